"""`SearchPlan`: everything a search decides before its first trial.

`SearchPlan.build(request, stored)` loads the space (a resumed study's stored text when none
is given; derived from the data and the budget for `--space auto`, the default with real
`--data`), the objectives and the data, merges the request with the settings a resumed study
stored (the one place that does: a value given wins where it may change, and is refused
where it may not — budget, objectives, data, space), fits the baseline on real data (a new
study; a resumed one keeps its stored one), sizes the workers and CPUs, and prices the
cheapest corner of the space (`NothingFitsError`, exit status 3, when even it does not
fit). Ray's cluster may change a trial's CPUs (`with_cpus_per_trial`).

The baseline's validation score is the trials' target (steps_to_target) where the space
gives none: on real data there is no oracle (`runner.default_target`).
"""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from autoembed.baselines import Baseline
from autoembed.budget import Budget, format_bytes
from autoembed.data.spec import SYNTHETIC_NAMES, DataSpec
from autoembed.errors import AutoembedError, ConfigError
from autoembed.memory.objective import LEGACY_BASIS, MEMORY_BASIS, check_basis
from autoembed.search.request import SearchRequest, check_same
from autoembed.search.study import DEFAULT_SAMPLER
from autoembed.search.workload import Workload, build_workload, data_spec_for, given_spec
from autoembed.space import (
    BUILTIN_SPACES,
    Objective,
    SearchSpace,
    builtin_space_path,
    cheapest_config,
    load_space,
    parse_objectives,
    parse_space,
)
from autoembed.space.start import StartPoint, start_points
from autoembed.space_auto import AUTO_SOURCE as AUTO_SPACE

__all__ = ["SearchPlan", "NothingFitsError", "DEFAULT_SPACE", "DEFAULT_EARLY_STOP",
           "trial_threads"]

DEFAULT_SPACE = "default"
DERIVED_SPACE_FILE = "space.yaml"  # a derived space, in the study's folder
# Early stopping on by default: in benchmarks/results/search_efficiency.md (tpe, 3 seeds, 12
# trials) the front's hypervolume was 0.0785 with it and 0.0783 without, for 3% fewer trained
# steps (a front as good for less training; within noise).
DEFAULT_EARLY_STOP = True


class NothingFitsError(AutoembedError):
    """Not even the cheapest config of the space fits the budget (exit status 3)."""

    exit_code = 3


def trial_threads(cpus_per_trial: int, device: str) -> int:
    """Torch threads per trial: on a CPU, one core fewer than the trial's share, so that the
    driver, Ray and the trial's own data generation never make torch's OpenMP threads wait
    for a core. Measured on this 2-core machine (default.yaml trial, 200 steps): idle, 2
    threads train in 0.70 s and 1 thread in 0.83 s; next to two busy processes, 2 threads
    take 4.36 s and 1 thread 1.21 s."""
    return cpus_per_trial if device != "cpu" else max(1, cpus_per_trial - 1)


@dataclass(frozen=True)
class SearchPlan:
    """The search to run: the request, merged with a resumed study's stored settings."""

    request: SearchRequest
    space: SearchSpace
    objectives: tuple[Objective, ...]
    spec: DataSpec  # the priced data
    workload: Workload
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
    baseline: Baseline | None = None  # the simple model on the same split (real data)
    baseline_note: str | None = None  # why there is none, where one was tried
    start_points: bool = False  # known-good configs trained first (space.start)
    start: tuple[StartPoint, ...] = ()  # those points (none for the grid sampler)

    # ------------------------------------------------------------------ building
    @classmethod
    def build(cls, request: SearchRequest, stored: Mapping[str, Any],
              note: Callable[[str], None] | None = None) -> SearchPlan:
        """`note(line)`: told, as it happens, a derived space and the baseline (its fit
        takes seconds on real data)."""
        r = request
        tell = note or (lambda line: None)
        if _derives(r, stored):
            sp, spec, workload = _derived(r)
            objs = _objectives(r, sp)
        else:
            sp = _space(r.space, stored)
            objs = _objectives(r, sp)
            spec, stand_in = data_spec_for(sp, r.data, r.label, r.categorical, r.text_column)
            spec = _resolved(spec)
            if stored:
                check_same(stored, "budget_bytes", r.budget.bytes, f"--budget {r.budget.text}")
                check_same(stored, "objectives", [o.name for o in objs], "--objectives")
                check_same(stored, "data", spec.to_dict(), "--data")
                if r.space is not None:
                    check_same(stored, "space_text", sp.text, f"--space {r.space}")
            workload = build_workload(spec, stand_in, sp.tables)
        seed = r.seed if r.seed is not None else int(stored.get("seed", 0))
        sp = _seeded(sp, seed)
        cheapest = _check_cheapest(sp, workload, r.budget)
        if sp.source == AUTO_SPACE:
            from autoembed.space_auto import summary

            tell(summary(sp, r.runs_dir / r.study / DERIVED_SPACE_FILE))
        sampler = r.sampler or stored.get("sampler") or DEFAULT_SAMPLER
        use_start = r.start_points if r.start_points is not None else (
            bool(stored.get("start_points", False)) if stored else True)
        start = tuple(start_points(sp, spec.task, cheapest)) if (
            use_start and sampler != "grid") else ()
        baseline, why = _baseline(workload, stored, tell)
        gpus = 0
        if r.device == "cuda":
            import torch

            gpus = torch.cuda.device_count()
        workers = r.workers or int(stored.get("workers", 0)) or (
            max(1, gpus) if r.device == "cuda" else 1)
        cpus = os.cpu_count() or 1
        return cls(
            request=r, space=sp, objectives=tuple(objs), spec=spec, workload=workload,
            sampler=sampler,
            seed=seed,
            trials=r.trials or int(stored.get("trials", 0)) or sp.trials,
            early_stop=r.early_stop if r.early_stop is not None else bool(
                stored.get("early_stop", DEFAULT_EARLY_STOP)),
            workers=workers, gpus=gpus, cpus=cpus, cpus_per_trial=max(1, cpus // workers),
            created=stored.get("created") or _dt.datetime.now().isoformat(timespec="seconds"),
            memory_basis=check_basis(str(stored.get("memory_basis", LEGACY_BASIS)))
            if stored else MEMORY_BASIS,
            baseline=baseline, baseline_note=why, start_points=use_start, start=start,
        )

    def with_cpus_per_trial(self, cpus: int) -> SearchPlan:
        return replace(self, cpus_per_trial=cpus)

    # ------------------------------------------------------------------ derived
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
    def out_dir(self) -> Path:
        return self.request.runs_dir / self.name

    @property
    def objective_pairs(self) -> tuple[tuple[str, str], ...]:
        return tuple((o.name, o.direction) for o in self.objectives)

    @property
    def derived(self) -> bool:
        """Whether the space was derived from the data (`--space auto`)."""
        return self.space.source == AUTO_SPACE

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
        a resume reads back; a user may copy and edit it). None: not derived."""
        if not self.derived:
            return None
        p = self.out_dir / DERIVED_SPACE_FILE
        p.write_text(self.space.text)
        return p

    @property
    def target(self) -> float | None:
        """The trials' target quality: the space's, else the baseline's validation score
        (None: the runner's default, the synthetic data's oracle)."""
        if self.space.target is not None:
            return self.space.target
        return self.baseline.valid if self.baseline is not None else None

    def run_settings(self) -> dict[str, Any]:
        """What each trial runs with (`runner.RunSettings` fields)."""
        s = {**dict(self.space.run), "device": self.device,
             "threads": trial_threads(self.cpus_per_trial, self.device)}
        s.setdefault("fit_to_data", self.workload.fits_length(
            self.space.run, given=self.request.data is not None or self.derived))
        if self.target is not None:
            s["target"] = self.target
        return s

    def meta(self, finished: bool = False) -> dict[str, Any]:
        """The study's stored settings (Optuna study attribute), read back by a resume."""
        return {
            "budget_bytes": self.budget.bytes, "budget": self.budget.text,
            "space_source": self.space.source, "space_text": self.space.text,
            "objectives": [o.name for o in self.objectives], "sampler": self.sampler,
            "seed": self.seed, "data": self.spec.to_dict(),
            "train_data": self.workload.train_spec.to_dict(), "trials": self.trials,
            "early_stop": self.early_stop, "workers": self.workers, "device": self.device,
            "threads": self.run_settings()["threads"], "finished": finished,
            "created": self.created, "memory_basis": self.memory_basis,
            "baseline": None if self.baseline is None else self.baseline.to_dict(),
            "baseline_note": self.baseline_note, "start_points": self.start_points,
        }

    def tracker_params(self) -> dict[str, str]:
        """The search's parameters on its MLflow parent run."""
        return {
            "budget": self.budget.text, "budget_bytes": str(self.budget.bytes),
            "space": self.space.source, "sampler": self.sampler, "seed": str(self.seed),
            "data": self.spec.name, "objectives": ",".join(o.name for o in self.objectives),
            "trials": str(self.trials), "workers": str(self.workers),
            "early_stop": str(self.early_stop), "device": self.device,
            "memory_basis": self.memory_basis,
            **({} if self.baseline is None else {
                f"baseline.{k}": str(v) for k, v in self.baseline.to_dict().items()}),
        }


def _objectives(r: SearchRequest, sp: SearchSpace) -> list[Objective]:
    if r.objectives:
        return list(parse_objectives(list(r.objectives), "--objectives"))
    return list(sp.objectives)


def _resolved(spec: DataSpec) -> DataSpec:
    """A file's spec names its absolute path (what a study stores)."""
    if spec.is_file:
        return replace(spec, name=str(Path(spec.name).expanduser().resolve()))
    return spec


def _derives(r: SearchRequest, stored: Mapping[str, Any]) -> bool:
    """Whether this search derives its space: `--space auto`, or real `--data` with no
    `--space`, in a new study (a resumed one reads the space it stored). `--space auto`
    without real data, or on a study started with another space, is refused."""
    if stored:
        if r.space == AUTO_SPACE:
            check_same(stored, "space_source", AUTO_SPACE, f"--space {AUTO_SPACE}")
        return False
    if r.space == AUTO_SPACE:
        if r.data is None:
            raise ConfigError(
                f"--space {AUTO_SPACE} derives the space from your data: give --data (a "
                "CSV/Parquet file, movielens, flights or bbcnews), or a built-in space "
                "(--space default)")
        if r.data in SYNTHETIC_NAMES:
            raise ConfigError(
                f"--space {AUTO_SPACE} derives the space from real data; '{r.data}' is "
                "synthetic and has built-in spaces: --space default, ctr or text")
        return True
    return r.space is None and r.data is not None and r.data not in SYNTHETIC_NAMES


def _derived(r: SearchRequest) -> tuple[SearchSpace, DataSpec, Workload]:
    """The space derived from `--data` and the budget, the data's spec and workload."""
    from autoembed.space_auto import auto_space

    assert r.data is not None
    spec = _resolved(given_spec(r.data, r.label, r.categorical, r.text_column))
    workload = build_workload(spec, None)
    sp = auto_space(workload.dataset, r.budget.bytes)
    return sp, spec, replace(workload, tables=sp.tables)


def _baseline(workload: Workload, stored: Mapping[str, Any], tell: Callable[[str], None]
              ) -> tuple[Baseline | None, str | None]:
    """The study's baseline and why there is none: a resumed study's stored one (None in a
    study stored before there were baselines); in a new study fitted on real data
    (synthetic data have their oracle). A fit the data refuse (too many ids, one class) is
    a note, not an error."""
    if stored:
        raw = stored.get("baseline")
        base = Baseline.from_dict(raw) if raw else None
        why = stored.get("baseline_note")
    elif workload.stand_in or workload.spec.name in SYNTHETIC_NAMES:
        return None, None
    else:
        from autoembed.baselines import NAMES, fit_baseline

        tell(f"fitting the baseline ({NAMES[workload.dataset.task]}, C chosen on the "
             "validation split) ...")
        try:
            base, why = fit_baseline(workload.dataset), None
        except ConfigError as e:
            base, why = None, str(e)
    if base is not None:
        tell(base.describe() + "; its validation score is the trials' target")
    elif why:
        tell(f"no baseline: {why}")
    return base, why


def _seeded(space: SearchSpace, seed: int) -> SearchSpace:
    """The space with the search's seed as every trial's `seed` (model init, data order), so
    seeds of one search differ in what they train, not only in what they propose; a space
    whose base sets `seed`, or that searches it, keeps its own."""
    if "seed" in space.base or any(p.name == "seed" for p in space.params):
        return space
    return replace(space, base={**space.base, "seed": seed})


def _space(space: str | Path | SearchSpace | None, stored: Mapping[str, Any]) -> SearchSpace:
    if isinstance(space, SearchSpace):
        return space
    if (space is None or space == AUTO_SPACE) and stored.get("space_text"):
        import yaml

        text = str(stored["space_text"])
        return parse_space(yaml.safe_load(text), str(stored.get("space_source", "stored")), text)
    if space is None:
        return load_space(builtin_space_path(DEFAULT_SPACE))
    p = Path(space)
    if not p.exists():
        # a built-in by name ("tiny"), or by its repository path from another directory
        if str(space) in BUILTIN_SPACES:
            p = builtin_space_path(str(space))
        elif (p.stem in BUILTIN_SPACES and p.suffix == ".yaml"
              and p.parent.name == "search_spaces" and len(p.parts) == 2):
            p = builtin_space_path(p.stem)
    return load_space(p)


def _check_cheapest(space: SearchSpace, workload: Workload, budget: Budget
                    ) -> dict[str, Any]:
    """Price the cheapest corner of the space: its values; NothingFitsError when even it
    does not fit."""
    from autoembed.memory import estimate

    def price(cfg: Any) -> int:
        return int(estimate(workload.priced(cfg)).device_total)

    values, cheap_cfg, cheap_cost = cheapest_config(space, price)
    if budget.admits(cheap_cost):
        return values
    est = estimate(workload.priced(cheap_cfg))
    cats = {"parameters": est.parameters, "gradients": est.gradients,
            "optimizer state": est.optimizer_state, "activations": est.activations,
            "temporaries": est.temporaries, "overhead": est.overhead}
    top = sorted(cats.items(), key=lambda kv: -kv[1])[:2]
    where = ", ".join(f"{k} {format_bytes(v)}" for k, v in top)
    described = ", ".join(f"{k}={v}" for k, v in values.items())
    raise NothingFitsError(
        f"nothing in the search space '{space.source}' fits the budget {budget.text} = "
        f"{format_bytes(budget.bytes)}: its cheapest config ({described}) "
        f"needs device_total {format_bytes(est.device_total)} (largest: {where}); raise "
        f"--budget to at least {format_bytes(est.device_total)}, or widen the space towards "
        "cheaper configs (smaller dim, hash/qr compression with fewer rows, lower precision, "
        "a row-wise or SGD table optimizer, smaller batch_size)"
    )
