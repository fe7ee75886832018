"""The MLflow tracker against an embedded SQLite store: run layout, metrics, tags, Pareto tags,
artifacts, resume, and failures that must not stop a search.

Creating MLflow's SQLite schema takes several seconds, so the tests share one runs directory
(one store, the session fixture `store_dir`) and each records its own study (experiment).
"""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from autoembed import EmbeddingConfig, TableConfig, estimate, load_config
from autoembed.errors import ConfigError
from autoembed.runner import Evaluation, TrialResult
from autoembed.tracking import (
    NullTracker,
    SearchTracker,
    TrackingUnreachableError,
    make_tracker,
    resolve_store,
)
from autoembed.tracking.run_data import trial_payload

STUDY = "unit-study"
DATA = {"name": "synthetic-ctr", "vocab_sizes": [1000, 50], "rows": [2000, 200, 200]}
PARAMS = {"budget": "8GB", "space": "tiny.yaml", "sampler": "tpe", "seed": "0", "data": "x"}


@dataclass(frozen=True)
class FakeRecord:
    """A trial record as the search driver hands it over (the fields of `TrialRow` it reads)."""

    number: int
    status: str
    config: EmbeddingConfig
    estimate: Mapping[str, Any]
    result: TrialResult | None
    reason: str | None = None
    ray_trial_id: str | None = None
    metrics: dict[str, float | None] = field(default_factory=dict)  # the search's objectives
    overshoot: float = 0.0


def config(dim: int) -> EmbeddingConfig:
    return EmbeddingConfig(
        task="ctr",
        tables=(TableConfig("f0", 1000), TableConfig("f1", 50)),
        dim=dim,
        dense_layers=(16,),
        batch_size=64,
        data=DATA,
    )


def make_records() -> list[FakeRecord]:
    """Five trials: two complete (one measured on a GPU), one infeasible, one failed, one
    pruned. Quality and memory are hand-set so tests can check exact values."""
    out = []
    for n, (dim, status) in enumerate(
        [(8, "complete"), (16, "complete"), (512, "infeasible"), (32, "failed"), (4, "pruned")]
    ):
        cfg = config(dim)
        est = estimate(cfg).to_dict()
        if status == "infeasible":
            out.append(
                FakeRecord(n, status, cfg, est, None, reason="device_total 9.1 GB > budget 8 GB",
                           overshoot=0.14)
            )
            continue
        curve = tuple(
            Evaluation(step, step * 64, 0.6 + 0.01 * n + 0.001 * step, {"auc": 0.6, "logloss": 0.5},
                       step / 100)
            for step in (10, 20, 30)
        )
        result = TrialResult(
            status=status,
            config=cfg,
            test_quality=None if status == "failed" else 0.7 + 0.01 * n,
            metrics={} if status == "failed" else {"auc": 0.7 + 0.01 * n, "logloss": 0.4},
            curve=curve if status != "failed" else (),
            steps=30,
            samples=30 * 64,
            throughput=1000.0 * (n + 1),
            steps_to_target=20 if n == 1 else None,
            target=0.62,
            latency_ms={"p50_b1": 0.5, "p99_b1": 0.9, "p50_b256": 2.0, "p99_b256": 3.0},
            estimate=est,
            measured_allocated_peak=1_000_000 if n == 1 else None,
            rss_peak=123_456_789,
            error="RuntimeError: boom" if status == "failed" else None,
            wall_seconds=2.5,
            env={"device": "cpu", "torch": "2.13.0"},
        )
        objectives = {"quality": result.test_quality, "memory": 12345.0 + n, "latency": None}
        out.append(FakeRecord(n, status, cfg, est, result, ray_trial_id=f"ray_{n:05d}",
                              metrics=objectives))
    return out


def tracker_cycle(
    tracker: SearchTracker, tmp: Path, study: str, pareto: Sequence[int] = (0, 4)
) -> None:
    space = tmp / "tiny.yaml"
    space.write_text("dim: [4, 8, 16]\n")
    pj = tmp / "pareto.json"
    pj.write_text('{"study": "unit-study"}')
    tracker.start(study, PARAMS, space)
    for r in make_records():
        tracker.trial(r)
    tracker.finish(list(pareto), [pj])
    tracker.close("FINISHED")
    tracker.close("FINISHED")  # safe twice


def read_back(uri: str, study: str) -> dict[str, Any]:
    """Every active run of the study's experiment, by role."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(study)
    assert exp is not None
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    by_role: dict[str, list[Any]] = {}
    for r in runs:
        by_role.setdefault(r.data.tags.get("autoembed.role", "?"), []).append(r)
    trials = {int(r.data.tags["trial"]): r for r in by_role.get("trial", [])}
    assert len(trials) == len(by_role.get("trial", [])), "one run per trial number"
    return {"client": client, "exp": exp, "by_role": by_role, "trials": trials}


def check_layout(seen: dict[str, Any], pareto: Sequence[int] = (0, 4)) -> None:
    """Shared by the SQLite and server tests: what any store must hold after one cycle."""
    client, by_role, trials = seen["client"], seen["by_role"], seen["trials"]
    (parent,) = by_role["search"]
    (group,) = by_role["infeasible-group"]
    pid = parent.info.run_id
    assert parent.info.status == "FINISHED"
    assert {k: parent.data.params[k] for k in PARAMS} == PARAMS
    assert sorted(trials) == [0, 1, 2, 3, 4]
    for n, run in trials.items():
        want_parent = group.info.run_id if n == 2 else pid
        assert run.data.tags["mlflow.parentRunId"] == want_parent
        assert run.data.tags["trial"] == str(n)
        assert run.data.tags["pareto"] == ("true" if n in pareto else "false")
    assert group.data.tags["mlflow.parentRunId"] == pid
    assert parent.data.tags["pareto_trials"] == ",".join(str(n) for n in sorted(pareto))
    assert trials[0].data.tags["status"] == "complete"
    assert trials[0].data.tags["ray_trial_id"] == "ray_00000"
    assert trials[3].info.status == "FAILED"
    assert trials[3].data.tags["reason"] == "RuntimeError: boom"
    assert trials[2].data.tags["reason"] == "device_total 9.1 GB > budget 8 GB"
    assert trials[2].info.run_name == "infeasible-0002"
    assert trials[0].info.run_name == "trial-0000"
    names = {f.path for f in client.list_artifacts(pid)}
    assert {"tiny.yaml", "pareto.json"} <= names
    assert {f.path for f in client.list_artifacts(trials[1].info.run_id)} == {
        "config.yaml",
        "memory.json",
    }
    assert client.list_artifacts(trials[2].info.run_id) == []


_SHARED: dict[str, Path] = {}


@pytest.fixture(scope="session", name="store_dir")
def _store_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One runs directory (one embedded store) for every test module that imports this
    fixture (each import is its own fixture definition: the module-level cache joins them)."""
    if "runs" not in _SHARED:
        _SHARED["runs"] = tmp_path_factory.mktemp("runs")
    return _SHARED["runs"]


@pytest.fixture
def runs(store_dir: Path) -> Path:
    return store_dir


@pytest.fixture
def sqlite_uri(runs: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return f"sqlite:///{runs / 'mlflow.db'}"


@pytest.fixture
def study(request: pytest.FixtureRequest) -> str:
    return request.node.name.removeprefix("test_").replace("_", "-")


def test_default_store_layout(tmp_path: Path, runs: Path, sqlite_uri: str, study: str) -> None:
    tracker = make_tracker(None, runs)
    assert isinstance(tracker, SearchTracker)
    tracker_cycle(tracker, tmp_path, study)
    assert (runs / "mlflow.db").is_file()
    seen = read_back(sqlite_uri, study)
    check_layout(seen)
    # the embedded store keeps artifacts under <runs-dir>/mlartifacts/<study>/
    assert seen["exp"].artifact_location == (runs / "mlartifacts" / study).as_uri()
    assert list((runs / "mlartifacts" / study).rglob("config.yaml"))


def test_metrics_by_hand(tmp_path: Path, runs: Path, sqlite_uri: str, study: str) -> None:
    tracker_cycle(make_tracker(None, runs), tmp_path, study)
    seen = read_back(sqlite_uri, study)
    client, trials = seen["client"], seen["trials"]
    recs = make_records()
    m1 = trials[1].data.metrics
    assert m1["quality"] == pytest.approx(0.71)
    assert m1["auc"] == pytest.approx(0.71)
    assert m1["throughput"] == 2000.0
    assert m1["steps_to_target"] == 20
    assert m1["latency_p50_b1_ms"] == 0.5 and m1["latency_p99_b256_ms"] == 3.0
    est = recs[1].estimate
    assert m1["estimate_device_total"] == est["device_total"]
    assert m1["estimate_allocated_peak"] == est["allocated_peak"]
    assert m1["measured_allocated_peak"] == 1_000_000
    assert m1["estimate_rel_error"] == pytest.approx((est["allocated_peak"] - 1e6) / 1e6)
    assert m1["rss_peak"] == 123_456_789
    assert m1["memory"] == 12346.0  # the search's objective value, as given
    # no GPU measured trial 0: no measured figure, no error
    assert "measured_allocated_peak" not in trials[0].data.metrics
    assert "estimate_rel_error" not in trials[0].data.metrics
    hist = client.get_metric_history(trials[1].info.run_id, "valid_quality")
    assert [(h.step, round(h.value, 6)) for h in hist] == [(10, 0.62), (20, 0.63), (30, 0.64)]
    assert [h.step for h in client.get_metric_history(trials[1].info.run_id, "valid_auc")] == [
        10,
        20,
        30,
    ]
    # infeasible: the estimate only
    m2 = trials[2].data.metrics
    assert m2["estimate_device_total"] == recs[2].estimate["device_total"]
    assert m2["budget_overshoot"] == 0.14
    assert all(k.startswith("estimate_") for k in m2 if k != "budget_overshoot")
    assert trials[2].data.params["dim"] == "512"
    assert trials[0].data.params == recs[0].config.flat_params()
    (group,) = seen["by_role"]["infeasible-group"]
    assert group.data.metrics["infeasible_proposals"] == 1


def test_config_artifact_round_trips(
    tmp_path: Path, runs: Path, sqlite_uri: str, study: str
) -> None:
    import json

    tracker_cycle(make_tracker(None, runs), tmp_path, study)
    seen = read_back(sqlite_uri, study)
    client, run = seen["client"], seen["trials"][1]
    got = Path(client.download_artifacts(run.info.run_id, "config.yaml", str(tmp_path)))
    cfg = load_config(got)
    want = make_records()[1].config
    assert cfg == want and cfg.data == want.data
    mem = json.loads(
        Path(client.download_artifacts(run.info.run_id, "memory.json", str(tmp_path))).read_text()
    )
    assert mem["device_total"] == make_records()[1].estimate["device_total"]


def test_resume_reuses_parent_and_replaces_rerecorded_trials(
    runs: Path, sqlite_uri: str, study: str
) -> None:
    first = make_tracker(None, runs)
    first.start(study, PARAMS, None)
    recs = make_records()
    for r in recs[:3]:
        first.trial(r)
    first.close("KILLED")  # Ctrl-C
    second = make_tracker(None, runs)
    second.start(study, {**PARAMS, "resumed": "yes"}, None)
    for r in recs[1:]:  # trials 1 and 2 are recorded again
        second.trial(r)
    second.finish([1], [])
    second.close("FINISHED")
    seen = read_back(sqlite_uri, study)
    (parent,) = seen["by_role"]["search"]
    (group,) = seen["by_role"]["infeasible-group"]
    assert parent.info.status == "FINISHED" and parent.data.params["resumed"] == "yes"
    assert sorted(seen["trials"]) == [0, 1, 2, 3, 4]
    assert {n: r.data.tags["pareto"] for n, r in seen["trials"].items()} == {
        0: "false",
        1: "true",
        2: "false",
        3: "false",
        4: "false",
    }
    assert group.data.metrics["infeasible_proposals"] == 2  # counted per record, not per trial


def test_a_new_search_of_a_finished_study_gets_a_new_parent(
    runs: Path, sqlite_uri: str, study: str
) -> None:
    for _ in range(2):
        t = make_tracker(None, runs)
        t.start(study, PARAMS, None)
        t.close("FINISHED")
    assert len(read_back(sqlite_uri, study)["by_role"]["search"]) == 2


def test_a_new_study_never_records_into_another_searchs_experiment(
    tmp_path: Path, runs: Path, sqlite_uri: str, study: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A search under another --runs-dir with the same --tracking-uri and --study: its
    study is new there, and it replaced the first search's trial runs in the shared
    experiment (deleted by number). Refused in one line, exit 2, the runs kept."""
    from autoembed.cli import main

    first = make_tracker(None, runs)
    first.start(study, PARAMS, None)
    for r in make_records()[:2]:
        first.trial(r)
    first.close("FINISHED")
    before = {n: r.info.run_id for n, r in read_back(sqlite_uri, study)["trials"].items()}
    rc = main(["search", "--budget", "800MB", "--space", "tiny", "--trials", "1", "--study",
               study, "--executor", "local", "--runs-dir", str(tmp_path / "elsewhere"),
               "--tracking-uri", sqlite_uri])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert f"holds the runs of another search named '{study}'" in err
    seen = read_back(sqlite_uri, study)
    assert {n: r.info.run_id for n, r in seen["trials"].items()} == before
    assert len(seen["by_role"]["search"]) == 1
    # nothing made: the same command in its own store runs as a new study
    assert not (tmp_path / "elsewhere" / study).exists()


def test_a_deleted_experiment_is_never_restored_nor_its_runs_replaced(
    tmp_path: Path, runs: Path, sqlite_uri: str, study: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The user deleted a search's experiment in MLflow, then started a study of its name:
    the tracker restored it, which makes all its runs active again (MLflow's restore), and
    the new search replaced them by trial number. Refused in one line, exit 2; the
    experiment and its runs stay in the bin as the user left them."""
    from mlflow import MlflowClient

    from autoembed.cli import main

    first = make_tracker(None, runs)
    first.start(study, PARAMS, None)
    for r in make_records()[:2]:
        first.trial(r)
    first.close("FINISHED")
    client = MlflowClient(tracking_uri=sqlite_uri)
    exp = client.get_experiment_by_name(study)
    assert exp is not None
    run_ids = [r.info.run_id for r in client.search_runs([exp.experiment_id])]
    client.delete_experiment(exp.experiment_id)
    rc = main(["search", "--budget", "800MB", "--space", "tiny", "--trials", "1", "--study",
               study, "--executor", "local", "--runs-dir", str(tmp_path / "fresh"),
               "--tracking-uri", sqlite_uri])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert f"deleted experiment '{study}' (id {exp.experiment_id})" in err
    assert client.get_experiment(exp.experiment_id).lifecycle_stage == "deleted"
    assert {client.get_run(r).info.lifecycle_stage for r in run_ids} == {"deleted"}
    # a tracker started on it anyway (deleted meanwhile) turns itself off, restoring nothing
    late = make_tracker(None, runs)
    late.start(study, PARAMS, None)
    assert not late.enabled
    assert client.get_experiment(exp.experiment_id).lifecycle_stage == "deleted"


def test_failures_mid_search_warn_and_never_raise(
    runs: Path, sqlite_uri: str, study: str, caplog: pytest.LogCaptureFixture
) -> None:
    from autoembed.tracking.mlflow_store import MAX_FAILURES, MlflowTracker

    tracker = make_tracker(None, runs)
    assert isinstance(tracker, MlflowTracker)
    tracker.start(study, PARAMS, None)
    calls = []

    def broken(*a: Any, **k: Any) -> Any:
        calls.append(1)
        raise ConnectionError("server went away")

    tracker._client.create_run = broken  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, logger="autoembed.tracking"):
        for r in make_records():
            tracker.trial(r)  # never raises
        tracker.finish([0], [])
        tracker.close("FINISHED")
    assert len(calls) == MAX_FAILURES  # then tracking turned itself off
    assert not tracker.enabled
    assert "server went away" in caplog.text and "tracking is off" in caplog.text


def test_failed_start_turns_tracking_off(
    runs: Path, sqlite_uri: str, study: str, caplog: pytest.LogCaptureFixture
) -> None:
    from autoembed.tracking.mlflow_store import MlflowTracker

    tracker = make_tracker(None, runs)
    assert isinstance(tracker, MlflowTracker)

    def broken(*a: Any, **k: Any) -> Any:
        raise RuntimeError("database is locked")

    tracker._client.get_experiment_by_name = broken  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, logger="autoembed.tracking"):
        tracker.start(study, PARAMS, None)
        tracker.trial(make_records()[0])
        tracker.close("FINISHED")
    assert not tracker.enabled
    assert caplog.text.count("database is locked") == 1


def test_none_and_env_uri(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(make_tracker("none", tmp_path), NullTracker)
    assert isinstance(make_tracker("NONE", tmp_path), NullTracker)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "none")
    assert isinstance(make_tracker(None, tmp_path), NullTracker)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'env.db'}")
    store = resolve_store(None, tmp_path / "runs")
    assert store.kind == "embedded" and store.artifact_root == tmp_path / "mlartifacts"


def test_file_store_refused_with_a_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    with pytest.raises(ConfigError, match="MLFLOW_ALLOW_FILE_STORE.*sqlite:///"):
        make_tracker(str(tmp_path / "mlruns"), tmp_path)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unreachable_server_fails_within_seconds(tmp_path: Path) -> None:
    t0 = time.monotonic()
    with pytest.raises(TrackingUnreachableError, match="not reachable.*--tracking-uri none") as e:
        make_tracker(f"http://127.0.0.1:{_free_port()}", tmp_path)
    assert time.monotonic() - t0 < 3
    assert e.value.exit_code == 2
    assert "\n" not in str(e.value)


def test_a_uri_of_a_scheme_mlflow_lacks_is_bad_input(tmp_path: Path) -> None:
    """--tracking-uri foo://x exited 1 (a store fault) with MLflow's exception cut off."""
    with pytest.raises(ConfigError) as e:
        make_tracker("foo://x", tmp_path)
    assert e.value.exit_code == 2 and "\n" not in str(e.value)
    assert str(e.value).startswith("--tracking-uri 'foo://x': ") and "'none'" in str(e.value)


def test_silent_server_times_out_in_3_seconds(tmp_path: Path) -> None:
    """README's 3 s: the probe waits the 3 s out (not less: it is the timeout that fires) and
    gives up by 3 s + 0.5 s, a margin for a loaded machine (measured: 3.01 s idle)."""
    with socket.socket() as s:  # accepts connections, never answers
        s.bind(("127.0.0.1", 0))
        s.listen(4)
        t0 = time.monotonic()
        with pytest.raises(TrackingUnreachableError, match="timed out"):
            make_tracker(f"http://127.0.0.1:{s.getsockname()[1]}", tmp_path)
        assert 3.0 <= time.monotonic() - t0 < 3.5


def test_payload_without_mlflow() -> None:
    recs = make_records()
    p = trial_payload(recs[2], STUDY)
    assert p.name == "infeasible-0002" and p.run_status == "FINISHED"
    assert {m.key for m in p.metrics} == {"budget_overshoot"} | {
        f"estimate_{k}"
        for k in (
            "parameters",
            "gradients",
            "optimizer_state",
            "activations",
            "temporaries",
            "allocated_peak",
            "reserved_peak",
            "overhead",
            "device_total",
            "serving_bytes",
        )
    }
    assert trial_payload(recs[3], STUDY).run_status == "FAILED"


def test_import_stays_light() -> None:
    code = (
        "import sys, autoembed.tracking, autoembed.export; "
        "print('mlflow' in sys.modules, 'ray' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_a_long_trials_batches_stay_within_mlflows_limits(tmp_path: Path) -> None:
    """Every log_batch request holds at most 100 params and tags and 1000 entities in all
    (mlflow.utils.validation), however many a trial has: 40 params and 990 curve points
    once went out as one request of 1030 and were refused."""
    from mlflow.entities import Metric

    from autoembed.tracking.mlflow_store import MlflowTracker
    from autoembed.tracking.store import TrackingStore

    calls: list[tuple[int, int, int]] = []

    class Client:
        def log_batch(self, run_id: str, metrics: Sequence[Any] = (),
                      params: Sequence[Any] = (), tags: Sequence[Any] = ()) -> None:
            calls.append((len(metrics), len(params), len(tags)))

    tracker = MlflowTracker(Client(), TrackingStore("sqlite:///x.db", "embedded"),  # type: ignore[arg-type]
                            tmp_path)
    for n_params, n_tags, n_metrics in ((40, 5, 990), (150, 60, 2500), (0, 0, 0), (3, 2, 7)):
        calls.clear()
        tracker._log("run", {f"p{i}": i for i in range(n_params)},
                     {f"t{i}": "x" for i in range(n_tags)},
                     [Metric(f"m{i}", 1.0, 0, 0) for i in range(n_metrics)])
        assert all(p + t <= 100 and m + p + t <= 1000 for m, p, t in calls), calls
        assert tuple(map(sum, zip(*calls, strict=True))) == (n_metrics, n_params, n_tags)


def test_a_refused_study_names_the_store_without_its_password() -> None:
    from types import SimpleNamespace

    from autoembed.errors import ConfigError
    from autoembed.pipeline.driver import _check_new_runs

    tracker = SimpleNamespace(uri="postgresql://ann:s3cret@db:5432/mlflow",
                              deleted_experiment=lambda name: "7",
                              holds_search=lambda name: False)
    plan = SimpleNamespace(name="clicks")
    for existing, fix in ((None, "restore and rename it"), (object(), "restore it to resume")):
        with pytest.raises(ConfigError) as e:
            _check_new_runs(SimpleNamespace(existing=existing), plan, tracker)  # type: ignore[arg-type]
        assert "s3cret" not in str(e.value) and "postgresql://ann:***@db:5432" in str(e.value)
        assert fix in str(e.value) and "\n" not in str(e.value)
