"""Every config of a small, finite space, and the untried one that fits: what lets a search
say that it has tried every config that fits.

`space_configs(suggest)` runs the space's suggest code on stand-in trials that walk every
option (conditional params included): each config once, as (Optuna params, values); None for
a float param without a step or more than ENUMERATE_LIMIT configs. `untried_fitting` prices
untried configs in a seeded random order until one fits (not enumerable: at most
RANDOM_DRAWS random ones); when none fits the search ends (`SpaceExhausted`, "every fitting
config tried: N").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from autoembed.pipeline.records import params_key

__all__ = ["ENUMERATE_LIMIT", "RANDOM_DRAWS", "RandomTrial", "SpaceExhausted", "space_configs",
           "untried_fitting", "exhausted_reason"]

ENUMERATE_LIMIT = 10_000  # configs of a space enumerated at most (each priced once at most)
RANDOM_DRAWS = 128  # random configs priced at most in a space not enumerated

Config = tuple[dict[str, Any], dict[str, Any]]  # (Optuna params, the space's values)
Key = tuple[tuple[str, str], ...]


class SpaceExhausted(Exception):  # noqa: N818 - a state of the search, not a failure
    """A sampler's ask (`before_trial` of trial `number`) found no config of the space that
    is untried and fits: the engine tells that trial failed and ends the search."""

    def __init__(self, number: int) -> None:
        super().__init__(f"trial {number}: every fitting config tried")
        self.number = number


def exhausted_reason(tried: int) -> str:
    """The search's stop reason when nothing untried fits."""
    return f"every fitting config tried: {tried}"


class RandomTrial:
    """A stand-in trial for the space's suggest code: each suggestion drawn at random;
    `params` holds them under their Optuna names."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.params: dict[str, Any] = {}

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        self.params[name] = v = choices[int(self.rng.integers(len(choices)))]
        return v

    def suggest_int(self, name: str, low: int, high: int, step: int = 1,
                    log: bool = False) -> int:
        if log:
            v = int(round(math.exp(self.rng.uniform(math.log(low - 0.5 + 1e-9),
                                                    math.log(high + 0.5)))))
            v = min(max(v, low), high)
        else:
            v = low + step * int(self.rng.integers((high - low) // step + 1))
        self.params[name] = v
        return v

    def suggest_float(self, name: str, low: float, high: float, step: float | None = None,
                      log: bool = False) -> float:
        if log:
            v = math.exp(self.rng.uniform(math.log(low), math.log(high)))
        elif step:
            v = low + step * int(self.rng.integers(int(round((high - low) / step)) + 1))
        else:
            v = float(self.rng.uniform(low, high))
        self.params[name] = v
        return v


class _TooMany(Exception):
    """The space is not enumerated: a float without a step, or too many configs."""


class _PathTrial:
    """A stand-in trial whose k-th suggestion takes option `path[k]` (0 past the path's
    end); `sizes` records how many options each suggestion had, `params` what it took."""

    def __init__(self, path: Sequence[int], limit: int) -> None:
        self.path, self.limit = path, limit
        self.sizes: list[int] = []
        self.params: dict[str, Any] = {}

    def _take(self, name: str, count: int, option: Callable[[int], Any]) -> Any:
        if count > self.limit:
            raise _TooMany
        k = len(self.sizes)
        self.sizes.append(count)
        self.params[name] = v = option(self.path[k] if k < len(self.path) else 0)
        return v

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        return self._take(name, len(choices), lambda i: choices[i])

    def suggest_int(self, name: str, low: int, high: int, step: int = 1,
                    log: bool = False) -> int:
        return int(self._take(name, (high - low) // step + 1, lambda i: low + i * step))

    def suggest_float(self, name: str, low: float, high: float, step: float | None = None,
                      log: bool = False) -> float:
        if not step or log:
            raise _TooMany
        # as Optuna rounds a stepped float: low + k * step, within [low, high]
        count = int(round((high - low) / step)) + 1
        return float(self._take(name, count, lambda i: min(max(i * step + low, low), high)))


def space_configs(suggest: Callable[[Any], Mapping[str, Any]],
                  limit: int = ENUMERATE_LIMIT) -> list[Config] | None:
    """Every config of the space `suggest` asks for, each once, in a fixed order; None when
    the space is not finite or has more than `limit` configs."""
    out: list[Config] = []
    path: list[int] = []
    try:
        while True:
            trial = _PathTrial(path, limit)
            values = dict(suggest(trial))
            out.append((trial.params, values))
            if len(out) > limit:
                return None
            path = list(path) + [0] * (len(trial.sizes) - len(path))
            # the last suggestion with an option left moves on; those after it start over
            k = max((i for i, n in enumerate(trial.sizes) if path[i] + 1 < n), default=-1)
            if k < 0:
                return out
            path = path[:k] + [path[k] + 1]
    except _TooMany:
        return None


def untried_fitting(configs: Sequence[Config] | None,
                    suggest: Callable[[Any], Mapping[str, Any]], skip: set[Key], unfit: set[Key],
                    price: Callable[[Mapping[str, Any]], float | None],
                    rng: np.random.Generator) -> tuple[dict[str, Any], float] | None:
    """An untried config that fits (Optuna params, `price(values)`: the memory objective of
    a config that fits and would train, else None), or None: of `configs` (`space_configs`)
    in `rng`'s order, skipping `skip` (params tried) and `unfit`; without them, of
    RANDOM_DRAWS random configs. A config that does not fit or would not train joins `unfit`
    (the budget stays, the OOM ceiling only falls, a config tried stays tried)."""
    if configs is not None:
        order = (configs[int(i)] for i in rng.permutation(len(configs)))
    else:
        order = ((t.params, dict(suggest(t))) for t in (RandomTrial(rng)
                                                         for _ in range(RANDOM_DRAWS)))
    for params, values in order:
        key = params_key(params)
        if key in skip or key in unfit:
            continue
        memory = price(values)
        if memory is not None:
            return params, memory
        unfit.add(key)
    return None
