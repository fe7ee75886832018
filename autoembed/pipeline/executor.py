"""Executors run the engine's proposals: `Executor` (the protocol), `RayTuneExecutor` (the
default: Ray Tune, locally or on a cluster) and `InProcessExecutor` (one trial at a time in
this process: tests, and debugging a training loop with a plain debugger).

An executor takes proposals from `engine.propose()` until it returns None, streams each
trial's evaluations back to `engine.observe()`, carries the engine's stop decision to the
running trial, and ends each trial with `engine.finish()`. The channel is two-way:

* in process, a `TrialChannel` per trial: `report(evaluation)` hands one evaluation to the
  engine and raises `StopTrial` in the trial when the engine says stop (a user's own loop
  lets it propagate; the runner's loop turns it into a stop);
* on Ray Tune, the trainable reports through `tune.report` and `FrontScheduler` answers
  STOP, which Tune delivers by ending the trainable.

A trial stopped by the engine ends with no final report (`finish(number, None)`), whichever
executor ran it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from autoembed.errors import AutoembedError

if TYPE_CHECKING:
    from autoembed.pipeline.engine import SearchEngine
    from autoembed.pipeline.plan import SearchPlan
    from autoembed.trial import Evaluation, TrialResult

__all__ = ["Executor", "StopTrial", "TrialChannel", "InProcessExecutor", "RayTuneExecutor",
           "evaluation_report", "final_report"]


class StopTrial(AutoembedError):
    """Raised by `TrialChannel.report` inside a trial the search has decided to stop."""


def final_report(result: TrialResult, **extra: Any) -> dict[str, Any]:
    """A trial's last report (what `engine.finish` reads): its result, and beside it the
    validation scores the driver keeps in memory for the pick (`selection.ValidScores`)."""
    scores = result.valid_scores
    return {"status": result.status, "result": result.to_dict(), "error": None,
            "valid_scores": None if scores is None else scores.encode(), **extra}


def evaluation_report(ev: Evaluation) -> dict[str, Any]:
    """What a trial reports of one evaluation (what `engine.observe` reads)."""
    return {"quality": float(ev.quality), "step": ev.step, "samples": ev.samples,
            "elapsed_s": ev.elapsed_s}


class TrialChannel:
    """The two-way channel between one running trial and the engine (in process)."""

    def __init__(self, engine: SearchEngine, number: int) -> None:
        self.engine = engine
        self.number = number
        self.stopped = False

    def report(self, evaluation: Evaluation | Mapping[str, Any]) -> None:
        """Hand one evaluation to the engine; raise StopTrial when the trial must stop."""
        report = (dict(evaluation) if isinstance(evaluation, Mapping)
                  else evaluation_report(evaluation))
        if self.engine.observe(self.number, report):
            self.stopped = True
            raise StopTrial(f"trial {self.number} stopped at step {report.get('step')}: it "
                            "cannot reach the Pareto front")


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


class RayTuneExecutor:
    """Ray Tune, as `autoembed search` has always run: a private Ray or `ray_address`."""

    def __init__(self, ray_address: str | None, num_cpus: int, num_gpus: int | None,
                 faults: Mapping[int, str] | None = None) -> None:
        from autoembed.pipeline.ray_tune import ray_session

        self._ray = ray_session(ray_address, num_cpus, num_gpus)
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
        self._ray.check_nodes(plan.spec.kind)
        return plan

    def run(self, engine: SearchEngine, plan: SearchPlan) -> None:
        import datetime as _dt

        from autoembed.pipeline.ray_tune import TuneSettings, run_tune

        run_tune(engine, TuneSettings(
            workers=plan.workers, cpus_per_trial=plan.cpus_per_trial,
            gpus_per_trial=1 if plan.device == "cuda" else 0,
            storage_path=plan.out_dir / "ray",
            name="tune-" + _dt.datetime.now().strftime("%Y%m%d-%H%M%S"),
            train_data=plan.workload.train_spec.to_dict(), run_settings=plan.run_settings(),
            trial_resources=tuple(plan.request.trial_resources), faults=self.faults,
        ))


Trainer = Callable[[Mapping[str, Any], TrialChannel], Mapping[str, Any] | None]


class InProcessExecutor:
    """One trial at a time in this process, no Ray. `trainer(payload, channel)` runs one
    trial and returns its final report (`{"result": TrialResult dict}` or `{"error": ...}`);
    the default trains with the runner. Faults are not injected here."""

    def __init__(self, trainer: Trainer | None = None) -> None:
        self.trainer = trainer or run_with_runner

    def __enter__(self) -> InProcessExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def session(self) -> tuple[str | None, int | None]:
        return None, None

    def place(self, plan: SearchPlan) -> SearchPlan:
        return plan.with_cpus_per_trial(plan.cpus)  # one trial at a time: all of them

    def run(self, engine: SearchEngine, plan: SearchPlan) -> None:
        data = plan.workload.train_spec.to_dict()
        while (p := engine.propose()) is not None:
            channel = TrialChannel(engine, p.number)
            payload = {"number": p.number, "config": dict(p.train_config), "data": data,
                       "settings": plan.run_settings()}
            try:
                final = self.trainer(payload, channel)
            except StopTrial:
                final = None
            except Exception as e:  # noqa: BLE001 - the trial's failure, not the search's
                final = {"status": "failed", "result": None,
                         "error": f"{type(e).__name__}: {e}"}
            engine.finish(p.number, None if channel.stopped else final)


def run_with_runner(payload: Mapping[str, Any], channel: TrialChannel) -> dict[str, Any]:
    """Train a payload with `runner.run_trial`; a StopTrial from the channel stops it."""
    from autoembed.config import config_from_dict
    from autoembed.runner import RunSettings, run_trial

    dataset = _dataset(json.dumps(payload["data"], sort_keys=True))

    def report(ev: Evaluation) -> bool:
        try:
            channel.report(ev)
        except StopTrial:
            return False  # the runner ends the loop
        return True

    result = run_trial(config_from_dict(payload["config"], f"trial {payload['number']}"),
                       dataset, RunSettings(**payload["settings"]), report)
    return final_report(result)


_DATASETS: dict[str, Any] = {}


def _dataset(key: str) -> Any:
    """Load a data spec (JSON) once per process: the last one is kept."""
    if key not in _DATASETS:
        from autoembed.data import load_dataset
        from autoembed.data.spec import DataSpec

        _DATASETS.clear()
        _DATASETS[key] = load_dataset(DataSpec.from_dict(json.loads(key), "trial data"))
    return _DATASETS[key]
