"""Executors run the engine's proposals, for any workload: `Executor` (the protocol),
`RayTuneExecutor` (the default, locally or on a cluster) and `InProcessExecutor` (one trial
at a time in this process: tests, debugging a training loop).

An executor takes proposals from `engine.propose()` until it returns None, runs each with the
workload's runner on `trial_payload`, streams its evaluations to `engine.observe()` and
carries a stop back (in process: `TrialChannel`; on Ray: `FrontScheduler`'s STOP), and ends
it with `engine.finish()` (no final report when the engine stopped it). Every report carries
the trial's wall and CPU seconds so far (`workload.CostClock`). A trial `engine.overdue`
lists is ended (Ray: its worker killed; in process: `TrialTimeout` raised in it, abandoned
after `GRACE_S`) and is `timeout` whatever it returns. A trial that raises, or calls
`sys.exit`, is that trial's failure, never the search's end.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from autoembed.errors import AutoembedError, TrialTimeout
from autoembed.pipeline.workload import CostClock, evaluation_report, failed_report

if TYPE_CHECKING:
    from autoembed.pipeline.engine import Proposal, SearchEngine
    from autoembed.pipeline.plan import SearchPlan
    from autoembed.pipeline.workload import TrialRunner
    from autoembed.trial import Evaluation

__all__ = ["Executor", "StopTrial", "TrialChannel", "InProcessExecutor", "RayTuneExecutor",
           "evaluation_report", "trial_payload", "failed_report", "end_trial", "raise_in",
           "LOG_DIR", "GRACE_S"]

LOG_DIR = "logs"  # a study's folder for its trials' output on Ray (trial-NNNN.log)
# In process: the seconds a trial past its time limit has to end before it is abandoned
GRACE_S = 10.0
POLL_S = 1.0  # the driver's longest wait for a trial's message between looks at its limit


class StopTrial(AutoembedError):
    """Raised by `TrialChannel.report` inside a trial the search has decided to stop."""


def trial_payload(proposal: Proposal, plan: SearchPlan, **extra: Any) -> dict[str, Any]:
    """What a trial runner gets: the proposal's payload, its number and the plan's placement
    of a trial (device, torch threads)."""
    return {**proposal.payload, "number": proposal.number, "device": plan.device,
            "threads": plan.threads, **extra}


class TrialChannel:
    """The trial's end of its two-way channel with the driver (in process): calling it hands
    one evaluation to the engine and returns False once it says stop (`report` raises
    `StopTrial` instead); once the driver ended the trial, every call raises `TrialTimeout`."""

    def __init__(self, number: int, cost: CostClock | None = None) -> None:
        self.number = number
        self.stopped = False
        self.ended = False  # by the driver (its limit, Ctrl-C)
        self.done = False  # the trial's thread posted its end
        self.cost = cost or CostClock()  # started with the trial
        # ("report", report) and ("end", final report) to the driver; the answers back
        self.to_driver: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self.answers: queue.SimpleQueue[bool | None] = queue.SimpleQueue()

    def __call__(self, evaluation: Evaluation | Mapping[str, Any]) -> bool:
        """Hand one evaluation to the engine; False once the trial must stop."""
        if self.ended:
            raise TrialTimeout(f"trial {self.number} was ended by the search")
        if self.stopped:
            return False
        report = {**(dict(evaluation) if isinstance(evaluation, Mapping)
                     else evaluation_report(evaluation)), **self.cost.stamp()}
        self.to_driver.put(("report", report))
        answer = self.answers.get()
        if answer is None:
            raise TrialTimeout(f"trial {self.number} was ended by the search")
        self.stopped = answer
        return not self.stopped

    def report(self, evaluation: Evaluation | Mapping[str, Any]) -> None:
        """As calling the channel, raising StopTrial when the trial must stop."""
        if not self(evaluation):
            step = (evaluation.get("step") if isinstance(evaluation, Mapping)
                    else evaluation.step)
            raise StopTrial(f"trial {self.number} stopped at step {step}: it cannot reach "
                            "the Pareto front")

    def end(self) -> None:
        """The driver ended the trial: later reports raise, and one waiting is woken."""
        self.ended = True
        self.answers.put(None)


class Executor(Protocol):
    """Runs a search's trials (see the module docstring)."""

    def __enter__(self) -> Executor:
        """Start (Ray: a private instance, or join the cluster)."""

    def __exit__(self, *exc: object) -> None:
        """Stop what `__enter__` started."""

    def session(self) -> tuple[str | None, int | None]:
        """(session directory, PID) of what this started, for the study lock's cleanup of
        a SIGKILLed driver; (None, None) when there is nothing to clean up."""

    def place(self, plan: SearchPlan) -> SearchPlan:
        """The plan with a trial's CPUs as this executor provides them; ConfigError when
        the trials' resources cannot be had."""

    def run(self, engine: SearchEngine, plan: SearchPlan) -> None:
        """Run trials until `engine.propose()` returns None. KeyboardInterrupt on Ctrl-C."""

    def notes(self, plan: SearchPlan) -> list[str]:
        """Lines said before the first trial: what this executor does with the trials'
        output, and what it cannot isolate."""


class RayTuneExecutor:
    """Ray Tune: a private Ray, or the cluster at `ray_address`; the workload's code and
    data travel as its `ray_options` say."""

    kind = "ray"

    def __init__(self, ray_address: str | None, num_cpus: int, num_gpus: int | None,
                 faults: Mapping[int, str] | None = None,
                 options: Mapping[str, Any] | None = None, gpu: str | None = None) -> None:
        """`gpu`: the CUDA_VISIBLE_DEVICES entry of the one GPU a private Ray may use."""
        from autoembed.pipeline.ray_tune import ray_session

        self.options = dict(options or {})
        self._ray = ray_session(ray_address, num_cpus, num_gpus,
                                self.options.get("runtime_env"), gpu=gpu)
        self.address = ray_address
        self.faults = dict(faults or {})

    def __enter__(self) -> RayTuneExecutor:
        self._ray.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._ray.__exit__(*exc)

    def session(self) -> tuple[str | None, int | None]:
        return self._ray.local_session()

    def place(self, plan: SearchPlan) -> SearchPlan:
        custom = plan.request.trial_resources
        if self.address:  # a trial's share of a cluster node, not of this machine
            plan = plan.with_cpus_per_trial(self._ray.cpus_per_trial(plan.workers, custom))
        self._ray.check_resources(custom)
        self._ray.check_nodes(tuple(self.options.get("packages", ())))
        return plan

    def notes(self, plan: SearchPlan) -> list[str]:
        where = " on this machine" if self.address else ""
        return [f"trial output (print, warnings){where} goes to "
                f"{plan.out_dir / LOG_DIR}/trial-NNNN.log"]

    def run(self, engine: SearchEngine, plan: SearchPlan) -> None:
        import datetime as _dt

        from autoembed.pipeline.ray_tune import TuneSettings, run_tune

        (plan.out_dir / LOG_DIR).mkdir(parents=True, exist_ok=True)
        run_tune(engine, TuneSettings(
            workers=plan.workers,
            cpus_per_trial=self.options.get("trial_cpus", plan.cpus_per_trial),
            gpus_per_trial=self.options.get("trial_gpus", 1 if plan.device == "cuda" else 0),
            storage_path=plan.out_dir / "ray",
            name="tune-" + _dt.datetime.now().strftime("%Y%m%d-%H%M%S"),
            placement={"device": plan.device, "threads": plan.threads,
                       "log_dir": str(plan.out_dir / LOG_DIR)},
            runner=plan.workload.runner(local=False),
            runner_kwargs=self.options.get("runner_kwargs") or {},
            trial_resources=tuple(plan.request.trial_resources), faults=self.faults))


class InProcessExecutor:
    """One trial at a time in this process, no Ray, no injected faults. `trainer(payload,
    channel)` (default: the workload's runner) returns the final report; `cost_clock` times
    each trial. Each trial runs on a daemon thread while the driver's thread serves its
    channel (the engine is called on the driver's thread only) and ends it past its limit
    (`end_trial`); an abandoned trial's results are never read."""

    kind = "local"

    def __init__(self, trainer: TrialRunner | None = None,
                 cost_clock: Callable[[], CostClock] = CostClock) -> None:
        self.trainer = trainer
        self.cost_clock = cost_clock

    def __enter__(self) -> InProcessExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def session(self) -> tuple[str | None, int | None]:
        return None, None

    def place(self, plan: SearchPlan) -> SearchPlan:
        return plan.with_cpus_per_trial(plan.cpus)  # one trial at a time: all of them

    def notes(self, plan: SearchPlan) -> list[str]:
        del plan
        return ["--executor local runs each trial in this process: one that calls os._exit or "
                "dies of a signal ends the search, and one that does not end within "
                f"{GRACE_S:g} s of its time limit is abandoned, still running (--executor ray "
                "runs each in its own process)"]

    def run(self, engine: SearchEngine, plan: SearchPlan) -> None:
        trainer = self.trainer or plan.workload.runner(local=True)
        while (p := engine.propose()) is not None:
            channel = TrialChannel(p.number, self.cost_clock())
            engine.trial_started(p.number)
            thread = threading.Thread(target=_run_trial, name=f"autoembed-trial-{p.number}",
                                      args=(trainer, trial_payload(p, plan), channel),
                                      daemon=True)
            thread.start()
            try:
                final, late = _serve(engine, p.number, channel)
            except BaseException:  # Ctrl-C or the driver's own error: the trial ends too
                end_trial(channel, thread, KeyboardInterrupt)
                raise
            if late:
                end_trial(channel, thread, TrialTimeout)
                engine.finish(p.number, {"status": "timeout", "result": None, "error": None,
                                         "cost": channel.cost.stamp()})
                continue
            if final is not None:
                final = {**final, "cost": channel.cost.stamp()}
            engine.finish(p.number, None if channel.stopped else final)


def _run_trial(trainer: TrialRunner, payload: Mapping[str, Any],
               channel: TrialChannel) -> None:
    """A trial's thread: run it and post its final report (None: stopped) to the driver;
    what it raises is the trial's failure, but a KeyboardInterrupt the driver raises."""
    out: tuple[str, Mapping[str, Any] | None] = ("end", None)
    try:
        out = ("end", trainer(payload, channel))
    except StopTrial:
        pass
    except KeyboardInterrupt:
        out = ("interrupt", None)
    except BaseException as e:  # noqa: BLE001 - the trial's (sys.exit and timeouts included)
        out = ("end", failed_report(e))
    finally:
        channel.done = True
        channel.to_driver.put(out)


def _serve(engine: SearchEngine, number: int,
           channel: TrialChannel) -> tuple[Mapping[str, Any] | None, bool]:
    """On the driver's thread: answer trial `number`'s reports with the engine's decision
    until it ends: (its final report, False), or (None, True) once it is overdue."""
    while True:
        if number in engine.overdue():
            engine.time_out(number)
            return None, True
        remaining = engine.remaining(number)
        wait = POLL_S if remaining is None else min(max(remaining, 0.0), POLL_S)
        try:
            kind, body = channel.to_driver.get(timeout=wait)
        except queue.Empty:
            continue
        if kind == "interrupt" and not channel.ended:
            raise KeyboardInterrupt
        if kind != "report":
            return body, False
        channel.answers.put(bool(engine.observe(number, body)))


def end_trial(channel: TrialChannel, thread: threading.Thread,
              exc: type[BaseException]) -> bool:
    """End a trial's thread: later reports raise `TrialTimeout`, `exc` is raised in it once a
    second until it ends (True) or `GRACE_S` pass (abandoned: False)."""
    channel.end()
    deadline = time.monotonic() + GRACE_S
    while thread.is_alive() and not channel.done:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        raise_in(thread, exc)
        try:
            kind, _ = channel.to_driver.get(timeout=min(left, 1.0))
        except queue.Empty:
            continue
        if kind != "report":
            return True
        channel.answers.put(None)  # a report made as it was ended: raises in the trial
    return True


def raise_in(thread: threading.Thread, exc: type[BaseException]) -> None:
    """Raise `exc` in `thread` at its next Python instruction (CPython's asynchronous
    exception: a C call in progress, a sleep included, finishes first)."""
    import ctypes

    if thread.ident is not None and thread.is_alive():
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident),
                                                   ctypes.py_object(exc))
