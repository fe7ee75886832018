"""A team store: the Optuna study and the MLflow runs in a real PostgreSQL server (started
here as user postgres on a free loopback port, stopped by PID), selected by URL; and the
bad URLs a user can give, refused in one line with exit status 2 before anything runs."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from _services import PostgresServer, free_port, need_postgres

from autoembed.cli import main

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "search_spaces" / "tiny.yaml")


@pytest.fixture(scope="module")
def pg() -> Iterator[PostgresServer]:
    server = PostgresServer(need_postgres()).start()
    try:
        yield server
    finally:
        server.stop()


def _one_error_line(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def test_storage_that_is_not_a_database_url_is_refused(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    rc = main(["search", "--budget", "1GB", "--space", TINY, "--study", "x",
               "--runs-dir", str(tmp_path), "--tracking-uri", "none",
               "--storage", "redis://secret-host/0"])
    line = _one_error_line(capsys.readouterr().err)
    assert rc == 2
    assert "--storage 'redis://secret-host/0' is not a database URL" in line
    assert "postgresql://" in line  # the fix
    assert not (tmp_path / "x").exists()


def test_storage_nobody_answers_is_refused_with_the_password_masked(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()  # nothing listens there
    url = f"postgresql://alice:hunter2@127.0.0.1:{port}/optuna"
    rc = main(["search", "--budget", "1GB", "--space", TINY, "--study", "x",
               "--runs-dir", str(tmp_path), "--tracking-uri", "none", "--storage", url])
    line = _one_error_line(capsys.readouterr().err)
    assert rc == 2
    assert f"postgresql://alice:***@127.0.0.1:{port}/optuna" in line
    assert "hunter2" not in line
    assert "cannot open the study storage" in line
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
def test_search_keeps_study_and_runs_in_postgresql(pg: PostgresServer, tmp_path: Path) -> None:
    import optuna
    import psycopg2
    from mlflow.tracking import MlflowClient

    # Optuna and MLflow each keep an alembic_version table: one database each.
    pg.createdb("ae_optuna")
    pg.createdb("ae_mlflow")
    storage, tracking = pg.url("ae_optuna"), pg.url("ae_mlflow")
    runs = tmp_path / "runs"
    proc = subprocess.run(
        [sys.executable, "-m", "autoembed", "search", "--budget", "1GB", "--space", TINY,
         "--trials", "2", "--device", "cpu", "--study", "team", "--runs-dir", str(runs),
         "--storage", storage, "--tracking-uri", tracking, "--json"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    # nothing went to the default SQLite files
    assert not (runs / "optuna.db").exists() and not (runs / "mlflow.db").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]  # no ./mlruns

    study = optuna.load_study(study_name="team", storage=storage)
    trained = [t for t in study.trials
               if (t.user_attrs.get("autoembed") or {}).get("status") == "complete"]
    assert len(trained) == 2
    assert {m["trial"] for m in out["front"]} <= {t.number for t in trained}

    client = MlflowClient(tracking_uri=tracking)
    exp = client.get_experiment_by_name("team")
    assert exp is not None
    # artifacts beside the driver's runs (the database holds no files)
    assert exp.artifact_location == (runs / "mlartifacts" / "team").as_uri()
    assert (runs / "mlartifacts" / "team").is_dir()
    runs_ = client.search_runs([exp.experiment_id])
    trial_runs = [r for r in runs_ if r.data.tags.get("autoembed.role") == "trial"]
    top = [r for r in runs_ if "mlflow.parentRunId" not in r.data.tags]
    assert len(top) == 1 and top[0].info.status == "FINISHED"  # the search's parent run
    by_trial = {int(r.data.tags["trial"]): r for r in trial_runs}
    for t in study.trials:  # every Optuna trial has its MLflow run, and it finished
        assert t.number in by_trial, t.number
    for t in trained:
        assert by_trial[t.number].info.status == "FINISHED"
        assert by_trial[t.number].data.metrics["quality"] == pytest.approx(
            t.user_attrs["autoembed"]["metrics"]["quality"])

    # and the rows are really in PostgreSQL's tables
    with psycopg2.connect(host="127.0.0.1", port=pg.port, user="postgres",
                          dbname="ae_optuna") as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM trials")
        assert cur.fetchone()[0] == len(study.trials)
    with psycopg2.connect(host="127.0.0.1", port=pg.port, user="postgres",
                          dbname="ae_mlflow") as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM runs WHERE experiment_id = %s",
                    (int(exp.experiment_id),))
        assert cur.fetchone()[0] == len(runs_)


def test_tracking_database_nobody_answers_is_refused_in_seconds(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()  # MLflow alone would retry this for about two minutes
    url = f"postgresql://bob:pw123@127.0.0.1:{port}/mlflow"
    rc = main(["search", "--budget", "1GB", "--space", TINY, "--study", "x",
               "--runs-dir", str(tmp_path), "--tracking-uri", url])
    line = _one_error_line(capsys.readouterr().err)
    assert rc == 2
    assert f"MLflow database 'postgresql://bob:***@127.0.0.1:{port}/mlflow' cannot be " \
           "reached" in line and "pw123" not in line
    assert not (tmp_path / "x").exists()


def test_missing_postgresql_skips_here_but_fails_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    import _services

    monkeypatch.setattr(_services, "postgres_bin", lambda: None)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no PostgreSQL binaries"):
        _services.need_postgres()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match=r"\.ci/run installs PostgreSQL"):
        _services.need_postgres()
