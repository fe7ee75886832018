"""`report`: what the user's training loop tells autoembed, and how autoembed stops it.

The loop calls `report(step=, samples=, quality=, **metrics)` after each validation; the
report builds an `Evaluation`, hands it to the stop channel (the Executor's: a callable that
returns False when the trial must stop) and raises `TrialStopped` when told to stop, as
Optuna's `TrialPruned`. Throughput (samples per second from the first report to the last,
less `report.evaluating()` blocks) and the statuses a report ends a trial with
(`TrialStopped`, `Diverged`, `ReportError`, also for a step or samples that is not a
non-negative integer): docs/user_search.md, "Contracts". A report remembers why it ended
the trial in `ending`, so a loop that swallows the exception still ends with the right
status.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from autoembed.errors import AutoembedError
from autoembed.space.objectives import MEASURED
from autoembed.trial import Evaluation

__all__ = ["Report", "TrialStopped", "Diverged", "ReportError", "Ending", "Channel",
           "ALWAYS_REPORTABLE"]

ALWAYS_REPORTABLE = ("loss",)  # a training loop's own loss: reportable without `metrics:`

Channel = Callable[[Evaluation], bool]  # False: stop the trial


class TrialStopped(Exception):  # noqa: N818 - named like optuna.TrialPruned
    """Raised from `report(...)` when autoembed stops the trial early. Let it leave `train`;
    autoembed records the trial as `pruned`."""


class Diverged(ArithmeticError):
    """Raised from `report(...)` when a reported value is NaN or infinite (`diverged`)."""


class ReportError(AutoembedError):
    """A `report(...)` call autoembed cannot use (an unknown metric, a bad step): the trial
    fails with this message."""


@dataclass(frozen=True)
class Ending:
    """Why a report ended the trial: status (`pruned`, `diverged` or `failed`) and message."""

    status: str
    message: str


class Report:
    """The `report` object `train(model, params, report)` receives.

    metrics: names the loop may report besides `quality` (the space's `metrics` and the
    objectives it does not measure itself; `loss` always, declared or not); channel: the
    stop channel (None: never stop); clock: seconds (injectable for tests).
    """

    def __init__(self, metrics: Collection[str] = (), channel: Channel | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.metrics = frozenset((*metrics, *ALWAYS_REPORTABLE))
        self.channel = channel
        self.clock = clock
        self.curve: list[Evaluation] = []
        self.ending: Ending | None = None
        self._t0: float | None = None
        self._eval_s = 0.0  # time inside evaluating() blocks so far
        self._first: tuple[float, float, int] | None = None  # (time, eval_s, samples)
        self._last: tuple[float, float, int] | None = None
        self._depth = 0

    # ------------------------------------------------------------------ the loop's side
    def start(self) -> None:
        """Called by autoembed just before `train`: the loop's clock starts."""
        self._t0 = self.clock()

    @contextlib.contextmanager
    def evaluating(self) -> Iterator[None]:
        """Time inside this block is not training time (excluded from throughput)."""
        self._depth += 1
        t = self.clock()
        try:
            yield
        finally:
            self._depth -= 1
            if self._depth == 0:
                self._eval_s += self.clock() - t

    def __call__(self, *, step: int, samples: int, quality: float | None = None,
                 **metrics: float) -> None:
        """One evaluation: step and samples so far, the validation quality (higher is
        better) and any declared metrics. Raises TrialStopped, Diverged or ReportError."""
        if self.ending is not None:  # the loop caught our exception and went on
            self._raise(self.ending)
        now = self.clock()
        if self._t0 is None:
            self._t0 = now
        for name, v in (("step", step), ("samples", samples)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                self._end("failed", f"report({name}={v!r}): must be an integer >= 0")
        values = self._values(quality, metrics)
        ev = Evaluation(step, samples, values.pop("quality", math.nan), values,
                        now - self._t0)
        self.curve.append(ev)
        mark = (now, self._eval_s, samples)
        self._first = self._first or mark
        self._last = mark
        if self.channel is not None and self.channel(ev) is False:
            self._end("pruned", f"stopped early at step {step} by the search's scheduler")

    def _values(self, quality: float | None, metrics: Mapping[str, Any]) -> dict[str, float]:
        for name in metrics:
            if name in MEASURED:  # objectives autoembed measures itself: never reported
                self._end("failed", f"report({name}=...): '{name}' is measured by autoembed; "
                          "do not report it")
            if name not in self.metrics:
                known = ", ".join(sorted({"quality", *self.metrics}))
                self._end("failed", f"report({name}=...): unknown metric '{name}'; known: "
                          f"{known} (declare it under `metrics:` in the space)")
        out: dict[str, float] = {}
        given = {**({"quality": quality} if quality is not None else {}), **metrics}
        for name, v in given.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                try:
                    v = float(v)  # a 0-d tensor or numpy scalar
                except (TypeError, ValueError):
                    self._end("failed", f"report({name}={v!r}): must be a number")
            if not math.isfinite(v):
                self._end("diverged", f"report({name}={v}) is not finite")
            out[name] = float(v)
        return out

    def refuse(self, message: str) -> None:
        """End the trial `failed` with `message` (raises ReportError; a later report raises
        it again): what autoembed calls when the loop does what the trial was not priced
        for (`user.guard`)."""
        self._end("failed", message)

    def _end(self, status: str, message: str) -> None:
        self.ending = Ending(status, message)
        self._raise(self.ending)

    @staticmethod
    def _raise(ending: Ending) -> None:
        if ending.status == "pruned":
            raise TrialStopped(ending.message)
        if ending.status == "diverged":
            raise Diverged(ending.message)
        raise ReportError(ending.message)

    # ------------------------------------------------------------------ autoembed's side
    def final(self, returned: Any) -> dict[str, float]:
        """What `train` returned, checked as a report's values: None (nothing), a number
        (the quality) or a mapping of `quality` and declared metrics. Raises as a report."""
        if returned is None:
            return {}
        if isinstance(returned, Mapping):
            kw = {str(k): v for k, v in returned.items()}
            return self._values(kw.pop("quality", None), kw)
        return self._values(returned, {})

    @property
    def eval_seconds(self) -> float:
        return self._eval_s

    @property
    def throughput(self) -> float | None:
        """Samples per second of training (see the module docstring); None before a report."""
        if self._first is None or self._last is None or self._t0 is None:
            return None
        if len(self.curve) == 1:
            t, e, n = self._t0, 0.0, 0
        else:
            t, e, n = self._first
        t1, e1, n1 = self._last
        seconds = (t1 - t) - (e1 - e)
        return (n1 - n) / seconds if seconds > 0 and n1 > n else None
