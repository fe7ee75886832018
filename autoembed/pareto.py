"""Pareto fronts, hypervolume and the `--pick` rules. Pure Python: no numpy, no Optuna.

A point dominates another when it is at least as good on every objective and strictly
better on one; equal points do not dominate each other, so duplicates of a front point are
all on the front. The pick rules (`PICK_RULES`, one list for `search --pick` and `export
--pick`; what each picks and why: docs/searching.md, "Pick rules"): `within-noise`
(DEFAULT_PICK) is the one-standard-error rule with the cheapest config as the simplest
(`pick` says what it reads); `knee` min-max normalises each objective over the members
(best 1, worst 0; an objective all agree on counts 1); the single-metric rules break ties
by the other objectives in order; remaining ties go to the lower trial number.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from autoembed.errors import ConfigError
from autoembed.rules import Interval, Is, OneOf, or_list

__all__ = ["DIRECTIONS", "PICK_RULES", "DEFAULT_PICK", "Pick", "Candidate", "dominates",
           "non_dominated", "hypervolume", "normalise", "parse_pick", "pick", "unmeasured",
           "clears_floor", "pick_help",
           "quality_noise", "auc_standard_error", "accuracy_standard_error"]

DIRECTIONS = ("maximize", "minimize")
PICK_RULES = ("within-noise", "knee", "max-quality", "min-memory", "max-throughput", "trial:N")
DEFAULT_PICK = "within-noise"


def pick_help(after: str = "") -> str:
    """`--pick`'s help (search's and export's): the rules `PICK_RULES` lists, then `after`."""
    return f"{or_list(PICK_RULES)}{after}."

# within-noise: after quality, cheaper first, then faster (objective name, direction)
_COST_ORDER = (("memory", "minimize"), ("throughput", "maximize"), ("latency", "minimize"))
_RULE_METRIC = {
    "max-quality": ("quality", "maximize"),
    "min-memory": ("memory", "minimize"),
    "max-throughput": ("throughput", "maximize"),
}
_TRIAL = re.compile(r"^trial:(\d+)$")


def _check_directions(directions: Sequence[str]) -> None:
    for d in directions:
        OneOf(DIRECTIONS).check_argument("direction", d)


def dominates(a: Sequence[float], b: Sequence[float], directions: Sequence[str]) -> bool:
    """Whether `a` is at least as good as `b` on every objective and better on one."""
    if not len(a) == len(b) == len(directions):
        raise ValueError(f"points {a!r} and {b!r} must both have {len(directions)} values")
    strictly = False
    for x, y, d in zip(a, b, directions, strict=True):
        if not (x >= y if d == "maximize" else x <= y):
            return False
        if x != y:
            strictly = True
    return strictly


def non_dominated(points: Sequence[Sequence[float]], directions: Sequence[str]) -> list[int]:
    """Indices (ascending) of the points no other point dominates. NaN is not allowed:
    map missing values to the worst value (-inf for maximize, +inf for minimize) first."""
    _check_directions(directions)
    for p in points:
        if any(isinstance(v, float) and math.isnan(v) for v in p):
            raise ValueError(f"point {p!r} has NaN; map missing values to +-inf first")
    # O(n^2) pairwise checks: a search has tens to hundreds of trials.
    front: list[int] = []
    for i, p in enumerate(points):
        if not any(dominates(points[j], p, directions) for j in range(len(points)) if j != i):
            front.append(i)
    return front


def hypervolume(
    points: Sequence[Sequence[float]], reference: Sequence[float], directions: Sequence[str]
) -> float:
    """Volume of objective space dominated by `points` and bounded by `reference` (a point
    worse than every point on every objective; points not better than it are ignored).

    Exact, by slicing along the first objective (HSO, While et al. 2006): fine for the tens
    of points of a search front in 2-4 objectives.
    """
    _check_directions(directions)
    k = len(directions)
    if len(reference) != k:
        raise ValueError(f"reference {reference!r} must have {k} values")
    # To minimisation with reference at the origin's "worst" side: v' = sign * v.
    signs = [-1.0 if d == "maximize" else 1.0 for d in directions]
    ref = [s * r for s, r in zip(signs, reference, strict=True)]
    pts = []
    for p in points:
        q = [s * v for s, v in zip(signs, p, strict=True)]
        if all(x < r for x, r in zip(q, ref, strict=True)):
            pts.append(q)
    return _hv(pts, ref)


def _hv(points: list[list[float]], ref: list[float]) -> float:
    if not points:
        return 0.0
    if len(ref) == 1:
        return ref[0] - min(p[0] for p in points)
    pts = sorted(points, key=lambda p: p[0])
    if len(ref) == 2:
        return _hv2(pts, ref)
    volume = 0.0
    for i, p in enumerate(pts):
        upper = pts[i + 1][0] if i + 1 < len(pts) else ref[0]
        width = upper - p[0]
        if width <= 0:
            continue
        volume += width * _hv([q[1:] for q in pts[: i + 1]], ref[1:])
    return volume


def _hv2(pts: list[list[float]], ref: list[float]) -> float:
    """`_hv` in two objectives, `pts` sorted on the first: the same slices and sums, each
    slice's one-objective volume from a running minimum (O(n), not O(n^2))."""
    volume, low = 0.0, math.inf
    for i, p in enumerate(pts):
        low = min(low, p[1])
        upper = pts[i + 1][0] if i + 1 < len(pts) else ref[0]
        width = upper - p[0]
        if width > 0:
            volume += width * (ref[1] - low)
    return volume


def normalise(
    points: Sequence[Sequence[float]], directions: Sequence[str]
) -> list[list[float]]:
    """Min-max normalise each objective over `points` to [0, 1] with 1 the best; an
    objective with a single value maps to 1. Infinite values map to 0 (worst)."""
    _check_directions(directions)
    out = [[0.0] * len(directions) for _ in points]
    for k, d in enumerate(directions):
        col = [p[k] for p in points]
        finite = [v for v in col if math.isfinite(v)]
        lo, hi = (min(finite), max(finite)) if finite else (0.0, 0.0)
        for i, v in enumerate(col):
            if not math.isfinite(v):
                out[i][k] = 0.0
            elif hi == lo:
                out[i][k] = 1.0
            else:
                x = (v - lo) / (hi - lo)
                out[i][k] = x if d == "maximize" else 1.0 - x
    return out


class Candidate(Protocol):
    """What the pick rules need: a trial number and metric values by objective name."""

    @property
    def number(self) -> int: ...

    @property
    def values(self) -> Mapping[str, float]: ...


@dataclass(frozen=True)
class Pick:
    """A parsed pick rule: `rule` in PICK_RULES (trial:N as "trial") and the trial N."""

    rule: str
    trial: int | None = None

    def __str__(self) -> str:
        return f"trial:{self.trial}" if self.rule == "trial" else self.rule


def parse_pick(text: str, name: str = "pick") -> Pick:
    """`text` as a Pick; a ConfigError naming it as `name` (the CLI's "--pick") otherwise."""
    s = str(text).strip()
    m = _TRIAL.match(s)
    if m:
        return Pick("trial", int(m.group(1)))
    if s in PICK_RULES and s != "trial:N":
        return Pick(s)
    raise ConfigError(f"{name} '{text}' is not a rule; use one of {', '.join(PICK_RULES)}")


def pick(
    candidates: Sequence[Candidate],
    rule: Pick | str,
    objectives: Sequence[tuple[str, str]],
    noise: float | Mapping[int, float] | None = None,
    floor: float | None = None,
    floor_noise: float = 0.0,
) -> Candidate:
    """The candidate `rule` chooses. `objectives`: (name, direction) pairs; the knee uses
    them all, the single-metric rules break ties with them. `noise` is read by
    `within-noise` only: a slack >= 0 (the quality's standard error, `quality_noise`) for
    every candidate, or each candidate's own finite slack by trial number (a candidate is
    near when best - its quality <= its slack; one not in the mapping has 0); None: 0.
    `floor`: a quality every rule but trial:N keeps to when the best candidate reaches it:
    only the candidates that clear it by `floor_noise` (>= 0) are chosen from, else the
    best ones (None: none)."""
    r = parse_pick(rule) if isinstance(rule, str) else rule
    if not candidates:
        raise ConfigError(f"pick '{r}': there is no candidate to pick from")
    dirs = [d for _, d in objectives]
    _check_directions(dirs)

    def vec(c: Candidate, name: str, direction: str) -> float:
        v = c.values.get(name)
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return -math.inf if direction == "maximize" else math.inf
        return float(v)

    if r.rule == "trial":
        for c in candidates:
            if c.number == r.trial:
                return c
        numbers = ", ".join(str(c.number) for c in candidates)
        raise ConfigError(f"pick 'trial:{r.trial}': no such candidate; choose one of {numbers}")
    line = unmeasured(candidates, r)
    if line is not None:
        raise ConfigError(line)
    if floor is not None and math.isfinite(floor):
        candidates = _clear_of_floor(candidates, floor, floor_noise, vec)
    if r.rule == "knee":
        pts = [[vec(c, n, d) for n, d in objectives] for c in candidates]
        norm = normalise(pts, dirs)
        dist = [math.sqrt(sum((1.0 - x) ** 2 for x in row)) for row in norm]
        return min(zip(dist, candidates, strict=True), key=lambda t: (t[0], t[1].number))[1]
    if r.rule == "within-noise":
        slack = _slacks(noise)
        best = max(vec(c, "quality", "maximize") for c in candidates)
        near = [c for c in candidates
                if vec(c, "quality", "maximize") >= best - slack(c.number)]
        costs = list(_COST_ORDER)
        order = costs + [(n, d) for n, d in objectives if n not in {m for m, _ in costs}]
        return _lexicographic_best(near, [*order, ("quality", "maximize")], vec)
    metric, direction = _RULE_METRIC[r.rule]
    order = [(metric, direction)] + [(n, d) for n, d in objectives if n != metric]
    return _lexicographic_best(candidates, order, vec)


def unmeasured(candidates: Sequence[Candidate], rule: Pick) -> str | None:
    """Why single-metric `rule` (max-quality, min-memory, max-throughput) cannot pick among
    `candidates`: none of them has a value of its metric (a loop of the user's that never
    calls `report` measures no throughput), so any pick would be an arbitrary one; None when
    it can, and for the other rules."""
    if rule.rule not in _RULE_METRIC:
        return None
    metric = _RULE_METRIC[rule.rule][0]
    for c in candidates:
        v = c.values.get(metric)
        if v is not None and math.isfinite(float(v)):
            return None
    why = (" (a loop of yours measures it from its report(step=, samples=) calls; one that "
           "only returns its quality measures none)" if metric == "throughput" else "")
    return (f"pick '{rule}': no member of the front has a {metric} measured{why}; "
            "pick by another rule")


def clears_floor(quality: float, floor: float, floor_noise: float) -> bool:
    """Whether `quality` clears `floor` by `floor_noise` (the picks' floor rule)."""
    return quality >= floor + floor_noise


def _clear_of_floor(
    candidates: Sequence[Candidate], floor: float, floor_noise: float,
    vec: Callable[[Candidate, str, str], float],
) -> Sequence[Candidate]:
    """Where the best of `candidates` reaches `floor`: those that clear it by
    `floor_noise`, else the best ones; else all of them (a floor no one reaches is not
    kept to)."""
    Interval(0).check_argument("pick: floor noise", floor_noise, sep=" ")
    quality = [vec(c, "quality", "maximize") for c in candidates]
    best = max(quality)
    if best < floor:
        return candidates
    clear = [c for c, q in zip(candidates, quality, strict=True)
             if clears_floor(q, floor, floor_noise)]
    return clear or [c for c, q in zip(candidates, quality, strict=True) if q >= best]


def _slacks(noise: float | Mapping[int, float] | None) -> Callable[[int], float]:
    """The within-noise slack of each trial number (checked)."""
    if isinstance(noise, Mapping):
        own = {int(k): float(v) for k, v in noise.items()}
        Is(lambda m: all(map(math.isfinite, m.values())), "finite numbers").check_argument(
            "pick 'within-noise': noise", own, sep=" ")
        return lambda n: own.get(n, 0.0)
    flat = 0.0 if noise is None else float(noise)
    Interval(0).check_argument("pick 'within-noise': noise", flat, sep=" ")
    return lambda n: flat


def _lexicographic_best(
    candidates: Sequence[Candidate],
    order: Sequence[tuple[str, str]],
    vec: Callable[[Candidate, str, str], float],
) -> Candidate:
    """The best candidate on `order`'s metrics in turn, then the lower trial number."""

    def key(c: Candidate) -> tuple[float, ...]:
        ks = []
        for n, d in order:
            v = vec(c, n, d)
            ks.append(-v if d == "maximize" else v)
        return (*ks, float(c.number))

    return min(candidates, key=key)


def auc_standard_error(auc: float, positives: int, negatives: int) -> float:
    """Standard error of an AUC measured on `positives` + `negatives` rows: Hanley & McNeil
    (Radiology 143, 1982, eq. 1), with Q1 = A/(2-A), Q2 = 2A^2/(1+A)."""
    if positives < 1 or negatives < 1:
        raise ConfigError(f"AUC noise needs both classes; got {positives} positive and "
                          f"{negatives} negative rows")
    a = min(max(float(auc), 0.0), 1.0)
    q1, q2 = a / (2 - a), 2 * a * a / (1 + a)
    var = (a * (1 - a) + (positives - 1) * (q1 - a * a) + (negatives - 1) * (q2 - a * a)) / (
        positives * negatives)
    return math.sqrt(max(var, 0.0))


def accuracy_standard_error(accuracy: float, rows: int) -> float:
    """Binomial standard error sqrt(p (1 - p) / n) of an accuracy over `rows` rows."""
    if rows < 1:
        raise ConfigError(f"accuracy noise needs rows >= 1; got {rows}")
    p = min(max(float(accuracy), 0.0), 1.0)
    return math.sqrt(p * (1 - p) / rows)


def quality_noise(metric: str, quality: float, class_rows: Sequence[int]) -> float:
    """One standard error of `quality` (metric "auc" or "accuracy") measured on a split with
    `class_rows` rows per class (auc: (negatives, positives)); the `within-noise` slack."""
    if metric == "auc":
        if len(class_rows) != 2:
            raise ConfigError(f"AUC noise needs (negatives, positives); got {class_rows!r}")
        return auc_standard_error(quality, int(class_rows[1]), int(class_rows[0]))
    if metric == "accuracy":
        return accuracy_standard_error(quality, int(sum(class_rows)))
    raise ConfigError(f"quality metric '{metric}' has no noise model; use auc or accuracy")
