"""Multi-fidelity for a multi-objective search (`--multi-fidelity`): MO-ASHA, the stopping
variant, on rungs read from the data (the rule and its figures: docs/searching.md).
`AshaScheduler.decide` ranks a trial at a rung (`rung_step`) by non-dominated front on the
`RUNG_OBJECTIVES` known then, ties by exclusive hypervolume contribution (min-max
normalised); an objective unknown at a rung (latency) stops nothing; `active` holds the rungs
in use (SETTLE_TRIALS, SETTLED_RHO). Every decision is a `RungPoint`, recorded (RUNGS_ATTR)
before it is acted on; `restore` and `learn` rebuild the scheduler on a resume.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["AshaScheduler", "RungPoint", "RUNGS_ATTR", "ETA", "RUNG_COUNT", "SETTLE_TRIALS",
           "SETTLED_RHO", "RUNG_OBJECTIVES", "rung_step", "spearman"]

RUNGS_ATTR = "autoembed_rungs"  # Optuna trial attribute: the trial's RungPoints
ETA = 3  # successive halving's reduction factor: 1/ETA of a rung's trials go on
RUNG_COUNT = 3  # candidate rungs: ETA**-1 .. ETA**-RUNG_COUNT of a trial's length
SETTLE_TRIALS = 8
SETTLED_RHO = 0.8
# objectives known at a rung, and their scale for the hypervolume tie-break
RUNG_OBJECTIVES = {"quality": "linear", "memory": "log", "throughput": "log"}


def rung_step(fraction: float, length: tuple[int, int]) -> int | None:
    """The step of a trial's rung `fraction`: its first evaluation at or after that share of
    `length` = (max_steps, eval_every); None when that is the trial's last evaluation (no
    decision left to make there)."""
    max_steps, every = length
    step = math.ceil(fraction * max_steps / every - 1e-9) * every
    return step if 0 < step < max_steps else None


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation (average ranks for ties); 0 when either is constant."""
    from autoembed.selection import midranks

    ra, rb = (midranks(np.asarray(x, dtype=float)) for x in (a, b))
    ra, rb = ra - ra.mean(), rb - rb.mean()
    var = math.sqrt(float((ra**2).sum() * (rb**2).sum()))
    return float((ra * rb).sum()) / var if var > 0 else 0.0


@dataclass(frozen=True)
class RungPoint:
    """One trial at one rung: the objective values known there and the decision."""

    number: int
    rung: float  # the fraction of the trial's length
    step: int
    values: Mapping[str, float]
    go_on: bool

    def encode(self) -> list[object]:
        return [self.rung, self.step, dict(self.values), self.go_on]

    @classmethod
    def decode(cls, number: int, raw: Sequence[Any]) -> RungPoint:
        rung, step, values, go_on = raw
        return cls(number, float(rung), int(step),
                   {str(k): float(v) for k, v in dict(values).items()}, bool(go_on))


@dataclass
class AshaScheduler:
    """MO-ASHA (see the module docstring). `objectives`: the search's (name, direction);
    those known at a rung are used. `rungs`: fixed fractions (None: read from the data)."""

    objectives: Sequence[tuple[str, str]]
    eta: int = ETA
    rungs: tuple[float, ...] | None = None
    settle_trials: int = SETTLE_TRIALS
    settled_rho: float = SETTLED_RHO
    points: dict[float, dict[int, RungPoint]] = field(default_factory=dict)
    # trials that ran to their full length: (best quality by each candidate rung, final)
    finished: dict[int, tuple[dict[float, float], float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.used = tuple((n, d) for n, d in self.objectives if n in RUNG_OBJECTIVES)

    @property
    def candidates(self) -> tuple[float, ...]:
        return tuple(self.eta ** -k for k in range(1, RUNG_COUNT + 1))

    def agreement(self) -> dict[float, float]:
        """Spearman rho between each candidate rung's best quality so far and the final
        quality, over the trials that ran to their full length."""
        out = {}
        for f in self.candidates:
            pairs = [(at[f], final) for at, final in self.finished.values() if f in at]
            if len(pairs) >= self.settle_trials:
                out[f] = spearman([p[0] for p in pairs], [p[1] for p in pairs])
        return out

    def active(self) -> tuple[float, ...]:
        """The rungs in use now, largest first (module docstring)."""
        if self.rungs is not None:
            return tuple(sorted(self.rungs, reverse=True))
        rho = self.agreement()
        if not rho:
            return self.candidates[:1]
        used = []
        for f in self.candidates:  # largest first; a rung needs every larger one trusted
            if rho.get(f, -1.0) < self.settled_rho:
                break
            used.append(f)
        return tuple(used)

    def due(self, step: int, length: tuple[int, int]) -> list[float]:
        """The active rungs a trial of `length` reaches at the evaluation of `step`."""
        return [f for f in self.active() if rung_step(f, length) == step]

    def decide(self, number: int, rung: float, step: int,
               values: Mapping[str, float]) -> RungPoint:
        """The decision for trial `number` at `rung` (not yet recorded: `add` it)."""
        known = {n: float(values[n]) for n, _ in self.used if n in values
                 and values[n] is not None and math.isfinite(float(values[n]))}
        if len(self.used) < len(self.objectives):  # e.g. latency: measured at the end only
            return RungPoint(number, rung, step, known, True)
        mates = [p for p in self.points.get(rung, {}).values() if p.number != number]
        n = len(mates) + 1
        position = self._position(known, mates)
        return RungPoint(number, rung, step, known, position < math.ceil(n / self.eta))

    def add(self, point: RungPoint) -> None:
        self.points.setdefault(point.rung, {})[point.number] = point

    def _position(self, mine: Mapping[str, float], mates: Sequence[RungPoint]) -> int:
        """How many rung-mates rank before `mine`: those in better fronts, and those in
        its front with a larger hypervolume contribution."""
        names = [n for n, _ in self.used if n in mine
                 and all(n in p.values for p in mates)]
        if not mates or not names:
            return 0
        signs = np.array([1.0 if d == "maximize" else -1.0
                          for n, d in self.used if n in names])
        raw = np.array([[mine[n] for n in names]] + [[p.values[n] for n in names]
                                                     for p in mates], dtype=float)
        pts = _normalised(raw, [RUNG_OBJECTIVES[n] for n in names], signs)
        fronts = _front_ranks(pts)
        better = int(np.sum(fronts < fronts[0]))
        same = np.flatnonzero(fronts == fronts[0])
        if len(same) == 1:
            return better
        contrib = _contributions(pts[same])
        return better + int(np.sum(contrib[1:] > contrib[0]))

    def learn(self, number: int, curve: Iterable[tuple[int, float]],
              length: tuple[int, int], final: float | None) -> None:
        """A trial that ran to its full length: its curve of (step, quality) and final
        quality, for the rank agreement `active` reads."""
        if final is None or not math.isfinite(final):
            return
        points = sorted((int(s), float(q)) for s, q in curve if math.isfinite(float(q)))
        at = {}
        for f in self.candidates:
            step = rung_step(f, length)
            seen = [q for s, q in points if step is not None and s <= step]
            if step is not None and seen:
                at[f] = max(seen)
        self.finished[number] = (at, float(final))

    def restore(self, points: Iterable[RungPoint]) -> None:
        for p in points:
            self.add(p)


def _normalised(raw: np.ndarray, scales: Sequence[str], signs: np.ndarray) -> np.ndarray:
    """Each column on its scale, oriented so larger is better, min-max scaled to [0, 1]."""
    x = raw.copy()
    for k, scale in enumerate(scales):
        if scale == "log":
            x[:, k] = np.log10(np.maximum(x[:, k], 1e-12))
    x = x * signs
    lo, hi = x.min(axis=0), x.max(axis=0)
    span = np.where(hi > lo, hi - lo, 1.0)
    return (x - lo) / span


def _front_ranks(pts: np.ndarray) -> np.ndarray:
    """Non-dominated sorting (larger is better on every column): 0 for the first front."""
    dominated_by = _dominance(pts)
    ranks = np.full(len(pts), -1)
    left = np.ones(len(pts), dtype=bool)
    r = 0
    while left.any():
        beaten = np.any(dominated_by[left][:, left], axis=0)
        idx = np.flatnonzero(left)[~beaten]
        ranks[idx] = r
        left[idx] = False
        r += 1
    return ranks


def _contributions(front: np.ndarray) -> np.ndarray:
    """Each point's exclusive hypervolume contribution to `front` (larger is better, in
    [0, 1], the reference 0.1 below the worst): its box less the others clipped to it."""
    from autoembed.pareto import hypervolume

    k = front.shape[1]
    ref, dirs = [-0.1] * k, ["maximize"] * k
    out = np.empty(len(front))
    for i, p in enumerate(front):
        clipped = np.minimum(np.delete(front, i, axis=0), p)
        undominated = clipped[~np.any(_dominance(clipped), axis=0)]
        covered = hypervolume(undominated.tolist(), ref, dirs)
        out[i] = hypervolume([p.tolist()], ref, dirs) - covered  # a twin's: exactly 0
    return out


def _dominance(pts: np.ndarray) -> np.ndarray:
    """[i, j]: row i dominates row j (at least as large everywhere, larger somewhere)."""
    ge = np.all(pts[:, None, :] >= pts[None, :, :], axis=2)
    gt = np.any(pts[:, None, :] > pts[None, :, :], axis=2)
    return np.asarray(ge & gt)
