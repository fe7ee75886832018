"""`SearchRequest`: every argument of a search, checked once, before anything is made.

`SearchRequest.parse(...)` takes what `autoembed.search(...)` and `autoembed search` take and
raises `ConfigError` (one line naming the value and the fix) for bad input. The request
holds what the user gave; settings a resumed study stored are merged in `search.plan` (one
place: `SearchPlan.build`).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autoembed.budget import Budget, BudgetLike, MemoryBudget
from autoembed.errors import ConfigError
from autoembed.pareto import DEFAULT_PICK, Pick, parse_pick
from autoembed.search.study import SAMPLERS, check_study_name
from autoembed.space import OBJECTIVES, SearchSpace, check_objective

__all__ = ["SearchRequest", "DEVICES", "MAX_SEED"]

DEVICES = ("auto", "cpu", "cuda")
MAX_SEED = 2**32 - 1  # Optuna's samplers seed numpy's RandomState, which takes 0..2**32 - 1


@dataclass(frozen=True)
class SearchRequest:
    """A search as asked for (None: not given; see `search.driver.search` for each field)."""

    budget: Budget
    study: str
    runs_dir: Path
    device: str  # "cpu" or "cuda", resolved against what this machine has
    space: str | Path | SearchSpace | None = None
    trials: int | None = None
    time_budget: float | None = None
    objectives: tuple[str, ...] | None = None
    sampler: str | None = None
    seed: int | None = None
    workers: int | None = None
    resume: bool = False
    ray_address: str | None = None
    tracking_uri: str | None = None
    storage: str | None = None
    trial_resources: tuple[Mapping[str, float], ...] = ()
    pick: Pick = Pick(DEFAULT_PICK)
    data: str | None = None
    label: str | None = None
    categorical: tuple[str, ...] | None = None
    text_column: str | None = None
    early_stop: bool | None = None
    host_budget: Budget | None = None
    start_points: bool | None = None

    @classmethod
    def parse(
        cls,
        budget: BudgetLike,
        space: str | Path | SearchSpace | None = None,
        *,
        trials: int | None = None,
        time_budget: float | None = None,
        objectives: str | Sequence[str] | None = None,
        sampler: str | None = None,
        seed: int | None = None,
        workers: int | None = None,
        device: str = "auto",
        study: str | None = None,
        resume: bool = False,
        runs_dir: str | Path = "runs",
        ray_address: str | None = None,
        tracking_uri: str | None = None,
        storage: str | None = None,
        trial_resources: Sequence[str] | None = None,
        pick_rule: str = DEFAULT_PICK,
        data: str | None = None,
        label: str | None = None,
        categorical: Sequence[str] | None = None,
        text_column: str | None = None,
        early_stop: bool | None = None,
        host_budget: BudgetLike | None = None,
        start_points: bool | None = None,
    ) -> SearchRequest:
        """Check every argument; the first bad one raises ConfigError."""
        name = study if study is not None else _default_study()
        check_study_name(name)
        if resume and study is None:
            raise ConfigError("--resume needs --study NAME (the study to continue)")
        pick = parse_pick(pick_rule)
        if sampler is not None and sampler not in SAMPLERS:
            raise ConfigError(
                f"sampler '{sampler}' is not known; use one of {', '.join(SAMPLERS)}")
        _positive("--trials", trials)
        _positive("--workers", workers)
        _positive("--time-budget", time_budget, integer=False)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)
                                 or not 0 <= seed <= MAX_SEED):
            raise ConfigError(
                f"--seed {seed!r}: must be an integer in 0..{MAX_SEED} (2**32 - 1)")
        dev = _device(device)
        memory = MemoryBudget.of(budget, host_budget)
        bud, host = memory.device, memory.host
        objs = _objectives(objectives)
        from autoembed.search.ray_tune import parse_trial_resources

        custom = parse_trial_resources(trial_resources or ())
        return cls(
            budget=bud, study=name, runs_dir=Path(runs_dir).expanduser().resolve(), device=dev,
            space=space, trials=trials, time_budget=time_budget, objectives=objs,
            sampler=sampler, seed=seed, workers=workers, resume=resume,
            ray_address=ray_address, tracking_uri=tracking_uri, storage=storage,
            trial_resources=custom, pick=pick, data=data, label=label,
            categorical=tuple(categorical) if categorical is not None else None,
            text_column=text_column, early_stop=early_stop, host_budget=host,
            start_points=start_points,
        )


def _default_study() -> str:
    return "search-" + _dt.datetime.now().strftime("%Y%m%d-%H%M%S")


def _positive(name: str, value: float | None, integer: bool = True) -> None:
    if value is None:
        return
    bad = isinstance(value, bool) or (integer and not isinstance(value, int)) or not value > 0
    if bad:
        raise ConfigError(f"{name} {value!r}: must be {'an integer ' if integer else ''}> 0")


def _device(device: str) -> str:
    if device not in DEVICES and not device.startswith("cuda:"):
        raise ConfigError(f"device '{device}' is not known; use one of {', '.join(DEVICES)}")
    import torch

    has_cuda = torch.cuda.is_available()
    if device == "auto":
        return "cuda" if has_cuda else "cpu"
    if device.startswith("cuda") and not has_cuda:
        raise ConfigError(
            f"device '{device}' was asked for, but no GPU is visible; use --device cpu"
        )
    return "cuda" if device.startswith("cuda") else "cpu"


def _objectives(objectives: str | Sequence[str] | None) -> tuple[str, ...] | None:
    if objectives is None:
        return None
    if isinstance(objectives, str):
        objectives = [s for s in (x.strip() for x in objectives.split(",")) if s]
        if not objectives:
            raise ConfigError("--objectives '': name at least one of " + ", ".join(OBJECTIVES))
    for o in objectives:
        check_objective(o, "--objectives: ")
    return tuple(objectives) or None


def check_same(stored: Mapping[str, Any], key: str, now: Any, flag: str) -> None:
    """A resumed study keeps what it was started with: refuse an option that changes it."""
    if key in stored and stored[key] != now:
        raise ConfigError(
            f"{flag} differs from what study was started with ({key} = {stored[key]!r}); a "
            "resumed search keeps its budget, space, objectives and data: drop the option or "
            "start a new --study"
        )
