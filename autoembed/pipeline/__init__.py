"""`autoembed.pipeline`: the search pipeline, which finds the Pareto-best embedding configs
that fit a memory budget (`autoembed.search` runs it).

    from autoembed.pipeline import search
    result = search(budget="8GB", space="search_spaces/default.yaml", trials=20)
    result.front, result.best, result.files["pareto.json"]

Optuna proposes (ask/tell in the driver, see `engine`), every proposal is priced and judged
before it runs (`feasibility`), an executor runs the ones that fit (Ray Tune by default,
`ray_tune`; `InProcessExecutor` in this process), and the report writes the study's files
(`report`, `outputs`); docs/ARCHITECTURE.md has the stages. Ray and Optuna load only when a
search runs, so importing this is cheap.

The module is also callable, so `autoembed.search(budget=...)` works like
`autoembed.pipeline.search(budget=...)` (DESIGN.md: the Python API mirrors the CLI).
"""

from __future__ import annotations

import sys
import types
from typing import Any

from autoembed.pipeline.driver import (
    DEFAULT_SPACE,
    DEVICES,
    NothingFitsError,
    SearchFailedError,
    SearchResult,
    search,
)
from autoembed.pipeline.engine import SearchStatus
from autoembed.pipeline.executor import InProcessExecutor, StopTrial
from autoembed.pipeline.records import TrialRow
from autoembed.pipeline.study import SAMPLERS

__all__ = [
    "search",
    "SearchResult",
    "SearchStatus",
    "TrialRow",
    "NothingFitsError",
    "SearchFailedError",
    "InProcessExecutor",
    "StopTrial",
    "SAMPLERS",
    "DEVICES",
    "DEFAULT_SPACE",
]


class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if "model" in kwargs:  # your own model and loop (autoembed.user.search)
            from autoembed.user.search import search_own

            return search_own(*args, **kwargs)
        return search(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
