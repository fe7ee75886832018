"""`search(budget=..., space=...)`: the whole search, as the CLI's `autoembed search` runs it.

Order of work (so bad input costs nothing and leaves nothing behind): validate every
argument, load the space and the data, price the cheapest corner of the space (exit 3 when
even it does not fit), then create or resume the Optuna study, start Ray, run trials, and
write the outputs (pareto.json last).
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autoembed.budget import Budget, format_bytes
from autoembed.errors import AutoembedError, ConfigError
from autoembed.pareto import PICK_RULES, Pick, parse_pick, pick
from autoembed.search.engine import SearchEngine, SearchStatus
from autoembed.search.faults import faults_from_env
from autoembed.search.records import ATTR, TrialRow
from autoembed.search.study import (
    SAMPLERS,
    Recovery,
    check_study_name,
    find_study,
    load_rows,
    make_sampler,
    open_storage,
    recover,
    storage_label,
    study_meta,
)
from autoembed.search.workload import Workload, build_workload, data_spec_for
from autoembed.space import (
    BUILTIN_SPACES,
    OBJECTIVES,
    Objective,
    SearchSpace,
    builtin_space_path,
    cheapest_config,
    check_objective,
    load_space,
    parse_objectives,
    parse_space,
)

if TYPE_CHECKING:
    from autoembed.tracking import SearchTracker

__all__ = ["search", "SearchResult", "NothingFitsError", "SearchFailedError", "DEVICES",
           "DEFAULT_SPACE", "DEFAULT_EARLY_STOP", "trial_threads"]

DEVICES = ("auto", "cpu", "cuda")
DEFAULT_SPACE = "default"
INTERRUPTED = "interrupted: the driver stopped while this trial ran"
# Early stopping on by default: in benchmarks/results/search_efficiency.md (tpe, 3 seeds, 12
# trials) the front's hypervolume was 0.0802 with it and 0.0775 without, for 16% fewer trained
# steps: 17% more hypervolume per wall-clock minute.
DEFAULT_EARLY_STOP = True
MAX_SEED = 2**32 - 1  # Optuna's samplers seed numpy's RandomState, which takes 0..2**32 - 1


def trial_threads(cpus_per_trial: int, device: str) -> int:
    """Torch threads per trial: on a CPU, one core fewer than the trial's share, so that the
    driver, Ray and the trial's own data generation never make torch's OpenMP threads wait
    for a core. Measured on this 2-core machine (default.yaml trial, 200 steps): idle, 2
    threads train in 0.70 s and 1 thread in 0.83 s; next to two busy processes, 2 threads
    take 4.36 s and 1 thread 1.21 s."""
    return cpus_per_trial if device != "cpu" else max(1, cpus_per_trial - 1)


class NothingFitsError(AutoembedError):
    """Not even the cheapest config of the space fits the budget (exit status 3)."""

    exit_code = 3


class SearchFailedError(AutoembedError):
    """The search ran but no trial completed (exit status 1)."""

    exit_code = 1


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
    extra: Mapping[str, Any] = field(default_factory=dict)

    def count(self, status: str) -> int:
        return sum(1 for r in self.rows if r.status == status)


# ===================================================================== argument checks


def _positive(name: str, value: float | None, integer: bool = True) -> None:
    if value is None:
        return
    bad = isinstance(value, bool) or (integer and not isinstance(value, int)) or not value > 0
    if bad:
        raise ConfigError(f"{name} {value!r}: must be {'an integer ' if integer else ''}> 0")


def _host_budget(value: str | int | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        if value <= 0:
            raise ConfigError(f"--host-budget {value}: must be > 0 bytes")
        return value
    from autoembed.budget import parse_size

    return parse_size(str(value), "--host-budget")


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


def _space(space: str | Path | SearchSpace | None, stored: Mapping[str, Any]) -> SearchSpace:
    import yaml

    if isinstance(space, SearchSpace):
        return space
    if space is None and stored.get("space_text"):
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


def _default_study() -> str:
    return "search-" + _dt.datetime.now().strftime("%Y%m%d-%H%M%S")


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for pkg in ("autoembed", "torch", "optuna", "ray", "mlflow"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:  # pragma: no cover
            out[pkg] = "n/a"
    return out


def _describe_config(values: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items())


def _nothing_fits(space: SearchSpace, budget: Budget, values: Mapping[str, Any],
                  est: Any) -> NothingFitsError:
    cats = {"parameters": est.parameters, "gradients": est.gradients,
            "optimizer state": est.optimizer_state, "activations": est.activations,
            "temporaries": est.temporaries, "overhead": est.overhead}
    top = sorted(cats.items(), key=lambda kv: -kv[1])[:2]
    where = ", ".join(f"{k} {format_bytes(v)}" for k, v in top)
    return NothingFitsError(
        f"nothing in the search space '{space.source}' fits the budget {budget.text} = "
        f"{format_bytes(budget.bytes)}: its cheapest config ({_describe_config(values)}) "
        f"needs device_total {format_bytes(est.device_total)} (largest: {where}); raise "
        f"--budget to at least {format_bytes(est.device_total)}, or widen the space towards "
        "cheaper configs (smaller dim, hash/qr compression with fewer rows, lower precision, "
        "a row-wise or SGD table optimizer, smaller batch_size)"
    )


# ===================================================================== search


def search(
    budget: str | int,
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
    tracker: SearchTracker | None = None,
    pick_rule: str = "knee",
    data: str | None = None,
    label: str | None = None,
    categorical: Sequence[str] | None = None,
    text_column: str | None = None,
    early_stop: bool | None = None,
    progress: Callable[[SearchStatus], None] | None = None,
    on_recovered: Callable[[str], None] | None = None,
    host_budget: str | int | None = None,
) -> SearchResult:
    """Search `space` for configs that fit `budget` ("8GB", "7.5GiB", or bytes) and are
    Pareto-best on its objectives; write `<runs_dir>/<study>/` and return the result.

    trials: trained trials (proposals over budget are free and not counted; default: the
    space's `trials`); time_budget: seconds after which no new trial starts; objectives:
    names (default: the space's); sampler: tpe (default), nsga2, random or grid; seed:
    sampler seed (default 0); workers: trials at once (default 1 on CPU, one per GPU);
    resume: continue `study` after Ctrl-C or a crash (trials left running are failed and
    re-queued once); pick_rule: knee, max-quality, min-memory, max-throughput or trial:N;
    data/label/categorical/text_column: train on other data; early_stop: stop trials that
    cannot reach the front (default on: DEFAULT_EARLY_STOP); host_budget: host memory for
    host_cached tables ("64GB" or bytes; proposals whose host_bytes exceed it are infeasible).
    storage: the Optuna storage URL (default `<runs_dir>/optuna.db`; e.g.
    postgresql://user:pw@host/optuna for a team); trial_resources: Ray custom resources
    each trial asks for, "name=amount[,name=amount]"; several alternate, trial by trial
    (README, "Running on a cluster").
    """
    t_start = time.monotonic()
    runs = Path(runs_dir).expanduser().resolve()
    name = study if study is not None else _default_study()
    check_study_name(name)
    if resume and study is None:
        raise ConfigError("--resume needs --study NAME (the study to continue)")
    rule = parse_pick(pick_rule)
    if sampler is not None and sampler not in SAMPLERS:
        raise ConfigError(f"sampler '{sampler}' is not known; use one of {', '.join(SAMPLERS)}")
    _positive("--trials", trials)
    _positive("--workers", workers)
    _positive("--time-budget", time_budget, integer=False)
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)
                             or not 0 <= seed <= MAX_SEED):
        raise ConfigError(f"--seed {seed!r}: must be an integer in 0..{MAX_SEED} (2**32 - 1)")
    dev = _device(device)
    host_bud = _host_budget(host_budget)
    bud = Budget(int(budget), str(budget)) if isinstance(budget, int) else Budget.parse(budget)
    if isinstance(budget, int) and budget <= 0:
        raise ConfigError(f"budget {budget}: must be > 0 bytes")
    if isinstance(objectives, str):
        objectives = [s for s in (x.strip() for x in objectives.split(",")) if s]
        if not objectives:
            raise ConfigError("--objectives '': name at least one of " + ", ".join(OBJECTIVES))
    for o in objectives or ():
        check_objective(o, "--objectives: ")

    from autoembed.search.ray_tune import parse_trial_resources

    custom = parse_trial_resources(trial_resources or ())
    where = storage_label(runs, storage)
    study_store = open_storage(runs, storage)
    existing = find_study(study_store, name)
    stored: dict[str, Any] = study_meta(existing) if existing is not None else {}
    if existing is not None and not resume:
        state = "finished" if stored.get("finished") else "unfinished"
        raise ConfigError(
            f"study '{name}' already exists in {where} ({state}, "
            f"{len(existing.trials)} trials); pass --resume to continue it, or choose another "
            "--study name"
        )
    if resume and existing is None:
        known = sorted(s.study_name for s in study_store.get_all_studies())
        raise ConfigError(
            f"--resume: there is no study '{name}' in {where}"
            + (f" (studies there: {', '.join(known)})" if known else "")
        )

    # ---- the problem: space, objectives, data (refused if a resume would change it)
    sp = _space(space, stored)
    objs = parse_objectives(list(objectives), "--objectives") if objectives else sp.objectives
    spec, stand_in = data_spec_for(sp, data, label,
                                   tuple(categorical) if categorical is not None else None,
                                   text_column)
    if spec.is_file:
        from dataclasses import replace as _replace

        spec = _replace(spec, name=str(Path(spec.name).expanduser().resolve()))
    if stored:
        _check_same(stored, "budget_bytes", bud.bytes, f"--budget {bud.text}")
        _check_same(stored, "objectives", [o.name for o in objs], "--objectives")
        _check_same(stored, "data", spec.to_dict(), "--data")
        if space is not None:
            _check_same(stored, "space_text", sp.text, f"--space {space}")
    sampler = sampler or stored.get("sampler") or "tpe"
    seed = seed if seed is not None else int(stored.get("seed", 0))
    n_trials = trials or int(stored.get("trials", 0)) or sp.trials
    stop_early = early_stop if early_stop is not None else bool(
        stored.get("early_stop", DEFAULT_EARLY_STOP))

    workload = build_workload(spec, stand_in, sp.tables)
    directions = [o.direction for o in objs]
    obj_pairs = [(o.name, o.direction) for o in objs]

    # ---- does anything fit? the cheapest corner, priced
    from autoembed.memory import estimate

    def price(cfg: Any) -> int:
        return int(estimate(workload.priced(cfg)).device_total)

    values, cheap_cfg, cheap_cost = cheapest_config(sp, price)
    if cheap_cost > bud.bytes:
        raise _nothing_fits(sp, bud, values, estimate(workload.priced(cheap_cfg)))

    gpus = 0
    if dev == "cuda":
        import torch

        gpus = torch.cuda.device_count()
    n_workers = workers or int(stored.get("workers", 0)) or (max(1, gpus) if dev == "cuda" else 1)
    cpus = os.cpu_count() or 1
    cpus_per_trial = max(1, cpus // n_workers)
    if tracker is None:  # an unreachable tracking server fails here, before anything is made
        from autoembed.tracking import make_tracker

        tracker = make_tracker(tracking_uri, runs)
    from autoembed.search.ray_tune import TuneSettings, ray_session, run_tune
    from autoembed.search.session import StudyLock

    faults = faults_from_env()
    # One driver per study (runs/<study>/session.lock; a dead driver's lock and Ray leftovers
    # are taken over, see search.session); then Ray: a bad --ray-address fails before a
    # study exists
    with StudyLock(runs / name, name, on_recovered) as lock, \
            ray_session(ray_address, cpus, gpus if dev == "cuda" else None) as ray_s:
        lock.ray(*ray_s.local_session())
        if existing is None and find_study(study_store, name) is not None:
            raise ConfigError(f"study '{name}' was just created by another search; pass "
                              "--resume to continue it, or choose another --study name")
        if ray_address:  # a trial's share of a cluster node, not of this machine
            cpus_per_trial = ray_s.cpus_per_trial(n_workers, custom)
        ray_s.check_resources(custom)
        ray_s.check_nodes(spec.kind)
        # ---- the study
        import optuna

        n_existing = len(existing.trials) if existing is not None else 0
        # a resumed sampler draws fresh numbers
        smp = make_sampler(sampler, (seed + n_existing) % (MAX_SEED + 1))
        recovery: Recovery | None = None
        if existing is None:
            from optuna.study import StudyDirection

            st = optuna.create_study(
                study_name=name, storage=study_store, sampler=smp,
                directions=[StudyDirection.MAXIMIZE if d == "maximize"
                            else StudyDirection.MINIMIZE for d in directions])
        else:
            st = optuna.load_study(study_name=name, storage=study_store, sampler=smp)
            if [d.name.lower() for d in st.directions] != directions:
                raise ConfigError(f"study '{name}' has other objectives; start a new --study")
            recovery = recover(st, study_store, INTERRUPTED, lambda params: workload.priced(
                sp.config_for(sp.values_from_optuna(params))))
            if on_recovered is not None:
                kept = [r.status for r in load_rows(st).values() if not r.interrupted]
                by = ", ".join(f"{kept.count(x)} {x}" for x in sorted(set(kept), key=kept.index))
                on_recovered(f"resumed study '{name}': {recovery.describe()}; kept the "
                             f"{len(kept)} trials it had recorded ({by or 'none'})")
        run_settings = {**dict(sp.run), "device": dev,
                        "threads": trial_threads(cpus_per_trial, dev)}
        run_settings.setdefault("measure_latency", "latency" in {o.name for o in objs})
        if sp.target is not None:
            run_settings["target"] = sp.target
        meta = {
            "budget_bytes": bud.bytes, "budget": bud.text, "space_source": sp.source,
            "space_text": sp.text, "objectives": [o.name for o in objs], "sampler": sampler,
            "seed": seed, "data": spec.to_dict(), "train_data": workload.train_spec.to_dict(),
            "trials": n_trials, "early_stop": stop_early, "workers": n_workers, "device": dev,
            "threads": run_settings["threads"], "finished": False,
            "created": stored.get("created") or _dt.datetime.now().isoformat(timespec="seconds"),
        }
        st.set_user_attr(ATTR, meta)
        grid = None
        if sampler == "grid":
            grid = sp.grid()
            random.Random(seed).shuffle(grid)
        out_dir = runs / name
        out_dir.mkdir(parents=True, exist_ok=True)
        tracker.start(name, {
            "budget": bud.text, "budget_bytes": str(bud.bytes), "space": sp.source,
            "sampler": sampler, "seed": str(seed), "data": spec.name,
            "objectives": ",".join(o.name for o in objs), "trials": str(n_trials),
            "workers": str(n_workers), "early_stop": str(stop_early), "device": dev,
        }, Path(sp.source) if Path(sp.source).is_file() else None)
        engine = SearchEngine(
            study=st, space=sp, workload=workload, budget_bytes=bud.bytes, objectives=obj_pairs,
            settings=run_settings, trials=n_trials, time_budget_s=time_budget, grid=grid,
            early_stop=stop_early, use_measured=(dev == "cuda" and not workload.stand_in),
            host_memory=(dev == "cpu"), host_budget_bytes=host_bud, tracker=tracker,
            progress=progress, calibration_path=out_dir / "calibration.json",
        )
        for n in recovery.failed if recovery is not None else ():
            if n in engine.rows:  # the interrupted trials' rows reach MLflow too
                tracker.trial(engine.rows[n])
        tune_settings = TuneSettings(
            workers=n_workers, cpus_per_trial=cpus_per_trial,
            gpus_per_trial=1 if dev == "cuda" else 0, storage_path=out_dir / "ray",
            name="tune-" + _dt.datetime.now().strftime("%Y%m%d-%H%M%S"),
            train_data=workload.train_spec.to_dict(), run_settings=run_settings,
            trial_resources=custom, faults=faults,
        )
        try:
            run_tune(engine, tune_settings)
        except BaseException as exc:
            # Ctrl-C or a failure: trials still running are failed and re-queued once,
            # exactly as `--resume` does after a hard kill.
            engine.abandon(INTERRUPTED)
            try:
                rec = recover(st, study_store, INTERRUPTED, lambda params: workload.priced(
                    sp.config_for(sp.values_from_optuna(params))))
                rows = load_rows(st)
                for n in rec.failed:
                    if n in rows:
                        tracker.trial(rows[n])
                if on_recovered is not None:
                    on_recovered(f"stopped ({type(exc).__name__}): {rec.describe()}; "
                                 f"continue with --study {name} --resume")
            finally:
                tracker.close("KILLED" if isinstance(exc, KeyboardInterrupt) else "FAILED")
            raise
        return _finish(engine, st, sp, bud, objs, obj_pairs, rule, name, out_dir, workload,
                       tracker, meta, recovery, n_workers, dev, t_start)


def _check_same(stored: Mapping[str, Any], key: str, now: Any, flag: str) -> None:
    if key in stored and stored[key] != now:
        raise ConfigError(
            f"{flag} differs from what study was started with ({key} = {stored[key]!r}); a "
            "resumed search keeps its budget, space, objectives and data: drop the option or "
            "start a new --study"
        )


def _finish(
    engine: SearchEngine, st: Any, sp: SearchSpace, bud: Budget, objs: Sequence[Objective],
    obj_pairs: Sequence[tuple[str, str]], rule: Pick, name: str, out_dir: Path,
    workload: Workload, tracker: SearchTracker, meta: dict[str, Any],
    recovery: Recovery | None, n_workers: int, dev: str, t_start: float,
) -> SearchResult:
    from autoembed.search.outputs import (
        member_dict,
        write_best_yaml,
        write_pareto_json,
        write_pareto_png,
        write_trials_csv,
    )

    rows = sorted((r for r in engine.rows.values() if r.status != "running"),
                  key=lambda r: r.number)
    front = engine.front()
    files: dict[str, Path] = {}
    files["trials.csv"] = write_trials_csv(rows, out_dir / "trials.csv", [r.number for r in front])
    if not front:
        tracker.close("FAILED")
        if engine.count("complete") == 0 and engine.count("infeasible") > 0 and not any(
                r.counted for r in rows):
            raise NothingFitsError(
                f"no proposal fit the budget {bud.text} = {format_bytes(bud.bytes)} "
                f"({engine.count('infeasible')} over budget; {engine.stop_reason}); narrow "
                f"the space towards cheaper configs. Trials: {files['trials.csv']}"
            )
        reasons = sorted({(r.reason or r.status) for r in rows if r.counted})[:3]
        raise SearchFailedError(
            f"no trial completed within the budget ({engine.stop_reason}); "
            f"e.g. {' | '.join(reasons) or 'none ran'}. Trials: {files['trials.csv']}"
        )
    candidates: Sequence[TrialRow] = front
    if rule.rule == "trial" and all(r.number != rule.trial for r in front):
        candidates = engine.feasible_rows()
    best = pick(candidates, rule, obj_pairs)
    assert isinstance(best, TrialRow)
    picks: dict[str, int] = {}
    for r in PICK_RULES:
        if r == "trial:N":
            continue
        try:
            picks[r] = pick(front, r, obj_pairs).number
        except ConfigError:
            pass
    title = (f"study {name}: {len(front)} on the front of {engine.count('complete')} complete, "
             f"{engine.count('infeasible')} over budget {bud.text}")
    try:
        files["pareto.png"] = write_pareto_png(rows, front, best, obj_pairs,
                                               out_dir / "pareto.png", title, bud.bytes)
    except Exception as e:  # noqa: BLE001 - a missing plot must not lose the search
        meta["plot_error"] = f"{type(e).__name__}: {e}"
    search_info = {
        "study": name, "trial": best.number, "pick": str(rule), "budget": bud.text,
        "budget_bytes": bud.bytes, "metrics": dict(best.metrics),
        "trained_on": workload.train_spec.to_dict(),
    }
    files["best.yaml"] = write_best_yaml(best, out_dir / "best.yaml", {"search": search_info})
    if workload.spec.is_file or workload.spec.kind in ("movielens", "flights", "bbcnews"):
        try:
            files["vocab"] = Path(workload.dataset.save_vocab(out_dir / "vocab"))
        except Exception as e:  # noqa: BLE001 - export can still work from the data spec
            meta["vocab_error"] = f"{type(e).__name__}: {e}"
    wall = time.monotonic() - t_start
    body = {
        "study": name,
        "budget": bud.text,
        "budget_bytes": bud.bytes,
        "objectives": [o.to_dict() for o in objs],
        "members": [member_dict(r) for r in front],
        "best": best.number,
        "pick": str(rule),
        "picks": picks,
        "counts": {s: engine.count(s) for s in ("complete", "infeasible", "pruned", "failed",
                                                 "oom", "diverged", "unsupported")},
        "trainables_started": engine.trainables_started,
        "stop_reason": engine.stop_reason,
        "space": sp.source,
        "data": workload.spec.to_dict(),
        "trained_on": workload.train_spec.to_dict(),
        "stand_in": workload.stand_in,
        "sampler": meta["sampler"],
        "seed": meta["seed"],
        "early_stop": meta["early_stop"],
        "device": dev,
        "workers": n_workers,
        "concurrency": max((r.concurrency for r in rows), default=0),
        "threads": meta.get("threads"),
        "cpus": os.cpu_count(),
        "versions": _versions(),
        "recovered": recovery.describe() if recovery is not None else None,
        "wall_seconds": round(wall, 2),
        "finished_at": _dt.datetime.now().isoformat(timespec="seconds"),
    }
    if (out_dir / "calibration.json").exists():
        files["calibration.json"] = out_dir / "calibration.json"
    files["pareto.json"] = write_pareto_json(body, out_dir / "pareto.json")
    meta["finished"] = True
    st.set_user_attr(ATTR, meta)
    tracker.finish([r.number for r in front], [p for k, p in files.items() if k != "vocab"])
    tracker.close("FINISHED")
    return SearchResult(
        study=name, out_dir=out_dir, budget_bytes=bud.bytes, objectives=tuple(objs),
        rows=tuple(rows), front=tuple(front), best=best, pick=str(rule), picks=picks,
        files=files, recovered=recovery.describe() if recovery is not None else None,
        stop_reason=engine.stop_reason, wall_seconds=wall,
        trainables_started=engine.trainables_started, workers=n_workers, device=dev,
    )
