"""Start points: the known-good configs a search trains first, before its sampler proposes.

`start_points(space, task, cheapest)` is a pure function of the space (no Optuna, no torch):

* CTR: **full+wide** — uncompressed tables at a moderate dim with the wide part (Wide &
  Deep); **fm** — a factorization-machine shape: the pairwise `dot` interaction, a small dim,
  no hidden layers, the wide part's per-id weights as its linear terms (the hand-swept
  MovieLens config, `benchmarks/configs/movielens.yaml`); **cheapest** — the space's
  cheapest corner (`space.corners.cheapest_config`, priced by the caller), its
  memory-neutral values (`model.MEMORY_NEUTRAL`: lr, weight_decay ...) the first point's.
* text: **bag** — an uncompressed idf-weighted (else mean-pooled) bag of embeddings at a
  moderate dim (benchmarks/text_pooling.py: idf 0.9835 vs mean 0.979 on BBC News), whole
  documents, a lr that trains well; **cheapest**.

Each start point prefers values (PREFERENCES); every one becomes a value the space allows:
a choice the space offers (the first of the preferred ones it has; for numbers the nearest
choice), a number clamped into the range and onto its step or multiple. A param the space
does not search gets no value (the space's base decides it); a searched param the point has
no preference for takes its first choice, or the middle of its range. Only the params whose
condition (`when`) holds are given. Points that are not valid configs are left out, and
duplicates (same values) kept once, first name first.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autoembed.errors import ConfigError
from autoembed.space.search_space import MEMORY_NEUTRAL, Param, SearchSpace

__all__ = ["StartPoint", "PREFERENCES", "start_points", "value_in_space"]

HIGHEST = math.inf  # prefer the largest value the space allows (text: whole documents)

_FULL = {"compression": ("none",), "placement": ("device",), "precision": ("fp32",),
         "table_optimizer": ("adam",), "serving": ("none",)}
# name -> {param: preferred values, first offered wins (numbers: the first, clamped)}
PREFERENCES: dict[str, dict[str, dict[str, tuple[Any, ...]]]] = {
    "ctr": {
        "full+wide": {**_FULL, "wide": (True,), "interaction": ("concat",), "dim": (32,),
                      "dense_layers": ((256, 64), (64,)), "lr": (0.005,),
                      "weight_decay": (2e-5,), "batch_size": (512,)},
        # movielens.yaml: dim 16, dot, no hidden layers, wide, lr 0.002, weight_decay 2e-4
        "fm": {**_FULL, "wide": (True,), "interaction": ("dot",), "dim": (16,),
               "dense_layers": ((), (32,), (64,)), "lr": (0.003,), "weight_decay": (2e-4,),
               "batch_size": (512,)},
    },
    "text": {
        "bag": {**_FULL, "pooling": ("idf", "mean", "sum"), "dim": (64,), "lr": (0.01,),
                "weight_decay": (0.0,), "seq_len": (HIGHEST,), "tokens_per_batch": (16384,),
                "batch_size": (64,), "checkpointing": (False,)},
    },
}
CHEAPEST = "cheapest"


@dataclass(frozen=True)
class StartPoint:
    """A start point: its `name` and its values (searched param name -> config value)."""

    name: str
    values: Mapping[str, Any]
    origin: str | None = None  # TrialRow.origin of its trial (None: a known-good config)

    def params(self, space: SearchSpace) -> dict[str, Any]:
        """Its values as the sampler names them (`dim/8: 4`, choice labels)."""
        return space.optuna_params(self.values)


def start_points(space: SearchSpace, task: str,
                 cheapest: Mapping[str, Any] | None = None) -> list[StartPoint]:
    """The start points of `space` for a `task` ("ctr" or "text"; module docstring), then
    `cheapest` (the cheapest corner's values, `cheapest_config`) when given."""
    rules = PREFERENCES.get(task, {})
    points = [StartPoint(name, _resolve(space, prefs)) for name, prefs in rules.items()]
    if cheapest is not None:
        # the corner's memory-neutral values (its lowest lr) are the first point's
        first = next(iter(rules.values()), {})
        kept = {k: v for k, v in cheapest.items()
                if not (_key(k) in MEMORY_NEUTRAL and _key(k) in first)}
        points.append(StartPoint(CHEAPEST, _resolve(space, first, kept)))
    out: list[StartPoint] = []
    seen: set[tuple[tuple[str, str], ...]] = set()
    for p in points:
        key = tuple(sorted((k, repr(v)) for k, v in p.values.items()))
        if key in seen or not _valid(space, p.values):
            continue
        seen.add(key)
        out.append(p)
    return out


def _resolve(space: SearchSpace, prefs: Mapping[str, tuple[Any, ...]],
             given: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Each active param's value: `given`'s (taken into the space), else the preference."""
    chosen: dict[str, Any] = dict(space.base)
    out: dict[str, Any] = {}
    for p in space.params:
        if not p.active(chosen):
            continue
        if given is not None and p.name in given:
            want: tuple[Any, ...] = (given[p.name],)
        else:
            want = prefs.get(_key(p.name), ())
        out[p.name] = chosen[p.name] = value_in_space(p, want)
    return out


def _key(name: str) -> str:
    """The config key a param searches (`tables[0].compression` -> compression)."""
    return name.rsplit(".", 1)[-1] if name.startswith("tables[") else name


def value_in_space(p: Param, want: Sequence[Any]) -> Any:
    """The value of `p` for the preferred values `want` (module docstring); no preference:
    the first choice, or the middle of the range (geometric on a log scale)."""
    if p.kind == "categorical":
        for w in want:
            for c in p.choices:
                if _same(c, w):
                    return c
        numbers = [w for w in want if _number(w)]
        if numbers and all(_number(c) for c in p.choices):
            return _nearest(p.choices, float(numbers[0]))
        return p.choices[0]
    numbers = [float(w) for w in want if _number(w)]
    if numbers:
        target = numbers[0]
    else:
        target = math.sqrt(p.low * p.high) if p.log and p.low > 0 else (p.low + p.high) / 2
    return _in_range(p, target)


def _in_range(p: Param, target: float) -> int | float:
    """`target` clamped into `p`'s range, on its step (ints: its multiple_of and step)."""
    if p.kind == "int":
        lo, hi = p.int_bounds()
        step = int(p.step) if p.step and not p.log else 1
        units = min(max(target / (p.multiple_of or 1), lo), hi)
        k = min(round((units - lo) / step), (hi - lo) // step)
        return (lo + k * step) * (p.multiple_of or 1)
    v = min(max(target, p.low), p.high)
    if p.step and not p.log:
        k = min(round((v - p.low) / p.step), math.floor((p.high - p.low) / p.step + 1e-9))
        v = p.low + k * p.step
    return float(v)


def _nearest(choices: Sequence[Any], target: float) -> Any:
    if target == HIGHEST:
        return max(choices)
    if target > 0 and all(c > 0 for c in choices):
        return min(choices, key=lambda c: abs(math.log(c) - math.log(target)))
    return min(choices, key=lambda c: abs(c - target))


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _same(a: Any, b: Any) -> bool:
    """Equal and of one kind (True is not 1, 1.0 is 1)."""
    return a == b and (isinstance(a, bool) == isinstance(b, bool))


def _valid(space: SearchSpace, values: Mapping[str, Any]) -> bool:
    try:
        space.config_for(values)
    except ConfigError:
        return False
    return True
