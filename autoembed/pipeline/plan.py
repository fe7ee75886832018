"""`SearchPlan`: everything a search decides before its first trial, for either workload.

`SearchPlan.build(request, stored)` builds the workload (`workload_for`: the one place the
two kinds part), merges the request with a resumed study's stored settings (the one place
that does: a value given wins where it may change and is refused where it may not), sizes
workers and CPUs, and checks that something fits (`NothingFitsError`, exit status 3).
"""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from autoembed.budget import Budget
from autoembed.errors import ConfigError
from autoembed.memory.objective import LEGACY_BASIS, MEMORY_BASIS, check_basis
from autoembed.pipeline.builtin import DERIVED_SPACE_FILE, BuiltinWorkload
from autoembed.pipeline.request import SearchRequest, local_gpus
from autoembed.pipeline.sharded_workload import TOPOLOGY_KEY
from autoembed.pipeline.study import DEFAULT_SAMPLER, check_same, check_sampler
from autoembed.pipeline.time_limit import TrialTimeLimit
from autoembed.pipeline.user_workload import UserWorkload
from autoembed.pipeline.workload import NothingFitsError, Workload
from autoembed.space import Objective, SearchSpace, parse_objectives
from autoembed.space.start import StartPoint

__all__ = ["SearchPlan", "NothingFitsError", "DEFAULT_EARLY_STOP", "trial_threads", "workload_for",
           "TIME_BOXED_TRIALS"]

# Early stopping on by default (a front as good for less training); a user's space turns it
# on by saying how long its loop runs (`early_stop: {max_steps, eval_every}`).
DEFAULT_EARLY_STOP = True


def trial_threads(cpus_per_trial: int, device: str) -> int:
    """Torch threads per trial: on a CPU, one core fewer than the trial's share, so that the
    driver, Ray and data generation never make torch's OpenMP threads wait for a core."""
    return cpus_per_trial if device != "cpu" else max(1, cpus_per_trial - 1)


def workload_for(request: SearchRequest, stored: Mapping[str, Any], seed: int,
                 tell: Callable[[str], None]) -> Workload:
    """The request's workload: the user's model and loop when it has the user's functions,
    else autoembed's own models; a resumed study must be of the same kind."""
    kind = str(stored.get("kind", "builtin")) if stored else request.kind
    if kind != request.kind:
        raise ConfigError(
            f"study '{request.study}' searched "
            f"{'your own model' if kind == 'user' else 'autoembed models'}; resume it "
            f"{'with' if kind == 'user' else 'without'} --model, --example and --train, or "
            "start a new --study")
    made = (UserWorkload if request.kind == "user" else BuiltinWorkload).build(
        request, stored, seed, tell)
    if stored:
        made.check_resume(stored)
    return made


@dataclass(frozen=True)
class SearchPlan:
    """The search to run: the request, merged with a resumed study's stored settings."""

    request: SearchRequest
    workload: Workload
    objectives: tuple[Objective, ...]
    sampler: str
    seed: int
    trials: int
    early_stop: bool
    workers: int
    gpus: int
    cpus: int  # this machine's
    cpus_per_trial: int
    created: str
    memory_basis: str = MEMORY_BASIS  # memory.objective: the `memory` objective's bytes
    start_points: bool = False  # known-good configs trained first (space.start)
    start: tuple[StartPoint, ...] = ()  # those points (none for the grid sampler)
    repeatable: bool = False  # one worker; no wall-clock figure steers proposals
    multi_fidelity: bool = False  # MO-ASHA at rungs of each trial's length
    time_limit: TrialTimeLimit = TrialTimeLimit()  # how long a trial may run

    @classmethod
    def build(cls, request: SearchRequest, stored: Mapping[str, Any],
              note: Callable[[str], None] | None = None) -> SearchPlan:
        """`note(line)`: told, as it happens, a derived space and the baseline (its fit
        takes seconds on real data)."""
        r = request
        tell = note or (lambda line: None)
        seed = r.seed if r.seed is not None else int(stored.get("seed", 0))
        sampler = r.sampler or stored.get("sampler") or DEFAULT_SAMPLER
        check_sampler(sampler)  # a resumed study's kind may since have moved to benchmarks/
        if r.start_points and sampler == "grid":  # else dropped unsaid
            raise ConfigError("--start-points: the grid sampler trains its grid's points "
                              "only; drop --start-points, or give another --sampler")
        gpus = local_gpus(r.device, r.gpu)
        repeatable = r.repeatable or bool(stored.get("repeatable", False))
        cpus = os.cpu_count() or 1
        workers = _workers(r, stored, repeatable, gpus, cpus)  # refused before any work
        workload = workload_for(r, stored, seed, tell)
        objs = (parse_objectives(list(r.objectives), "--objectives") if r.objectives
                else workload.space.objectives)
        _check_measured(workload, objs)
        if stored:
            check_same(stored, "budget_bytes", r.budget.bytes, f"--budget {r.budget.text}",
                       f"give --budget {stored.get('budget', stored.get('budget_bytes'))}")
            check_same({"objectives": _names(stored.get("objectives"))} if "objectives" in
                       stored else {}, "objectives", [o.name for o in objs], "--objectives")
        cheapest = workload.check_fits(r.budget)
        use_start = r.start_points if r.start_points is not None else (
            bool(stored.get("start_points", False)) if stored else r.kind == "builtin")
        start = tuple(workload.start_points(cheapest)) if (
            (use_start or r.kind == "user") and sampler != "grid") else ()
        return cls(
            request=r, workload=workload, objectives=tuple(objs), sampler=sampler, seed=seed,
            trials=_trials(r, stored, workload.space),
            early_stop=_early_stop(r, stored, workload.space),
            workers=workers, gpus=gpus, cpus=cpus, cpus_per_trial=max(1, cpus // workers),
            created=stored.get("created") or _dt.datetime.now().isoformat(timespec="seconds"),
            memory_basis=_basis(stored), start_points=use_start, start=start,
            repeatable=repeatable, time_limit=_time_limit(r, stored, workload.space),
            multi_fidelity=_multi_fidelity(r, stored, workload.space))

    def with_cpus_per_trial(self, cpus: int) -> SearchPlan:
        return replace(self, cpus_per_trial=cpus)

    @property
    def space(self) -> SearchSpace:
        return self.workload.space

    @property
    def name(self) -> str:
        return self.request.study

    @property
    def budget(self) -> Budget:
        return self.request.budget

    @property
    def device(self) -> str:
        return self.request.device

    @property
    def threads(self) -> int:
        """Torch threads each trial runs with (`trial_threads`)."""
        return trial_threads(self.cpus_per_trial, self.device)

    @property
    def out_dir(self) -> Path:
        return self.request.runs_dir / self.name

    @property
    def objective_pairs(self) -> tuple[tuple[str, str], ...]:
        return tuple((o.name, o.direction) for o in self.objectives)

    @property
    def derived(self) -> bool:
        """Whether the space was derived from the data (`--space auto`)."""
        return bool(getattr(self.workload, "derived", False))

    @property
    def space_file(self) -> Path | None:
        """The space's file (a derived space's: `space.yaml` in the study's folder, once
        `save_space` wrote it)."""
        if self.derived:
            p = self.out_dir / DERIVED_SPACE_FILE
            return p if p.is_file() else None
        return Path(self.space.source) if Path(self.space.source).is_file() else None

    def save_space(self) -> Path | None:
        """Write a derived space's YAML into the study's folder (what the study stores and
        a resume reads back; a user may copy and edit it), atomically as every study file.
        None: not derived."""
        from autoembed.files import atomic_write_text

        if not self.derived:
            return None
        return atomic_write_text(self.out_dir / DERIVED_SPACE_FILE, self.space.text)

    def meta(self, finished: bool = False) -> dict[str, Any]:
        """The study's stored settings (Optuna study attribute), read back by a resume."""
        return {
            "kind": self.workload.kind, "budget_bytes": self.budget.bytes,
            "budget": self.budget.text, "space_source": self.space.source,
            "space_text": self.space.text, "objectives": [o.name for o in self.objectives],
            "sampler": self.sampler, "seed": self.seed, "trials": self.trials,
            "early_stop": self.early_stop, "workers": self.workers, "device": self.device,
            "threads": self.threads, "finished": finished, "created": self.created,
            "memory_basis": self.memory_basis, "start_points": self.start_points,
            "repeatable": self.repeatable, "multi_fidelity": self.multi_fidelity,
            "trial_time_limit": self.time_limit.seconds, **self.workload.meta()}

    def tracker_params(self) -> dict[str, str]:
        """The search's parameters on its MLflow parent run."""
        return {
            "budget": self.budget.text, "budget_bytes": str(self.budget.bytes),
            "space": self.space.source, "sampler": self.sampler, "seed": str(self.seed),
            "objectives": ",".join(o.name for o in self.objectives), "trials": str(self.trials),
            "workers": str(self.workers), "early_stop": str(self.early_stop), "device": self.device,
            "memory_basis": self.memory_basis, "workload": self.workload.kind,
            **self.workload.tracker_params()}


def _check_measured(workload: Workload, objectives: Sequence[Objective]) -> None:
    """A latency objective is measured: a space's `run` that turns latency off is refused
    (every trial would end without the objective's value)."""
    run = getattr(workload, "run", None) or {}
    if run.get("measure_latency") is False and any(o.name == "latency" for o in objectives):
        raise ConfigError(f"search space '{workload.space.source}': key 'run.measure_latency' "
                          "= False: latency is an objective; drop measure_latency: false, or "
                          "the latency objective")


def _names(objectives: Any) -> list[str]:
    """Stored objectives as names (a user study stored before kept them as mappings)."""
    return [o["name"] if isinstance(o, Mapping) else o for o in objectives or ()]


def _basis(stored: Mapping[str, Any]) -> str:
    """The memory objective's basis: a new study's, or a resumed study's (stored before
    there was a choice: the legacy basis for built-in searches, allocated peak for user ones)."""
    if not stored:
        return MEMORY_BASIS
    default = MEMORY_BASIS if stored.get("kind") == "user" else LEGACY_BASIS
    return check_basis(str(stored.get("memory_basis", default)))


def _time_limit(r: SearchRequest, stored: Mapping[str, Any],
                space: SearchSpace) -> TrialTimeLimit:
    """A trial's time limit: as asked, else as a resumed study stored it, else the space's,
    else derived (`pipeline.time_limit`)."""
    given = r.trial_time_limit
    if given is None and stored.get("trial_time_limit") is not None:
        given = float(stored["trial_time_limit"])
    if given is None:
        given = space.trial_time_limit
    return TrialTimeLimit(given, user=r.kind == "user")


def _workers(r: SearchRequest, stored: Mapping[str, Any], repeatable: bool, gpus: int,
             cpus: int) -> int:
    """Trials at once: one in a repeatable search or in process (`--executor local`, which
    runs one at a time, a resumed study's count aside); else --workers, else a resumed
    study's count; else as many as the GPUs run at once; on a CPU one (trials side by side
    distort each other's throughput), except in a time-boxed search on a private Ray: one
    per core, each on one torch thread (a time box buys trials, not seconds). Where each
    trial holds GPUs of this machine's `gpus` (`_gpu_slots`: one, or a TorchRec space's
    world_size) no more run at once: --workers above is refused, a resumed study's count is
    cut to them (the count recorded is the count that runs)."""
    if repeatable or r.executor_kind == "local":
        return 1
    slots = _gpu_slots(r, stored, gpus)
    if r.workers:
        if slots is not None and r.workers > slots:
            raise _too_many_workers(r.workers, gpus, _trial_gpus(r, stored), r.gpu)
        return int(r.workers)
    if stored.get("workers"):
        return min(int(stored["workers"]), slots or int(stored["workers"]))
    if r.device == "cuda":
        return max(1, gpus if slots is None else slots)
    private_ray = r.executor is None and r.executor_kind == "ray" and r.ray_address is None
    return cpus if r.time_budget is not None and private_ray else 1


def _too_many_workers(workers: int, gpus: int, per: int, gpu: int | None) -> ConfigError:
    """--workers above the trials this machine's `gpus` run at once, each on `per` of them
    (`_trial_gpus`), in one line with the fix."""
    import torch

    slots = gpus // per
    where = f"--device cuda:{gpu} gives this search" if gpu is not None else "this machine has"
    other = (", or --device cuda (all this machine's GPUs)"
             if gpu is not None and torch.cuda.device_count() > slots else "")
    each = ("its own GPU" if per == 1 else
            f"{per} GPUs (the space's topology.world_size {per}: a rank on each)")
    return ConfigError(f"--workers {workers} runs {workers} trials at once, each on {each}, "
                       f"and {where} {gpus}: use --workers {slots}{other}")


def _gpu_slots(r: SearchRequest, stored: Mapping[str, Any], gpus: int) -> int | None:
    """The trials that can run at once on this machine's `gpus` where each holds
    `_trial_gpus` of them (`--device cuda` on a Ray this search starts): `gpus` // that;
    None where nothing here bounds them: a CPU, a Ray cluster's GPUs (not checked here), an
    Executor object, a TorchRec space planned for cpu (its ranks hold no GPU) or of more
    ranks than `gpus` (its world_size is refused: `Sharded.of`)."""
    if r.device != "cuda" or r.executor_kind != "ray" or r.ray_address or r.executor is not None:
        return None
    per = _trial_gpus(r, stored)
    return None if per == 0 or per > gpus else gpus // per


def _trial_gpus(r: SearchRequest, stored: Mapping[str, Any]) -> int:
    """The GPUs one trial of `--device cuda` holds: one; a TorchRec space's (`topology:`,
    as given or as a resumed study stored it) its world_size, each rank's Ray Train worker
    on its own, where planned for cuda (the search's device unless the topology says);
    none where planned for cpu."""
    topo = (r.space.topology if isinstance(r.space, SearchSpace)
            else stored.get(TOPOLOGY_KEY))
    if topo is None:
        return 1
    return int(topo.get("world_size", 1)) if topo.get("compute_device", "cuda") == "cuda" else 0


# The trial count of a search bounded only by --time-budget (time is the limit, not a count)
TIME_BOXED_TRIALS = 100_000


def _trials(r: SearchRequest, stored: Mapping[str, Any], space: SearchSpace) -> int:
    """--trials; else a resumed study's count; else no count under a time budget
    (TIME_BOXED_TRIALS; resumed without one: the space's); else the space's."""
    if r.trials:
        return r.trials
    kept = int(stored.get("trials", 0))
    if kept and kept < TIME_BOXED_TRIALS:
        return kept
    return TIME_BOXED_TRIALS if r.time_budget is not None else space.trials


def _multi_fidelity(r: SearchRequest, stored: Mapping[str, Any], space: SearchSpace) -> bool:
    """MO-ASHA (`pipeline.scheduler`): as asked or as stored, off by default; its rungs are
    shares of a trial's length, which a user space must state."""
    on = r.multi_fidelity or bool(stored.get("multi_fidelity", False))
    if on and r.kind == "user" and space.early_stop is None:
        raise ConfigError(
            "--multi-fidelity: your loop's length is unknown; add `early_stop: {max_steps: N, "
            "eval_every: M}` to the space (its rungs are shares of max_steps)")
    return on


def _early_stop(r: SearchRequest, stored: Mapping[str, Any], space: SearchSpace) -> bool:
    """Early stopping: as asked, else as stored, else on (a user space: on when it says how
    long its loop runs). A user space that does not say cannot be projected: refused."""
    if r.kind == "user" and r.early_stop and space.early_stop is None:
        raise ConfigError(
            "--early-stop: your loop's length is unknown; add `early_stop: {max_steps: N, "
            "eval_every: M}` to the space (the loop's most steps and its steps between "
            "reports)")
    if r.early_stop is not None:
        return r.early_stop
    if stored and "early_stop" in stored:
        return bool(stored["early_stop"])
    return space.early_stop is not None if r.kind == "user" else DEFAULT_EARLY_STOP
