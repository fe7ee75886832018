"""A new embedded MLflow store starts as a copy of the schema the first one made (issue 25:
MLflow's migrations of an empty SQLite file take seconds on every new runs dir), and is the
same store MLflow itself would have made."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from autoembed.tracking.mlflow_store import open_client, schema_template
from autoembed.tracking.store import resolve_store


def schema(db: Path) -> tuple[dict[str, list[tuple[str, str, int]]], list[tuple[str]]]:
    """Each table's columns (name, type, not null) and the migration the store is at (the
    DDL text itself differs between two runs of MLflow's migrations)."""
    with sqlite3.connect(db) as c:
        names = [n for (n,) in c.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        tables = {n: sorted((r[1], r[2], r[3]) for r in c.execute(f"PRAGMA table_info('{n}')"))
                  for n in names}
        return tables, c.execute("SELECT version_num FROM alembic_version").fetchall()


def default_experiment(db: Path) -> list[tuple[int, str]]:
    with sqlite3.connect(db) as c:
        return c.execute("SELECT experiment_id, name FROM experiments").fetchall()


def test_a_new_store_copies_the_first_ones_schema(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    template = schema_template()
    assert not template.exists()
    first = resolve_store(None, tmp_path / "a")
    open_client(first)  # MLflow's own migrations
    assert template.is_file()
    second = resolve_store(None, tmp_path / "b")
    client = open_client(second)  # the copy
    assert first.db_path is not None and second.db_path is not None
    assert schema(second.db_path) == schema(first.db_path)
    # MLflow made its Default experiment in the copy as in the first
    assert default_experiment(second.db_path) == default_experiment(first.db_path) == [
        (0, "Default")]
    exp = client.create_experiment("study")
    run = client.create_run(exp)
    client.log_metric(run.info.run_id, "quality", 0.7)
    assert client.get_run(run.info.run_id).data.metrics == {"quality": 0.7}
    # a template that does not open is dropped, and the store made anew
    template.write_bytes(b"not a database")
    third = resolve_store(None, tmp_path / "c")
    open_client(third)
    assert third.db_path is not None and schema(third.db_path) == schema(first.db_path)
    assert "did not open" in caplog.text
    assert schema(template) == schema(first.db_path)  # made again from the new store
