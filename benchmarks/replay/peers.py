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
* `optuna_sampler`: Optuna's own model-based samplers as a user reaches for them, with
  Optuna's defaults: `GPSampler` (multi-objective, constrained: logEHVI times the chance of
  feasibility), multivariate `TPESampler` (c-TPE) and `BoTorchSampler` (optuna-integration:
  BoTorch's qNEHVI with the constraints, running trials as pending points). The budget
  reaches them as Optuna's constraints: the engine sets `memory` (overshoot of the budget)
  and `runs` on every told trial with `Trial.set_constraint`, which is what
  `constraints_func` feeds (deprecated in Optuna 5.0 in its favour; passing both would
  count the memory constraint twice).
* `DehbSampler` + `DehbScheduler`: DEHB (`dehb.DEHB`, 0.1.2) through its ask/tell
  interface: each ask is a config and a fidelity (a share of the trial's length); the
  sampler answers the trial's `suggest_*` from the config, the scheduler stops the trial at
  its first search evaluation at or past the fidelity, and the sampler tells DEHB the
  outcome when the trial is told.

No peer's package is a project dependency: each is imported only when a peer is built, and
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
           "DehbSampler", "DehbScheduler", "discover_space", "flaml_space", "flaml_sampler",
           "moasha", "dehb", "optuna_sampler"]

log = logging.getLogger(__name__)

# package import name -> what to install (the versions the replays were made with); DEHB's
# metadata pins numpy<2, so it goes in without its dependencies, after the ones it needs
PEERS = {"syne_tune": "syne-tune==0.16.0", "flaml": "flaml==2.8.0",
         "optuna_integration": "botorch==0.18.1 optuna-integration==5.0.0",
         "dehb": "ConfigSpace==1.2.2 loguru dask distributed, then pip install --no-deps "
                 "dehb==0.1.2"}


class PeerMissing(RuntimeError):
    """A peer's package is not installed (the message is the one line to show)."""


def require(module: str) -> None:
    """Raise `PeerMissing` unless `module` (a key of PEERS) can be imported."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise PeerMissing(f"this peer needs {module.replace('_', '-')}: "
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
SCORES = ("quality", "scalarized")  # what a one-metric peer maximizes (`_told`)


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


def _told(trial: Any, values: Sequence[float] | None, objectives: Sequence[tuple[str, str]],
          score: str, memory_weight: float) -> tuple[float, float, float] | None:
    """(quality, score, seconds) of a told trial for a one-metric peer, quality larger is
    better: a complete trial's values, a pruned one's last (best-so-far) quality; `score`
    `quality`, or `scalarized` = quality - memory_weight * log10(memory bytes). None: an
    infeasible (over budget), failed or otherwise scoreless trial."""
    from autoembed.pipeline.records import ATTR

    row = trial.user_attrs.get(ATTR) or {}
    metrics = row.get("metrics") or {}
    names = [n for n, _ in objectives]
    quality = memory = None
    if row.get("status") == "complete" and values:
        quality = float(values[names.index("quality")])
        memory = float(values[names.index("memory")]) if "memory" in names else None
    elif row.get("status") == "pruned" and metrics.get("quality") is not None:
        quality, memory = float(metrics["quality"]), metrics.get("memory")
    if quality is None or not math.isfinite(quality):
        return None
    if dict(objectives)["quality"] == "minimize":
        quality = -quality
    scored = quality
    if score == "scalarized":
        scored -= memory_weight * math.log10(max(float(memory or 1.0), 1.0))
    return quality, scored, float(metrics.get("wall_seconds") or 0.0)


class _PeerSampler(BaseSampler):
    """What the peers' Optuna samplers share: no relative sampling; a param the peer gave
    no value for (or a trial not its own) is drawn by `RandomSampler` (`_random`)."""

    def __init__(self, seed: int) -> None:
        self._random = RandomSampler(seed=seed)

    def infer_relative_search_space(self, study: Any, trial: Any) -> dict[str, BaseDistribution]:
        return {}

    def sample_relative(self, study: Any, trial: Any,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        return {}

    def reseed_rng(self) -> None:
        self._random.reseed_rng()

    def _value(self, number: int, name: str, dist: BaseDistribution) -> Any:
        """Trial `number`'s value of param `name` from the peer (None: it gave none)."""
        return None

    def sample_independent(self, study: Any, trial: Any, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        v = self._value(trial.number, param_name, param_distribution)
        if v is not None and param_distribution._contains(
                param_distribution.to_internal_repr(v)):
            return v
        return self._random.sample_independent(study, trial, param_name, param_distribution)


class FlamlSampler(_PeerSampler):
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
        if algo not in ("cfo", "blendsearch") or score not in SCORES:
            raise ValueError(f"unknown FLAML setup {algo!r} / {score!r}")
        super().__init__(seed)
        self.seed = seed
        self.algo = algo
        self.score = score
        self.memory_weight = memory_weight
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

    def _value(self, number: int, name: str, dist: BaseDistribution) -> Any:
        asked = self._asked.get(number)
        return None if asked is None else _fit(dist, asked[1].get(flaml_key(name)))

    def after_trial(self, study: Any, trial: Any, state: Any,
                    values: Sequence[float] | None) -> None:
        self._random.after_trial(study, trial, state, values)
        asked = self._asked.pop(trial.number, None)
        if asked is None or self._searcher is None:
            return
        tid, config = asked
        told = _told(trial, values, self._pricing.objectives, self.score, self.memory_weight)
        if told is None:
            self._searcher.on_trial_complete(tid, None, error=True)
            return
        quality, score, cost = told
        self._searcher.on_trial_complete(tid, {
            "score": score, "quality": quality,
            "time_total_s": cost if cost else 1.0, "config": config})


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


# ====================================================================== DEHB
DEHB_ETA = 3  # DEHB's default reduction factor
DEHB_MIN_FIDELITY = 1 / 9  # of a trial's length: st-moasha's rungs (grace 1 of 9, rf 3)


class DehbSampler(_PeerSampler):
    """DEHB's proposals as an Optuna sampler, one metric (its scheduler: `DehbScheduler`).

    * The space: `discover_space` on the bound suggest code (the union of a conditional
      space's params, as FLAML's), each categorical as the index of its choice (ConfigSpace
      refuses unhashable choices such as layer lists), ints and floats with their bounds and
      log flag; values snapped back by `_fit`.
    * Fidelity: a share of the trial's length, DEHB_MIN_FIDELITY to 1 with eta DEHB_ETA (its
      brackets: 1/9, 1/3, 1). A promoted config is asked again at a higher fidelity and
      trains from its start (DEHB's own protocol: no checkpoint), as a repeat of its row.
    * Told (`after_trial`): fitness = -score (DEHB minimizes); `score` as FlamlSampler's
      (`quality`, or `scalarized` = quality - MEMORY_WEIGHT * log10 memory); cost = the
      trial's seconds. An infeasible (over budget) or failed proposal is told fitness +inf at
      cost 0 (never trained: priced only).
    Enqueued trials (start points) are not DEHB's: not asked, not told."""

    def __init__(self, seed: int, score: str = "quality",
                 memory_weight: float = MEMORY_WEIGHT) -> None:
        require("dehb")
        if score not in SCORES:
            raise ValueError(f"unknown DEHB score {score!r}")
        logging.getLogger("dehb").setLevel(logging.WARNING)
        import dehb  # noqa: F401 - imported here (dask: seconds), not in an ask

        super().__init__(seed)
        self.seed = seed
        self.score = score
        self.memory_weight = memory_weight
        self._pricing: Any = None
        self._dehb: Any = None
        self._dists: dict[str, BaseDistribution] = {}
        self._jobs: dict[int, dict[str, Any]] = {}  # trial number -> DEHB's job (ask)

    def bind(self, pricing: Any) -> None:
        """Build DEHB on the bound space (setup: not on the search's clock)."""
        import tempfile

        import ConfigSpace as CS
        from dehb import DEHB
        from loguru import logger

        logger.remove()  # DEHB logs through loguru to stderr: every ask otherwise
        self._pricing = pricing
        self._dists = discover_space(pricing.suggest, self.seed)
        cs = CS.ConfigurationSpace(seed=self.seed)
        for name, d in self._dists.items():
            if isinstance(d, CategoricalDistribution):
                cs.add(CS.CategoricalHyperparameter(name, list(range(len(d.choices)))))
            elif isinstance(d, IntDistribution):
                cs.add(CS.UniformIntegerHyperparameter(name, d.low, d.high, log=d.log))
            elif isinstance(d, FloatDistribution):
                cs.add(CS.UniformFloatHyperparameter(name, d.low, d.high, log=d.log))
            else:
                raise TypeError(f"{name}: no ConfigSpace hyperparameter for {d!r}")
        self._dehb = DEHB(cs=cs, dimensions=len(self._dists), min_fidelity=DEHB_MIN_FIDELITY,
                          max_fidelity=1.0, eta=DEHB_ETA, n_workers=1, seed=self.seed,
                          output_path=tempfile.mkdtemp(prefix="dehb-"), save_freq=None)

    def fidelity(self, number: int) -> float:
        """Trial `number`'s share of a full trial (1: not DEHB's, or not asked)."""
        job = self._jobs.get(number)
        return 1.0 if job is None else float(job["fidelity"])

    def _value(self, number: int, name: str, dist: BaseDistribution) -> Any:
        job = self._jobs.get(number)
        raw = None if job is None else job["config"].get(name)
        if raw is None:
            return None
        if isinstance(dist, CategoricalDistribution):
            return dist.choices[int(raw)]
        return _fit(dist, raw)

    def before_trial(self, study: Any, trial: Any) -> None:
        self._random.before_trial(study, trial)
        if "fixed_params" in trial.system_attrs or self._dehb is None:
            return  # a start point, or not bound to an engine: not DEHB's
        self._jobs[trial.number] = self._dehb.ask()


    def after_trial(self, study: Any, trial: Any, state: Any,
                    values: Sequence[float] | None) -> None:
        self._random.after_trial(study, trial, state, values)
        job = self._jobs.pop(trial.number, None)
        if job is None or self._dehb is None:
            return
        told = _told(trial, values, self._pricing.objectives, self.score, self.memory_weight)
        _, score, cost = told if told is not None else (None, -math.inf, 0.0)
        self._dehb.tell(job, {"fitness": -score, "cost": cost})


class DehbScheduler:
    """The engine's scheduler for `DehbSampler`'s trials: a trial stops at its first search
    evaluation at or past its DEHB fidelity (a share of its length); one at fidelity 1, or
    not DEHB's (a start point), runs to its end. Not resumable (a replay never resumes)."""

    eta = DEHB_ETA

    def __init__(self, sampler: DehbSampler) -> None:
        self.sampler = sampler
        self.stopped = 0

    def due(self, step: int, length: tuple[int, int]) -> list[float]:
        return [step / length[0]]

    def decide(self, number: int, rung: float, step: int,
               values: Mapping[str, float]) -> Any:
        from autoembed.pipeline.scheduler import RungPoint

        fidelity = self.sampler.fidelity(number)
        go_on = fidelity >= 1.0 or rung < fidelity - 1e-9
        self.stopped += not go_on
        return RungPoint(number, rung, step, {"quality": float(values["quality"]),
                                              "memory": float(values["memory"])}, go_on)

    def add(self, point: Any) -> None:
        del point

    def restore(self, points: Any) -> None:
        del points

    def learn(self, number: int, curve: Any, length: tuple[int, int],
              final: float | None) -> None:
        del number, curve, length, final  # the sampler tells DEHB when the trial is told


def dehb(score: str = "quality") -> tuple[Callable[[int, Any], DehbSampler],
                                          Callable[[Sequence[tuple[str, str]], int],
                                                   DehbScheduler]]:
    """A `harness.Method`'s sampler and scheduler factory for DEHB, sharing the sampler (the
    harness builds both with the same seed, the sampler first)."""
    built: dict[int, DehbSampler] = {}

    def sampler(seed: int, workload: Any) -> DehbSampler:
        del workload  # the engine binds the space's suggest code
        built[seed] = DehbSampler(seed, score=score)
        return built[seed]

    def scheduler(objectives: Sequence[tuple[str, str]], seed: int) -> DehbScheduler:
        del objectives
        return DehbScheduler(built.pop(seed))
    return sampler, scheduler


# ====================================================================== Optuna's own
OPTUNA_KINDS = ("gp", "tpe", "botorch")


class _OneTorchThread:
    """Runs a sampler's relative sampling on one torch thread: the harness charges the
    calling thread's CPU time (`time.thread_time`), so GPSampler's torch work must not
    spread to threads it does not see (and the shared machine's cores stay free)."""

    def sample_relative(self, study: Any, trial: Any,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        import torch

        before = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return super().sample_relative(study, trial, search_space)  # type: ignore[misc]
        finally:
            torch.set_num_threads(before)


def _varying_constraints(candidates_func: Callable[..., Any]) -> Callable[..., Any]:
    """`candidates_func` given only the constraint columns that vary: the engine's `runs`
    constraint is 0 on every trial that ran, and BoTorch standardizes each outcome, so a
    constant one (no information) breaks its GP fits (not positive definite)."""

    def call(train_x: Any, train_obj: Any, train_con: Any, bounds: Any,
             pending_x: Any) -> Any:
        if train_con is not None:
            keep = train_con.std(dim=0) > 0
            train_con = train_con[:, keep] if bool(keep.any()) else None
        return candidates_func(train_x, train_obj, train_con, bounds, pending_x)
    return call


def optuna_sampler(kind: str) -> Callable[[int, Any], BaseSampler]:
    """A `harness.Method` sampler: (seed, workload) -> Optuna's `GPSampler` (`gp`),
    multivariate `TPESampler` (`tpe`) or optuna-integration's `BoTorchSampler` with
    BoTorch's qNEHVI (`botorch`), each with its defaults otherwise (10 random start-up
    trials; GPSampler's qLogEHVI, TPE's constant liar and qNEHVI's pending points see the
    running trials). The study's objectives are the search's; the budget is Optuna's
    constraint, set by the engine on every told trial (module docstring). GPSampler's
    independent-sampling warning is off (a conditional param outside the intersection space
    is drawn at random either way)."""
    if kind not in OPTUNA_KINDS:
        raise ValueError(f"unknown Optuna sampler {kind!r}; use one of {OPTUNA_KINDS}")

    def make(seed: int, workload: Any) -> BaseSampler:
        del workload
        import warnings

        import optuna

        if kind == "tpe":
            with warnings.catch_warnings():  # multivariate is experimental
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return optuna.samplers.TPESampler(seed=seed, multivariate=True)

        if kind == "botorch":
            from optuna_integration import BoTorchSampler
            from optuna_integration.botorch import qnehvi_candidates_func

            class OneThreadBoTorch(_OneTorchThread, BoTorchSampler):
                def sample_relative(self, study: Any, trial: Any,
                                    search_space: dict[str, BaseDistribution],
                                    ) -> dict[str, Any]:
                    # the experimental-API warning at every ask, and BoTorch's check of
                    # outcomes it standardizes itself: nothing to act on
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                        warnings.filterwarnings("ignore", message="Data .* is not standardized")
                        return super().sample_relative(study, trial, search_space)

            with warnings.catch_warnings():  # BoTorchSampler is experimental
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return OneThreadBoTorch(candidates_func=_varying_constraints(
                    qnehvi_candidates_func), consider_running_trials=True, seed=seed)

        class OneThreadGP(_OneTorchThread, optuna.samplers.GPSampler):
            pass

        return OneThreadGP(seed=seed, warn_independent_sampling=False)
    return make
