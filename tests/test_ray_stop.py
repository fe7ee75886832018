"""How a search stops the private Ray it started: leaving the `with` stops it in the calling
thread (never in the background: a core worker shut down while the driver still frees Ray
objects ends the process) and raises what the stop raised; the autoscaler monitor this
process spawned is killed first, and nothing is killed when the search joined a cluster or
found Ray running. Ray itself is replaced by fakes here: these are the session's decisions,
not Ray's."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import autoembed.pipeline.ray_tune as ray_tune
from autoembed.pipeline.ray_tune import ray_session


class FakeProcess:
    def __init__(self) -> None:
        self.killed = False

    def poll(self) -> int | None:
        return -9 if self.killed else None

    def kill(self) -> None:
        self.killed = True


class FakeRay:
    """ray.init / is_initialized / shutdown; shutdown blocks until `go` is set."""

    def __init__(self, initialized: bool = False, fails: bool = False) -> None:
        self.initialized = initialized
        self.fails = fails
        self.go = threading.Event()
        self.stopping = threading.Event()
        self.stopped_in: str | None = None

    def init(self, **kwargs: Any) -> None:
        self.initialized = True

    def is_initialized(self) -> bool:
        return self.initialized

    def shutdown(self) -> None:
        self.stopping.set()
        assert self.go.wait(30)
        self.stopped_in = threading.current_thread().name
        self.initialized = False
        if self.fails:
            raise RuntimeError("raylet would not stop")


@pytest.fixture
def node(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Any]]:
    """This process's Ray node as Ray records it: one process per type."""
    from ray._private import ray_constants, worker

    procs = {t: [type("Info", (), {"process": FakeProcess()})()] for t in (
        ray_constants.PROCESS_TYPE_MONITOR, ray_constants.PROCESS_TYPE_RAYLET,
        ray_constants.PROCESS_TYPE_GCS_SERVER)}
    monkeypatch.setattr(worker, "_global_node", type("Node", (), {"all_processes": procs})())
    return procs


def _killed(procs: dict[str, list[Any]]) -> set[str]:
    return {t for t, infos in procs.items() if infos[0].process.killed}


def test_exit_stops_ray_in_this_thread_once(monkeypatch: pytest.MonkeyPatch,
                                            node: dict[str, list[Any]]) -> None:
    fake = FakeRay()
    fake.go.set()
    monkeypatch.setattr(ray_tune, "ray", fake)
    session = ray_session(None, 2, None)
    session.__enter__()
    session.__exit__(None, None, None)  # stopped here, after only the monitor was killed
    assert not fake.initialized and fake.stopped_in == threading.current_thread().name
    assert _killed(node) == {"monitor"}
    fake.stopped_in = None
    session.__exit__(None, None, None)  # a second exit stops nothing
    assert fake.stopped_in is None


def test_a_failed_stop_is_raised(monkeypatch: pytest.MonkeyPatch,
                                 node: dict[str, list[Any]]) -> None:
    fake = FakeRay(fails=True)
    fake.go.set()
    monkeypatch.setattr(ray_tune, "ray", fake)
    with pytest.raises(RuntimeError, match="would not stop"):
        with ray_session(None, 2, None):
            pass


def test_a_cluster_or_a_running_ray_kills_nothing(monkeypatch: pytest.MonkeyPatch,
                                                 node: dict[str, list[Any]]) -> None:
    fake = FakeRay()
    fake.go.set()
    monkeypatch.setattr(ray_tune, "ray", fake)
    monkeypatch.setattr(ray_tune, "_probe", lambda address: None)
    with ray_session("10.0.0.5:6379", 2, None):
        pass
    assert fake.stopped_in is not None and not _killed(node)  # disconnected only
    fake = FakeRay(initialized=True)  # a notebook's Ray: used, left running
    monkeypatch.setattr(ray_tune, "ray", fake)
    with ray_session(None, 2, None):
        pass
    assert fake.initialized and fake.stopped_in is None and not _killed(node)
