"""Peer HPO methods replayed through the same harness, engine and clock as autoembed's own
searches (`harness.Replay`), so pricing, the budget rule, trial costs and the charge for
decision time are identical (README, "The peers").

* `MoashaScheduler`: syne-tune's MOASHA (`syne_tune.optimizer.schedulers.multiobjective.
  moasha.MOASHA`, 0.16.0) behind the interface the engine uses for `AshaScheduler` (`due`,
  `decide`, `add`, `restore`, `learn`, `eta`). Every search evaluation of a trial is
  forwarded to MOASHA's `on_trial_result` (its decision is the engine's continue / stop);
  a trial that runs to its end is forwarded to `on_trial_complete`.
* `FlamlSampler`: an Optuna sampler that asks a FLAML searcher (`CFO`, or `BlendSearch`)
  for a config when a trial starts, answers each `suggest_*` from it and reports the outcome
  to the searcher when the trial is told.

Neither package is a project dependency: both are imported only when a peer is built, and
a missing one raises `PeerMissing` (one line: the package and its `pip install`).
"""

from __future__ import annotations

import datetime
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.samplers import BaseSampler, RandomSampler

__all__ = ["PEERS", "PeerMissing", "require", "MoashaScheduler", "FlamlSampler",
           "discover_space", "flaml_space", "flaml_sampler", "moasha"]

log = logging.getLogger(__name__)

# package import name -> what to install (the versions the replays were made with)
PEERS = {"syne_tune": "syne-tune==0.16.0", "flaml": "flaml==2.8.0"}


class PeerMissing(RuntimeError):
    """A peer's package is not installed (the message is the one line to show)."""


def require(module: str) -> None:
    """Raise `PeerMissing` unless `module` (a key of PEERS) can be imported."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise PeerMissing(f"this peer needs {PEERS[module].split('==')[0]}: "
                          f"pip install {PEERS[module]} (in a venv beside the project's, "
                          "benchmarks/replay/README.md)")


# ====================================================================== syne-tune MOASHA
GRACE_PERIOD = 1  # syne-tune's defaults, in evaluations of a trial (time_attr)
REDUCTION_FACTOR = 3


def _rank_priority() -> Any:
    """syne-tune's `NonDominatedPriority` with its rank read right: it returns the items'
    order (best first) where `asha.Bracket.on_result` expects a priority per item, so the
    rank it compares with 1/eta is not the new trial's (README, "syne-tune's simulator
    backend"); this one returns each item's position in that order."""
    from syne_tune.optimizer.schedulers.multiobjective.multiobjective_priority import (
        NonDominatedPriority,
    )

    class RankPriority(NonDominatedPriority):  # type: ignore[misc]
        def priority_unsafe(self, objectives: np.ndarray) -> np.ndarray:
            order = np.asarray(super().priority_unsafe(objectives), dtype=int)
            position = np.empty(len(order), dtype=float)
            position[order] = np.arange(len(order))
            return position

    return RankPriority()


class MoashaScheduler:
    """syne-tune's MOASHA as the engine's scheduler.

    * metrics: `neg_quality` (-the trial's best validation quality so far, as the engine
      judges a trial at a rung) and `log_memory` (log10 of the priced memory objective,
      bytes), both minimized (MOASHA has one `do_minimize` flag); throughput is left out
      (the yardstick's front is quality x memory);
    * time_attr `evaluation`: the trial's search evaluations so far (step / eval_every, the
      runner's own cadence: 4 evaluations a trial on the default table, 8 MovieLens, 9
      flights and BBC News), scaled to `max_t` for a trial of another length;
    * syne-tune's defaults otherwise: grace period 1, reduction factor 3, one bracket, its
      `NonDominatedPriority` (epsilon-net within a front); `max_t` = the evaluations of a full
      trial (the first trial's), so the rungs are evaluations 1 and 3 on every table (1/4
      and 3/4 of a default trial, 1/8 and 3/8 MovieLens, 1/9 and 1/3 flights and BBC News;
      syne-tune adds a rung at 9 = max_t there, which is the trial's end, never decided);
    * `rank_fix`: syne-tune's rank bug fixed (`_rank_priority`), else as shipped.

    Proposals are not its business: the method pairs it with random sampling, as syne-tune's
    MOASHA samples its config space at random. Not resumable (`restore` ignores recorded
    points: a replay never resumes)."""

    eta = REDUCTION_FACTOR

    def __init__(self, objectives: Sequence[tuple[str, str]], seed: int = 0, *,
                 rank_fix: bool = False, grace_period: int = GRACE_PERIOD,
                 reduction_factor: float = REDUCTION_FACTOR) -> None:
        require("syne_tune")
        import syne_tune.optimizer.schedulers.multiobjective.moasha  # noqa: F401 - not in a decision

        names = [n for n, _ in objectives]
        if "quality" not in names or "memory" not in names:
            raise ValueError("MOASHA here needs the quality and memory objectives")
        self.sign = -1.0 if dict(objectives)["quality"] == "maximize" else 1.0
        self.seed = seed
        self.rank_fix = rank_fix
        self.grace_period = grace_period
        self.reduction_factor = reduction_factor
        self.moasha: Any = None
        self.max_t: int | None = None
        self.trials: dict[int, Any] = {}  # engine trial number -> syne-tune Trial
        self.memory: dict[int, float] = {}
        self.stopped = 0
        self._length = (1, 1)  # the length of the trial `due` was last asked about

    def _build(self, length: tuple[int, int]) -> None:
        from syne_tune.optimizer.schedulers.multiobjective.moasha import MOASHA

        self.max_t = max(1, math.ceil(length[0] / length[1]))
        self.moasha = MOASHA(
            config_space={}, metrics=["neg_quality", "log_memory"], do_minimize=True,
            time_attr="evaluation", max_t=self.max_t, grace_period=self.grace_period,
            reduction_factor=self.reduction_factor, brackets=1, random_seed=self.seed,
            multiobjective_priority=_rank_priority() if self.rank_fix else None)

    def _evaluation(self, step: int, length: tuple[int, int]) -> float:
        assert self.max_t is not None
        own = max(1, math.ceil(length[0] / length[1]))
        k = step / length[1]
        return k if own == self.max_t else k * self.max_t / own

    def _trial(self, number: int) -> Any:
        from syne_tune.backend.trial_status import Trial

        if number not in self.trials:
            self.trials[number] = Trial(trial_id=number, config={},
                                        creation_time=datetime.datetime.now())
            self.moasha.on_trial_add(self.trials[number])
        return self.trials[number]

    # ------------------------------------------------------------------ the engine's calls
    def due(self, step: int, length: tuple[int, int]) -> list[float]:
        """Every search evaluation goes to MOASHA (its rungs decide which ones count); the
        'rung' the engine records is the share of the trial's length."""
        if self.moasha is None:
            self._build(length)
        self._length = length  # the engine decides right after asking what is due
        return [step / length[0]]

    def decide(self, number: int, rung: float, step: int,
               values: Mapping[str, float]) -> Any:
        from syne_tune.optimizer.scheduler import SchedulerDecision

        from autoembed.pipeline.scheduler import RungPoint

        quality, memory = float(values["quality"]), float(values["memory"])
        self.memory[number] = memory
        result = {"neg_quality": self.sign * quality,
                  "log_memory": math.log10(max(memory, 1.0)),
                  "evaluation": self._evaluation(step, self._length)}
        action = self.moasha.on_trial_result(self._trial(number), result)
        go_on = action == SchedulerDecision.CONTINUE
        self.stopped += not go_on
        return RungPoint(number, rung, step, {"quality": quality, "memory": memory}, go_on)

    def add(self, point: Any) -> None:
        del point  # MOASHA recorded it in on_trial_result

    def restore(self, points: Any) -> None:
        del points

    def learn(self, number: int, curve: Any, length: tuple[int, int],
              final: float | None) -> None:
        """A trial that ran to its end: MOASHA's `on_trial_complete` at max_t."""
        del curve, length
        trial = self.trials.pop(number, None)
        if self.moasha is None or trial is None or final is None:
            return
        self.moasha.on_trial_complete(trial, {
            "neg_quality": self.sign * float(final),
            "log_memory": math.log10(max(self.memory.get(number, 1.0), 1.0)),
            "evaluation": float(self.max_t or 1)})


# ====================================================================== FLAML
MAX_SUGGEST_TRIES = 100  # flaml.tune.run's max_failure: suggestions of None in a row
DISCOVER_DRAWS = 256  # random runs of the space's suggest code to learn its params
MEMORY_WEIGHT = 0.01  # the scalarized variant: quality - 0.01 * log10(memory bytes)


def _random_trial() -> type:
    from autoembed.pipeline.priced_ehvi import _RandomTrial

    class Recording(_RandomTrial):  # type: ignore[misc, valid-type]
        """A random trial that also records each param's Optuna distribution."""

        def __init__(self, rng: np.random.Generator) -> None:
            super().__init__(rng)
            self.dists: dict[str, BaseDistribution] = {}

        def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
            self.dists[name] = CategoricalDistribution(tuple(choices))
            return super().suggest_categorical(name, choices)

        def suggest_int(self, name: str, low: int, high: int, step: int = 1,
                        log: bool = False) -> int:
            self.dists[name] = IntDistribution(low, high, log=log, step=step)
            return super().suggest_int(name, low, high, step=step, log=log)

        def suggest_float(self, name: str, low: float, high: float,
                          step: float | None = None, log: bool = False) -> float:
            self.dists[name] = FloatDistribution(low, high, log=log, step=step)
            return super().suggest_float(name, low, high, step=step, log=log)

    return Recording


def discover_space(suggest: Callable[[Any], Any], seed: int,
                   draws: int = DISCOVER_DRAWS) -> dict[str, BaseDistribution]:
    """Every param the space's suggest code asks for, with its distribution: the code run
    on `draws` random trials (priced_ehvi's `_RandomTrial` idea), so the params of every
    branch of a conditional space are found (the union: FLAML's space is flat)."""
    recording = _random_trial()
    rng = np.random.default_rng(seed)
    out: dict[str, BaseDistribution] = {}
    for _ in range(draws):
        fake = recording(rng)
        suggest(fake)
        for name, dist in fake.dists.items():
            out.setdefault(name, dist)
    return out


def flaml_key(name: str) -> str:
    """A param's key in FLAML's space: FLAML (through Ray's flatten_dict) refuses a `/` in a
    key (`dim/8`)."""
    return name.replace("/", "_over_")


def flaml_space(dists: Mapping[str, BaseDistribution]) -> dict[str, Any]:
    """FLAML's search space for Optuna distributions (keys by `flaml_key`): categorical ->
    tune.choice, int -> tune.randint / lograndint (upper bound exclusive) or qrandint /
    qlograndint (a step), float -> tune.uniform / loguniform / quniform."""
    from flaml import tune

    space: dict[str, Any] = {}
    if len({flaml_key(n) for n in dists}) != len(dists):
        raise ValueError(f"params collide as FLAML keys: {sorted(dists)}")
    for name, d in dists.items():
        name = flaml_key(name)
        if isinstance(d, CategoricalDistribution):
            space[name] = tune.choice(list(d.choices))
        elif isinstance(d, IntDistribution):
            if d.step != 1:
                space[name] = (tune.qlograndint if d.log else tune.qrandint)(d.low, d.high, d.step)
            else:
                space[name] = (tune.lograndint if d.log else tune.randint)(d.low, d.high + 1)
        elif isinstance(d, FloatDistribution):
            if d.step is not None:
                space[name] = tune.quniform(d.low, d.high, d.step)
            else:
                space[name] = (tune.loguniform if d.log else tune.uniform)(d.low, d.high)
        else:
            raise TypeError(f"{name}: no FLAML domain for {d!r}")
    return space


def _fit(dist: BaseDistribution, v: Any) -> Any:
    """FLAML's value `v` as a value of the Optuna distribution (None: it is not one)."""
    if v is None:
        return None
    if isinstance(v, np.generic):
        v = v.item()  # FLAML hands out numpy scalars (np.str_, np.int64, np.bool_)
    if isinstance(dist, CategoricalDistribution):
        return next((c for c in dist.choices
                     if c == v and isinstance(c, bool) == isinstance(v, bool)), None)
    if isinstance(dist, IntDistribution):
        k = round((min(max(float(v), dist.low), dist.high) - dist.low) / dist.step)
        return int(dist.low + k * dist.step)
    if isinstance(dist, FloatDistribution):
        x = min(max(float(v), dist.low), dist.high)
        if dist.step is not None:
            x = min(dist.low + round((x - dist.low) / dist.step) * dist.step, dist.high)
        return x
    return None


class FlamlSampler(BaseSampler):
    """FLAML's CFO (or BlendSearch) as an Optuna sampler, one metric.

    * When a trial starts (`before_trial`), the searcher is asked for a config (FLAML trial
      id = the Optuna trial number; a `None` is asked again with a new id, up to
      MAX_SUGGEST_TRIES, as `flaml.tune.run` does, then the trial is random); each
      `suggest_*` of the space's code is answered from it (`sample_independent`).
    * When the trial is told (`after_trial`), the outcome goes to `on_trial_complete` with
      FLAML's own config: a complete trial as a result (`score`, `time_total_s` = the trial's
      cost on the replay's clock, `config`); a pruned one with its last quality (as FLAML's
      runner reports a stopped trial's last result); an infeasible (over the budget), failed
      or otherwise scoreless one as `error=True` without a result (what `flaml.tune.run`
      reports for a trial that errs before its first report).
    * `score`: `quality` = validation quality, maximized (a single-objective user's setup:
      memory is the engine's budget rule only); `scalarized` = quality - MEMORY_WEIGHT *
      log10(memory bytes).
    * The space: `discover_space` on the bound suggest code, converted by `flaml_space`;
      no `low_cost_partial_config` (CFO starts from a random point), no config constraints
      (the budget is the engine's rule, as for every method).
    Trials enqueued by the engine (start points) are not FLAML's: not asked, not told.
    """

    def __init__(self, seed: int, algo: str = "cfo", score: str = "quality",
                 memory_weight: float = MEMORY_WEIGHT) -> None:
        require("flaml")
        if algo not in ("cfo", "blendsearch") or score not in ("quality", "scalarized"):
            raise ValueError(f"unknown FLAML setup {algo!r} / {score!r}")
        self.seed = seed
        self.algo = algo
        self.score = score
        self.memory_weight = memory_weight
        self._random = RandomSampler(seed=seed)
        self._pricing: Any = None
        self._searcher: Any = None
        self._asked: dict[int, tuple[str, dict[str, Any]]] = {}
        self.fallbacks = 0  # trials FLAML had no config for (random)
        logging.getLogger("flaml").setLevel(logging.WARNING)
        import flaml.tune.searcher.blendsearch  # noqa: F401 - imported here, not in an ask

    def bind(self, pricing: Any) -> None:
        """The engine's `Pricing` (priced_ehvi): its suggest code and objectives. The
        searcher is built here, with the engine (setup, as a sampler's construction: not on
        the search's clock)."""
        from flaml.tune.searcher.blendsearch import CFO, BlendSearch

        self._pricing = pricing
        space = flaml_space(discover_space(pricing.suggest, self.seed))
        cls = CFO if self.algo == "cfo" else BlendSearch
        self._searcher = cls(metric="score", mode="max", space=space, seed=self.seed,
                             cost_attr="time_total_s")

    # ---------------------------------------------------------------- Optuna's protocol
    def infer_relative_search_space(self, study: Any, trial: Any) -> dict[str, BaseDistribution]:
        return {}

    def sample_relative(self, study: Any, trial: Any,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        return {}

    def before_trial(self, study: Any, trial: Any) -> None:
        self._random.before_trial(study, trial)
        if "fixed_params" in trial.system_attrs:
            return  # an enqueued point (start points): not FLAML's proposal
        searcher = self._searcher
        if searcher is None:
            return  # not bound to an engine: random
        for k in range(MAX_SUGGEST_TRIES):
            tid = str(trial.number) if k == 0 else f"{trial.number}.{k}"
            config = searcher.suggest(tid)
            if config is not None:
                self._asked[trial.number] = (tid, dict(config))
                return
        self.fallbacks += 1

    def sample_independent(self, study: Any, trial: Any, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        asked = self._asked.get(trial.number)
        if asked is not None:
            v = _fit(param_distribution, asked[1].get(flaml_key(param_name)))
            if v is not None and param_distribution._contains(
                    param_distribution.to_internal_repr(v)):
                return v
        return self._random.sample_independent(study, trial, param_name, param_distribution)

    def after_trial(self, study: Any, trial: Any, state: Any,
                    values: Sequence[float] | None) -> None:
        from autoembed.pipeline.records import ATTR

        self._random.after_trial(study, trial, state, values)
        asked = self._asked.pop(trial.number, None)
        if asked is None or self._searcher is None:
            return
        tid, config = asked
        row = trial.user_attrs.get(ATTR) or {}
        metrics = row.get("metrics") or {}
        status = row.get("status")
        names = [n for n, _ in self._pricing.objectives]
        quality = memory = None
        if status == "complete" and values:
            quality = float(values[names.index("quality")])
            memory = float(values[names.index("memory")]) if "memory" in names else None
        elif status == "pruned" and metrics.get("quality") is not None:
            quality, memory = float(metrics["quality"]), metrics.get("memory")
        if quality is None or not math.isfinite(quality):
            self._searcher.on_trial_complete(tid, None, error=True)
            return
        if dict(self._pricing.objectives)["quality"] == "minimize":
            quality = -quality  # FLAML's mode is max
        score = quality
        if self.score == "scalarized":
            score -= self.memory_weight * math.log10(max(float(memory or 1.0), 1.0))
        cost = metrics.get("wall_seconds")
        self._searcher.on_trial_complete(tid, {
            "score": score, "quality": quality,
            "time_total_s": float(cost) if cost else 1.0, "config": config})

    def reseed_rng(self) -> None:
        self._random.reseed_rng()


def flaml_sampler(algo: str = "cfo", score: str = "quality"
                  ) -> Callable[[int, Any], FlamlSampler]:
    """A `harness.Method` sampler: (seed, workload) -> FlamlSampler."""
    def make(seed: int, workload: Any) -> FlamlSampler:
        del workload  # the engine binds the space's suggest code
        return FlamlSampler(seed, algo=algo, score=score)
    return make


def moasha(rank_fix: bool = False) -> Callable[[Sequence[tuple[str, str]], int],
                                                MoashaScheduler]:
    """A `harness.Method` scheduler factory: (objectives, seed) -> MoashaScheduler."""
    def make(objectives: Sequence[tuple[str, str]], seed: int) -> MoashaScheduler:
        return MoashaScheduler(objectives, seed, rank_fix=rank_fix)
    return make
