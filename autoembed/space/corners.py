"""The cheapest corner of a search space: the combination a budget must hold for the search
to have anything to run."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from autoembed.config import EmbeddingConfig
from autoembed.errors import ConfigError
from autoembed.space.search_space import Param, SearchSpace

__all__ = ["MAX_CHEAPEST_CORNERS", "cheapest_config", "first_corner"]

MAX_CHEAPEST_CORNERS = 20_000  # exhaustive corner search above this falls back to descent


def cheapest_config(
    space: SearchSpace, price: Callable[[EmbeddingConfig], int]
) -> tuple[dict[str, Any], EmbeddingConfig, int]:
    """The corner of the space with the smallest `price` (device bytes): field values, the
    config and its price.

    Every choice and both ends of each memory-relevant range (smallest dim, most
    compression, lowest precision, cheapest optimizer, smallest batch ...) are combined and
    priced (the analytic estimate takes well under a millisecond); above
    MAX_CHEAPEST_CORNERS corners, a coordinate descent from the low corner stands in.
    Invalid combinations are skipped. ConfigError when no combination is valid.
    """
    best: tuple[int, dict[str, Any], EmbeddingConfig] | None = None

    def consider(values: dict[str, Any]) -> int | None:
        nonlocal best
        try:
            cfg = space.config_for(values)
            cost = price(cfg)
        except ConfigError:
            return None
        if best is None or cost < best[0]:
            best = (cost, values, cfg)
        return cost

    corners = 1
    for p in space.params:
        corners *= len(p.corner_values())
    if corners <= MAX_CHEAPEST_CORNERS:
        for values in space._combinations(Param.corner_values, MAX_CHEAPEST_CORNERS):
            consider(values)
    else:
        current = {p.name: p.corner_values()[0] for p in space.params}
        for _ in range(3):  # passes of coordinate descent
            for p in space.params:
                for v in p.corner_values():
                    trial = {**current, p.name: v}
                    active = _active_only(space, trial)
                    consider(active)
                    if best is not None and best[1] == active:
                        current = trial
    if best is None:
        raise ConfigError(f"{space.source}: no combination of the params is a valid config")
    return best[1], best[2], best[0]


def first_corner(space: SearchSpace) -> dict[str, Any]:
    """The space's first corner: each active param at its first corner value (its first
    choice, or its low end), conditions respected; the values a proposal of it carries."""
    return next(space._combinations(Param.corner_values, 1))


def _active_only(space: SearchSpace, values: Mapping[str, Any]) -> dict[str, Any]:
    chosen: dict[str, Any] = dict(space.base)
    out: dict[str, Any] = {}
    for p in space.params:
        if p.name in values and p.active(chosen):
            out[p.name] = chosen[p.name] = values[p.name]
    return out
