"""`--space auto` end to end on a user CSV with small vocabularies (issue 15): the derived
space printed before the first trial, stored and reused on resume; no table compressed;
memory objectives that see the tables; the baseline (against scikit-learn run directly)
as the trials' target, in pareto.json and on the MLflow parent run; the pick's noise."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from autoembed.config import resolved_tables
from autoembed.data import DataSpec, load_dataset
from autoembed.errors import ConfigError
from autoembed.memory.types import CUBLAS_WORKSPACE_BYTES, CUDA_CONTEXT_BYTES
from autoembed.pipeline import search
from autoembed.pipeline.executor import InProcessExecutor
from autoembed.tracking import NullTracker

COLUMNS = ("user", "item", "day")


class Captured(NullTracker):
    """A tracker that keeps the parent run's params."""

    def __init__(self) -> None:
        self.params: dict[str, str] = {}

    def start(self, study: str, params: Mapping[str, str], space_file: Path | None) -> None:
        self.params = dict(params)
        self.space_file = space_file


def _clicks(path: Path, n: int = 2000) -> pd.DataFrame:
    rng = np.random.default_rng(3)
    user, item, day = rng.integers(0, 300, n), rng.integers(0, 60, n), rng.integers(0, 7, n)
    logit = 1.2 * np.sin(user) + 0.8 * np.cos(item) + 0.3 * (day - 3)
    y = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(int)
    frame = pd.DataFrame({"user": user, "item": item, "day": day, "y": y})
    frame.to_csv(path, index=False)
    return frame


def _run(tmp: Path, csv: Path, events: list[tuple[str, Any]], **kw: Any) -> Any:
    opts: dict[str, Any] = dict(data=str(csv), label="y", categorical=list(COLUMNS),
                                trials=3, seed=0, study="mine", runs_dir=tmp / "runs")
    opts.update(kw)
    tracker = Captured()
    res = search("8GB", kw.pop("space", None), tracker=tracker, executor=InProcessExecutor(),
                 on_recovered=lambda m: events.append(("note", m)),
                 progress=lambda s: events.append(("progress", s)),
                 **{k: v for k, v in opts.items() if k != "space"})
    return res, tracker


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("auto")
    csv = tmp / "clicks.csv"
    frame = _clicks(csv)
    events: list[tuple[str, Any]] = []
    res, tracker = _run(tmp, csv, events)
    yield {"tmp": tmp, "csv": csv, "frame": frame, "res": res, "events": events,
           "tracker": tracker}


def test_the_derived_space_is_printed_first_and_stored(searched: dict[str, Any]) -> None:
    res, events = searched["res"], searched["events"]
    first_trial = next(i for i, (kind, s) in enumerate(events)
                       if kind == "progress" and s.last is not None)
    notes = [m for kind, m in events[:first_trial] if kind == "note"]
    assert notes and notes[0].startswith("search space derived from the data and the budget")
    # 300 user ids: 1.6 x 300^0.56 = 39.1 -> dims up to 40; no table worth compressing
    assert "dim 8..40 log x8" in notes[0] and "compression" not in notes[0]
    # then the baseline, fitted before any trial trains
    assert notes[1].startswith("fitting the baseline (logistic regression on one-hot ids")
    assert notes[2].startswith("baseline (logistic regression on one-hot ids, C=")
    # and the start points, trained first (space.start)
    assert notes[3] == "start points: 3 (full+wide, fm, cheapest), trained first"
    stored = res.out_dir / "space.yaml"
    assert str(stored) in notes[0] and searched["tracker"].space_file == stored
    pareto = json.loads((res.out_dir / "pareto.json").read_text())
    assert pareto["space"] == "auto"
    import yaml

    raw = yaml.safe_load(stored.read_text())
    assert raw["data"]["name"] == str(searched["csv"]) and raw["params"]["dim"]["high"] == 40


def test_small_vocabularies_are_never_hashed_and_memory_sees_the_tables(
        searched: dict[str, Any]) -> None:
    res = searched["res"]
    data = load_dataset(DataSpec(str(searched["csv"]), label="y", categorical=COLUMNS))
    vocab = {t.name: t.vocab_size for t in data.tables}
    fixed = CUDA_CONTEXT_BYTES + CUBLAS_WORKSPACE_BYTES
    done = [r for r in res.rows if r.status == "complete"]
    assert len(done) >= 2
    for r in res.rows:
        for t in resolved_tables(r.config):
            assert t.compression == "none" and t.vocab_size == vocab[t.name]
    for r in done:
        # the tables' fp32 weights alone, by hand; and nothing of the fixed overhead
        weights = sum(vocab.values()) * r.config.dim * 4
        assert weights <= r.metrics["memory"] < r.device_total - fixed
    # tables of other widths hold other bytes: their objectives differ
    pairs = [(a, b) for a in done for b in done if a.config.dim < b.config.dim]
    assert pairs, [r.config.dim for r in done]
    assert all(a.metrics["memory"] != b.metrics["memory"] for a, b in pairs)
    pareto = json.loads((res.out_dir / "pareto.json").read_text())
    assert pareto["memory_basis"] == "allocated_peak"


def test_the_baseline_is_sklearns_and_the_target(searched: dict[str, Any]) -> None:
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score
    from sklearn.preprocessing import OneHotEncoder

    res, frame = searched["res"], searched["frame"]
    data = load_dataset(DataSpec(str(searched["csv"]), label="y", categorical=COLUMNS))
    part = {s: frame.iloc[data.split_rows(s)] for s in ("train", "valid", "test")}
    enc = OneHotEncoder(handle_unknown="ignore").fit(part["train"][list(COLUMNS)])
    xs = {s: enc.transform(p[list(COLUMNS)]) for s, p in part.items()}
    best = None
    for c in (0.01, 0.03, 0.1, 0.3, 1.0, 3.0):
        m = LogisticRegression(C=c, max_iter=2000).fit(xs["train"], part["train"]["y"])
        v = roc_auc_score(part["valid"]["y"], m.decision_function(xs["valid"]))
        if best is None or v > best[1]:
            best = (c, v, roc_auc_score(part["test"]["y"], m.decision_function(xs["test"])))
    assert best is not None
    pareto = json.loads((res.out_dir / "pareto.json").read_text())
    base = pareto["baseline"]
    assert base["c"] == best[0] and base["metric"] == "auc"
    assert base["valid"] == pytest.approx(best[1], abs=2e-4)
    assert base["test"] == pytest.approx(best[2], abs=2e-4)
    # the trials' target (steps_to_target) is the baseline's validation score
    done = [r for r in res.rows if r.status == "complete"]
    assert all(r.result.target == base["valid"] for r in done)
    for r in done:
        reached = [e.step for e in r.result.curve if e.quality >= base["valid"]]
        assert r.result.steps_to_target == (min(reached) if reached else None)
    params = searched["tracker"].params  # the MLflow parent run's
    assert float(params["baseline.valid"]) == base["valid"] and params["baseline.c"] == str(
        base["c"])


def test_pareto_json_says_how_the_picks_noise_was_measured(searched: dict[str, Any]) -> None:
    res, frame = searched["res"], searched["frame"]
    pareto = json.loads((res.out_dir / "pareto.json").read_text())
    noise = pareto["noise"]
    top = max((r for r in res.front), key=lambda r: r.metrics["quality"])
    assert noise["trial"] == top.number and noise["quality"] == top.metrics["quality"]
    data = load_dataset(DataSpec(str(searched["csv"]), label="y", categorical=COLUMNS))
    import yaml

    eval_batches = yaml.safe_load((res.out_dir / "space.yaml").read_text())["run"][
        "eval_batches"]
    # the rows its evaluation read: eval_batches batches of its batch size, at most the split
    rows = min(len(data.split_rows("valid")), eval_batches * top.config.batch_size)
    y = frame["y"].to_numpy()[data.split_rows("valid")][:rows]
    pos, neg = int(y.sum()), int(rows - y.sum())
    a = noise["quality"]  # Hanley-McNeil by hand
    q1, q2 = a / (2 - a), 2 * a * a / (1 + a)
    want = math.sqrt((a * (1 - a) + (pos - 1) * (q1 - a * a) + (neg - 1) * (q2 - a * a))
                     / (pos * neg))
    assert noise["rows"] == rows and noise["class_rows"] == [neg, pos]
    assert noise["slack"] == pytest.approx(want) and "standard error" in noise["method"]
    # paired: every other member's lead, on the rows both read (the whole split when both
    # read it all: then the recorded qualities' difference)
    members = {r.number: r for r in res.front}
    assert noise["kind"] == ("paired" if len(members) > 1 else "unpaired")
    assert sorted(g["trial"] for g in noise["paired"]) == sorted(set(members) - {top.number})
    split = len(data.split_rows("valid"))
    for g in noise["paired"]:
        m = members[g["trial"]]
        assert g["rows"] == min(rows, eval_batches * m.config.batch_size, split)
        if g["rows"] == rows:
            assert g["gap"] == pytest.approx(a - m.metrics["quality"], abs=1e-6)


def test_resume_reuses_the_stored_space_and_refuses_another(
        searched: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    import autoembed.space_auto as auto

    tmp, csv, res = searched["tmp"], searched["csv"], searched["res"]
    text = (res.out_dir / "space.yaml").read_text()

    def no_derivation(*a: object, **k: object) -> None:
        raise AssertionError("a resumed study derived its space again")

    monkeypatch.setattr(auto, "derive_space", no_derivation)
    # with --data again and no --space; then --space auto alone (the study knows its data)
    for space, data in ((None, {}), ("auto", {"data": None, "label": None,
                                              "categorical": None})):
        events: list[tuple[str, Any]] = []
        again, _ = _run(tmp, csv, events, resume=True, trials=len(res.rows) + 1, space=space,
                        **data)
        assert (again.out_dir / "space.yaml").read_text() == text
        assert json.loads((again.out_dir / "pareto.json").read_text())["space"] == "auto"
        res = again
    with pytest.raises(ConfigError, match="--space tiny differs"):
        _run(tmp, csv, [], resume=True, trials=9, space="tiny")


@pytest.mark.parametrize(("kw", "needle"), [
    ({"data": None, "label": None, "categorical": None}, "--space auto derives the space from"),
    ({"data": "synthetic-ctr", "label": None, "categorical": None}, "is synthetic"),
])
def test_auto_needs_real_data(tmp_path: Path, kw: dict[str, Any], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        _run(tmp_path, tmp_path / "none.csv", [], space="auto", study="bad", **kw)
    assert not (tmp_path / "runs" / "bad").exists()


def test_a_split_lacking_a_class_is_refused_before_any_trial(tmp_path: Path) -> None:
    from autoembed.errors import DataError

    frame = _clicks(tmp_path / "rare.csv")
    frame["y"] = 0
    frame.loc[[5, 6, 7], "y"] = 1  # 3 positives of 2,000: the 200-row valid split has none
    frame.to_csv(tmp_path / "rare.csv", index=False)
    data = load_dataset(DataSpec(str(tmp_path / "rare.csv"), label="y"))
    lacking = next(s for s in ("train", "valid", "test") if not data.split_labels(s).any())
    n = data.num_rows(lacking)
    with pytest.raises(DataError) as e:
        _run(tmp_path, tmp_path / "rare.csv", [], study="rare")
    msg = str(e.value)
    assert "\n" not in msg and "'y'" in msg and "rare.csv" in msg
    assert f"3 of 2000 rows of class '1' and the {lacking} split ({n} rows) none" in msg
    # trials whose AUC is NaN used to train, and a pick was made on memory alone
    assert not (tmp_path / "runs" / "rare").exists()


def _resume_as_old_study(tmp_path: Path, csv: Path, pareto: Path, written: str) -> None:
    """Study 'edit' as a version before `KEYS_RULE` stored it (no `data_keys`, nor, older,
    `data_sha256`): resumed on the same file, its trials would read the file's values as
    other ids, so it is refused in one line before anything trains; its record restored
    after."""
    import optuna

    from autoembed.errors import DataError
    from autoembed.pipeline.records import ATTR

    study = optuna.load_study(study_name="edit",
                              storage=f"sqlite:///{tmp_path / 'runs' / 'optuna.db'}")
    meta = dict(study.user_attrs[ATTR])
    assert meta["data_keys"] == 2
    old = {k: v for k, v in meta.items() if k not in ("data_keys", "data_sha256")}
    study.set_user_attr(ATTR, old)
    with pytest.raises(DataError) as e:
        _run(tmp_path, csv, [], trials=2, study="edit", resume=True)
    msg = str(e.value)
    assert "\n" not in msg and "study 'edit' searched" in msg and "'007' was '7'" in msg
    assert pareto.read_text() == written and len(study.trials) == 1
    study.set_user_attr(ATTR, meta)


def test_an_edited_data_file_is_refused_on_resume_and_noted_on_rerun(tmp_path: Path) -> None:
    import hashlib

    from autoembed.errors import DataError
    from autoembed.export import export_config
    from autoembed.training import plan_training

    csv = tmp_path / "clicks.csv"
    frame = _clicks(csv, n=600)
    first, _ = _run(tmp_path, csv, [], trials=1, study="edit")
    pareto = (first.out_dir / "pareto.json").read_text()
    assert json.loads(pareto)["data_sha256"] == hashlib.sha256(csv.read_bytes()).hexdigest()
    export_config("edit", tmp_path / "x.yaml", runs_dir=tmp_path / "runs", tracking_uri="none")
    for path in (first.out_dir / "best.yaml", tmp_path / "x.yaml"):
        assert not any("changed" in line for line in plan_training(path).lines)
    _resume_as_old_study(tmp_path, csv, first.out_dir / "pareto.json", pareto)
    import yaml

    record = yaml.safe_load((tmp_path / "x.yaml").read_text())
    assert record["trained_on"]["data_keys"] == 2  # the export carries the study's rule
    del record["trained_on"]["data_keys"]  # as a version before the rule wrote it
    (tmp_path / "old.yaml").write_text(yaml.safe_dump(record))
    assert any("the trial read data file" in line and "'007' was '7'" in line
               for line in plan_training(tmp_path / "old.yaml").lines)
    frame["y"] = 1 - frame["y"]  # the same columns and size, other labels
    frame.to_csv(csv, index=False)
    with pytest.raises(DataError) as e:
        _run(tmp_path, csv, [], trials=2, study="edit", resume=True)
    msg = str(e.value)
    assert "\n" not in msg and "clicks.csv" in msg and "changed since study 'edit'" in msg
    assert (first.out_dir / "pareto.json").read_text() == pareto  # nothing trained or written
    # a rerun "as it was measured" says its figures can differ, and why
    for path in (first.out_dir / "best.yaml", tmp_path / "x.yaml"):
        plan = plan_training(path)
        assert plan.rerun and any(f"data file '{csv}' changed since the search" in line
                                  for line in plan.lines), plan.lines
