"""A search keeps one connection to each store: the Optuna storage and the MLflow store are
each opened once per search (one SQLAlchemy engine), a resumed study is loaded once, and no
search reads every study of the storage to find its own (a team database holds many)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_a_search_and_its_resume_open_each_store_once(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import optuna
    import sqlalchemy
    import sqlalchemy.engine

    from autoembed.pipeline import search
    from autoembed.pipeline.executor import InProcessExecutor

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)  # the embedded store in runs/
    engines: Counter[str] = Counter()
    studies: list[str] = []
    scans: list[int] = []
    real_engine = sqlalchemy.engine.create_engine

    def engine(url: Any, *args: Any, **kwargs: Any) -> Any:
        engines[Path(str(url)).name] += 1  # by database file: optuna.db, mlflow.db
        return real_engine(url, *args, **kwargs)

    real_init = optuna.study.Study.__init__

    def study_init(self: Any, study_name: str, *args: Any, **kwargs: Any) -> None:
        studies.append(study_name)
        real_init(self, study_name, *args, **kwargs)

    real_scan = optuna.storages.RDBStorage.get_all_studies

    def scan(self: Any) -> Any:
        scans.append(1)
        return real_scan(self)

    monkeypatch.setattr(sqlalchemy.engine, "create_engine", engine)  # Optuna's call
    monkeypatch.setattr(sqlalchemy, "create_engine", engine)  # MLflow's call
    monkeypatch.setattr(optuna.study.Study, "__init__", study_init)
    monkeypatch.setattr(optuna.storages.RDBStorage, "get_all_studies", scan)

    runs = tmp_path / "runs"
    space = str(ROOT / "search_spaces" / "tiny.yaml")
    first = search(800_000_000, space, trials=1, runs_dir=runs, study="once",
                   early_stop=False, executor=InProcessExecutor())
    assert (runs / "mlflow.db").is_file() and len([r for r in first.rows if r.counted]) == 1
    assert engines["optuna.db"] == 1 and engines["mlflow.db"] == 1, engines
    assert studies == ["once"] and not scans, (studies, scans)

    engines.clear()
    studies.clear()
    again = search(800_000_000, None, trials=2, runs_dir=runs, study="once", resume=True,
                   early_stop=False, executor=InProcessExecutor())
    assert len([r for r in again.rows if r.counted]) == 2  # it resumed: one more trained
    # MLflow may keep its store for the URI from the first search: at most one more
    assert engines["optuna.db"] == 1 and engines["mlflow.db"] <= 1, engines
    assert studies == ["once"] and not scans, (studies, scans)
