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

`autoembed.search` is this package's `search` (the Python API mirrors the CLI:
docs/contracts.md#imports-and-the-python-api).
"""

from __future__ import annotations

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
from autoembed.pipeline.workload import Workload

__all__ = ["search", "Workload", "SearchResult", "SearchStatus", "TrialRow", "NothingFitsError",
           "SearchFailedError", "InProcessExecutor", "StopTrial", "SAMPLERS", "DEVICES",
           "DEFAULT_SPACE"]
