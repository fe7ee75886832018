"""How a search stops the private Ray it started: `release()` stops it in the background
(the driver writes its report meanwhile), leaving the `with` waits for the end and raises
what the stop raised; the autoscaler monitor this process spawned is killed first, and
nothing is killed when the search joined a cluster or found Ray running. Ray itself is
replaced by fakes here: these are the session's decisions, not Ray's."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import autoembed.search.ray_tune as ray_tune
from autoembed.search.ray_tune import ray_session


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


def test_release_stops_ray_in_the_background_and_exit_waits(
        monkeypatch: pytest.MonkeyPatch, node: dict[str, list[Any]]) -> None:
    fake = FakeRay()
    monkeypatch.setattr(ray_tune, "ray", fake)
    session = ray_session(None, 2, None)
    session.__enter__()
    session.release()
    assert fake.stopping.wait(30)  # the stop runs while this thread goes on...
    assert fake.initialized and fake.stopped_in is None
    assert _killed(node) == {"monitor"}  # ...after only the monitor was killed
    fake.go.set()
    session.__exit__(None, None, None)  # ...and leaving waits for its end
    assert not fake.initialized and fake.stopped_in == "ray-shutdown"


def test_a_failed_stop_is_raised_when_leaving(monkeypatch: pytest.MonkeyPatch,
                                             node: dict[str, list[Any]]) -> None:
    fake = FakeRay(fails=True)
    fake.go.set()
    monkeypatch.setattr(ray_tune, "ray", fake)
    session = ray_session(None, 2, None)
    session.__enter__()
    session.release()
    with pytest.raises(RuntimeError, match="would not stop"):
        session.__exit__(None, None, None)


def test_without_release_exit_stops_ray_in_this_thread(monkeypatch: pytest.MonkeyPatch,
                                                      node: dict[str, list[Any]]) -> None:
    fake = FakeRay()
    fake.go.set()
    monkeypatch.setattr(ray_tune, "ray", fake)
    with ray_session(None, 2, None):
        pass  # Ctrl-C or an error before the trials were over: no release()
    assert fake.stopped_in == threading.current_thread().name and _killed(node) == {"monitor"}


def test_a_cluster_or_a_running_ray_kills_nothing(monkeypatch: pytest.MonkeyPatch,
                                                 node: dict[str, list[Any]]) -> None:
    fake = FakeRay()
    fake.go.set()
    monkeypatch.setattr(ray_tune, "ray", fake)
    monkeypatch.setattr(ray_tune, "_probe", lambda address: None)
    with ray_session("10.0.0.5:6379", 2, None) as joined:
        joined.release()
    assert fake.stopped_in == "ray-shutdown" and not _killed(node)  # disconnected only
    fake = FakeRay(initialized=True)  # a notebook's Ray: used, left running
    monkeypatch.setattr(ray_tune, "ray", fake)
    with ray_session(None, 2, None) as used:
        used.release()
    assert fake.initialized and fake.stopped_in is None and not _killed(node)
