"""Ray Tune glue: a custom `Searcher` over the SearchEngine (ask/price/tell happen in the
driver), a scheduler that stops trials that cannot reach the front, and the Ray lifecycle.

Ray starts private (`address="local"`) unless an address is given, and is shut down on the
way out, also after Ctrl-C or an error; a Ray already initialised in this process (tests,
notebooks) is used as is and left running. Imported only by `autoembed.search.driver`.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Before Ray starts: the classic (quiet at verbose=0) output; Ctrl-C raising
# KeyboardInterrupt in the driver instead of Tune's own graceful-stop handler; and trial
# workers at normal priority. Ray nices its workers (RayConfig worker_niceness) and a niced
# trial starves next to any other busy process: measured here, a default search next to two
# busy loops got 3% of a core per trial and ran 20x longer. Throughput is an objective, so
# trials run at the driver's priority.
os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
os.environ.setdefault("TUNE_DISABLE_SIGINT_HANDLER", "1")
os.environ.setdefault("RAY_worker_niceness", "0")

import ray  # noqa: E402
from ray import tune  # noqa: E402
from ray.tune.schedulers import FIFOScheduler, TrialScheduler  # noqa: E402
from ray.tune.search import Searcher  # noqa: E402

from autoembed.errors import ConfigError  # noqa: E402
from autoembed.search.engine import SearchEngine  # noqa: E402
from autoembed.search.trainable import FINAL, PAYLOAD, train_trial  # noqa: E402

__all__ = ["TuneSettings", "BudgetSearcher", "FrontScheduler", "run_tune", "ray_session"]

# Host memory is reserved in power-of-two steps from this size, so that trials of similar
# size ask for the same resources and Tune can reuse their worker processes.
MEMORY_STEP = 2**30


def _memory_request(host_bytes: int, available: float | None) -> int:
    steps = max(1, math.ceil(host_bytes / MEMORY_STEP))
    req = MEMORY_STEP * (1 << (steps - 1).bit_length())
    if available:  # never ask for more than the cluster has (Tune would wait forever)
        req = min(req, int(available * 0.9))
    return req


@dataclass(frozen=True)
class TuneSettings:
    """How trials are placed: workers at once, CPUs and GPUs per trial, where Tune writes."""

    workers: int
    cpus_per_trial: int
    gpus_per_trial: int
    storage_path: Path
    name: str
    train_data: Mapping[str, Any]
    run_settings: Mapping[str, Any]
    faults: Mapping[int, str] = field(default_factory=dict)  # launch order -> injected fault


class BudgetSearcher(Searcher):
    """Proposes only configs that fit; infeasible ones are told and recorded inside
    `engine.propose()` and never become Tune trials."""

    def __init__(self, engine: SearchEngine, settings: TuneSettings) -> None:
        super().__init__()  # no single metric: the engine reads the results itself
        self.engine = engine
        self.settings = settings
        self.numbers: dict[str, int] = {}
        self._available = ray.cluster_resources().get("memory")

    def suggest(self, trial_id: str) -> dict[str, Any] | None:
        p = self.engine.propose()
        if p is None:
            return Searcher.FINISHED  # type: ignore[return-value]
        self.numbers[trial_id] = p.number
        self.engine.attach(p.number, trial_id)
        return {
            "number": p.number,
            "memory_request": _memory_request(p.host_bytes, self._available),
            # one JSON string: Tune copies configs into every result file, flattened
            PAYLOAD: json.dumps({"number": p.number, "config": dict(p.train_config),
                                 "data": dict(self.settings.train_data),
                                 "settings": dict(self.settings.run_settings),
                                 "fault": self.settings.faults.get(
                                     self.engine.trainables_started)}),
        }

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        return None  # intermediate results go to the scheduler

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None,
                          error: bool = False) -> None:
        number = self.numbers.pop(trial_id, None)
        if number is None:
            return
        final = None
        if result and FINAL in result:
            final = json.loads(result[FINAL])
        self.engine.finish(number, final, error=(
            "the trial's process failed (see Tune's error file under the study's ray/ folder)"
            if error else None))

    def __getstate__(self) -> dict[str, Any]:
        # Tune pickles its config for Tuner.restore, which autoembed does not use (the Optuna
        # storage is the search's state); the engine (storage, tracker) stays in the driver.
        return {k: v for k, v in self.__dict__.items() if k != "engine"}

    def save(self, checkpoint_path: str) -> None:
        return None

    def restore(self, checkpoint_path: str) -> None:
        return None


class FrontScheduler(FIFOScheduler):
    """FIFO, plus: stop a trial when `engine.observe` says it cannot reach the front."""

    def __init__(self, engine: SearchEngine) -> None:
        super().__init__()
        self.engine = engine

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "engine"}

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> str:
        if FINAL in result or "quality" not in result:
            return str(TrialScheduler.CONTINUE)
        number = int(trial.config["number"])
        if self.engine.observe(number, result):
            return str(TrialScheduler.STOP)
        return str(TrialScheduler.CONTINUE)


PROBE_TIMEOUT_S = 3.0  # Ray itself retries an unreachable address for minutes


def _probe(address: str) -> None:
    """Fail in seconds when nothing listens at a host:port address (`auto` is not probed)."""
    import socket

    hostport = address.removeprefix("ray://")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        return  # "auto", or a form Ray resolves itself
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), PROBE_TIMEOUT_S):
            pass
    except OSError as e:
        raise ConfigError(
            f"--ray-address '{address}': nothing answers there within {PROBE_TIMEOUT_S:g} s "
            f"({e.strerror or e}); start the head with `ray start --head` and give its "
            "address, or drop --ray-address for a private local Ray"
        ) from None


class ray_session:  # noqa: N801 - used as a context manager, reads like one
    """`with ray_session(address, num_cpus):` a private Ray (or the given cluster), shut down
    on exit unless it was running before."""

    def __init__(self, address: str | None, num_cpus: int, num_gpus: int | None) -> None:
        self.address = address
        self.num_cpus = num_cpus
        self.num_gpus = num_gpus
        self.started = False

    def __enter__(self) -> ray_session:
        if self.address:
            _probe(self.address)
        if ray.is_initialized():
            return self
        kw: dict[str, Any] = dict(include_dashboard=False, log_to_driver=False,
                                  configure_logging=True, logging_level=logging.WARNING)
        if self.address:
            try:
                ray.init(address=self.address, **kw)
            except (ConnectionError, ValueError, RuntimeError) as e:
                first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise ConfigError(
                    f"--ray-address '{self.address}': cannot join that Ray cluster ({first}); "
                    "check the address (e.g. 10.0.0.5:6379 from `ray start --head`) and that "
                    "this machine may join it (Ray's token authentication)"
                ) from None
        else:
            ray.init(address="local", num_cpus=self.num_cpus, num_gpus=self.num_gpus, **kw)
        self.started = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self.started:
            ray.shutdown()

    def local_session(self) -> tuple[str | None, int | None]:
        """(session directory, raylet PID) of the private Ray this started, else (None,
        None): what a later driver needs to clean up after this one is SIGKILLed."""
        if not self.started or self.address:
            return None, None
        try:
            from ray._private import ray_constants
            from ray._private.worker import _global_node

            node: Any = _global_node
            raylets = node.all_processes.get(ray_constants.PROCESS_TYPE_RAYLET) or []
            pid = int(raylets[0].process.pid) if raylets else None
            return str(node.get_session_dir_path()), pid
        except Exception:  # noqa: BLE001 - Ray internals moved: no cleanup record
            return None, None


def run_tune(engine: SearchEngine, settings: TuneSettings) -> None:
    """Run trials until the engine says stop. Raises KeyboardInterrupt on Ctrl-C."""
    from ray.tune import PlacementGroupFactory

    def resources(config: dict[str, Any]) -> PlacementGroupFactory:
        bundle: dict[str, float] = {"CPU": settings.cpus_per_trial,
                                    "memory": float(config.get("memory_request", MEMORY_STEP))}
        if settings.gpus_per_trial:
            bundle["GPU"] = settings.gpus_per_trial
        return PlacementGroupFactory([bundle])

    # Tune logs each result-file write at INFO; keep the driver's output to our progress
    logging.getLogger("ray.tune").setLevel(logging.WARNING)
    searcher = BudgetSearcher(engine, settings)
    tuner = tune.Tuner(
        tune.with_resources(train_trial, resources),
        tune_config=tune.TuneConfig(
            search_alg=searcher,
            scheduler=FrontScheduler(engine),
            num_samples=-1,  # the searcher says when to stop
            max_concurrent_trials=settings.workers,
            reuse_actors=True,
        ),
        run_config=tune.RunConfig(
            name=settings.name,
            storage_path=str(settings.storage_path),
            verbose=0,
            failure_config=tune.FailureConfig(max_failures=0),
        ),
    )
    tuner.fit()
