"""`autoembed.pipeline`: the search pipeline, which finds the Pareto-best embedding configs
that fit a memory budget (`autoembed.search` is its `search`; the stages:
docs/ARCHITECTURE.md). Ray and Optuna load only when a search runs.

    from autoembed.pipeline import search
    result = search(budget="8GB", space="search_spaces/default.yaml", trials=20)
    result.front, result.best, result.files["pareto.json"]
"""

from __future__ import annotations

from autoembed.pipeline.driver import search

__all__ = ["search"]
