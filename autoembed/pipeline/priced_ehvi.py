"""Priced EHVI: each proposal is the candidate whose expected gain in the (quality, memory)
front is largest per predicted second, with its memory priced exactly before it is chosen
(sampler `ehvi`).

A search knows a proposal's memory objective before it trains (the analytic pricing) and its
quality only after. So, at each ask once STARTUP trials have finished:

1. draw CANDIDATES configs at random from the space (the space's own suggest code on a
   random trial, conditional params as the space has them), skipping configs already tried;
2. price each (`bind`: the workload's pricing, the memory objective, and whether a proposal
   of it would train: within the budget, its config untried, `propose.trial_key`); drop
   those that would not, and the invalid — they are never proposed;
3. predict each one's validation quality from the finished trials: extra trees over the
   encoded params and the log of the priced memory (mean and spread over the trees);
4. score it by the expected hypervolume improvement (EHVI) over the current front in the
   unit square of (quality, log memory): memory exact, quality Gaussian; divided by its
   predicted seconds (extra trees on the same features, log wall seconds of the finished
   trials) once MIN_COSTS trials have one;
5. propose the best (its values are handed out by `sample_independent`).

Running trials (`Pricing.pending`: each at the memory it was priced at) are believed (the
kriging believer): each joins the trees' data and the front at its predicted quality, so N
asks in a row with N workers spread instead of piling onto one place (replayed with 8
workers: benchmarks/results/ehvi_running_trials_replay.md).

The start-up (the first STARTUP trial numbers) spreads over the memory axis, the one
objective known before training: each start-up ask draws and prices candidates as above and
proposes the fitting one nearest the k-th point of a stratified sequence over their log memory
(`spread_point`: van der Corput's sequence, each point jittered within 1/STARTUP), so
the first few trials already span the front's memory range and none is over budget. Chosen
over a random start-up because it reaches 95% of the front's hypervolume sooner on three
replay tables of four (benchmarks/results/search_efficiency_replay.md). Without a memory
objective the start-up is the random proposal below.

Random proposals: every RANDOM_EVERY-th trial after the start-up (as `interleave.is_random`)
proposes the first of its random candidates (drawn and priced as above, untried) that fits,
pricing no more: uniform over the untried configs that fit, the same for a seed and trial
number; so does the start-up without a memory objective, and a turn whose model failed. A
model turn before STARTUP trials have finished (others still running, or failed) is a
start-up proposal (priced, spread) instead. Only these go unpriced (Optuna's random
sampler): every trial when nothing is bound (a study opened outside the engine); an ask
none of whose candidates could be priced at all, or whose pricing raised; in a space not
enumerated, an ask while random candidates found none that fits lately (`_barren`). An
enqueued trial (start points, a retry) is not priced: its params are given.

Hooks: the points where the replays' variants (benchmarks/replay/variants.py) differ from
this rule are small methods a subclass overrides: `_random_turn` (which trials are random),
`_startup_proposal` (the start-up), `_spread_point` (where a start-up ask aims on the
memory axis), `_stand_ins` (the candidate set), `_features` (the trees'
features), `_gain` (the acquisition), `_seconds_weight` (the predicted seconds' exponent)
and `_pending` (the running trials believed).

Candidate pricing stops after PRICE_BUDGET_S per ask once a candidate fits (a user's model
prices in milliseconds to seconds): fewer candidates then. An ask with none that fits by
then, and some priced over budget, prices on until one does (the rest of its candidates,
then a finite space's untried configs, `_keep_pricing`, `pipeline.untried`): a slow model
makes a slow ask, never an unpriced proposal; a finite space with no untried config that
fits raises `SpaceExhausted`, which ends the search ("every fitting config tried: N"). In
a space not enumerated, an ask whose candidates all missed proposes at random and later
asks keep to their window until one fits again. An ask none of whose candidates could be
priced at all (INVALID_LIMIT of them, past the window) proposes at random: the engine's
price of it says why (bad input when it is the first). What it proposes is the candidate it
priced, value for value (None included). A repeatable search
(`Pricing.repeatable`) lets no clock decide: every candidate is priced and the acquisition is
not divided by seconds. Throughput is not in the acquisition (timing on a shared machine is
noise to a model); it stays an objective of the front. Without a memory objective the gain
is the expected improvement of quality alone (every candidate at the same memory); without a
quality objective proposals are random.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.samplers import BaseSampler, RandomSampler

from autoembed.pipeline.interleave import is_random
from autoembed.pipeline.records import ATTR, params_key
from autoembed.pipeline.untried import RandomTrial as _RandomTrial
from autoembed.pipeline.untried import SpaceExhausted, space_configs, untried_fitting

if TYPE_CHECKING:
    from optuna.study import Study
    from optuna.trial import FrozenTrial, TrialState

__all__ = ["PricedEHVI", "Pricing", "ehvi_2d", "spread_point", "STARTUP", "CANDIDATES"]

log = logging.getLogger(__name__)

# start-up proposals (spread over the memory axis) and finished trials before the model is
# used: 5 against TPE's 8 random ones (the replays: benchmarks/results/search_efficiency_replay.md)
STARTUP = 5
RANDOM_EVERY = 4  # after the start-up, every 4th proposal is random
CANDIDATES = 128  # random candidates priced and scored per ask
PRICE_BUDGET_S = 1.0  # pricing candidates stops after this long once one fits
INVALID_LIMIT = 8  # candidates that cannot be priced, none priced, before pricing stops
MIN_COSTS = 5  # trials with a cost before the acquisition is per second
GRID = 256  # quality grid of the EHVI integral
HEAVY_IMPORTS = ("sklearn.ensemble", "scipy.special")  # what an ask imports: study.warm_sampler

# a finished trial: (params, quality (larger is better), memory objective, wall seconds or None)
Finished = tuple[dict[str, Any], float, float, float | None]


@dataclass(frozen=True)
class Pricing:
    """What the engine binds: `price(values)` -> (memory objective in bytes, a proposal of
    it would train: it fits the budget and its config is untried) or None (invalid);
    `suggest(trial)` -> the space's values of a trial (the
    space's suggest code); the objectives' names and directions; `budget_bytes`: the top
    of the memory axis."""

    price: Callable[[Mapping[str, Any]], tuple[float, bool] | None]
    suggest: Callable[[Any], Mapping[str, Any]]
    objectives: Sequence[tuple[str, str]]
    budget_bytes: float
    repeatable: bool = False  # every candidate priced, however long (no clock decides)
    spent: Callable[[], float] = lambda: 0.0  # the share of the search's budget spent, 0..1
    # (the engine's; no hook of the product reads it, variants may)
    # the running trials: (Optuna params, memory objective as priced) of each
    pending: Callable[[], Sequence[tuple[Mapping[str, Any], float]]] = lambda: ()


class PricedEHVI(BaseSampler):
    """The sampler of the module docstring. `bind(pricing)` before the first ask. `startup`,
    `candidates`, `price_budget_s` and `clock` (what the pricing window reads) default to
    the product's; tests set them to drive it deterministically."""

    def __init__(self, seed: int, startup: int = STARTUP, candidates: int = CANDIDATES,
                 price_budget_s: float = PRICE_BUDGET_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.seed = seed
        self.clock = clock
        self.startup = startup
        self.candidates = candidates
        self.price_budget_s = price_budget_s
        self._random = RandomSampler(seed=seed)
        self._pricing: Pricing | None = None
        self._chosen: dict[int, dict[str, Any]] = {}
        # the space's configs once enumerated (None: not finite or too many), and the keys
        # of those priced that would not train (`untried.untried_fitting`)
        self._enumerated = False
        self._configs: list[tuple[dict[str, Any], dict[str, Any]]] | None = None
        self._unfit: set[tuple[tuple[str, str], ...]] = set()
        self._barren = False  # random configs past an ask's window found none that fits

    def bind(self, pricing: Pricing) -> None:
        self._pricing = pricing

    # ---------------------------------------------------------------- Optuna's protocol
    def infer_relative_search_space(self, study: Study,
                                    trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return {}

    def sample_relative(self, study: Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        return {}

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        self._random.before_trial(study, trial)
        if self._pricing is None or "fixed_params" in trial.system_attrs:
            return  # unbound, or an enqueued trial: its params are given
        number = trial.number

        def random() -> dict[str, Any] | None:
            return self._random_proposal(study, number)

        propose = random
        if number < self.startup and _has_memory(self._pricing.objectives):
            def propose() -> dict[str, Any] | None:
                return self._startup_proposal(study, number)
        elif number >= self.startup and not self._random_turn(number):
            done = _finished(study, self._pricing.objectives)
            if len(done) < self.startup:  # start-up trials still running or failed
                if self._barren:  # random while nothing fitting was found lately
                    return

                def propose() -> dict[str, Any] | None:
                    return self._startup_proposal(study, number)
            else:
                def propose() -> dict[str, Any] | None:
                    return self._choose(study, number, done)
        chosen = self._proposal(number, propose, random)
        if chosen is not None:
            self._chosen[trial.number] = chosen

    def sample_independent(self, study: Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        chosen = self._chosen.get(trial.number, {})
        # a chosen value is handed out as it is, None included
        if param_name in chosen and _contains(param_distribution, chosen[param_name]):
            return chosen[param_name]
        return self._random.sample_independent(study, trial, param_name, param_distribution)

    def after_trial(self, study: Study, trial: FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
        self._chosen.pop(trial.number, None)
        self._random.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self._random.reseed_rng()

    # ---------------------------------------------------------------- hooks
    def _random_turn(self, number: int) -> bool:
        """Whether trial `number` (past the start-up) is a random proposal: every
        RANDOM_EVERY-th."""
        return is_random(number, self.startup, RANDOM_EVERY)

    def _startup_proposal(self, study: Study, number: int) -> dict[str, Any] | None:
        """A start-up proposal (None: a random one): spread over the memory axis."""
        return self._spread(study, number)

    def _spread_point(self, number: int, rng: np.random.Generator) -> float:
        """Where on the candidates' log-memory range (0: cheapest) start-up ask `number`
        aims: `spread_point`."""
        return spread_point(number, self.startup, rng)

    def _stand_ins(self, rng: np.random.Generator, number: int,
                   done: Sequence[Finished]) -> list[_RandomTrial]:
        """The stand-in trials whose configs are trial `number`'s candidates, in pricing
        order: CANDIDATES random ones (`done`: the finished trials, none at the start-up)."""
        return [_RandomTrial(rng) for _ in range(self.candidates)]

    def _features(self, done: Sequence[Finished],
                  cands: Sequence[tuple[dict[str, Any], float]],
                  ) -> tuple[np.ndarray, np.ndarray]:
        """The trees' features of the finished trials and of the candidates (`_encode`)."""
        names = sorted({n for p, *_ in done for n in p} | {n for p, _ in cands for n in p})
        return (_encode([p for p, *_ in done], [m for _, _, m, _ in done], names),
                _encode([p for p, _ in cands], [m for _, m in cands], names))

    def _gain(self, number: int, q: np.ndarray, front: Sequence[tuple[float, float]],
              x: np.ndarray, mu: np.ndarray, sd: np.ndarray) -> np.ndarray:
        """Each candidate's acquisition: EHVI over `front` (unit square) of the candidates
        at memory `x` with quality ~ N(mu, sd) (`q`: the finished trials' qualities; mu, sd
        in their units)."""
        q_lo, q_span = float(q.min()), float(np.ptp(q)) + 1e-9
        return ehvi_2d(front, x, (mu - q_lo) / q_span, sd / q_span)

    def _seconds_weight(self) -> float:
        """The exponent of the predicted seconds dividing the acquisition (0: none)."""
        return 1.0

    def _pending(self) -> Sequence[tuple[Mapping[str, Any], float]]:
        """The running trials the model believes (`Pricing.pending`)."""
        assert self._pricing is not None
        return self._pricing.pending()

    # ---------------------------------------------------------------- the choice
    def _proposal(self, number: int, propose: Callable[[], dict[str, Any] | None],
                  random: Callable[[], dict[str, Any] | None]) -> dict[str, Any] | None:
        """`propose()`'s config; when it fails (a model failure must not end a search), the
        priced random one, `random()`; None (an unpriced random proposal) when that fails
        too. SpaceExhausted ends the search."""
        for attempt in (propose,) if propose is random else (propose, random):
            try:
                return attempt()
            except SpaceExhausted:
                raise
            except Exception as e:  # noqa: BLE001
                then = "; a priced random one instead" if attempt is not random else ""
                log.warning("ehvi: no %s proposal for trial %d (%s)%s",
                            "random" if attempt is random else "model", number, e, then)
        return None

    def _random_proposal(self, study: Study, number: int) -> dict[str, Any] | None:
        """A random proposal that fits: the first of trial `number`'s candidates (random,
        in order, none tried before) that fits (`_candidates`), so uniform over the untried
        configs that fit; None when none could be priced, or none fits lately (`_barren`)."""
        _, cands = self._candidates(study, number, first=True)
        return dict(cands[0][0]) if cands else None

    def _spread(self, study: Study, number: int) -> dict[str, Any] | None:
        """A start-up proposal: the fitting candidate nearest `spread_point(number)` on the
        candidates' log-memory range (random without a memory objective)."""
        assert self._pricing is not None
        if not _has_memory(self._pricing.objectives):
            return None
        rng, cands = self._candidates(study, number)
        if not cands:
            return None
        mem = np.log([m for _, m in cands])
        target = mem.min() + self._spread_point(number, rng) * float(np.ptp(mem))
        return dict(cands[int(np.argmin(np.abs(mem - target)))][0])

    def _choose(self, study: Study, number: int, done: list[Finished],
                ) -> dict[str, Any] | None:
        assert self._pricing is not None
        rng, cands = self._candidates(study, number, done)
        if not cands:
            return None
        pending = [(dict(p), float(m)) for p, m in self._pending()]
        x_done, x_cand = self._features(done, [*cands, *pending])
        q = np.array([q for _, q, _, _ in done])
        x_fit, q_fit, believed = x_done, q, np.empty(0)
        if pending:  # the kriging believer: each running trial at the quality predicted
            x_run, x_cand = x_cand[len(cands):], x_cand[:len(cands)]
            believed, _ = _forest(x_done, q, x_run, rng)
            x_fit, q_fit = np.vstack([x_done, x_run]), np.concatenate([q, believed])
        mu, sd = _forest(x_fit, q_fit, x_cand, rng)
        sd = np.maximum(sd, 0.05 * float(q.std()) + 1e-9)
        mems = [m for _, _, m, _ in done] + [m for _, m in cands] + [m for _, m in pending]
        lo = math.log(min(mems))
        hi = math.log(max(self._pricing.budget_bytes, math.exp(lo) * 10))
        q_lo, q_span = float(q.min()), float(np.ptp(q)) + 1e-9

        def x_of(mem: float) -> float:  # memory on the unit interval, larger is better
            return (hi - math.log(mem)) / (hi - lo)

        front = [(x_of(m), (qq - q_lo) / q_span) for _, qq, m, _ in done]
        front += [(x_of(m), (float(b) - q_lo) / q_span)
                  for (_, m), b in zip(pending, believed, strict=True)]
        score = self._gain(number, q, front, np.array([x_of(m) for _, m in cands]), mu, sd)
        secs = [(i, s) for i, (*_, s) in enumerate(done) if s]
        weight = self._seconds_weight()
        if weight and len(secs) >= MIN_COSTS and not self._pricing.repeatable:
            log_s, _ = _forest(x_done[[i for i, _ in secs]], np.log([s for _, s in secs]),
                               x_cand, rng)
            score = score / np.exp(log_s * weight)
        return dict(cands[int(np.argmax(score))][0])

    def _candidates(self, study: Study, number: int, done: Sequence[Finished] = (),
                    first: bool = False,
                    ) -> tuple[np.random.Generator, list[tuple[dict[str, Any], float]]]:
        """Trial `number`'s generator and its priced candidates (`_stand_ins`), none tried
        before (`first`: the first that fits alone)."""
        rng = np.random.default_rng((self.seed, number))
        tried = {params_key(t.params) for t in study.get_trials(deepcopy=False)
                 if t.number != number and t.state.name != "WAITING"}  # no params yet
        deadline = self.clock() + self.price_budget_s
        trials = self._stand_ins(rng, number, done)
        cands, over = self._priced_candidates(trials, tried, deadline, not self._barren, first)
        if cands:
            self._barren = False
        if cands or not over or self._barren:  # none could be priced: a random proposal
            return rng, cands
        return rng, self._keep_pricing(rng, tried, number)

    def _priced_candidates(self, trials: Sequence[_RandomTrial],
                           tried: set[tuple[tuple[str, str], ...]], deadline: float,
                           keep: bool = True, first: bool = False,
                           ) -> tuple[list[tuple[dict[str, Any], float]], bool]:
        """The stand-in trials' configs that fit the budget, each once: (Optuna params,
        memory objective); and whether any was priced over budget. Unless the search is
        repeatable, pricing stops at `deadline` once one fits, or once INVALID_LIMIT could
        not be priced and none could (the engine's first price says why), or (not `keep`)
        there; (`first`) once one fits."""
        assert self._pricing is not None
        out: list[tuple[dict[str, Any], float]] = []
        seen = set(tried)
        over, invalid = False, 0
        for fake in trials:
            if first and out:
                break
            if ((out or not keep or (not over and invalid >= INVALID_LIMIT))
                    and self.clock() > deadline and not self._pricing.repeatable):
                break
            values = self._pricing.suggest(fake)
            key = params_key(fake.params)
            if key in seen:
                continue
            seen.add(key)
            priced = self._pricing.price(values)
            memory = self._memory_if_fits(priced)
            if memory is not None:
                out.append((fake.params, memory))
            over, invalid = over or priced is not None, invalid + (priced is None)
        return out, over

    def _memory_if_fits(self, priced: tuple[float, bool] | None) -> float | None:
        """A config's memory objective (bytes, at least 1: the axis is log; 1 without a
        memory objective) when its price says a proposal of it would train (it fits the
        budget, its config untried: `Pricing.price`), else None."""
        assert self._pricing is not None
        if priced is None or not priced[1]:
            return None
        return max(priced[0] if _has_memory(self._pricing.objectives) else 1.0, 1.0)

    def _keep_pricing(self, rng: np.random.Generator, tried: set[tuple[tuple[str, str], ...]],
                      number: int) -> list[tuple[dict[str, Any], float]]:
        """None of the ask's candidates, all priced, fits: a finite space's untried configs
        are priced on (`untried.untried_fitting`) until one fits, SpaceExhausted when none
        is left. In any other space, [] (a random proposal): later asks price for their
        window alone until one fits again (`_barren`), and the engine's rejections in a row
        end a search where nothing fits any more."""
        assert self._pricing is not None
        if not self._enumerated:
            self._configs, self._enumerated = space_configs(self._pricing.suggest), True
        if self._configs is None:  # the ask's own candidates were the random ones
            self._barren = True
            return []
        price = self._pricing.price
        found = untried_fitting(self._configs, self._pricing.suggest, tried, self._unfit,
                                lambda values: self._memory_if_fits(price(values)), rng)
        if found is None:
            raise SpaceExhausted(number)
        return [found]


def spread_point(k: int, strata: int, rng: np.random.Generator) -> float:
    """The k-th start-up point on [0, 1): van der Corput's k-th point (0, 1/2, 1/4, 3/4,
    1/8, ...) plus a uniform jitter of 1/`strata`, modulo 1. With a power of two for
    `strata`, points 0..strata-1 fall one in each of its equal strata; any first few are
    spread over the interval."""
    return float((van_der_corput(k) + rng.uniform() / max(strata, 1)) % 1.0)


def van_der_corput(k: int) -> float:
    """k's base-2 digits mirrored about the point: 0, 1/2, 1/4, 3/4, 1/8, ..."""
    out, scale = 0.0, 0.5
    while k:
        out, k, scale = out + scale * (k & 1), k >> 1, scale / 2
    return out


def _has_memory(objectives: Sequence[tuple[str, str]]) -> bool:
    return any(n == "memory" for n, _ in objectives)


def _contains(dist: BaseDistribution, v: Any) -> bool:
    """Whether `dist` holds value `v`: one of a categorical's choices; a number within a
    numeric one's bounds and on its step (an int's exactly, a float's within 1e-8 steps)."""
    try:
        x = dist.to_internal_repr(v)  # raises for a label not among the choices, a NaN ...
    except (ValueError, TypeError):
        return False
    if isinstance(dist, CategoricalDistribution):
        return True
    if not isinstance(dist, (FloatDistribution, IntDistribution)):
        return False
    if not dist.low <= x <= dist.high:
        return False
    if isinstance(dist, IntDistribution):
        return (x - dist.low) % dist.step == 0
    return dist.step is None or abs((x - dist.low) / dist.step
                                    - round((x - dist.low) / dist.step)) < 1.0e-8


def _finished(study: Study, objectives: Sequence[tuple[str, str]]) -> list[Finished]:
    """(params, quality (larger is better), memory (1 when it is no objective), wall seconds
    or None) of every trial trained to its end; none without a quality objective."""
    names = [n for n, _ in objectives]
    if "quality" not in names:
        return []
    iq, im = names.index("quality"), names.index("memory") if "memory" in names else None
    sign = -1.0 if dict(objectives)["quality"] == "minimize" else 1.0  # larger is better
    out = []
    for t in study.get_trials(deepcopy=False):
        row = t.user_attrs.get(ATTR)
        if not isinstance(row, Mapping) or row.get("status") != "complete" or not t.values:
            continue
        q, m = t.values[iq], (t.values[im] if im is not None else 1.0)
        if not (math.isfinite(q) and math.isfinite(m) and m > 0):
            continue
        secs = (row.get("metrics") or {}).get("wall_seconds")
        wall = float(secs) if isinstance(secs, (int, float)) and secs > 0 else None
        out.append((dict(t.params), sign * float(q), float(m),
                    wall if wall is not None and math.isfinite(wall) else None))
    return out


def _encode(params: Sequence[Mapping[str, Any]], memory: Sequence[float],
            names: Sequence[str]) -> np.ndarray:
    """Features: per param `_feature` of its value; then log10(memory)."""
    return np.array([[_feature(p.get(n)) for n in names] + [math.log10(m)]
                     for p, m in zip(params, memory, strict=True)], dtype=float)


def _feature(v: Any) -> float:
    """A param value's feature: a number (log10 where positive), a hash of a label
    (categoricals: trees split on them), -1 when absent (None)."""
    if v is None:
        return -1.0
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return float(_label_code(v))
    return math.log10(v) if v > 0 else float(v)


def _label_code(v: Any) -> int:
    """A stable code for a categorical label (the same in every process)."""
    import zlib

    return zlib.crc32(repr(v).encode()) % 1000


def _forest(x: np.ndarray, y: np.ndarray, x_new: np.ndarray,
            rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Mean and spread over the trees of an extra-trees fit of y on x, at x_new."""
    from sklearn.ensemble import ExtraTreesRegressor

    model = ExtraTreesRegressor(n_estimators=64, bootstrap=True, min_samples_leaf=1,
                                random_state=int(rng.integers(2**31)))
    model.fit(x, y)
    # each tree's own predict, as `t.predict` computes it without its input checks (14x
    # faster on 128 candidates); the trees split on float32
    x32 = np.ascontiguousarray(x_new, dtype=np.float32)
    per_tree = np.stack([t.tree_.predict(x32).reshape(len(x_new)) for t in model.estimators_])
    return per_tree.mean(axis=0), per_tree.std(axis=0)


def ehvi_2d(front: Sequence[tuple[float, float]], x: np.ndarray, mu: np.ndarray,
            sd: np.ndarray) -> np.ndarray:
    """Expected hypervolume improvement of candidates at exact `x` (memory: larger is
    better, the unit interval) with quality ~ N(mu, sd) (larger is better), over the points
    `front` (x, y), reference (0, 0). A point (x, y) adds the integral over t in [0, y] of
    max(0, x - G(t)), G(t) the largest x of a front point with y >= t."""
    top = float(max([1.0, *(mu + 4 * sd)]))
    t = np.linspace(0.0, top, GRID)
    g = np.zeros_like(t)
    for fx, fy in front:
        g = np.where(t <= fy, np.maximum(g, fx), g)
    gain = np.maximum(0.0, x[:, None] - g[None, :])  # (candidates, grid)
    dt = t[1] - t[0]
    h = np.concatenate([np.zeros((len(x), 1)), np.cumsum(gain[:, :-1] * dt, axis=1)], axis=1)
    from scipy.special import ndtr  # the normal CDF (scipy.stats costs 0.8 s to import)

    edges = np.concatenate([t[:-1] + dt / 2, [np.inf]])
    cdf = ndtr((edges[None, :] - mu[:, None]) / sd[:, None])
    # the mass of each grid point's bin (the first takes all below, the last all above)
    p = np.diff(np.concatenate([np.zeros((len(x), 1)), cdf], axis=1), axis=1)
    return np.asarray((h * p).sum(axis=1))
