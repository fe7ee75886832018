"""Every trial event goes to one `Recorder`, which fans it out to the sinks, one writer each:

* the Optuna study: the row as the trial's user attribute, written before `tell`;
* MLflow (`TrackerSink`): rows buffered and written in batches behind on a thread
  (`FLUSH_ROWS`; the rest at `flush`, which waits); `catch_up` on a resume re-records what
  the tracker lacks, so after a SIGKILL the stores agree trial by trial again;
* calibration.json (`CalibrationSink`): every OOM against its prediction.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from autoembed.pipeline.feasibility import oom_ceiling
from autoembed.trial import TrialRow, encode_row

if TYPE_CHECKING:
    from autoembed.tracking import SearchTracker

__all__ = ["Sink", "Recorder", "TrackerSink", "CalibrationSink", "FLUSH_ROWS", "ATTR"]

ATTR = "autoembed"  # the Optuna user-attribute key holding a trial's row
# MLflow rows buffered before a write: infeasible proposals come in bursts of cheap events
FLUSH_ROWS = 16


class Sink(Protocol):
    def record(self, row: TrialRow) -> None:
        """One finished (or rejected) trial's row."""

    def catch_up(self, rows: Sequence[TrialRow]) -> None:
        """Every finished row the study holds (a resume): record what this sink lacks."""

    def flush(self) -> None:
        """Write anything buffered."""


class Recorder:
    """The one entry point for trial events (see the module docstring)."""

    def __init__(self, sinks: Sequence[Sink] = ()) -> None:
        self.sinks = tuple(sinks)

    def record(self, row: TrialRow, trial: Any = None,
               tell: Callable[[], None] | None = None) -> None:
        """Write `row` to the trial's attributes (when an Optuna `trial` is given), then
        `tell` Optuna, then fan the row out to the sinks (running rows stay in Optuna)."""
        if trial is not None:
            trial.set_user_attr(ATTR, encode_row(row))
        if tell is not None:
            tell()
        if row.status != "running":
            for sink in self.sinks:
                sink.record(row)

    def note(self, trial: Any, key: str, value: Any) -> None:
        """Store `value` as the running trial's attribute `key` (the study is the search's
        record: a scheduler's decision is noted before it is acted on)."""
        trial.set_user_attr(key, value)

    def catch_up(self, rows: Iterable[TrialRow]) -> None:
        done = sorted((r for r in rows if r.status != "running"), key=lambda r: r.number)
        for sink in self.sinks:
            sink.catch_up(done)

    def flush(self) -> None:
        for sink in self.sinks:
            sink.flush()


class TrackerSink:
    """MLflow (any `SearchTracker`), in batches of `flush_rows` rows, a full batch written
    behind on a thread (`background`), one at a time, in order; `flush` and `catch_up` wait
    for it and raise what it raised."""

    def __init__(self, tracker: SearchTracker, flush_rows: int = FLUSH_ROWS,
                 background: bool = True) -> None:
        self.tracker = tracker
        self.flush_rows = flush_rows
        self.background = background
        self._buffer: list[TrialRow] = []
        self._writer: threading.Thread | None = None
        self._error: BaseException | None = None

    def record(self, row: TrialRow) -> None:
        self._buffer.append(row)
        if len(self._buffer) >= self.flush_rows:
            if self.background:
                self._join()
                batch, self._buffer = self._buffer, []
                self._writer = threading.Thread(target=self._write_behind, args=(batch,),
                                                name="autoembed-tracker-write")
                self._writer.start()
            else:
                self.flush()

    def catch_up(self, rows: Sequence[TrialRow]) -> None:
        self._join()  # a batch in flight is recorded before the tracker is asked
        recorded = getattr(self.tracker, "recorded", lambda: None)()
        if recorded is None:  # a tracker that cannot say: nothing to compare
            return
        pending = {r.number for r in self._buffer}  # buffered: written by this flush
        self._buffer.extend(r for r in rows if r.number not in recorded | pending)
        self.flush()

    def flush(self) -> None:
        self._join()
        batch, self._buffer = self._buffer, []
        self._write(batch)

    def _join(self) -> None:
        if self._writer is not None:
            self._writer.join()
            self._writer = None
        error, self._error = self._error, None
        if error is not None:
            raise error

    def _write_behind(self, batch: list[TrialRow]) -> None:
        try:
            self._write(batch)
        except BaseException as e:  # noqa: BLE001 - raised on the driver's thread at _join
            self._error = e

    def _write(self, batch: list[TrialRow]) -> None:
        if not batch:
            return
        many = getattr(self.tracker, "trials", None)
        if many is not None:
            many(batch)
        else:
            for row in batch:
                self.tracker.trial(row)


class CalibrationSink:
    """calibration.json in the study's folder: each OOM, its predicted bytes and the size
    that failed, and the ceiling they set (rewritten atomically on each OOM)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._ooms: dict[int, TrialRow] = {}

    def record(self, row: TrialRow) -> None:
        if row.status == "oom":
            self._ooms[row.number] = row
            self._write()

    def catch_up(self, rows: Sequence[TrialRow]) -> None:
        ooms = {r.number: r for r in rows if r.status == "oom"}
        self._ooms.update(ooms)
        if ooms.keys() - self._known():
            self._write()

    def flush(self) -> None:
        return None

    def _known(self) -> set[int]:
        try:
            body = json.loads(self.path.read_text())
            return {int(e["trial"]) for e in body.get("oom", [])}
        except (OSError, ValueError, KeyError, TypeError):
            return set()

    def _write(self) -> None:
        from autoembed.files import atomic_write_text

        events = []
        for row in sorted(self._ooms.values(), key=lambda r: r.number):
            predicted = int(row.metrics.get("oom_predicted_bytes") or row.device_total)
            failed = int(row.metrics.get("oom_failed_bytes") or predicted)
            events.append({
                "trial": row.number, "predicted_device_total": predicted, "failed_bytes": failed,
                "measured": bool(row.result and row.result.measured_reserved_peak is not None),
                "failed_over_predicted": round(failed / predicted, 4) if predicted else None,
                "error": row.reason})
        ceiling = oom_ceiling(self._ooms.values())
        body = {"rule": "proposals whose predicted device_total is at or above "
                        "ceiling_bytes are infeasible (autoembed.pipeline.engine)",
                "ceiling_bytes": ceiling[0] if ceiling else None,
                "ceiling_trial": ceiling[1] if ceiling else None,
                "oom": events}
        atomic_write_text(self.path, json.dumps(body, indent=2) + "\n")
