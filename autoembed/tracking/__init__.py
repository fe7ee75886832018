"""Tracking: where a search's runs are recorded (MLflow by default; imported lazily).

Only the driver calls a `SearchTracker` (docs/contracts.md#who-writes-each-store-and-file):
`start` once, `trial`/`trials` for finished or rejected trials (in batches, through the
recorder's `TrackerSink`), `finish` once with the front, `close` always; `NullTracker`
records nothing. `make_tracker(tracking_uri, runs_dir)` picks the store (`tracking.store`);
an http(s) server that does not answer raises `TrackingUnreachableError` (exit 2) and a
store that cannot be opened `TrackingError` (exit 1), before anything runs; `open_tracker`
opens it on a thread while Ray starts. Once made, a tracker never raises.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Protocol, runtime_checkable

from autoembed.tracking.store import (
    TrackingError,
    TrackingStore,
    TrackingUnreachableError,
    check_database,
    check_reachable,
    resolve_store,
)
from autoembed.trial import TrialRow

__all__ = ["SearchTracker", "NullTracker", "make_tracker", "open_tracker", "resolve_store",
           "check_reachable", "TrackingStore", "TrackingError", "TrackingUnreachableError"]


@runtime_checkable
class SearchTracker(Protocol):
    def start(self, study: str, params: Mapping[str, str], space_file: Path | None) -> None:
        """Open the search's parent run with its parameters (budget, space, sampler, seed,
        data, objectives) and the space file as an artifact."""

    def trial(self, record: TrialRow) -> None:
        """Record one trial as a nested run (infeasible ones too, tagged as such). Optional:
        `trials(records)` records several at once; `recorded()`, the trial numbers the store
        holds (None: unknown), lets a resumed search re-record what it lacks."""

    def finish(self, pareto_trials: Sequence[int], artifacts: Sequence[Path]) -> None:
        """Tag Pareto members (`pareto` = true/false on every trial run) and attach the
        search's files (pareto.json, pareto.png, trials.csv) to the parent run."""

    def close(self, status: str) -> None:
        """End the parent run: FINISHED, FAILED or KILLED. Safe to call twice."""


class NullTracker:
    """Records nothing (tests, `--tracking-uri none`)."""

    def start(self, study: str, params: Mapping[str, str], space_file: Path | None) -> None:
        return None

    def trial(self, record: TrialRow) -> None:
        return None

    def trials(self, records: Sequence[TrialRow]) -> None:
        return None

    def recorded(self) -> set[int] | None:
        return None

    def finish(self, pareto_trials: Sequence[int], artifacts: Sequence[Path]) -> None:
        return None

    def close(self, status: str) -> None:
        return None


def make_tracker(tracking_uri: str | None, runs_dir: Path) -> SearchTracker:
    """The tracker for a search writing under `runs_dir` (the module docstring): the URI
    probed first, then the store opened and its schema made here."""
    return open_tracker(tracking_uri, runs_dir, wait=True)()


def open_tracker(tracking_uri: str | None, runs_dir: Path, *, wait: bool = False,
                 ) -> Callable[[], SearchTracker]:
    """As `make_tracker`, but the store is opened on a (non-daemon) thread unless `wait`,
    overlapping what the caller does next; the probes run before this returns, and calling
    the result waits for the tracker and raises what `make_tracker` would."""
    store = resolve_store(tracking_uri, runs_dir)
    if store.kind == "none":
        return NullTracker
    if store.kind == "http":
        check_reachable(store.uri)  # fail in seconds, before paying for `import mlflow`
    if store.is_database:
        check_database(store.uri)  # MLflow would retry an unreachable database for minutes

    def opened() -> SearchTracker:
        from autoembed.tracking.mlflow_store import MlflowTracker

        return MlflowTracker.open(store, runs_dir)

    if wait:
        return opened
    done: Future[SearchTracker] = Future()

    def work() -> None:
        try:
            done.set_result(opened())
        except BaseException as e:  # noqa: BLE001 - raised where the tracker is taken
            done.set_exception(e)

    threading.Thread(target=work, name="autoembed-tracker-open").start()
    return done.result
