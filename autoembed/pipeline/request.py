"""`SearchRequest`: every argument of a search, checked once, before anything is made.

`SearchRequest.parse(...)` takes what `autoembed.search(...)` and `autoembed search` take
(`SearchOptions` declares each option and its rule), for either workload (autoembed's own
models on data; or the user's `model`, `example` and `train`, given together), and raises
`ConfigError` (one line naming the value and the fix) for bad input: an option that has
no meaning for the workload asked for is refused, never ignored (`USER_REFUSED`). The
request holds what the user gave; settings a resumed study stored are merged in
`pipeline.plan` (one place: `SearchPlan.build`).
"""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autoembed.budget import Budget, BudgetLike, MemoryBudget, detect_device_memory
from autoembed.errors import ConfigError
from autoembed.options import check_options
from autoembed.pareto import DEFAULT_PICK, Pick, parse_pick
from autoembed.pipeline.search_options import MAX_SEED, SearchOptions
from autoembed.pipeline.study import check_sampler, check_study_name
from autoembed.space import OBJECTIVES, SearchSpace, check_objective, load_space
from autoembed.space_auto import AUTO_SOURCE as AUTO_SPACE

if TYPE_CHECKING:
    from autoembed.user.run import UserCode

__all__ = ["SearchRequest", "DEVICES", "visible_id", "MAX_SEED", "EXECUTORS", "USER_REFUSED"]

DEVICES = ("auto", "cpu", "cuda")
EXECUTORS = ("ray", "local")  # Ray Tune (default); or one trial at a time in this process
# Options of a search of autoembed's own models that a search over the user's model does not
# take (the model, data and loop are the user's), and why: refused in one line.
USER_REFUSED = {
    "data": "the data are your loop's",
    "label": "the data are your loop's",
    "categorical": "the data are your loop's",
    "text_column": "the data are your loop's",
    "host_budget": "host_cached tables are not searched over your model",
    "start_points": "start points are known-good configs of autoembed's own models",
}


@dataclass(frozen=True, kw_only=True)
class SearchRequest(SearchOptions):
    """A search as asked for, checked: every option as given (declared once, in
    `SearchOptions`), but those below, which `of` resolves (the budget parsed, the study
    named, the device found, ...), and what follows from them."""

    budget: Budget
    study: str
    runs_dir: Path
    device: str  # "cpu" or "cuda", resolved against what this machine has
    gpu: int | None = None  # the GPU `--device cuda:N` named: the only one a private Ray sees
    space: str | SearchSpace | None = None
    trial_time_limit: float | None = None  # seconds (pipeline.time_limit)
    objectives: tuple[str, ...] | None = None
    categorical: tuple[str, ...] | None = None
    host_budget: Budget | None = None
    # NAME=AMOUNT strings, parsed (`pipeline.resources`)
    trial_resources: tuple[Mapping[str, float], ...] = ()  # type: ignore[assignment]
    executor: Any = None  # an Executor object given to `autoembed.search`
    # configs of the user's choice trained first (param name -> value each; None: not given)
    enqueue: tuple[Mapping[str, Any], ...] | None = None
    pick: Pick = Pick(DEFAULT_PICK)
    # a search over the user's own model: its functions (None: autoembed's own models)
    code: UserCode | None = None
    executor_kind: str = "ray"  # EXECUTORS, or "custom" for an Executor object
    space_arg: str | None = None  # the space as the user named it (messages)

    @property
    def space_label(self) -> str:
        """The space as the user named it, for messages."""
        if self.space_arg is not None:
            return self.space_arg
        return str(self.space.source if isinstance(self.space, SearchSpace) else self.space)

    @property
    def kind(self) -> str:
        """The workload: "user" with the user's functions, else "builtin"."""
        return "builtin" if self.code is None else "user"

    @classmethod
    def parse(cls, budget: BudgetLike, space: str | Path | SearchSpace | None = None,
              **options: Any) -> SearchRequest:
        """The request of `SearchOptions(budget, space, **options)` (`of`); a keyword that
        is not declared there is a TypeError."""
        return cls.of(SearchOptions(budget, space, **options))

    @classmethod
    def of(cls, o: SearchOptions) -> SearchRequest:
        """Check every option, each against its declared rule, then how they combine; the
        first bad one raises ConfigError."""
        check_options(o)
        code = _user_code(o.model, o.example, o.train, o.loss, o.apply,
                          {k: getattr(o, k) for k in USER_REFUSED})
        user_only = {"--enqueue": o.enqueue is not None, "--no-reference": not o.reference,
                     "--allow-changed-code": o.allow_changed_code}
        asked = [flag for flag, on in user_only.items() if on]
        if code is None and asked:
            raise ConfigError(f"{asked[0]} applies to a search over your own model (--model, "
                              "--example, --train): remove it")
        queue = None if o.enqueue is None else _enqueue(o.enqueue)
        kind, executor_obj = _executor(o.executor)
        space = o.space
        space_arg = None if space is None or isinstance(space, SearchSpace) else str(space)
        space = _space(space, "builtin" if code is None else "user", o.resume)
        name = o.study if o.study is not None else _dt.datetime.now().strftime(
            "search-%Y%m%d-%H%M%S")
        check_study_name(name)
        if o.resume and o.study is None:
            raise ConfigError("--resume needs --study NAME (the study to continue)")
        pick = parse_pick(o.pick_rule, "--pick")
        if o.sampler is not None:
            check_sampler(o.sampler)
        if o.repeatable and (o.workers or 1) > 1:
            raise ConfigError(f"--repeatable runs one trial at a time: drop --workers {o.workers}")
        if kind == "local" and (o.workers or 1) > 1:
            raise ConfigError(f"--executor local runs one trial at a time: drop --workers "
                              f"{o.workers}, or run trials side by side with --executor ray")
        if o.repeatable and o.time_budget is not None:
            raise ConfigError("--repeatable with --time-budget: when the time runs out depends "
                              "on the machine; give --trials instead")
        share = isinstance(o.budget, str) and o.budget.strip().endswith("%")
        # a size is refused before _device loads torch (~3 CPU s); "80%" needs the device
        memory = None if share else MemoryBudget.of(o.budget, o.host_budget)
        dev, gpu = _device(o.device)
        if gpu is not None:
            _check_pinned(o.device, kind, o.ray_address)
        if memory is None:
            memory = MemoryBudget.of(o.budget, o.host_budget, device_memory=(  # of GPU N's
                detect_device_memory(gpu) if gpu is not None else None))
        objs = _objectives(o.objectives)
        from autoembed.pipeline.resources import parse_trial_resources

        given = {f.name: getattr(o, f.name) for f in fields(cls) if hasattr(o, f.name)}
        limit = o.trial_time_limit
        return cls(**{
            **given, "budget": memory.device, "study": name, "device": dev, "gpu": gpu,
            "space": space,
            "runs_dir": Path(o.runs_dir).expanduser().resolve(), "objectives": objs,
            "trial_time_limit": None if limit is None else float(limit),
            "categorical": _names(o.categorical), "host_budget": memory.host,
            "trial_resources": parse_trial_resources(o.trial_resources or ()),
            "executor": executor_obj, "enqueue": queue, "pick": pick, "code": code,
            "executor_kind": kind, "space_arg": space_arg})


def _enqueue(raw: str | Path | Sequence[Mapping[str, Any]]) -> tuple[dict[str, Any], ...]:
    """The configs to enqueue: a list of param dicts, or a YAML file holding one (checked
    against the space later, `user.space.enqueue_values`)."""
    source = "enqueue"
    if isinstance(raw, (str, Path)):
        from autoembed.config import safe_load_yaml

        path = Path(raw)
        if not path.is_file():
            raise ConfigError(f"--enqueue {raw}: no such file; give a YAML list of param "
                              "dicts, e.g. - {dim: 64, lr: 0.01}")
        source, raw = f"--enqueue {raw}", safe_load_yaml(path.read_text(), str(raw),
                                                         "enqueue")
    if not isinstance(raw, (list, tuple)) or not all(isinstance(e, Mapping) for e in raw):
        raise ConfigError(f"{source}: {str(raw)[:80]!r} is not a list of param dicts; give "
                          "e.g. [{dim: 64, lr: 0.01}]")
    return tuple(dict(e) for e in raw)


def _user_code(model: Any, example: Any, train: Any, loss: Any, apply: Any,
               builtin_only: Mapping[str, Any]) -> UserCode | None:
    """The user's functions, when any of model/example/train is given (all three must be);
    an option that describes autoembed's own models beside them is refused."""
    given = {"model": model, "example": example, "train": train}
    if all(v is None for v in given.values()):
        if loss is not None:
            raise ConfigError("--loss prices your own model's step: give it with --model, "
                              "--example and --train")
        if apply is not None:
            raise ConfigError("apply rewrites your own model: give it with model=, example= "
                              "and train=")
        return None
    missing = [f"--{k}" for k, v in given.items() if v is None]
    if missing:
        raise ConfigError(f"{', '.join(missing)} missing: a search of your own model needs "
                          "--model, --example and --train")
    for key, value in builtin_only.items():
        if key == "start_points" and value is False:  # the model as written still trains first
            raise ConfigError("--no-start-points does not apply to a search over your own "
                              "model (it has no start points; your model as written trains "
                              "first): remove it, or give --no-reference to skip that")
        if value is not None:
            flag = "--" + key.replace("_", "-")
            raise ConfigError(f"{flag} does not apply to a search over your own model "
                              f"({USER_REFUSED[key]}): remove it")
    from autoembed.user.run import UserCode

    return UserCode.resolve(model, example, train, loss, apply)


def _space(space: str | Path | SearchSpace | None, kind: str,
           resume: bool) -> str | SearchSpace | None:
    """The space as given: a file (or a built-in's name) loaded now, so that a bad one costs
    nothing; "auto" (derived from the data) and None (the default, or a resumed study's
    stored one) as they are. A search over the user's model needs its space file."""
    if space is None and kind == "user" and not resume:
        raise ConfigError("--space missing: give the YAML file with `embedding:` and `user:` "
                          "sections")
    if space is None or isinstance(space, SearchSpace):
        return space
    if str(space) == AUTO_SPACE:
        return AUTO_SPACE
    return load_space(space, kind)


def _executor(executor: Any) -> tuple[str, Any]:
    """("ray" | "local" | "custom", the Executor object or None)."""
    if executor is None or executor in EXECUTORS:
        return executor or "ray", None
    if isinstance(executor, str):
        raise ConfigError(f"executor '{executor}' is not known; use ray (the default) or "
                          "local (one trial at a time in this process, for a debugger)")
    return str(getattr(executor, "kind", "custom")), executor


def _names(names: str | Sequence[str] | None) -> tuple[str, ...] | None:
    """Column names: a comma list (as the CLI gives them) or a sequence."""
    if isinstance(names, str):
        return tuple(c.strip() for c in names.split(",") if c.strip())
    return tuple(names) if names is not None else None


def _device(device: str) -> tuple[str, int | None]:
    """("cpu" | "cuda", the GPU index `cuda:N` names, else None), a GPU checked present."""
    if device not in DEVICES and not device.startswith("cuda:"):
        raise ConfigError(f"device '{device}' is not known; use one of {', '.join(DEVICES)} "
                          "or cuda:N")
    if device == "auto":
        import torch

        return ("cuda" if torch.cuda.is_available() else "cpu"), None
    if device.startswith("cuda"):
        from autoembed.training import check_device

        # a GPU present, by the index as given, as `autoembed train` checks it
        return "cuda", check_device(device).index
    return "cpu", None


def local_gpus(device: str, gpu: int | None) -> int:
    """The GPUs a private Ray on this machine gives a search's trials (`device`, and `gpu`
    where `--device cuda:N` named one): that one alone (a private Ray sees it only), CUDA's
    count for `cuda`, none otherwise."""
    if device != "cuda":
        return 0
    if gpu is not None:
        return 1
    import torch

    return int(torch.cuda.device_count())


def _check_pinned(device: str, executor_kind: str, ray_address: str | None) -> None:
    """Refuse `--device cuda:N` where the search cannot keep its trials on that GPU: only a
    Ray it starts itself is limited to it (`ray_tune.ray_session`)."""
    index = int(device.partition(":")[2])
    env = (f"start the process with CUDA_VISIBLE_DEVICES={visible_id(index)} and give "
           "--device cuda")
    if ray_address:
        raise ConfigError(f"--device {device} with --ray-address: the cluster places trials on "
                          "its own GPUs; give --device cuda (to pin a GPU, start that node's "
                          "Ray with CUDA_VISIBLE_DEVICES set)")
    if executor_kind == "local":
        raise ConfigError(f"--device {device} with --executor local: trials run in this "
                          f"process on its current GPU; drop --executor local, or {env}")
    if executor_kind != "ray":
        raise ConfigError(f"device '{device}': an Executor object places its own trials; give "
                          f"device='cuda', or {env}")


def visible_id(index: int, visible: str | None = None) -> str:
    """The CUDA_VISIBLE_DEVICES entry of GPU `index` as this process numbers it: the
    index-th of `visible` (default: this process's CUDA_VISIBLE_DEVICES), else the index."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    ids = [v.strip() for v in (visible or "").split(",") if v.strip()]
    return ids[index] if index < len(ids) else str(index)


def _objectives(objectives: str | Sequence[str] | None) -> tuple[str, ...] | None:
    if objectives is None:
        return None
    if isinstance(objectives, str):
        objectives = [s for s in (x.strip() for x in objectives.split(",")) if s]
        if not objectives:
            raise ConfigError("--objectives '': name at least one of " + ", ".join(OBJECTIVES))
    for i, o in enumerate(objectives):
        check_objective(o, "--objectives: ")
        if o in objectives[:i]:
            raise ConfigError(f"--objectives: '{o}' is named twice; name each objective once")
    return tuple(objectives) or None
