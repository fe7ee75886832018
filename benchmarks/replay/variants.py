"""The replays' variants of the `ehvi` sampler (autoembed/pipeline/priced_ehvi.py): the
rules measured against the product's and left off (benchmarks/results/
search_efficiency_replay.md, search_time_box_replay.md). Each is a subclass that overrides
one of `PricedEHVI`'s hooks; `build(seed, **knobs)` combines them:

* `quality_turns=k` (`QualityTurns`): in each run of `random_every` trials after the
  start-up, the first k model turns score candidates by the expected improvement of quality
  alone instead of EHVI;
* `random_every=k` (`RandomEvery`): every k-th proposal after the start-up random (the
  product's: RANDOM_EVERY);
* `onehot=True` (`OneHot`): categoricals one 0/1 feature per label, not a hashed code;
* `per_second=False` (`NotPerSecond`): the acquisition not divided by predicted seconds;
* `cost_cooling=True` (`CostCooling`): the predicted seconds' exponent is the share of the
  search's budget left (`Pricing.spent`; CArBO, Lee et al. 2020);
* `neighbors=n` (`Neighbors`): n candidates near the front's members besides the random
  ones (SMAC's local search around its incumbents);
* `spread=False` (`RandomStartup`): a random start-up, not spread over the memory axis;
* `margin=r` (`Margin`): the hypervolume's reference point r of the memory axis's unit
  beyond the budget, so a candidate gains r x its expected improvement of the best quality
  besides its EHVI (a config at the budget counts);
* `seconds_weight=w` (`SecondsWeight`): the acquisition divided by the predicted seconds
  to the power w (the product's: 1);
* `pending=False` (`IgnoresPending`): running trials not believed (each ask sees only the
  finished ones);
* `pick_turns=k` (`PickTurns`): as `quality_turns=k`, but those turns' expected improvement
  of quality is not divided by the predicted seconds (the pick's best quality sought at
  whatever a trial costs).
* `random_quality=True` (`RandomQuality`): the random turn of each run of `random_every`
  scores by the expected improvement of quality alone, not divided by the predicted
  seconds; the model turns are the product's (the front keeps its three turns).
* `near=f` (`NearRepeats`): a model turn never proposes a near-repeat of a tried trial
  (`near_tried`: every categorical equal, every number within f of its (log) range) while
  a candidate that is none is left; the best of the rest is proposed.

`startup`, `candidates`, `price_budget_s` and `clock` go to `PricedEHVI` itself.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from autoembed.pareto import non_dominated
from autoembed.pipeline.interleave import is_random
from autoembed.pipeline.priced_ehvi import (
    RANDOM_EVERY,
    Finished,
    PricedEHVI,
    _feature,
    spread_point,
)
from autoembed.pipeline.untried import RandomTrial

if TYPE_CHECKING:
    from optuna.study import Study
    from optuna.trial import FrozenTrial


class RandomEvery(PricedEHVI):
    """Every `random_every`-th proposal after the start-up is random."""

    def __init__(self, seed: int, *, random_every: int = RANDOM_EVERY, **kw: Any) -> None:
        super().__init__(seed, **kw)
        self.random_every = random_every

    def _random_turn(self, number: int) -> bool:
        return is_random(number, self.startup, self.random_every)


class QualityTurns(RandomEvery):
    """The first `quality_turns` model turns of each run of `random_every` score by the
    expected improvement of quality alone (per predicted second as the product's)."""

    def __init__(self, seed: int, *, quality_turns: int = 0, **kw: Any) -> None:
        super().__init__(seed, **kw)
        self.quality_turns = quality_turns

    def _gain(self, number: int, q: np.ndarray, front: Sequence[tuple[float, float]],
              x: np.ndarray, mu: np.ndarray, sd: np.ndarray) -> np.ndarray:
        if (number - self.startup) % self.random_every < self.quality_turns:
            return expected_improvement(mu, sd, float(q.max()))
        return super()._gain(number, q, front, x, mu, sd)


class PickTurns(QualityTurns):
    """The first `pick_turns` model turns of each run of `random_every` score by the expected
    improvement of quality alone, not divided by the predicted seconds (the other model
    turns are the product's). Aimed at what delays the pick: on the default table the
    near-best configs are among the costliest trials, and a per-second acquisition ranks
    them last (benchmarks/results/ehvi_pick_rules_replay.md)."""

    def __init__(self, seed: int, *, pick_turns: int = 0, **kw: Any) -> None:
        super().__init__(seed, quality_turns=pick_turns, **kw)
        self._number = -1

    def _choose(self, study: Study, number: int, done: list[Finished],
                ) -> dict[str, Any] | None:
        self._number = number
        return super()._choose(study, number, done)

    def _seconds_weight(self) -> float:
        if (self._number - self.startup) % self.random_every < self.quality_turns:
            return 0.0
        return super()._seconds_weight()


class RandomQuality(RandomEvery):
    """The turn `is_random` gives the random proposal (after the start-up) is a model turn
    by the expected improvement of quality alone, not per predicted second."""

    def __init__(self, seed: int, **kw: Any) -> None:
        super().__init__(seed, **kw)
        self._number = -1

    def _random_turn(self, number: int) -> bool:
        return False

    def _quality_turn(self, number: int) -> bool:
        return number >= self.startup and is_random(number, self.startup, self.random_every)

    def _choose(self, study: Study, number: int, done: list[Finished],
                ) -> dict[str, Any] | None:
        self._number = number
        return super()._choose(study, number, done)

    def _gain(self, number: int, q: np.ndarray, front: Sequence[tuple[float, float]],
              x: np.ndarray, mu: np.ndarray, sd: np.ndarray) -> np.ndarray:
        if self._quality_turn(number):
            return expected_improvement(mu, sd, float(q.max()))
        return super()._gain(number, q, front, x, mu, sd)

    def _seconds_weight(self) -> float:
        return 0.0 if self._quality_turn(self._number) else super()._seconds_weight()


class NearRepeats(PricedEHVI):
    """A model turn skips the candidates that are near-repeats of a tried trial (`near_tried`
    at `near`: running, or trained or failed; not one told over budget, never trained) and
    proposes the best of the rest (their acquisition -inf); when every candidate is one, the
    product's choice. Aimed at model turns that keep proposing next to the front's members,
    paying a trial again for an outcome already known."""

    def __init__(self, seed: int, *, near: float = 0.0, **kw: Any) -> None:
        super().__init__(seed, **kw)
        self.near = near
        self._model_turn = False
        self._skip: np.ndarray | None = None  # this ask's candidates that are near-repeats

    def _choose(self, study: Study, number: int, done: list[Finished],
                ) -> dict[str, Any] | None:
        self._model_turn, self._skip = True, None
        try:
            return super()._choose(study, number, done)
        finally:
            self._model_turn, self._skip = False, None

    def _candidates(self, study: Study, number: int, done: Sequence[Finished] = (),
                    first: bool = False,
                    ) -> tuple[np.random.Generator, list[tuple[dict[str, Any], float]]]:
        rng, cands = super()._candidates(study, number, done, first)
        if self._model_turn and cands:
            near = near_tried([p for p, _ in cands], _trained_or_running(study, number),
                              self.near)
            self._skip = near if not near.all() else None
        return rng, cands

    def _gain(self, number: int, q: np.ndarray, front: Sequence[tuple[float, float]],
              x: np.ndarray, mu: np.ndarray, sd: np.ndarray) -> np.ndarray:
        gain = super()._gain(number, q, front, x, mu, sd)
        if self._skip is not None and len(self._skip) == len(gain):
            gain = np.where(self._skip, -np.inf, gain)
        return gain


def _trained_or_running(study: Study, number: int) -> list[FrozenTrial]:
    """The study's trials other than `number` that ran or run: not waiting (no params yet),
    not told over budget (`ATTR` status "infeasible": never trained)."""
    from autoembed.pipeline.records import ATTR

    out = []
    for t in study.get_trials(deepcopy=False):
        row = t.user_attrs.get(ATTR)
        if t.number == number or t.state.name == "WAITING" or not t.params:
            continue
        if isinstance(row, Mapping) and row.get("status") == "infeasible":
            continue
        out.append(t)
    return out


def near_tried(cands: Sequence[Mapping[str, Any]], tried: Sequence[FrozenTrial],
               near: float) -> np.ndarray:
    """Per candidate (Optuna params), whether it is a near-repeat of one of `tried`: the
    same params set, every categorical equal, every number within `near` of its
    distribution's range (log scale where the distribution is log), as the tried trial's
    own distributions define them (the search space's, not any table's)."""
    from optuna.distributions import CategoricalDistribution

    hit = np.zeros(len(cands), dtype=bool)
    if not tried or not cands:
        return hit
    dists: dict[str, Any] = {}
    for t in tried:
        dists.update(t.distributions)
    names = sorted(set(dists) | {n for c in cands for n in c})
    ok = np.ones((len(cands), len(tried)), dtype=bool)
    for name in names:
        d = dists.get(name)
        c_has = np.array([name in c for c in cands])
        t_has = np.array([name in t.params for t in tried])
        same = c_has[:, None] == t_has[None, :]
        if d is None:  # no tried trial has it: near only where the candidate lacks it too
            ok &= same
            continue
        if isinstance(d, CategoricalDistribution):
            codes: dict[str, int] = {}
            cc = np.array([codes.setdefault(repr(c.get(name)), len(codes)) for c in cands])
            tc = np.array([codes.setdefault(repr(t.params.get(name)), len(codes))
                           for t in tried])
            equal = cc[:, None] == tc[None, :]
        else:
            cs = np.array([_unit(d, c.get(name)) for c in cands])
            ts = np.array([_unit(d, t.params.get(name)) for t in tried])
            equal = np.abs(cs[:, None] - ts[None, :]) <= near + 1e-12
        both = c_has[:, None] & t_has[None, :]
        ok &= same & (~both | equal)
    return np.asarray(ok.any(axis=1))


def _unit(d: Any, v: Any) -> float:
    """A number on its distribution's [0, 1] (log scale where it is log); NaN when absent
    or not a number."""
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return math.nan
    lo, hi, x = float(d.low), float(d.high), float(v)
    if d.log:
        if x <= 0:
            return math.nan
        lo, hi, x = math.log(lo), math.log(hi), math.log(x)
    return 0.0 if hi == lo else (x - lo) / (hi - lo)


class OneHot(PricedEHVI):
    """Categoricals one 0/1 feature per label (`_labels`, `_onehot_encode`)."""

    def _features(self, done: Sequence[Finished],
                  cands: Sequence[tuple[dict[str, Any], float]],
                  ) -> tuple[np.ndarray, np.ndarray]:
        names = sorted({n for p, *_ in done for n in p} | {n for p, _ in cands for n in p})
        labels = _labels([p for p, *_ in done] + [p for p, _ in cands])
        return (_onehot_encode([p for p, *_ in done], [m for _, _, m, _ in done], names, labels),
                _onehot_encode([p for p, _ in cands], [m for _, m in cands], names, labels))


class NotPerSecond(PricedEHVI):
    """The acquisition alone, not divided by the predicted seconds."""

    def _seconds_weight(self) -> float:
        return 0.0


class CostCooling(PricedEHVI):
    """The predicted seconds' exponent is the share of the budget left (cheap trials
    explore early, the acquisition alone decides at the end)."""

    def _seconds_weight(self) -> float:
        if self._pricing is None:
            return 1.0
        return min(1.0, max(0.0, 1.0 - float(self._pricing.spent())))


class Neighbors(PricedEHVI):
    """Besides the random candidates, `neighbors` near the members of the current front in
    turn, best quality first, mixed in evenly (`NeighborTrial`); none at the start-up."""

    def __init__(self, seed: int, *, neighbors: int = 0, **kw: Any) -> None:
        super().__init__(seed, **kw)
        self.neighbors = neighbors

    def _stand_ins(self, rng: np.random.Generator, number: int,
                   done: Sequence[Finished]) -> list[RandomTrial]:
        randoms = super()._stand_ins(rng, number, done)
        parents = _front(done) if self.neighbors else []
        if not parents:
            return randoms
        keyed: list[tuple[float, RandomTrial]] = [
            ((i + 0.5) / len(randoms), t) for i, t in enumerate(randoms)]
        # a generator of their own: the random candidates are the same without them
        near = np.random.default_rng((self.seed, number, 1))
        keyed += [((i + 0.5) / self.neighbors, NeighborTrial(near, p, 1.0 / max(len(p), 1)))
                  for i, p in enumerate(parents[k % len(parents)]
                                        for k in range(self.neighbors))]
        # the two kinds evenly mixed, so a pricing deadline cuts both alike
        return [t for _, t in sorted(keyed, key=lambda kt: kt[0])]


class RandomStartup(PricedEHVI):
    """The start-up proposals random (`startup` of them), not spread over memory."""

    def _startup_proposal(self, study: Study, number: int) -> dict[str, Any] | None:
        return None


class TopFirst(PricedEHVI):
    """The start-up spreads from the top of the memory axis down: the product's spread
    (`_spread`) with each point mirrored (`_spread_point`: 1 - `spread_point(k)`), so the
    first trial is among the largest configs that fit and the best quality is known from
    the start."""

    def _spread_point(self, number: int, rng: np.random.Generator) -> float:
        return 1.0 - spread_point(number, self.startup, rng)


class NoBootstrap(PricedEHVI):
    """The trees fit on all finished trials (extra trees as Geurts et al. define them), not
    each on a bootstrap sample: the spread over the trees is then the random splits' alone."""

    def _choose(self, study: Study, number: int, done: list[Finished],
                ) -> dict[str, Any] | None:
        from autoembed.pipeline import priced_ehvi

        product = priced_ehvi._forest
        priced_ehvi._forest = _forest_no_bootstrap
        try:
            return super()._choose(study, number, done)
        finally:
            priced_ehvi._forest = product


def _forest_no_bootstrap(x: np.ndarray, y: np.ndarray, x_new: np.ndarray,
                         rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """`priced_ehvi._forest` with bootstrap off."""
    from sklearn.ensemble import ExtraTreesRegressor

    model = ExtraTreesRegressor(n_estimators=64, bootstrap=False, min_samples_leaf=1,
                                random_state=int(rng.integers(2**31)))
    model.fit(x, y)
    per_tree = np.stack([t.predict(x_new) for t in model.estimators_])
    return per_tree.mean(axis=0), per_tree.std(axis=0)


class Margin(PricedEHVI):
    """The reference point `margin` beyond the budget on the memory axis."""

    def __init__(self, seed: int, *, margin: float = 0.0, **kw: Any) -> None:
        super().__init__(seed, **kw)
        self.margin = margin

    def _gain(self, number: int, q: np.ndarray, front: Sequence[tuple[float, float]],
              x: np.ndarray, mu: np.ndarray, sd: np.ndarray) -> np.ndarray:
        shifted = [(fx + self.margin, fy) for fx, fy in front]
        return super()._gain(number, q, shifted, x + self.margin, mu, sd)


class SecondsWeight(PricedEHVI):
    """The acquisition divided by the predicted seconds to the power `seconds_weight`."""

    def __init__(self, seed: int, *, seconds_weight: float = 1.0, **kw: Any) -> None:
        super().__init__(seed, **kw)
        self.seconds_weight = seconds_weight

    def _seconds_weight(self) -> float:
        return self.seconds_weight


class IgnoresPending(PricedEHVI):
    """Running trials are not believed: concurrent asks see the same finished trials."""

    def _pending(self) -> Sequence[tuple[Mapping[str, Any], float]]:
        return ()


KNOBS: dict[str, tuple[type[PricedEHVI], Any]] = {
    # knob -> (the subclass that turns it, the product's value: no subclass needed)
    "quality_turns": (QualityTurns, 0),
    "random_every": (RandomEvery, RANDOM_EVERY),
    "onehot": (OneHot, False),
    "per_second": (NotPerSecond, True),
    "cost_cooling": (CostCooling, False),
    "neighbors": (Neighbors, 0),
    "spread": (RandomStartup, True),
    "pending": (IgnoresPending, True),
    "margin": (Margin, 0.0),
    "top_first": (TopFirst, False),
    "no_bootstrap": (NoBootstrap, False),
    "seconds_weight": (SecondsWeight, 1.0),
    "pick_turns": (PickTurns, 0),
    "random_quality": (RandomQuality, False),
    "near": (NearRepeats, 0.0),
}
# a class, no argument
FLAGS = ("onehot", "per_second", "cost_cooling", "spread", "pending", "random_quality",
         "top_first", "no_bootstrap")


def build(seed: int, **kw: Any) -> PricedEHVI:
    """`PricedEHVI` with the knobs in `kw` (KNOBS) turned: a class combining the variants'
    subclasses (the product's own class when every knob is at its product value); other
    keywords (startup, candidates, ...) go to `PricedEHVI`."""
    bases: list[type[PricedEHVI]] = []
    args = dict(kw)
    for knob, (cls, product) in KNOBS.items():
        if knob in args and args[knob] == product:
            del args[knob]
        elif knob in args:
            bases.append(cls)
            if knob in FLAGS:
                del args[knob]
    if PickTurns in bases:  # a QualityTurns: one class turns both
        bases = [b for b in bases if b not in (QualityTurns, RandomEvery)]
    if RandomQuality in bases and RandomEvery in bases:
        bases.remove(RandomEvery)  # RandomQuality is a RandomEvery
    if QualityTurns in bases and RandomEvery in bases:
        bases.remove(RandomEvery)  # QualityTurns is a RandomEvery
    if not bases:
        return PricedEHVI(seed, **args)
    cls = bases[0] if len(bases) == 1 else type("+".join(b.__name__ for b in bases),
                                                tuple(bases), {})
    return cls(seed, **args)


class NeighborTrial(RandomTrial):
    """A stand-in trial that stays near `parent` (Optuna params): each suggestion keeps the
    parent's value, except with probability `rate` (or when the parent lacks it or its value
    is out of range) a new one: another label, or a number moved by a normal step of
    SIGMA of its (log) range. SMAC's local search moves one param of an incumbent so."""

    SIGMA = 0.2

    def __init__(self, rng: np.random.Generator, parent: Mapping[str, Any], rate: float) -> None:
        super().__init__(rng)
        self.parent, self.rate = parent, rate

    def _keep(self, name: str) -> bool:
        return name in self.parent and self.rng.uniform() >= self.rate

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        v = self.parent.get(name)
        if self._keep(name) and v in choices:
            self.params[name] = v
            return v
        others = [c for c in choices if c != v] or list(choices)
        self.params[name] = c = others[int(self.rng.integers(len(others)))]
        return c

    def _moved(self, name: str, low: float, high: float, log: bool) -> float | None:
        v = self.parent.get(name)
        if not isinstance(v, (int, float)) or not low <= v <= high:
            return None
        if self._keep(name):
            return float(v)
        f = math.log if log else float
        lo, hi = f(low), f(high)
        x = min(max(f(v) + self.rng.normal() * self.SIGMA * (hi - lo), lo), hi)
        return math.exp(x) if log else x

    def suggest_int(self, name: str, low: int, high: int, step: int = 1,
                    log: bool = False) -> int:
        x = self._moved(name, low, high, log)
        if x is None:
            return super().suggest_int(name, low, high, step, log)
        v = min(max(low + step * int(round((x - low) / step)), low), high)
        self.params[name] = v
        return v

    def suggest_float(self, name: str, low: float, high: float, step: float | None = None,
                      log: bool = False) -> float:
        x = self._moved(name, low, high, log)
        if x is None:
            return super().suggest_float(name, low, high, step, log)
        if step:
            x = min(max(low + step * round((x - low) / step), low), high)
        self.params[name] = x
        return x


def _front(done: Sequence[Finished]) -> list[dict[str, Any]]:
    """The params of the finished trials on the (quality, memory) front
    (`pareto.non_dominated`), by quality, best first."""
    on = non_dominated([(q, m) for _, q, m, _ in done], ["maximize", "minimize"])
    return [done[i][0] for i in sorted(on, key=lambda i: -done[i][1])]


def _labels(params: Sequence[Mapping[str, Any]]) -> dict[str, list[str]]:
    """Per categorical param (a label, not a number), its labels in a stable order."""
    out: dict[str, set[str]] = {}
    for p in params:
        for n, v in p.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                out.setdefault(n, set()).add(repr(v))
    return {n: sorted(v) for n, v in out.items()}


def _onehot_encode(params: Sequence[Mapping[str, Any]], memory: Sequence[float],
                   names: Sequence[str], labels: Mapping[str, Sequence[str]]) -> np.ndarray:
    """The product's features (`priced_ehvi._encode`), except a param in `labels`: one 0/1
    column per label (absent: all 0)."""
    rows = []
    for p, m in zip(params, memory, strict=True):
        row: list[float] = []
        for n in names:
            if n in labels:
                row.extend(float(repr(p.get(n)) == lab) for lab in labels[n])
            else:
                row.append(_feature(p.get(n)))
        rows.append([*row, math.log10(m)])
    return np.array(rows, dtype=float)


def expected_improvement(mu: np.ndarray, sd: np.ndarray, best: float) -> np.ndarray:
    """Expected improvement over `best` of quality ~ N(mu, sd) (larger is better)."""
    from scipy.special import ndtr

    z = (mu - best) / sd
    return np.asarray((mu - best) * ndtr(z) + sd * np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi))
