"""`autoembed.pipeline`: the search pipeline, which finds the Pareto-best embedding configs
that fit a memory budget (`autoembed.search` is its `search`; the stages:
docs/ARCHITECTURE.md). Ray and Optuna load only when a search runs.

    from autoembed.pipeline import search
    result = search(budget="8GB", space="search_spaces/default.yaml", trials=20)
    result.front, result.best, result.files["pareto.json"]
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
