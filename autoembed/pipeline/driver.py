"""`search(budget=..., space=...)`: the whole search, as `autoembed search` runs it, for
either workload (autoembed's own models; or the user's model= example= train=), stage by
stage (docs/ARCHITECTURE.md): request, stored study, plan (exit 3 when nothing fits), under
the study lock the executor and the Optuna study (`recover` re-queues what a dead driver left
running), the engine, the report (pareto.json last). Every check comes before anything is
made, so bad input costs nothing and leaves nothing behind.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autoembed.errors import ConfigError, Interrupted
from autoembed.options import option, takes
from autoembed.pareto import DEFAULT_PICK, Pick, unmeasured
from autoembed.pipeline import study as studies
from autoembed.pipeline.engine import SearchEngine, SearchSettings, SearchStatus
from autoembed.pipeline.executor import Executor, InProcessExecutor, RayTuneExecutor
from autoembed.pipeline.faults import faults_from_env
from autoembed.pipeline.plan import SearchPlan
from autoembed.pipeline.recorder import CalibrationSink, Recorder, TrackerSink
from autoembed.pipeline.records import ATTR, TrialRow, front_of
from autoembed.pipeline.request import MAX_SEED, SearchRequest, visible_id
from autoembed.pipeline.scheduler import AshaScheduler
from autoembed.pipeline.search_options import SearchOptions
from autoembed.pipeline.search_report import RESULT_FILES, SearchReport
from autoembed.space import Objective

if TYPE_CHECKING:
    from autoembed.tracking import SearchTracker

__all__ = ["search", "SearchCall", "run_search", "SearchResult", "DEFAULT_SPACE", "MAX_SEED"]

DEFAULT_SPACE = "default"
INTERRUPTED = "interrupted: the driver stopped while this trial ran"


@dataclass(frozen=True)
class SearchResult:
    """What a finished search found and wrote."""

    study: str
    out_dir: Path
    budget_bytes: int
    objectives: tuple[Objective, ...]
    rows: tuple[TrialRow, ...]
    front: tuple[TrialRow, ...]
    best: TrialRow
    pick: str
    picks: Mapping[str, int]
    files: Mapping[str, Path]
    recovered: str | None = None
    stop_reason: str | None = None
    wall_seconds: float = 0.0
    trainables_started: int = 0
    workers: int = 1
    device: str = "cpu"
    workload: str = "builtin"
    # trial -> the values the search chose (front members), for display
    searched: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)

    def count(self, status: str) -> int:
        return sum(1 for r in self.rows if r.status == status)

    def show(self, file: Any = None) -> None:
        """Print the front table, the counts, the pick and the files, as `autoembed search`
        does (to `file`, default stdout)."""
        from rich.console import Console

        from autoembed.pipeline.render import render_result

        console = Console(file=file, highlight=False)
        if not console.is_terminal:
            console.width = max(console.width, 120)  # pipes and notebooks: whole rows
        render_result(console, self)


@dataclass(frozen=True, kw_only=True)
class SearchCall(SearchOptions):
    """`search`'s keywords: the declared options, and the hooks a Python caller may give."""

    tracker: SearchTracker | None = option(
        None, cli=False, help="Records the search (default: the MLflow store of tracking_uri).")
    progress: Callable[[SearchStatus], None] | None = option(
        None, cli=False, help="Called with the search's status after every event.")
    on_recovered: Callable[[str], None] | None = option(
        None, cli=False, help="Called with each note (a recovery, the derived space, the time "
        "limit), one line each.")


@takes(SearchCall)
def search(call: SearchCall) -> SearchResult:
    """Search `space` for configs that fit `budget` ("8GB", "7.5GiB", or bytes) and are
    Pareto-best on its objectives; write `<runs_dir>/<study>/` and return the result.

    What is searched: autoembed's own models on data (`space`: a space file, a built-in
    name, a SearchSpace, or "auto": derived from `data` and the budget, `space_auto`; None:
    "auto" with real `data`, else the default space; a resumed study: the space it
    stored), or your own model and loop (`model=build`, `example=`, `train=`, with a space
    file of `embedding:` and `user:` sections; `loss=fn(output, example)` prices a forward
    that returns logits; `apply=fn(model, config)` rewrites the built model instead of
    `autoembed.apply`: each proposal is priced and trained on the same build + apply).
    `result.extra` holds the baseline fitted on real data and the
    pick's measured noise (`baseline`, `noise`; also in pareto.json).

    Every keyword is an option of `autoembed search` (`SearchOptions` declares each, its
    default and rule; `pick_rule` is --pick); bad values raise ConfigError before anything
    starts, an unknown keyword a TypeError.
    """
    request = SearchRequest.of(call)
    return run_search(request, tracker=call.tracker, progress=call.progress,
                      on_recovered=call.on_recovered)


def run_search(request: SearchRequest, *, tracker: SearchTracker | None = None,
               progress: Callable[[SearchStatus], None] | None = None,
               on_recovered: Callable[[str], None] | None = None) -> SearchResult:
    """Run a checked request: the pipeline of the module docstring."""
    t_start = time.monotonic()
    pending: Callable[[], SearchTracker] | None = None
    stored = studies.StoredStudy.open(request.runs_dir, request.storage, request.study,
                                      request.resume)
    plan = SearchPlan.build(request, stored.meta, on_recovered)
    _check_new_dir(stored, plan)
    if tracker is None:  # an unreachable server fails here; the store opens while Ray starts
        from autoembed.tracking import open_tracker

        pending = open_tracker(request.tracking_uri, request.runs_dir)
    # its imports load while Ray starts, too (none where a new study never needs them)
    studies.warm_sampler(plan.sampler, None if stored.meta else plan.trials)
    executor = _executor(plan)
    from autoembed.pipeline.session import StudyLock

    # one driver per study (pipeline.session); a bad --ray-address fails before a study exists
    with StudyLock(plan.out_dir, plan.name, on_recovered) as lock, executor:
        tracker = pending() if pending is not None else tracker
        assert tracker is not None
        lock.ray(*executor.session())
        stored.check_still_new()
        _check_new_runs(stored, plan, tracker)
        plan = executor.place(plan)
        study, recovery = _open_study(stored, plan, on_recovered)
        plan.out_dir.mkdir(parents=True, exist_ok=True)
        plan.save_space()
        tracker.start(plan.name, plan.tracker_params(), plan.space_file)
        if on_recovered is not None:  # told once every check has passed: bad input is one line
            _announce(plan, not stored.meta, executor, on_recovered)
        engine = SearchEngine(
            study, SearchSettings.of(plan), progress=progress,
            scheduler=AshaScheduler(plan.objective_pairs) if plan.multi_fidelity else None,
            recorder=Recorder([
                TrackerSink(tracker), CalibrationSink(plan.out_dir / "calibration.json")]))
        try:
            executor.run(engine, plan)
        except BaseException as exc:  # running trials failed and re-queued, as --resume does
            _stopped(exc, engine, study, stored, plan, tracker, on_recovered)
            raise
        return _finish(engine, study, plan, tracker, recovery, t_start)


def _check_new_dir(stored: studies.StoredStudy, plan: SearchPlan) -> None:
    """A new study never writes into a folder that holds another search's results (a study
    of that name in another --storage, or one whose optuna.db was removed): ConfigError,
    before anything starts, so those files are neither overwritten nor mixed with its own."""
    if stored.existing is not None:
        return
    found = [n for n in RESULT_FILES if (plan.out_dir / n).exists()]
    if found:
        raise ConfigError(
            f"--study {plan.name}: {plan.out_dir} holds another search's results "
            f"({', '.join(found)}), not of the study '{plan.name}' in {stored.where}; choose "
            "another --study or --runs-dir, or move that folder away")


def _check_new_runs(stored: studies.StoredStudy, plan: SearchPlan, tracker: Any) -> None:
    """A study never records into an MLflow experiment of its name that the user deleted
    (restoring it brings all its runs back), and a new study never into one that holds
    another search (one under another --runs-dir with the same --tracking-uri): it would
    replace that search's trial runs by number. ConfigError before the study is made."""
    from autoembed.tracking.store import masked

    where = masked(str(getattr(tracker, "uri", "the tracking store")))  # no password shown
    deleted = getattr(tracker, "deleted_experiment", None)  # a caller's tracker may lack it
    exp_id = deleted(plan.name) if callable(deleted) else None
    if exp_id is not None:
        raise ConfigError(
            f"--study {plan.name}: the MLflow store {where} holds a deleted experiment "
            f"'{plan.name}' (id {exp_id}), which keeps the name until purged; purge it "
            f"(mlflow gc --backend-store-uri <its database> --experiment-ids {exp_id}), or "
            + ("restore it to resume into it (its runs come back with it)" if stored.existing
               else "restore and rename it") + ", or choose another --study")
    holds = getattr(tracker, "holds_search", None)
    if stored.existing is None and callable(holds) and holds(plan.name):
        raise ConfigError(
            f"--study {plan.name}: the MLflow store {where} holds the runs of another search "
            f"named '{plan.name}', whose study is not in {stored.where}; choose another "
            "--study, or give the --runs-dir (or --storage) it ran in to --resume it")


def _announce(plan: SearchPlan, new: bool, executor: Any,
              say: Callable[[str], None]) -> None:
    """The lines a search says before its first trial: its start points (a `new` study's),
    its time limit, the executor's notes."""
    if plan.start and new:
        names = ", ".join(p.name for p in plan.start)
        say(f"start points: {len(plan.start)} ({names}), trained first")
    notes = getattr(executor, "notes", None)  # an Executor object may have none
    for line in (plan.time_limit.describe(), *(notes(plan) if callable(notes) else ())):
        say(line)


def _stopped(exc: BaseException, engine: SearchEngine, study: Any,
             stored: studies.StoredStudy, plan: SearchPlan, tracker: SearchTracker,
             on_recovered: Callable[[str], None] | None) -> None:
    """A search stopped by `exc`: its running trials failed and re-queued, every finished
    row recorded, the tracker's run closed; Ctrl-C raises Interrupted (the CLI's one line)."""
    engine.abandon(INTERRUPTED)
    try:
        rec = _recover(study, stored, plan)
        rows = studies.load_rows(study)
        engine.recorder.catch_up(rows.values())
        line = _stopped_line(plan, rows.values(), rec)
        if isinstance(exc, KeyboardInterrupt):
            raise Interrupted(line) from None
        if on_recovered is not None:
            on_recovered(f"stopped ({type(exc).__name__}): {line}")
    finally:
        tracker.close("KILLED" if isinstance(exc, KeyboardInterrupt) else "FAILED")


def _kept(rows: Iterable[TrialRow]) -> tuple[int, str]:
    """The finished trials a study keeps: (how many, "a complete, b failed, ...")."""
    kept = [r.status for r in rows if not r.interrupted and r.status != "running"]
    return len(kept), ", ".join(f"{kept.count(s)} {s}" for s in dict.fromkeys(kept)) or "none"


def _stopped_line(plan: SearchPlan, rows: Iterable[TrialRow], rec: studies.Recovery) -> str:
    """What a stopped search kept and how to continue it."""
    n, by = _kept(rows)
    return (f"study '{plan.name}' kept {n} trials ({by}) in {plan.out_dir}; "
            f"{rec.describe()}; continue with: autoembed search --study {plan.name} "
            f"--resume (and this command's other options)")


def _executor(plan: SearchPlan) -> Executor:
    """The request's executor: an Executor object as given, one trial at a time in this
    process ("local"), or Ray Tune (a private Ray, or the cluster at --ray-address)."""
    r = plan.request
    if r.executor is not None:
        return r.executor
    if r.executor_kind == "local":
        return InProcessExecutor()
    return RayTuneExecutor(r.ray_address, plan.cpus, plan.gpus if plan.device == "cuda"
                           else None, faults_from_env(), plan.workload.ray_options(),
                           gpu=None if r.gpu is None else visible_id(r.gpu))


def _recover(study: Any, stored: studies.StoredStudy, plan: SearchPlan) -> studies.Recovery:
    """Fail and re-queue (once) the trials a stopped driver left running."""
    return studies.recover(study, stored.storage, INTERRUPTED, plan.workload.config_of)


def _open_study(stored: studies.StoredStudy, plan: SearchPlan,
                on_recovered: Callable[[str], None] | None,
                ) -> tuple[Any, studies.Recovery | None]:
    """Create the Optuna study, or load and recover a resumed one; store the plan's
    settings on it."""
    import optuna

    n_existing = len(stored.existing.trials) if stored.existing is not None else 0
    # a resumed sampler draws fresh numbers
    smp = studies.make_sampler(plan.sampler, (plan.seed + n_existing) % (MAX_SEED + 1))
    directions = [o.direction for o in plan.objectives]
    recovery = None
    if stored.existing is None:
        from optuna.study import StudyDirection

        study = optuna.create_study(
            study_name=plan.name, storage=stored.storage, sampler=smp,
            directions=[StudyDirection.MAXIMIZE if d == "maximize"
                        else StudyDirection.MINIMIZE for d in directions])
    else:
        study = stored.resumed(smp)
        if [d.name.lower() for d in study.directions] != directions:
            raise ConfigError(f"study '{plan.name}' has other objectives; start a new --study")
        recovery = _recover(study, stored, plan)
        if on_recovered is not None:
            n, by = _kept(studies.load_rows(study).values())
            on_recovered(f"resumed study '{plan.name}': {recovery.describe()}; kept the "
                         f"{n} trials it had recorded ({by})")
    study.set_user_attr(ATTR, plan.meta())
    return study, recovery


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for pkg in ("autoembed", "torch", "optuna", "ray", "mlflow"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:  # pragma: no cover
            out[pkg] = "n/a"
    return out


def _context(plan: SearchPlan, engine: SearchEngine, recovery: studies.Recovery | None,
             wall: float) -> dict[str, Any]:
    """pareto.json's fields about the search rather than its trials."""
    return {
        "trainables_started": engine.trainables_started, "space": plan.space.source,
        "workload": plan.workload.kind,
        **plan.workload.context({"device": plan.device, "threads": plan.threads}),
        "sampler": plan.sampler, "seed": plan.seed, "early_stop": plan.early_stop,
        "repeatable": plan.repeatable, "trial_time_limit": plan.time_limit.describe(),
        "device": plan.device, "workers": plan.workers, "threads": plan.threads,
        "cpus": os.cpu_count(), "versions": _versions(),
        "recovered": recovery.describe() if recovery is not None else None,
        "wall_seconds": round(wall, 2),
        "finished_at": _dt.datetime.now().isoformat(timespec="seconds")}


def _pick_rule(rows: Iterable[TrialRow], plan: SearchPlan) -> tuple[Pick, str | None]:
    """The rule the report picks by: the request's, unless it is `trial:N` and trial N is
    not a complete trial within the budget, or a one-metric rule no front member has a
    value of (`pareto.unmeasured`): then the default rule (the files are written all the
    same) and the line that says so (None when the rule holds)."""
    asked = plan.request.pick
    if asked.rule != "trial":
        pairs = [(o.name, o.direction) for o in plan.objectives]
        line = unmeasured(front_of(rows, pairs), asked)
        return (asked, None) if line is None else (Pick(DEFAULT_PICK), f"--{line}")
    done = sorted(r.number for r in rows if r.status == "complete" and r.feasible)
    if asked.trial in done:
        return asked, None
    listed = ", ".join(map(str, done[:30])) or "none"
    return Pick(DEFAULT_PICK), (f"--pick {asked}: no complete trial within the budget has "
                                f"that number (those that are: {listed})")


def _finish(engine: SearchEngine, study: Any, plan: SearchPlan, tracker: SearchTracker,
            recovery: studies.Recovery | None, t_start: float) -> SearchResult:
    """Report: rank, write the files (pareto.json last), mark the study finished."""
    engine.recorder.flush()
    workload = plan.workload
    rule, unmet = _pick_rule(engine.rows.values(), plan)
    report = SearchReport.build(
        list(engine.rows.values()), plan.objectives, rule, plan.budget,
        plan.name, engine.stop_reason, noise=lambda c: workload.noise(c, engine.valid_scores),
        memory_basis=plan.memory_basis, floor=workload.target)
    meta = plan.meta()
    wall = time.monotonic() - t_start
    files = report.write(plan.out_dir, _context(plan, engine, recovery, wall),
                         workload.save_vocab(), meta, workload.best_record)
    failure = report.failure(files["trials.csv"])
    if failure is not None or report.best is None:
        tracker.close("FAILED")
        raise failure or AssertionError("a report without a best has a failure")
    meta["finished"] = True
    study.set_user_attr(ATTR, meta)
    tracker.finish([r.number for r in report.front],
                   [p for k, p in files.items() if k != "vocab"])
    tracker.close("FINISHED")
    if unmet is not None:  # bad input, said once everything the search computed is kept
        raise ConfigError(f"{unmet}; the files in {plan.out_dir} hold the {rule} pick "
                          f"(trial {report.best.number}); `autoembed export --study "
                          f"{plan.name} --pick trial:N --out best.yaml` exports another")
    return SearchResult(
        study=plan.name, out_dir=plan.out_dir, budget_bytes=plan.budget.bytes,
        objectives=plan.objectives, rows=report.rows, front=report.front, best=report.best,
        pick=str(rule), picks=report.picks, files=files,
        recovered=recovery.describe() if recovery is not None else None,
        stop_reason=engine.stop_reason, wall_seconds=wall,
        trainables_started=engine.trainables_started, workers=plan.workers,
        device=plan.device, workload=workload.kind,
        searched={r.number: workload.searched(r) for r in report.front},
        extra={"baseline": getattr(workload, "baseline", None), "noise": report.noise,
               "memory_basis": report.memory_basis})
