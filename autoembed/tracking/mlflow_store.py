"""`SearchTracker` on MLflow: the runs it writes (an experiment per study, a parent run per
search, a nested run per trial, the infeasible proposals under one grouping run) and how
failures turn tracking off (`MAX_FAILURES` in a row, or a failed `start`) without stopping
the search: docs/mlflow.md. Imported only by `make_tracker` and export (importing MLflow
costs seconds).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from mlflow import MlflowClient
from mlflow.entities import Metric, Param, Run, RunTag, ViewType
from mlflow.tracking.registry import UnsupportedModelRegistryStoreURIException

from autoembed.errors import ConfigError
from autoembed.tracking.run_data import MAX_PARAM_CHARS, MAX_TAG_CHARS, trial_payload
from autoembed.tracking.store import TrackingError, TrackingStore, check_reachable, masked

__all__ = ["MAX_FAILURES", "ROLE_TAG", "MlflowTracker", "open_client", "experiment_for",
           "trial_runs"]

log = logging.getLogger("autoembed.tracking")

MAX_FAILURES = 3
ROLE_TAG = "autoembed.role"  # search | trial | infeasible-group
STUDY_TAG = "autoembed.study"
PARENT_TAG = "mlflow.parentRunId"
RUN_STATUSES = ("FINISHED", "FAILED", "KILLED")
# MLflow 3's UI opens an experiment of this kind on its runs table ("Model training"),
# not on the GenAI traces overview.
KIND_TAG, KIND = "mlflow.experimentKind", "custom_model_development"
# A dead server must cost seconds, not MLflow's default ~4 minutes of retries per call; and
# the driver's console is not MLflow's to print on. setdefault: the user's values win.
_ENV_DEFAULTS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "10", "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true",
    "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"}
# mlflow.utils.validation: per log_batch at most 100 params (and 100 tags), 1000 in all
_BATCH_PARAMS_TAGS = 100
_BATCH_ENTITIES = 1000  # metrics, params and tags together


def _now_ms() -> int:
    return int(time.time() * 1000)


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:300] if text else ''}"


def open_client(store: TrackingStore) -> MlflowClient:
    """A client for `store` with its schema initialised here, by this one process, before
    anything else logs (SQLite migrations race otherwise). Probes an http(s) server first."""
    for k, v in _ENV_DEFAULTS.items():
        os.environ.setdefault(k, v)
    if store.kind == "http":
        check_reachable(store.uri)
    if store.db_path is not None:
        store.db_path.parent.mkdir(parents=True, exist_ok=True)
    quiet = [logging.getLogger(n) for n in ("mlflow.store.db.utils", "alembic")]
    levels = [q.level for q in quiet]
    for q in quiet:
        q.setLevel(logging.WARNING)  # "Creating initial MLflow database tables..." is noise here
    guard = None
    try:
        if store.db_path is not None:
            # two searches starting at once on one runs dir: one creates the schema, the
            # other waits (an flock on a side file; the kernel drops it if we are killed)
            import fcntl

            guard = (store.db_path.parent / (store.db_path.name + ".init-lock")).open("a")
            fcntl.flock(guard.fileno(), fcntl.LOCK_EX)
        client = _open_schema(store)
    except UnsupportedModelRegistryStoreURIException:  # bad input, not a store fault
        raise ConfigError(
            f"--tracking-uri '{masked(store.uri)}': MLflow has no store of that scheme; use "
            "sqlite:///PATH, http(s)://HOST:PORT, postgresql://..., or 'none'") from None
    except Exception as e:  # noqa: BLE001 - any store fault is one clear line
        raise TrackingError(
            f"MLflow store '{masked(store.uri)}' cannot be opened: {_one_line(e)}") from e
    finally:
        if guard is not None:
            guard.close()
        for q, level in zip(quiet, levels, strict=True):
            q.setLevel(level)
    return client


def _open_schema(store: TrackingStore) -> MlflowClient:
    """A client whose store's schema exists: a new SQLite file starts as a copy of
    `schema_template()` (seconds of migrations saved), or becomes that template."""
    db = store.db_path
    new = db is not None and (not db.exists() or db.stat().st_size == 0)
    template = schema_template()
    copied = new and db is not None and _copy_template(template, db)
    client = MlflowClient(tracking_uri=store.uri)
    client.search_experiments(max_results=1)  # creates / migrates the schema now
    if new and not copied and db is not None:
        _save_template(db, template)
    return client


def schema_template() -> Path:
    """An empty SQLite store of this MLflow and SQLAlchemy (its schema, no experiment), in
    the user's cache (XDG_CACHE_HOME, else ~/.cache)."""
    import mlflow
    import sqlalchemy

    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return (cache / "autoembed" /
            f"mlflow-{mlflow.__version__}-sqlalchemy-{sqlalchemy.__version__}-schema.db")


def _copy_template(template: Path, db: Path) -> bool:
    """Start `db` as a copy of `template`; False when there is none, or it is no MLflow
    store (then it is dropped, and made again from the new store)."""
    import shutil
    import sqlite3

    if not template.is_file():
        return False
    try:
        with contextlib.closing(sqlite3.connect(f"{template.as_uri()}?mode=ro", uri=True)) as c:
            c.execute("SELECT version_num FROM alembic_version").fetchall()
    except sqlite3.Error as e:
        log.warning("MLflow schema template %s did not open (%s); making the schema anew",
                    template, e)
        template.unlink(missing_ok=True)
        return False
    try:
        shutil.copyfile(template, db)
    except OSError:
        db.unlink(missing_ok=True)
        return False
    return True


def _save_template(db: Path, template: Path) -> None:
    """Keep a copy of the new store `db` without its experiments as `template` (nothing when
    the cache is not writable)."""
    import sqlite3

    try:
        template.parent.mkdir(parents=True, exist_ok=True)
        tmp = template.with_name(f"{template.name}.{os.getpid()}.tmp")
        with contextlib.closing(sqlite3.connect(db)) as src, \
                contextlib.closing(sqlite3.connect(tmp)) as out:
            src.backup(out)
            out.execute("DELETE FROM experiment_tags")
            out.execute("DELETE FROM experiments")
            out.commit()
        os.replace(tmp, template)  # readers see the old file or the whole new one
    except (OSError, sqlite3.Error) as e:
        log.debug("MLflow schema template not saved: %s", e)


def experiment_for(client: MlflowClient, study: str, store: TrackingStore) -> str:
    """The id of the study's active experiment, created if needed. One the user deleted is
    never restored (MLflow would make all its runs active again, among them the runs a
    resumed search replaced): TrackingError (the driver refuses such a study before)."""
    exp = client.get_experiment_by_name(study)
    if exp is not None:
        if exp.lifecycle_stage != "active":
            raise TrackingError(f"experiment '{study}' (id {exp.experiment_id}) is deleted")
        if KIND_TAG not in exp.tags:
            client.set_experiment_tag(exp.experiment_id, KIND_TAG, KIND)
        return str(exp.experiment_id)
    location = (store.artifact_root / study).as_uri() if store.artifact_root else None
    try:
        tags = {STUDY_TAG: study, KIND_TAG: KIND}
        return str(client.create_experiment(study, location, tags=tags))
    except Exception:
        exp = client.get_experiment_by_name(study)  # another writer created it meanwhile
        if exp is None:
            raise
        return str(exp.experiment_id)


def _search(client: MlflowClient, experiment_id: str, filter_string: str) -> Iterable[Run]:
    token: str | None = None
    while True:
        page = client.search_runs([experiment_id], filter_string, ViewType.ACTIVE_ONLY,
                                  max_results=1000, page_token=token)
        yield from page
        token = page.token
        if not token:
            return


def trial_runs(client: MlflowClient, experiment_id: str) -> dict[int, Run]:
    """Active trial runs of an experiment by Optuna trial number (the newest if several)."""
    found: dict[int, Run] = {}
    for run in _search(client, experiment_id, f"tags.`{ROLE_TAG}` = 'trial'"):
        n = run.data.tags.get("trial", "")
        if n.isdigit():
            old = found.get(int(n))
            if old is None or run.info.start_time > old.info.start_time:
                found[int(n)] = run
    return found


class MlflowTracker:
    """Records a search in MLflow (see the module docstring for the layout)."""

    def __init__(self, client: MlflowClient, store: TrackingStore, runs_dir: Path) -> None:
        self._client = client
        self._store = store
        self._runs_dir = Path(runs_dir).absolute()
        self._study = ""
        self._experiment_id: str | None = None
        self._parent_id: str | None = None
        self._group_id: str | None = None
        self._trials: dict[int, str] = {}  # trial number -> run id
        self._infeasible = 0
        self._failures = 0
        self._disabled = False
        self._closed = False
        self._lock = threading.Lock()

    @classmethod
    def open(cls, store: TrackingStore, runs_dir: Path) -> MlflowTracker:
        return cls(open_client(store), store, runs_dir)

    @property
    def uri(self) -> str:
        return self._store.uri

    @property
    def experiment_id(self) -> str | None:
        return self._experiment_id

    @property
    def parent_run_id(self) -> str | None:
        return self._parent_id

    @property
    def enabled(self) -> bool:
        return not self._disabled

    def start(self, study: str, params: Mapping[str, str], space_file: Path | None) -> None:
        self._safely("start", lambda: self._start(study, params, space_file), fatal=True)

    def trial(self, record: Any) -> None:
        self.trials([record])

    def trials(self, records: Sequence[Any]) -> None:
        """Record several trials; the infeasible count is logged once for them all."""
        before = self._infeasible
        for record in records:
            self._safely(f"trial {record.number}", functools.partial(self._trial, record))
        if self._infeasible != before:
            self._safely("the infeasible count", self._log_infeasible_count)

    def holds_search(self, study: str) -> bool:
        """Whether the store's experiment `study` (an active one) holds a search's runs: a
        new study of that name would mix its runs with them (False when unknown)."""
        try:
            exp = self._client.get_experiment_by_name(study)
            if exp is None or exp.lifecycle_stage != "active":
                return False
            return any(True for _ in _search(self._client, str(exp.experiment_id),
                                             f"tags.`{ROLE_TAG}` = 'search'"))
        except Exception:  # noqa: BLE001 - a tracker never raises; start() says it is off
            return False

    def deleted_experiment(self, study: str) -> str | None:
        """The id of a deleted experiment named `study` (in MLflow's bin: it holds the name
        until purged), else None (also when unknown)."""
        try:
            exp = self._client.get_experiment_by_name(study)
        except Exception:  # noqa: BLE001 - a tracker never raises; start() says it is off
            return None
        return None if exp is None or exp.lifecycle_stage == "active" else str(exp.experiment_id)

    def recorded(self) -> set[int] | None:
        """Trial numbers this study's experiment holds a run for (after `start`); None when
        tracking is off."""
        return None if self._disabled else set(self._trials)

    def finish(self, pareto_trials: Sequence[int], artifacts: Sequence[Path]) -> None:
        self._safely("the Pareto tags", lambda: self._tag_pareto(pareto_trials))
        self._safely("the search's files", lambda: self._attach(artifacts))

    def close(self, status: str) -> None:
        if self._closed:
            return
        self._closed = True
        self._safely("the end of the search", lambda: self._close(status))

    def _safely(self, what: str, call: Callable[[], None], *, fatal: bool = False) -> None:
        with self._lock:  # the driver may report from more than one thread
            if self._disabled:
                return
            self._attempt(what, call, fatal)

    def _attempt(self, what: str, call: Callable[[], None], fatal: bool) -> None:
        try:
            call()
            self._failures = 0
        except Exception as e:  # noqa: BLE001 - tracking must never stop a search
            self._failures += 1
            if fatal or self._failures >= MAX_FAILURES:
                self._disabled = True
                log.warning("MLflow tracking (%s) failed recording %s: %s; tracking is off for "
                            "the rest of this search (its files under %s are complete)",
                            self._store.uri, what, _one_line(e),
                            self._runs_dir / (self._study or "<study>"))
            else:
                log.warning("MLflow tracking (%s) failed recording %s: %s; the search goes on",
                            self._store.uri, what, _one_line(e))

    def _log(self, run_id: str, params: Mapping[str, str] = {},  # noqa: B006 - read only
             tags: Mapping[str, str] = {}, metrics: Sequence[Metric] = ()) -> None:  # noqa: B006
        """log_batch in as few requests as MLflow's limits allow (one for a usual trial)."""
        entries: list[Param | RunTag] = [Param(k, str(v)[:MAX_PARAM_CHARS])
                                         for k, v in params.items()]
        entries += [RunTag(k, str(v)[:MAX_TAG_CHARS]) for k, v in tags.items()]
        rest = list(metrics)
        while True:
            head, entries = entries[:_BATCH_PARAMS_TAGS], entries[_BATCH_PARAMS_TAGS:]
            room = _BATCH_ENTITIES - len(head)
            part, rest = rest[:room], rest[room:]
            self._client.log_batch(run_id, params=[p for p in head if isinstance(p, Param)],
                                   tags=[t for t in head if isinstance(t, RunTag)], metrics=part)
            if not entries and not rest:
                return

    def _start(self, study: str, params: Mapping[str, str], space_file: Path | None) -> None:
        self._study = study
        exp = experiment_for(self._client, study, self._store)
        self._experiment_id = exp
        self._trials = {n: r.info.run_id for n, r in trial_runs(self._client, exp).items()}
        parent = self._unfinished_parent(exp)
        if parent is not None:  # a resumed search goes on in its parent run
            self._parent_id = parent.info.run_id
            self._client.update_run(self._parent_id, status="RUNNING")
            old = parent.data.params
            changed = {f"resumed.{k}": str(v) for k, v in params.items() if k in old
                       and old[k] != str(v)[:MAX_PARAM_CHARS]}
            self._log(self._parent_id, {k: v for k, v in params.items() if k not in old}, changed)
            self._group_id = self._find_group(exp, self._parent_id)
            if self._group_id is not None:
                count = self._client.get_run(self._group_id).data.metrics
                self._infeasible = int(count.get("infeasible_proposals", 0))
        else:
            run = self._client.create_run(exp, tags={ROLE_TAG: "search", STUDY_TAG: study},
                                          run_name=f"search-{study}")
            self._parent_id = run.info.run_id
            self._log(self._parent_id, params)
        if space_file is not None and Path(space_file).is_file():
            self._client.log_artifact(self._parent_id, str(space_file))

    def _unfinished_parent(self, exp: str) -> Run | None:
        for run in _search(self._client, exp, f"tags.`{ROLE_TAG}` = 'search'"):
            if run.info.status != "FINISHED":
                return run  # newest first
            return None
        return None

    def _find_group(self, exp: str, parent: str) -> str | None:
        flt = f"tags.`{ROLE_TAG}` = 'infeasible-group' and tags.`{PARENT_TAG}` = '{parent}'"
        for run in _search(self._client, exp, flt):
            return str(run.info.run_id)
        return None

    def _infeasible_group(self) -> str:
        if self._group_id is None:
            assert self._experiment_id is not None and self._parent_id is not None
            run = self._client.create_run(
                self._experiment_id,
                tags={
                    ROLE_TAG: "infeasible-group",
                    STUDY_TAG: self._study,
                    PARENT_TAG: self._parent_id,
                    "mlflow.note.content": "Proposals priced over the budget: never trained. "
                    "Each child has the proposed config (params), its estimate and the reason.",
                },
                run_name="infeasible proposals")
            self._group_id = run.info.run_id
        return self._group_id

    def _trial(self, record: Any) -> None:
        assert self._experiment_id is not None and self._parent_id is not None
        payload = trial_payload(record, self._study)
        infeasible = record.status == "infeasible"
        parent = self._infeasible_group() if infeasible else self._parent_id
        old = self._trials.pop(record.number, None)
        if old is not None:
            self._client.delete_run(old)  # recorded again (a resumed search): replace it
        end = _now_ms()
        start = end - payload.duration_ms
        run = self._client.create_run(self._experiment_id, start_time=start,
                                      tags={**payload.tags, PARENT_TAG: parent},
                                      run_name=payload.name)
        run_id = run.info.run_id
        self._trials[record.number] = run_id
        metrics = [Metric(m.key, m.value, start + m.offset_ms, m.step) for m in payload.metrics]
        try:
            self._log(run_id, payload.params, {}, metrics)
            if not infeasible:
                self._log_trial_files(run_id, record)
        except Exception:
            with contextlib.suppress(Exception):  # not left RUNNING: it is incomplete
                self._client.set_terminated(run_id, "FAILED", end_time=end)
            raise
        self._client.set_terminated(run_id, payload.run_status, end_time=end)
        if infeasible:
            self._infeasible += 1

    def _log_infeasible_count(self) -> None:
        assert self._parent_id is not None
        count = [Metric("infeasible_proposals", float(self._infeasible), _now_ms(),
                        self._infeasible)]
        self._log(self._parent_id, metrics=count)
        self._log(self._infeasible_group(), metrics=count)

    def _log_trial_files(self, run_id: str, record: Any) -> None:
        from autoembed.config import save_config

        estimate = dict(record.estimate or getattr(record.result, "estimate", {}) or {})
        with tempfile.TemporaryDirectory(prefix="autoembed-trial-") as tmp:
            d = Path(tmp)
            source = {"study": self._study, "trial": record.number, "status": record.status}
            save_config(record.config, d / "config.yaml", extra={"source": source})
            (d / "memory.json").write_text(json.dumps(estimate, indent=2, default=str))
            self._client.log_artifacts(run_id, str(d))

    def _tag_pareto(self, pareto_trials: Sequence[int]) -> None:
        assert self._parent_id is not None
        front = sorted({int(t) for t in pareto_trials})
        members = set(front)
        for number, run_id in sorted(self._trials.items()):
            self._client.set_tag(run_id, "pareto", "true" if number in members else "false")
        missing = [n for n in front if n not in self._trials]
        if missing:
            log.warning("Pareto trials %s have no MLflow run (recorded before tracking started?)",
                        missing)
        self._log(self._parent_id, tags={"pareto_trials": ",".join(str(n) for n in front)},
                  metrics=[Metric("pareto_size", float(len(front)), _now_ms(), 0)])

    def _attach(self, artifacts: Sequence[Path]) -> None:
        assert self._parent_id is not None
        for a in artifacts:
            p = Path(a)
            if p.is_file():
                self._client.log_artifact(self._parent_id, str(p))
            elif p.is_dir():
                self._client.log_artifacts(self._parent_id, str(p), p.name)
        vocab = self._runs_dir / self._study / "vocab"
        if vocab.is_dir() and all(Path(a).resolve() != vocab.resolve() for a in artifacts):
            self._client.log_artifacts(self._parent_id, str(vocab), "vocab")

    def _close(self, status: str) -> None:
        if self._parent_id is None:
            return
        s = status.upper()
        if s not in RUN_STATUSES:
            log.warning("close(%r): not one of %s; ending the search run as FAILED", status,
                        ", ".join(RUN_STATUSES))
            s = "FAILED"
        end = _now_ms()
        if self._group_id is not None:
            self._client.set_terminated(self._group_id, s, end_time=end)
        self._client.set_terminated(self._parent_id, s, end_time=end)
