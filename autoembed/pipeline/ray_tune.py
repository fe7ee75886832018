"""Ray Tune glue for `pipeline.executor.RayTuneExecutor`: a `Searcher` over the
SearchEngine (ask/price/tell happen in the driver), a scheduler that stops trials that cannot
reach the front, `TimeLimits` (kills the worker of a trial past its limit), and the Ray
lifecycle: a private Ray unless --ray-address, shut down on the way out (Ctrl-C and errors
too) with its session folder removed; a Ray already running or a cluster is left as it is.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Before Ray starts: the classic (quiet at verbose=0) output; Ctrl-C a KeyboardInterrupt in
# the driver; trial workers at the driver's priority (throughput is an objective; a niced
# trial starves next to any busy process).
os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
os.environ.setdefault("TUNE_DISABLE_SIGINT_HANDLER", "1")
os.environ.setdefault("RAY_worker_niceness", "0")
# No idle worker prestarted per CPU: trial actors start on demand (a faster start overall).
os.environ.setdefault("RAY_prestart_worker_first_driver", "0")
# Tune's own records, which autoembed does not read: only the JSON logger (`run_tune`) and
# error files; the experiment state written once at the end.
os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
os.environ.setdefault("TUNE_GLOBAL_CHECKPOINT_S", str(10**9))

import ray  # noqa: E402
from ray import tune  # noqa: E402
from ray.tune.schedulers import FIFOScheduler, TrialScheduler  # noqa: E402
from ray.tune.search import Searcher  # noqa: E402

from autoembed.errors import ConfigError, first_line  # noqa: E402
from autoembed.pipeline.engine import SearchEngine  # noqa: E402
from autoembed.pipeline.resources import OWN_RESOURCES  # noqa: E402
from autoembed.pipeline.session import remove_session  # noqa: E402
from autoembed.pipeline.trainable import FINAL, PAYLOAD, RESOURCES, train_trial  # noqa: E402


class _QuietDefaultTokenAuth(logging.Filter):
    """Drops Ray's notice that a new local cluster turned on token authentication (its
    default, printed on every search); the warning that auth is OFF still shows."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Token authentication is enabled")


logging.getLogger("ray._private.authentication.authentication_token_setup").addFilter(
    _QuietDefaultTokenAuth())

__all__ = ["TuneSettings", "BudgetSearcher", "FrontScheduler", "TimeLimits", "run_tune",
           "ray_session", "node_problems"]

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
    """How trials are placed (workers, CPUs and GPUs per trial, where Tune writes) and run:
    the workload's module-level `runner` with `runner_kwargs` (through the object store) on
    each proposal's payload plus `placement` (device, threads)."""

    workers: int
    cpus_per_trial: int
    gpus_per_trial: int
    storage_path: Path
    name: str
    placement: Mapping[str, Any]
    runner: Callable[..., Mapping[str, Any]]
    runner_kwargs: Mapping[str, Any] = field(default_factory=dict)
    # Ray custom resources per trial; several alternate trial by trial (--trial-resources)
    trial_resources: tuple[Mapping[str, float], ...] = field(default_factory=tuple)
    faults: Mapping[int, str] = field(default_factory=dict)  # launch order -> injected fault


class _DriverOnly:
    """Pickles without `engine` (Tune pickles its parts; the engine stays in the driver)."""

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "engine"}


class BudgetSearcher(_DriverOnly, Searcher):
    """Proposes only configs that fit; infeasible ones are told and recorded inside
    `engine.propose()` and never become Tune trials."""

    def __init__(self, engine: SearchEngine, settings: TuneSettings) -> None:
        super().__init__()  # no single metric: the engine reads the results itself
        self.engine = engine
        self.settings = settings
        self.numbers: dict[str, int] = {}
        self.launched = 0
        self._nodes = [n["Resources"] for n in _alive_nodes()]

    def suggest(self, trial_id: str) -> dict[str, Any] | None:
        p = self.engine.propose()
        if p is None:
            return Searcher.FINISHED  # type: ignore[return-value]
        self.numbers[trial_id] = p.number
        self.engine.attach(p.number, trial_id)
        alternatives = self.settings.trial_resources
        custom = dict(alternatives[self.launched % len(alternatives)]) if alternatives else {}
        self.launched += 1
        # a trial runs on one node: never ask for more memory than the largest node it may
        # use has (Tune would wait forever)
        available = max((n.get("memory", 0.0) for n in self._nodes
                         if all(n.get(k, 0.0) >= v for k, v in custom.items())),
                        default=0.0) or None
        return {
            "number": p.number,
            "memory_request": _memory_request(p.host_bytes, available),
            RESOURCES: custom,
            # one JSON string: Tune copies configs into every result file, flattened
            PAYLOAD: json.dumps({**p.payload, "number": p.number, **self.settings.placement,
                                 "fault": self.settings.faults.get(
                                     self.engine.trainables_started)})}

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

    def save(self, checkpoint_path: str) -> None:
        return None

    def restore(self, checkpoint_path: str) -> None:
        return None


class FrontScheduler(_DriverOnly, FIFOScheduler):
    """FIFO, plus: stop a trial when `engine.observe` says it cannot reach the front."""

    def __init__(self, engine: SearchEngine) -> None:
        super().__init__()
        self.engine = engine

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> str:
        if FINAL in result or "quality" not in result:
            return str(TrialScheduler.CONTINUE)
        number = int(trial.config["number"])
        if self.engine.observe(number, result):
            return str(TrialScheduler.STOP)
        return str(TrialScheduler.CONTINUE)


class TimeLimits(_DriverOnly, tune.Callback):
    """Every step of Tune's loop: running trials are `engine.trial_started`; each one
    `engine.overdue` lists is told `time_out` and its actor killed (a hung C call too), its
    resources freed for the next trial."""

    def __init__(self, engine: SearchEngine) -> None:
        super().__init__()
        self.engine = engine

    def on_step_begin(self, iteration: int, trials: list[Any], **info: Any) -> None:
        running = {int(t.config["number"]): t for t in trials
                   if t.status == "RUNNING" and "number" in t.config}
        for number in running:
            self.engine.trial_started(number)
        for number in self.engine.overdue():
            self.engine.time_out(number)
            trial = running.get(number)
            actor = trial.temporary_state.ray_actor if trial is not None else None
            if actor is not None:
                ray.kill(actor, no_restart=True)


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
            "address, or drop --ray-address for a private local Ray") from None


LOOPBACK = "127.0.0.1"


@contextmanager
def _on_loopback() -> Iterator[None]:
    """While a private Ray starts: its processes listen on 127.0.0.1 only. Ray keeps a
    loopback node address only with multi-node mode off (`_CLUSTER_ENV`=0, read once into
    `ray_constants.ENABLE_RAY_CLUSTER`): off for this start, in Ray's environment too."""
    from ray._private import ray_constants

    was_env = os.environ.get(_CLUSTER_ENV)
    was = getattr(ray_constants, "ENABLE_RAY_CLUSTER", True)
    os.environ[_CLUSTER_ENV] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = was
        if was_env is None:
            os.environ.pop(_CLUSTER_ENV, None)
        else:
            os.environ[_CLUSTER_ENV] = was_env


_CLUSTER_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


@contextmanager
def _without_idle_helpers() -> Iterator[None]:
    """While a private Ray starts: no autoscaler monitor and no log monitor (Ray's node
    settings `no_monitor` and `include_log_monitor`, which `ray start --no-monitor
    --include-log-monitor=False` sets and `ray.init` does not take), and no API server (the
    dashboard's head, which Ray starts even with include_dashboard=False, for job submission
    and the state API, and waits up to seconds for). A one-node Ray never scales, with
    log_to_driver off nothing reads what the log monitor ships, and a search neither submits
    jobs nor reads Ray's state API; each is a Python process of 1 to 1.5 CPU s at every
    search. Ray internals moved: Ray's defaults."""
    try:
        from ray._private.node import Node
    except ImportError:  # pragma: no cover - Ray internals moved
        yield
        return
    start = Node.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        params: Any = kwargs.get("ray_params", args[0] if args else None)
        if hasattr(params, "no_monitor") and hasattr(params, "include_log_monitor"):
            params.no_monitor, params.include_log_monitor = True, False
        if callable(getattr(self, "start_api_server", None)):
            self.start_api_server = lambda **_: None  # this node's only
        start(self, *args, **kwargs)

    Node.__init__ = init  # type: ignore[method-assign]
    try:
        yield
    finally:
        Node.__init__ = start  # type: ignore[method-assign]


@contextmanager
def _visible_gpus(gpu: str | None) -> Iterator[None]:
    """CUDA_VISIBLE_DEVICES=gpu while a private Ray starts (its processes inherit it, and
    Ray counts and hands out only the GPUs it names); as it was after. None: untouched."""
    if gpu is None:
        yield
        return
    was = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    try:
        yield
    finally:
        if was is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = was


class ray_session:  # noqa: N801 - used as a context manager, reads like one
    """`with ray_session(address, num_cpus):` a private Ray (or the given cluster), shut down
    on exit unless it was running before. `gpu`: a private Ray is started with
    CUDA_VISIBLE_DEVICES=gpu (Ray then places trials on that GPU only); a Ray already
    running, which cannot be limited so, is refused."""

    def __init__(self, address: str | None, num_cpus: int, num_gpus: int | None,
                 runtime_env: Mapping[str, Any] | None = None, gpu: str | None = None) -> None:
        self.gpu = gpu
        self.address = address
        self.num_cpus = num_cpus
        self.num_gpus = num_gpus
        self.runtime_env = dict(runtime_env) if runtime_env else None  # the user's code
        self.started = False
        self.session_dir: str | None = None  # the private Ray's, removed when it stops

    def __enter__(self) -> ray_session:
        if self.address:
            _probe(self.address)
        if ray.is_initialized():
            if self.gpu is not None:
                raise ConfigError(f"device cuda:N (GPU {self.gpu}): Ray is already running "
                                  "in this process and places trials on any of its GPUs; "
                                  "give device='cuda', or call ray.shutdown() first")
            return self
        kw: dict[str, Any] = dict(include_dashboard=False, log_to_driver=False,
                                  configure_logging=True, logging_level=logging.WARNING)
        if self.runtime_env:
            kw["runtime_env"] = self.runtime_env
        if self.address:
            try:
                ray.init(address=self.address, **kw)
            except (ConnectionError, ValueError, RuntimeError) as e:
                raise ConfigError(
                    f"--ray-address '{self.address}': cannot join that Ray cluster "
                    f"({first_line(e)}); check the address (e.g. 10.0.0.5:6379 from `ray start "
                    "--head`) and that "
                    "this machine may join it (Ray's token authentication)") from None
        else:
            with _on_loopback(), _visible_gpus(self.gpu), _without_idle_helpers():
                ray.init(address="local", num_cpus=self.num_cpus, num_gpus=self.num_gpus,
                         _node_ip_address=LOOPBACK, **kw)
        self.started = True
        self.session_dir = self.local_session()[0]
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop what this started, in this thread (the driver's Ray references are freed
        here; a core worker shut down under them ends the process): `ray.shutdown()`, after
        killing a private Ray's stateless autoscaler monitor, if one was started (where
        `_without_idle_helpers` could not stop it; Ray would wait out its 1 s SIGTERM
        grace)."""
        if not self.started:
            return
        self.started = False
        if not self.address:
            _kill_own_monitor()
        ray.shutdown()
        if self.session_dir is not None:
            remove_session(self.session_dir)
            self.session_dir = None

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

    def cpus_per_trial(self, workers: int, custom: Sequence[Mapping[str, float]] = ()) -> int:
        """A trial's CPUs on a cluster: the cluster's CPUs shared by `workers`, but no more
        than the smallest of the largest nodes each --trial-resources alternative can use
        (a trial runs on one node; asking for more than any node has waits forever)."""
        nodes = [n["Resources"] for n in _alive_nodes() if n["Resources"].get("CPU", 0) >= 1]
        if not nodes:
            return 1
        total = int(sum(n["CPU"] for n in nodes))
        largest = [max((int(n["CPU"]) for n in nodes
                        if all(n.get(k, 0.0) >= v for k, v in alt.items())), default=1)
                   for alt in (custom or ({},))]
        return max(1, min(min(largest), total // max(1, workers)))

    def check_resources(self, custom: Sequence[Mapping[str, float]]) -> None:
        """Every --trial-resources alternative fits on some live node, or a clear error
        (Tune would otherwise wait for it forever)."""
        if not custom:
            return
        nodes = [n["Resources"] for n in _alive_nodes()]
        for alt in custom:
            if any(all(n.get(k, 0.0) >= v for k, v in alt.items()) for n in nodes):
                continue
            have = sorted({k for n in nodes for k in n if k not in OWN_RESOURCES
                           and not k.startswith("node:") and not k.startswith("accelerator_")})
            wanted = ",".join(f"{k}={v:g}" for k, v in alt.items())
            raise ConfigError(
                f"--trial-resources {wanted}: no node of the Ray cluster has that "
                f"(custom resources there: {', '.join(have) or 'none'}); start a node with "
                "e.g. ray start --address HEAD:PORT --resources '{\"node_a\": 1}', or "
                "fix the name" + ("" if self.address else
                                  "; custom resources need a cluster: add --ray-address"))

    def check_nodes(self, needed: tuple[str, ...] = ()) -> None:
        """On a cluster: every live node with CPUs has the driver's autoembed (and the
        `needed` packages, e.g. the one built-in real data are read from), or a clear error
        before any trial."""
        if not self.address:
            return
        packages = ("autoembed", *needed)
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        def versions(names: tuple[str, ...]) -> dict[str, str | None]:
            # defined here so that Ray ships it by value: it runs where autoembed is missing
            from importlib.metadata import PackageNotFoundError, version

            found: dict[str, str | None] = {}
            for name in names:
                try:
                    found[name] = version(name)
                except PackageNotFoundError:
                    found[name] = None
            return found

        probe = ray.remote(num_cpus=0)(versions)
        refs = {f"{n['NodeManagerAddress']} ({n['NodeID'][:12]})": probe.options(
                    scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
                ).remote(packages)
                for n in _alive_nodes() if n["Resources"].get("CPU", 0) >= 1}
        try:
            found = dict(zip(refs, ray.get(list(refs.values()), timeout=NODE_CHECK_S),
                             strict=True))
        except ray.exceptions.GetTimeoutError:
            return  # a busy cluster: the trials will say it, node by node
        except ray.exceptions.RayError as e:
            raise ConfigError(
                f"a node of the Ray cluster cannot run a Python task "
                f"({first_line(e)[:200]}); give every node the driver's Python and packages "
                "(docs/clusters.md)") from None
        problems = node_problems(versions(packages), found)
        if problems:
            raise ConfigError(
                f"the Ray cluster's nodes lack what trials need: {'; '.join(problems)}; "
                "install the driver's environment on every node (pip install "
                "'autoembed[team,datasets]' of the same version; docs/clusters.md)")


NODE_CHECK_S = 120.0  # a worker process starts in seconds; a loaded node may take longer


def node_problems(here: Mapping[str, str | None],
                  nodes: Mapping[str, Mapping[str, str | None]]) -> list[str]:
    """What each node lacks against the driver: a package missing, or another autoembed."""
    out = []
    for node, there in nodes.items():
        for name, want in here.items():
            got = there.get(name)
            if got is None:
                out.append(f"node {node} has no {name}")
            elif name == "autoembed" and got != want:
                out.append(f"node {node} has autoembed {got}, the driver {want}")
    return out


def _kill_own_monitor() -> None:
    """SIGKILL the autoscaler monitor that this process's `ray.init` spawned, if any (Ray's
    record of its own child processes: nothing else is touched)."""
    try:
        from ray._private import ray_constants
        from ray._private.worker import _global_node
    except ImportError:  # pragma: no cover - Ray internals moved: Ray stops it itself
        return
    node: Any = _global_node
    procs = getattr(node, "all_processes", None) or {}
    for info in procs.get(ray_constants.PROCESS_TYPE_MONITOR, []):
        if info.process.poll() is None:
            info.process.kill()


def _alive_nodes() -> list[dict[str, Any]]:
    return [n for n in ray.nodes() if n.get("Alive")]


def run_tune(engine: SearchEngine, settings: TuneSettings) -> None:
    """Run trials until the engine says stop. Raises KeyboardInterrupt on Ctrl-C."""
    from ray.tune import PlacementGroupFactory
    from ray.tune.logger import JsonLoggerCallback

    def resources(config: dict[str, Any]) -> PlacementGroupFactory:
        bundle: dict[str, float] = {"CPU": settings.cpus_per_trial,
                                    "memory": float(config.get("memory_request", MEMORY_STEP)),
                                    **config.get(RESOURCES, {})}
        if settings.gpus_per_trial:
            bundle["GPU"] = settings.gpus_per_trial
        return PlacementGroupFactory([bundle])

    # Tune logs each result-file write at INFO; keep the driver's output to our progress
    logging.getLogger("ray.tune").setLevel(logging.WARNING)
    searcher = BudgetSearcher(engine, settings)
    # the runner's extras (a data file's bytes) travel once through the object store
    trainable = tune.with_parameters(train_trial, run=settings.runner,
                                     runner_kwargs=dict(settings.runner_kwargs))
    tuner = tune.Tuner(
        tune.with_resources(trainable, resources),
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
            # a trial's params.json (what Tune ran); trials past their time limit ended
            callbacks=[JsonLoggerCallback(), TimeLimits(engine)],
            failure_config=tune.FailureConfig(max_failures=0)))
    tuner.fit()
