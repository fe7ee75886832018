"""`autoembed.search(model=build, example=..., train=..., space=...)`: the search pipeline over
the user's own model and loop.

The same stages as a built-in search (study and lock, engine, recorder, report), with two
differences: a proposal is priced on the user's model (`user.pricing`: build on meta ->
config for its tables -> `estimate_model` of `apply(build(params))`), and a feasible one
runs the user's `train` (`user.trainer.run_payload`) through an executor. Bad input found
while pricing the first proposal (a build that raises or returns no module, a rule naming no
module) stops the search before any trial, with one line.
"""

from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autoembed.config import EmbeddingConfig
from autoembed.errors import ConfigError
from autoembed.pareto import parse_pick
from autoembed.pipeline import study as studies
from autoembed.pipeline.engine import (
    HOST_BASE_BYTES,
    InvalidProposal,
    PricedProposal,
    SearchEngine,
)
from autoembed.pipeline.executor import StopTrial, TrialChannel
from autoembed.pipeline.recorder import Recorder, TrackerSink
from autoembed.pipeline.records import ATTR, TrialRow
from autoembed.pipeline.report import SearchReport
from autoembed.trial import Evaluation
from autoembed.user.pricing import Apply, price_proposal
from autoembed.user.request import UserRequest
from autoembed.user.space import UserSpace
from autoembed.user.trainer import make_payload, run_payload

if TYPE_CHECKING:
    from autoembed.pipeline.session import StudyLock
    from autoembed.tracking import SearchTracker

__all__ = ["search_own", "search_user", "UserPricing", "user_engine", "LocalUserExecutor",
           "UserSearchResult"]


class UserPricing:
    """The engine's pricing stage on the user's model: `price_proposal`, and for one that
    fits a `run_payload` payload. A ConfigError pricing a proposal before any proposal of
    the study was priced is bad input (the trial told FAIL, the error raised: the search
    stops before any trial); a later one is that proposal's failure, recorded with the
    message (`placeholder`: the config its row carries, the first priced one)."""

    def __init__(self, request: UserRequest, budget: int, apply: Apply | None = None,
                 placeholder: EmbeddingConfig | None = None) -> None:
        self.request = request
        self.budget = budget
        self.apply = apply
        self.placeholder = placeholder

    def price(self, trial: Any) -> PricedProposal | InvalidProposal:
        from optuna.trial import TrialState

        space = self.request.space
        values = suggest_values(space, trial)
        try:
            priced = price_proposal(self.request.code, space, values, self.budget,
                                    apply=self.apply)
        except ConfigError as e:
            if self.placeholder is None:
                trial.study.tell(trial, state=TrialState.FAIL)  # bad input: nothing is kept
                raise
            return InvalidProposal(str(e), self.placeholder)
        self.placeholder = self.placeholder or priced.config

        def launch(number: int) -> tuple[dict[str, Any], int]:
            return make_payload(number, self.request.records, priced.params, priced.config,
                                metrics=tuple(_reportable(space)),
                                target=space.target), HOST_BASE_BYTES

        return PricedProposal(priced.config, priced.estimate, launch)


def user_engine(request: UserRequest, study: Any, *, apply: Apply | None = None,
                recorder: Recorder | None = None,
                progress: Callable[[Any], None] | None = None) -> SearchEngine:
    """The search engine of a user search: `UserPricing`, the space's objectives, and early
    stopping when the space has `early_stop:`."""
    space = request.space
    rows = studies.load_rows(study)
    first = next((r.config for r in rows.values() if r.status != "failed"), None)
    es = space.early_stop
    return SearchEngine(
        study=study, space=space, workload=None,  # type: ignore[arg-type]
        budget=request.budget, objectives=[(o.name, o.direction)
                                                       for o in space.objectives],
        settings={} if es is None else {"max_steps": es[0], "eval_every": es[1]},
        trials=request.trials, early_stop=es is not None, progress=progress,
        recorder=recorder, pricing=UserPricing(request, request.budget.bytes, apply, first))


def suggest_values(space: UserSpace, trial: Any) -> dict[str, Any]:
    """Ask `trial` for each param of `space` whose condition holds: qualified name ->
    value, fixed values included."""
    from autoembed.pipeline.optuna_space import suggest_param

    values: dict[str, Any] = dict(space.fixed)
    for p in space.params:
        if p.active(values):
            values[p.name] = suggest_param(p, trial)
    return values


def _reportable(space: Any) -> list[str]:
    """Names a loop may report: the space's metrics and `latency` when it is an objective."""
    return [*space.metrics, *(o.name for o in space.objectives if o.name == "latency")]


class LocalUserExecutor:
    """One trial at a time in this process: the user's loop under a plain debugger."""

    def run(self, engine: SearchEngine) -> None:
        while (p := engine.propose()) is not None:
            channel = TrialChannel(engine, p.number)

            def stop_channel(ev: Evaluation, channel: TrialChannel = channel) -> bool:
                try:
                    channel.report(ev)
                except StopTrial:
                    return False
                return True

            try:
                final: Mapping[str, Any] | None = run_payload(p.train_config, stop_channel)
            except ConfigError as e:  # this process's copy of the code changed under us
                final = {"status": "failed", "result": None, "error": str(e)}
            engine.finish(p.number, None if channel.stopped else final)


def _run_on_ray(engine: SearchEngine, request: UserRequest, out_dir: Path, name: str,
                lock: StudyLock, address: str | None = None, workers: int = 1) -> None:
    """`workers` trials at a time on a private local Ray, or on the cluster at `address`
    (a trial gets its share of a node's CPUs), the user's code shipped in the runtime_env
    and checked by hash on each node (`user.ship`)."""
    import os

    from autoembed.pipeline.ray_tune import TuneSettings, ray_session, run_tune
    from autoembed.user.ship import runtime_env
    from autoembed.user.trainer import tune_trainable

    cpus = max(1, os.cpu_count() or 1)
    with ray_session(address, cpus, None, runtime_env(request.records.values())) as ray:
        lock.ray(*ray.local_session())  # a resume after a SIGKILL stops what it left
        per_trial = (ray.cpus_per_trial(workers) if address
                     else max(1, cpus // max(1, workers)))
        run_tune(engine, TuneSettings(
            workers=workers, cpus_per_trial=per_trial, gpus_per_trial=0,
            storage_path=out_dir / "ray", name="tune-" + name, train_data={},
            run_settings={}, trainable=tune_trainable))


@dataclass(frozen=True)
class UserSearchResult:
    study: str
    out_dir: Path
    rows: tuple[TrialRow, ...]
    front: tuple[TrialRow, ...]
    best: TrialRow | None
    files: Mapping[str, Path]

    def count(self, status: str) -> int:
        return sum(1 for r in self.rows if r.status == status)


def search_user(request: UserRequest, *, study: str | None = None, runs_dir: str | Path = "runs",
                resume: bool = False, seed: int = 0, pick: str = "knee",
                tracker: SearchTracker | None = None, tracking_uri: str | None = None,
                apply: Apply | None = None, ray_address: str | None = None,
                workers: int = 1, progress: Callable[[Any], None] | None = None,
                note: Callable[[str], None] | None = None) -> UserSearchResult:
    """Run a checked user search: in this process (`executor="local"`) or on Ray, private
    or the cluster at `ray_address`, `workers` trials at a time. `note` gets the lock's
    takeover message (a resume after a SIGKILLed driver)."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ConfigError(f"workers = {workers!r}: must be an integer >= 1")
    import optuna
    from optuna.study import StudyDirection

    from autoembed.pipeline.session import StudyLock

    t0 = time.monotonic()
    root = Path(runs_dir).resolve()
    name = study or "user-" + _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    stored = studies.StoredStudy.open(root, None, name, resume)
    if resume:
        request.check_resume(stored.meta)
    out_dir = root / name
    if tracker is None:
        from autoembed.tracking import make_tracker

        tracker = make_tracker(tracking_uri, root)
    objectives = request.space.objectives
    with StudyLock(out_dir, name, note) as lock:
        stored.check_still_new()
        sampler = studies.make_sampler(studies.DEFAULT_SAMPLER, seed)
        if stored.existing is None:
            opt = optuna.create_study(study_name=name, storage=stored.storage, sampler=sampler,
                                      directions=[StudyDirection.MAXIMIZE if o.direction ==
                                                  "maximize" else StudyDirection.MINIMIZE
                                                  for o in objectives])
        else:
            opt = optuna.load_study(study_name=name, storage=stored.storage, sampler=sampler)
            studies.recover(opt, stored.storage, "interrupted: the driver stopped while this "
                            "trial ran")
        meta = {**request.meta(), "kind": "user", "budget": request.budget.text,
                "objectives": [o.to_dict() for o in objectives],
                "space_source": request.space.source, "space_text": request.space.text}
        opt.set_user_attr(ATTR, meta)
        out_dir.mkdir(parents=True, exist_ok=True)
        tracker.start(name, {"budget": request.budget.text, "space": request.space.source},
                      Path(request.space.source))
        engine = user_engine(request, opt, apply=apply, progress=progress,
                             recorder=Recorder([TrackerSink(tracker)]))
        try:
            if request.executor == "local":
                LocalUserExecutor().run(engine)
            else:
                _run_on_ray(engine, request, out_dir, name, lock, ray_address, workers)
        except BaseException:
            engine.abandon("interrupted")
            tracker.close("FAILED")
            raise
        engine.recorder.flush()
        report = SearchReport.build(list(engine.rows.values()), objectives, parse_pick(pick),
                                    request.budget, name, engine.stop_reason)
        files = report.write(out_dir, {"space": request.space.source,
                                       "wall_seconds": round(time.monotonic() - t0, 2)})
        tracker.finish([r.number for r in report.front], list(files.values()))
        tracker.close("FINISHED")
    return UserSearchResult(name, out_dir, report.rows, report.front, report.best, files)


def search_own(budget: str | int, space: Any = None, *, model: Any, example: Any = None,
               train: Any = None, trials: int | None = None, executor: Any = None,
               allow_changed_code: bool = False, **options: Any) -> UserSearchResult:
    """`autoembed.search(budget, space, model=build, example=..., train=...)`: check the
    arguments (`UserRequest.parse`), then `search_user` with the remaining options."""
    if space is None:
        raise ConfigError("space missing: give the YAML file with `embedding:` and `user:`")
    from autoembed.pipeline.executor import InProcessExecutor

    kind = ("local" if isinstance(executor, InProcessExecutor) else
            "ray" if executor is None else executor)
    request = UserRequest.parse(budget, model, example, train, space, trials=trials,
                                executor=kind, allow_changed_code=allow_changed_code)
    return search_user(request, **options)
