"""`SearchPlan`: everything a search decides before its first trial.

`SearchPlan.build(request, stored)` loads the space (a resumed study's stored text when none
is given), the objectives and the data, merges the request with the settings a resumed study
stored (the one place that does: a value given wins where it may change, and is refused
where it may not — budget, objectives, data, space), sizes the workers and CPUs, and prices
the cheapest corner of the space (`NothingFitsError`, exit status 3, when even it does not
fit). Ray's cluster may change a trial's CPUs (`with_cpus_per_trial`).
"""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from autoembed.budget import Budget, format_bytes
from autoembed.data.spec import DataSpec
from autoembed.errors import AutoembedError
from autoembed.search.request import SearchRequest, check_same
from autoembed.search.workload import Workload, build_workload, data_spec_for
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

__all__ = ["SearchPlan", "NothingFitsError", "DEFAULT_SPACE", "DEFAULT_EARLY_STOP",
           "trial_threads"]

DEFAULT_SPACE = "default"
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

    # ------------------------------------------------------------------ building
    @classmethod
    def build(cls, request: SearchRequest, stored: Mapping[str, Any]) -> SearchPlan:
        r = request
        sp = _space(r.space, stored)
        objs = parse_objectives(list(r.objectives), "--objectives") if r.objectives \
            else sp.objectives
        spec, stand_in = data_spec_for(sp, r.data, r.label, r.categorical, r.text_column)
        if spec.is_file:
            spec = replace(spec, name=str(Path(spec.name).expanduser().resolve()))
        if stored:
            check_same(stored, "budget_bytes", r.budget.bytes, f"--budget {r.budget.text}")
            check_same(stored, "objectives", [o.name for o in objs], "--objectives")
            check_same(stored, "data", spec.to_dict(), "--data")
            if r.space is not None:
                check_same(stored, "space_text", sp.text, f"--space {r.space}")
        workload = build_workload(spec, stand_in, sp.tables)
        _check_cheapest(sp, workload, r.budget)
        gpus = 0
        if r.device == "cuda":
            import torch

            gpus = torch.cuda.device_count()
        workers = r.workers or int(stored.get("workers", 0)) or (
            max(1, gpus) if r.device == "cuda" else 1)
        cpus = os.cpu_count() or 1
        return cls(
            request=r, space=sp, objectives=tuple(objs), spec=spec, workload=workload,
            sampler=r.sampler or stored.get("sampler") or "tpe",
            seed=r.seed if r.seed is not None else int(stored.get("seed", 0)),
            trials=r.trials or int(stored.get("trials", 0)) or sp.trials,
            early_stop=r.early_stop if r.early_stop is not None else bool(
                stored.get("early_stop", DEFAULT_EARLY_STOP)),
            workers=workers, gpus=gpus, cpus=cpus, cpus_per_trial=max(1, cpus // workers),
            created=stored.get("created") or _dt.datetime.now().isoformat(timespec="seconds"),
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
    def space_file(self) -> Path | None:
        return Path(self.space.source) if Path(self.space.source).is_file() else None

    def run_settings(self) -> dict[str, Any]:
        """What each trial runs with (`runner.RunSettings` fields)."""
        s = {**dict(self.space.run), "device": self.device,
             "threads": trial_threads(self.cpus_per_trial, self.device)}
        s.setdefault("fit_to_data", self.workload.fits_length(
            self.space.run, given=self.request.data is not None))
        if self.space.target is not None:
            s["target"] = self.space.target
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
            "created": self.created,
        }

    def tracker_params(self) -> dict[str, str]:
        """The search's parameters on its MLflow parent run."""
        return {
            "budget": self.budget.text, "budget_bytes": str(self.budget.bytes),
            "space": self.space.source, "sampler": self.sampler, "seed": str(self.seed),
            "data": self.spec.name, "objectives": ",".join(o.name for o in self.objectives),
            "trials": str(self.trials), "workers": str(self.workers),
            "early_stop": str(self.early_stop), "device": self.device,
        }


def _space(space: str | Path | SearchSpace | None, stored: Mapping[str, Any]) -> SearchSpace:
    if isinstance(space, SearchSpace):
        return space
    if space is None and stored.get("space_text"):
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


def _check_cheapest(space: SearchSpace, workload: Workload, budget: Budget) -> None:
    """Price the cheapest corner of the space; NothingFitsError when even it does not fit."""
    from autoembed.memory import estimate

    def price(cfg: Any) -> int:
        return int(estimate(workload.priced(cfg)).device_total)

    values, cheap_cfg, cheap_cost = cheapest_config(space, price)
    if cheap_cost <= budget.bytes:
        return
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
