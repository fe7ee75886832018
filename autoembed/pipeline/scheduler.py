"""Multi-fidelity for a multi-objective search: asynchronous successive halving with
non-dominated ranks (MO-ASHA), the stopping variant, on rungs read from the data.

A rung is a fraction f of a trial's own length (`Launch.length`: max_steps, eval_every):
the trial's first evaluation at or after f * max_steps. Fractions are ETA**-k (1/3, 1/9,
1/27, ...), so that successive halving keeps a 1/ETA share of the trials at each. A fraction
of the trial's length, not a number of steps: trials of different batch sizes run different
numbers of steps over the same data (`runner.fit_settings`), and are compared at the same
share of their training.

**The decision** (`AshaScheduler.decide`). When a running trial reaches a rung, it is ranked
among every trial recorded at that rung (itself included) on the objectives known there:
`quality` (the best validation quality so far: a trial is judged by its best evaluation on
real data), `memory` (priced, exact before training) and `throughput` (samples per second
so far; left out of a `repeatable` search). The rank is non-dominated sorting (front 1, front
2, ...), ties within a front broken by each point's exclusive hypervolume contribution to
that front (the objectives min-max normalised over the rung, memory and throughput on a log
scale): the tie-break that matches the yardstick, the front's hypervolume. The trial goes on
when its position is within the top ceil(n / ETA) of the n records, else it stops. A trial
never stops for memory alone: memory is exact, so a rung-mate that dominates it is at least
as cheap and better so far. A search with an objective unknown at a rung (`latency`,
measured at the end) stops nothing, as the front rule.

**Why the stopping variant** (a trial continues or stops at a rung; Li et al. 2020's ASHA
promotes paused trials instead): a decision is made when the trial reports, with what is
known then, and nothing waits to be resumed: no checkpoint to keep per paused trial, a
user's loop needs nothing beyond the report channel it already has, a cluster's workers
are never held by paused trials, and SIGKILL + `--resume` has no paused state to restore.
What it gives up: early trials are compared with few rung-mates (the first at a rung always
continues), as in Ray Tune's ASHA and syne-tune's stopping MOASHA.

**Rungs from the data, not constants** (`AshaScheduler.active`). Which rungs are used is
read from the search's own trials that ran to their full length: rung f is trusted when the
Spearman rank correlation between the trials' best quality by f and their final quality is
at least SETTLED_RHO over at least SETTLE_TRIALS such trials, and every larger rung is
trusted too. Until then only the largest rung, 1/ETA, is used (the tables show ranks
settled at a third of the length on every workload: benchmarks/replay/README.md). A search
whose ranks settle late gets no rung below the one that is settled; one whose ranks do not
settle even at 1/ETA runs at full fidelity.

State: every rung decision is a `RungPoint`, recorded by the engine (the trial's Optuna
attribute RUNGS_ATTR, through the Recorder) before the decision is acted on; the completed
trials' curves are in their rows. `restore` and `learn` rebuild the scheduler from both on a
resume, so SIGKILL + `--resume` loses no decision.
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
# A search runs MO-ASHA beside the front rule when asked (`--multi-fidelity`). Not by
# default: replayed with the default sampler (ehvi) it beat the front rule alone on one
# table of four; with random sampling on three (benchmarks/results/search_efficiency_replay.md).
ETA = 3  # successive halving's reduction factor: 1/ETA of a rung's trials go on
RUNG_COUNT = 3  # candidate rungs: ETA**-1 .. ETA**-RUNG_COUNT of a trial's length
# A rung is trusted once this many trials ran to their full length and their ranks at the
# rung agree this well with their final ranks (Spearman).
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
    ra, rb = _ranks(a), _ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb, strict=True))
    var = math.sqrt(sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb))
    return cov / var if var > 0 else 0.0


def _ranks(xs: Sequence[float]) -> list[float]:
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    ranks = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2
        i = j + 1
    return ranks


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

    # ------------------------------------------------------------------ which rungs
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

    # ------------------------------------------------------------------ deciding
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

    # ------------------------------------------------------------------ learning
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
    [0, 1], the reference 0.1 below the worst on every axis): its box less the part the
    others cover, which is the volume of the others clipped to its box (their componentwise
    minimum with it), of which only the non-dominated count."""
    from autoembed.pareto import hypervolume

    k = front.shape[1]
    ref, dirs = [-0.1] * k, ["maximize"] * k
    out = np.empty(len(front))
    for i, p in enumerate(front):
        clipped = np.minimum(np.delete(front, i, axis=0), p)
        covered = hypervolume(_undominated(clipped).tolist(), ref, dirs)
        out[i] = hypervolume([p.tolist()], ref, dirs) - covered  # a twin's: exactly 0
    return out


def _undominated(pts: np.ndarray) -> np.ndarray:
    """The rows no other row dominates (larger is better)."""
    return pts[~np.any(_dominance(pts), axis=0)]


def _dominance(pts: np.ndarray) -> np.ndarray:
    """[i, j]: row i dominates row j (at least as large everywhere, larger somewhere)."""
    ge = np.all(pts[:, None, :] >= pts[None, :, :], axis=2)
    gt = np.any(pts[:, None, :] > pts[None, :, :], axis=2)
    return np.asarray(ge & gt)
