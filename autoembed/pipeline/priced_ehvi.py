"""Priced EHVI: each proposal is the candidate whose expected gain in the (quality, memory)
front is largest per predicted second, with its memory priced exactly before it is chosen
(sampler `ehvi`).

A search knows a proposal's memory objective before it trains (the analytic pricing) and its
quality only after. So, at each ask once STARTUP trials have finished:

1. draw CANDIDATES configs at random from the space (the space's own suggest code on a
   random trial, conditional params as the space has them), skipping configs already tried;
2. price each (`bind`: the workload's pricing, the memory objective, the budget's verdict);
   drop those over budget or invalid — they are never proposed;
3. predict each one's validation quality from the finished trials: extra trees over the
   encoded params and the log of the priced memory (mean and spread over the trees);
4. score it by the expected hypervolume improvement (EHVI) over the current front in the
   unit square of (quality, log memory): memory exact, quality Gaussian; divided by its
   predicted seconds (extra trees on the same features, log wall seconds of the finished
   trials) once MIN_COSTS trials have one;
5. propose the best (its values are handed out by `sample_independent`).

Neighbors (`neighbors` = n, 0 by default): besides the random candidates, n more near the
members of the current (quality, memory) front, in turn, best quality first, mixed in evenly
(`_NeighborTrial`: each param kept, or with probability 1/(its params) moved: another label,
a normal step of 0.2 of a number's (log) range), so the acquisition can weigh small moves
from what already works (SMAC's local search around its incumbents does this).

Quality turns (`quality_turns` = k, 0 by default): in each run of `random_every` trials after
the start-up, the first k model turns score candidates by the expected improvement of quality
alone (`expected_improvement`, per predicted second as above) instead of EHVI, so the
front's quality end, where the default pick lies, gets a fixed share of the proposals.
Measured and left off (benchmarks/results/search_efficiency_replay.md, `ehvi-q1-front`): it
reaches 95% of the front's hypervolume later on every replay table, the single best quality
sooner on some and later on others.

The start-up (the first STARTUP trial numbers) spreads over the memory axis, the one
objective known before training: each start-up ask draws and prices candidates as above and
proposes the fitting one nearest the k-th point of a stratified sequence over their log memory
(`spread_point`: van der Corput's sequence, each point jittered within 1/STARTUP), so
the first few trials already span the front's memory range and none is over budget. Against
8 random start-up trials (`spread=False`; benchmarks/results/search_efficiency_replay.md) it
reaches 95% of the front sooner on three tables of four and the single best quality later on
two. Without a memory objective the start-up is random.

Random proposals: every `random_every`-th trial after the start-up (RANDOM_EVERY by default;
as `interleave.is_random`), and every trial when nothing is bound (a study opened outside
the engine). A model turn before STARTUP trials have finished (others still running, or
failed) is a start-up proposal (priced, spread) instead, or random while random candidates
found none that fits (`_barren`). An enqueued trial (start points, a
retry) is not priced: its params are given.

Measured in the time-boxed replays and left off (benchmarks/results/
search_time_box_replay.md): `onehot` (categoricals one 0/1 feature per label, not a hashed
code), `per_second=False` (the acquisition alone) and `cost_cooling` (the predicted
seconds' exponent is the share of the search's budget left, `Pricing.spent`: CArBO).
`neighbors=64` picked better in the time box on flights, as well on MovieLens, but reached
95% of BBC News's front 1.75x later (benchmarks/results/search_efficiency_front_experiments.md).

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
)
from optuna.samplers import BaseSampler, RandomSampler

from autoembed.pareto import non_dominated
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


@dataclass(frozen=True)
class Pricing:
    """What the engine binds: `price(values)` -> (memory objective in bytes, fits the
    budget) or None (invalid); `suggest(trial)` -> the space's values of a trial (the
    space's suggest code); the objectives' names and directions; `budget_bytes`: the top
    of the memory axis."""

    price: Callable[[Mapping[str, Any]], tuple[float, bool] | None]
    suggest: Callable[[Any], Mapping[str, Any]]
    objectives: Sequence[tuple[str, str]]
    budget_bytes: float
    repeatable: bool = False  # every candidate priced, however long (no clock decides)
    spent: Callable[[], float] = lambda: 0.0  # the share of the search's budget spent, 0..1


class _NeighborTrial(_RandomTrial):
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


class PricedEHVI(BaseSampler):
    """The sampler of the module docstring. `bind(pricing)` before the first ask."""

    def __init__(self, seed: int, startup: int = STARTUP, candidates: int = CANDIDATES,
                 price_budget_s: float = PRICE_BUDGET_S,
                 clock: Callable[[], float] = time.monotonic,
                 quality_turns: int = 0, spread: bool = True,
                 random_every: int = RANDOM_EVERY, onehot: bool = False,
                 per_second: bool = True, cost_cooling: bool = False,
                 neighbors: int = 0) -> None:
        self.seed = seed
        self.neighbors = neighbors  # candidates near the front's members, besides the random
        self.cost_cooling = cost_cooling  # seconds weigh less as the budget is spent
        self.per_second = per_second  # the acquisition per predicted second (step 4)
        self.onehot = onehot  # categoricals one column per label (else one hashed code)
        self.random_every = random_every  # after the start-up, every k-th proposal random
        self.quality_turns = quality_turns
        self.spread = spread  # False: a random start-up (the default before da0e799)
        self.clock = clock
        self.startup = startup
        self.candidates = candidates
        self.price_budget_s = price_budget_s
        self._random = RandomSampler(seed=seed)
        self._pricing: Pricing | None = None
        self._chosen: dict[int, dict[str, Any]] = {}
        # the space's configs once enumerated (None: not finite or too many), and the keys
        # of those priced over budget (`untried.first_fitting`)
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
        if self.spread and number < self.startup:
            def propose() -> dict[str, Any] | None:
                return self._spread(study, number)
        elif is_random(number, self.startup, self.random_every):
            return
        else:
            done = _finished(study, self._pricing.objectives)
            if len(done) < self.startup:  # start-up trials still running or failed
                if not self.spread or self._barren:  # random (nothing fitting found lately)
                    return

                def propose() -> dict[str, Any] | None:
                    return self._spread(study, number)
            else:
                def propose() -> dict[str, Any] | None:
                    return self._choose(study, number, done)
        try:
            chosen = propose()
        except SpaceExhausted:
            raise
        except Exception as e:  # noqa: BLE001 - a model failure must not end a search
            log.warning("ehvi: no model proposal for trial %d (%s); a random one instead",
                        trial.number, e)
            return
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

    # ---------------------------------------------------------------- the choice
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
        target = mem.min() + spread_point(number, self.startup, rng) * float(np.ptp(mem))
        return dict(cands[int(np.argmin(np.abs(mem - target)))][0])

    def _choose(self, study: Study, number: int,
                done: list[tuple[dict[str, Any], float, float, float | None]],
                ) -> dict[str, Any] | None:
        assert self._pricing is not None
        rng, cands = self._candidates(study, number, _front(done) if self.neighbors else ())
        if not cands:
            return None
        names = sorted({n for p, *_ in done for n in p} | {n for p, _ in cands for n in p})
        labels = _labels([p for p, *_ in done] + [p for p, _ in cands]) if self.onehot else {}
        x_done = _encode([p for p, *_ in done], [m for _, _, m, _ in done], names, labels)
        x_cand = _encode([p for p, _ in cands], [m for _, m in cands], names, labels)
        q = np.array([q for _, q, _, _ in done])
        mu, sd = _forest(x_done, q, x_cand, rng)
        sd = np.maximum(sd, 0.05 * float(q.std()) + 1e-9)
        lo = math.log(min([m for _, _, m, _ in done] + [m for _, m in cands]))
        hi = math.log(max(self._pricing.budget_bytes, math.exp(lo) * 10))
        q_lo, q_span = float(q.min()), float(np.ptp(q)) + 1e-9

        def x_of(mem: float) -> float:  # memory on the unit interval, larger is better
            return (hi - math.log(mem)) / (hi - lo)

        front = [(x_of(m), (qq - q_lo) / q_span) for _, qq, m, _ in done]
        if (number - self.startup) % self.random_every < self.quality_turns:  # a quality turn
            score = expected_improvement(mu, sd, float(q.max()))
        else:
            score = ehvi_2d(front, np.array([x_of(m) for _, m in cands]),
                            (mu - q_lo) / q_span, sd / q_span)
        secs = [(i, s) for i, (*_, s) in enumerate(done) if s]
        if self.per_second and len(secs) >= MIN_COSTS and not self._pricing.repeatable:
            log_s, _ = _forest(x_done[[i for i, _ in secs]], np.log([s for _, s in secs]),
                               x_cand, rng)
            score = score / np.exp(log_s * self._cost_weight())
        return dict(cands[int(np.argmax(score))][0])

    def _cost_weight(self) -> float:
        """The exponent of the predicted seconds in the acquisition: 1, or with cost cooling
        the share of the budget left (CArBO's, Lee et al. 2020: cheap trials explore early,
        the acquisition alone decides at the end)."""
        if not self.cost_cooling or self._pricing is None:
            return 1.0
        return min(1.0, max(0.0, 1.0 - float(self._pricing.spent())))

    def _candidates(self, study: Study, number: int,
                    parents: Sequence[Mapping[str, Any]] = (),
                    ) -> tuple[np.random.Generator, list[tuple[dict[str, Any], float]]]:
        """Trial `number`'s generator and its priced candidates, none tried before: the
        random ones and, mixed in evenly, `neighbors` near `parents` in turn (none without
        parents)."""
        rng = np.random.default_rng((self.seed, number))
        tried = {params_key(t.params) for t in study.get_trials(deepcopy=False)
                 if t.number != number and t.state.name != "WAITING"}  # no params yet
        deadline = self.clock() + self.price_budget_s
        keyed: list[tuple[float, _RandomTrial]] = [
            ((i + 0.5) / self.candidates, _RandomTrial(rng)) for i in range(self.candidates)]
        if parents:  # a generator of their own: the random candidates are the same without
            near = np.random.default_rng((self.seed, number, 1))
            keyed += [((i + 0.5) / self.neighbors,
                       _NeighborTrial(near, p, 1.0 / max(len(p), 1)))
                      for i, p in enumerate(parents[k % len(parents)]
                                            for k in range(self.neighbors))]
        # the two kinds evenly mixed, so a pricing deadline cuts both alike
        trials = [t for _, t in sorted(keyed, key=lambda kt: kt[0])]
        cands, over = self._priced_candidates(trials, tried, deadline, not self._barren)
        if cands:
            self._barren = False
        if cands or not over or self._barren:  # none could be priced: a random proposal
            return rng, cands
        return rng, self._keep_pricing(rng, tried, number)

    def _priced_candidates(self, trials: Sequence[_RandomTrial],
                           tried: set[tuple[tuple[str, str], ...]], deadline: float,
                           keep: bool = True,
                           ) -> tuple[list[tuple[dict[str, Any], float]], bool]:
        """The stand-in trials' configs that fit the budget, each once: (Optuna params,
        memory objective); and whether any was priced over budget. Unless the search is
        repeatable, pricing stops at `deadline` once one fits, or once INVALID_LIMIT could
        not be priced and none could (the engine's first price says why), or (not `keep`)
        there."""
        assert self._pricing is not None
        out: list[tuple[dict[str, Any], float]] = []
        seen = set(tried)
        over, invalid = False, 0
        for fake in trials:
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
        memory objective) when its price says it fits the budget, else None."""
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
    try:
        return bool(dist._contains(dist.to_internal_repr(v)))
    except (ValueError, TypeError):
        return False


def _finished(study: Study, objectives: Sequence[tuple[str, str]],
              ) -> list[tuple[dict[str, Any], float, float, float | None]]:
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


def _front(done: Sequence[tuple[dict[str, Any], float, float, float | None]],
           ) -> list[dict[str, Any]]:
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


def _encode(params: Sequence[Mapping[str, Any]], memory: Sequence[float],
            names: Sequence[str], labels: Mapping[str, Sequence[str]] | None = None,
            ) -> np.ndarray:
    """Features: per param its value (numbers, log10 where positive) or a hash of its
    label (categoricals: trees split on them), -1 where absent; then log10(memory). A param
    in `labels`: one 0/1 column per label instead (absent: all 0)."""
    labels = labels or {}
    rows = []
    for p, m in zip(params, memory, strict=True):
        row: list[float] = []
        for n in names:
            v = p.get(n)
            if n in labels:
                row.extend(float(repr(v) == lab) for lab in labels[n])
            elif v is None:
                row.append(-1.0)
            elif isinstance(v, bool) or not isinstance(v, (int, float)):
                row.append(float(_label_code(v)))
            else:
                row.append(math.log10(v) if v > 0 else float(v))
        row.append(math.log10(m))
        rows.append(row)
    return np.array(rows, dtype=float)


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


def expected_improvement(mu: np.ndarray, sd: np.ndarray, best: float) -> np.ndarray:
    """Expected improvement over `best` of quality ~ N(mu, sd) (larger is better)."""
    from scipy.special import ndtr

    z = (mu - best) / sd
    return np.asarray((mu - best) * ndtr(z) + sd * np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi))


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
