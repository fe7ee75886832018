"""`autoembed.pipeline`: the search pipeline, which finds the Pareto-best embedding configs
that fit a memory budget (`autoembed.search` is its `search`; the stages:
docs/ARCHITECTURE.md). Ray and Optuna load only when a search runs, and the driver only when
`search` is first read, so a command that only reads the search's options (`autoembed
estimate`, `export`, `train`) does not import the engine.

    from autoembed.pipeline import search
    result = search(budget="8GB", space="search_spaces/default.yaml", trials=20)
    result.front, result.best, result.files["pareto.json"]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autoembed.pipeline.driver import search

__all__ = ["search"]


def __getattr__(name: str) -> Any:
    if name == "search":
        from autoembed.pipeline.driver import search

        return search
    raise AttributeError(f"module 'autoembed.pipeline' has no attribute {name!r}")
