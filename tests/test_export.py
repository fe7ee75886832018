"""`autoembed export`: picks against a hand-made Pareto front, the written file, --force, and
one-line errors for a bad study, trial, pick or run id."""

from __future__ import annotations

import csv
import json
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from test_tracking import PARAMS, _store_dir, config, make_records  # noqa: F401 - fixture

from autoembed import EmbeddingConfig, load_config
from autoembed.cli import main
from autoembed.config import config_from_dict
from autoembed.errors import ConfigError
from autoembed.export import config_from_flat, export_config, pick_member

STUDY = "hand"
OBJECTIVES = [
    {"name": "quality", "direction": "maximize"},
    {"name": "memory", "direction": "minimize"},
    {"name": "throughput", "direction": "maximize"},
]
# trial: (quality, memory, throughput, dim). Normalised over the front (1 = best):
#   t0 (1, 0, 0)   t3 (.5, .5, .25)   t5 (0, 1, .5)   t7 (.2, .125, 1)
# squared distance to (1, 1, 1): t0 2, t3 1.0625, t5 1.25, t7 1.4056 -> knee = 3.
FRONT = {0: (0.80, 900, 1000, 8), 3: (0.75, 500, 2000, 16), 5: (0.70, 100, 3000, 4),
         7: (0.72, 800, 5000, 32)}


def member(n: int) -> dict[str, Any]:
    q, mem, thr, dim = FRONT[n]
    return {
        "trial": n,
        "config": config(dim).to_dict(),
        "metrics": {"quality": q, "memory": mem, "throughput": thr, "latency": None},
        "device_total": mem,
        "allocated_peak": mem // 2,
        "measured_allocated_peak": None,
    }


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    """A finished study as the search writes it: pareto.json, trials.csv, vocab/."""
    runs = tmp_path / "runs"
    sdir = runs / STUDY
    sdir.mkdir(parents=True)
    pareto = {
        "study": STUDY,
        "budget_bytes": 8_000_000_000,
        "objectives": OBJECTIVES,
        "members": [member(n) for n in FRONT],
        "best": 5,
        "pick": "min-memory",
    }
    (sdir / "pareto.json").write_text(json.dumps(pareto))
    with (sdir / "trials.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, ["trial", "status", "quality", "estimate_device_total",
                                "estimate_allocated_peak", "config_json"])
        w.writeheader()
        for n in range(9):
            status = "infeasible" if n == 6 else "complete"
            w.writerow({"trial": n, "status": status, "quality": "",
                        "estimate_device_total": 400_000_000 + n,
                        "estimate_allocated_peak": 100_000_000 + n,
                        "config_json": json.dumps(config(8 + n).to_dict())})
    (sdir / "vocab").mkdir()
    (sdir / "vocab" / "vocab.json").write_text('{"format": "autoembed-vocab/1"}')
    return runs


def test_picks_by_hand() -> None:
    members = [member(n) for n in FRONT]
    got = {r: pick_member(members, r, OBJECTIVES)["trial"]
           for r in ("knee", "max-quality", "min-memory", "max-throughput")}
    assert got == {"knee": 3, "max-quality": 0, "min-memory": 5, "max-throughput": 7}


def test_within_noise_reads_the_searchs_floor() -> None:
    """pareto.json's `floor`: of the members within noise of the best (0.80; an unpaired
    slack of 0.2 takes all four), the cheapest that clears it by that slack, else the
    best."""
    members = [member(n) for n in FRONT]
    noise = {"slack": 0.2, "metric": "auc", "quality": 0.80, "trial": 0, "rows": 1000,
             "class_rows": [500, 500]}
    assert pick_member(members, "within-noise", OBJECTIVES, noise)["trial"] == 5  # 100 B
    # 0.55 + 0.2 = 0.75: 0 (0.80, 900 B) and 3 (0.75, 500 B) clear it
    assert pick_member(members, "within-noise", OBJECTIVES, noise, 0.55)["trial"] == 3
    # 0.71 + 0.2: none clears it, the best reaches 0.71: the best
    assert pick_member(members, "within-noise", OBJECTIVES, noise, 0.71)["trial"] == 0
    assert pick_member(members, "within-noise", OBJECTIVES, noise, 0.76)["trial"] == 0
    assert pick_member(members, "within-noise", OBJECTIVES, noise, None)["trial"] == 5


def test_pick_ties_go_to_the_lowest_trial() -> None:
    a, b = member(3), member(3)
    b["trial"] = 1
    assert pick_member([a, b], "max-quality")["trial"] == 1
    assert pick_member([a, b], "knee", OBJECTIVES)["trial"] == 1


def test_bad_pick_names_the_rules(runs: Path, tmp_path: Path) -> None:
    for bad in ("best-ever", "trial:x", "trial:-1"):
        with pytest.raises(ConfigError, match="knee, max-quality.*trial:N"):
            export_config(STUDY, tmp_path / "x.yaml", pick=bad, runs_dir=runs)


def test_default_is_the_searchs_own_pick(runs: Path, tmp_path: Path) -> None:
    out = tmp_path / "out" / "best.yaml"
    done = export_config(STUDY, out, runs_dir=runs)
    assert done.trial == 5 and done.pick == "search pick min-memory = trial:5"
    cfg = load_config(out)
    assert cfg == config(4) and cfg.data == config(4).data
    # vocabulary copied beside the file, named by its content, and named in the file
    import hashlib

    import yaml

    text = '{"format": "autoembed-vocab/1"}'
    digest = hashlib.sha256(f"vocab.json\0{len(text)}\0{text}".encode()).hexdigest()[:16]
    body = yaml.safe_load(out.read_text())
    assert body["vocab"] == f"vocab-{digest}" and body["source"]["study"] == STUDY
    assert (out.parent / body["vocab"] / "vocab.json").read_text() == text
    assert body["source"]["metrics"]["quality"] == 0.70


def test_a_vocab_copy_is_reused_whole_and_refused_once_changed(runs: Path, tmp_path: Path
                                                               ) -> None:
    """A second export beside the first keeps its vocab-HASH copy; a copy whose files no
    longer hash to its name is refused, one line, and left as it is."""
    out = tmp_path / "best.yaml"
    export_config(STUDY, out, runs_dir=runs)
    copy = next(tmp_path.glob("vocab-*"))
    export_config(STUDY, tmp_path / "again.yaml", runs_dir=runs)
    assert list(tmp_path.glob("vocab-*")) == [copy]
    (copy / "vocab.json").write_text("{}")
    with pytest.raises(ConfigError, match="differs from its name's content"):
        export_config(STUDY, tmp_path / "third.yaml", runs_dir=runs)
    assert (copy / "vocab.json").read_text() == "{}"


@pytest.mark.parametrize(
    ("pick", "trial", "dim"),
    [("knee", 3, 16), ("max-quality", 0, 8), ("min-memory", 5, 4), ("max-throughput", 7, 32),
     ("trial:7", 7, 32), ("trial:4", 4, 12)],  # trial 4: not on the front, from trials.csv
)
def test_picks_export_the_right_config(
    runs: Path, tmp_path: Path, pick: str, trial: int, dim: int
) -> None:
    out = tmp_path / "x.yaml"
    assert export_config(STUDY, out, pick=pick, runs_dir=runs).trial == trial
    assert load_config(out) == config(dim)


def test_the_searchs_pick_may_be_off_the_front(runs: Path, tmp_path: Path) -> None:
    pj = runs / STUDY / "pareto.json"
    body = json.loads(pj.read_text())
    body.update(best=4, pick="trial:4")  # `search --pick trial:4`: a feasible non-member
    pj.write_text(json.dumps(body))
    done = export_config(STUDY, tmp_path / "b.yaml", runs_dir=runs)
    assert done.trial == 4 and done.pick == "search pick trial:4"
    assert load_config(tmp_path / "b.yaml") == config(12)


def test_a_trial_off_the_front_carries_its_memory_from_trials_csv(runs: Path, tmp_path: Path
                                                                 ) -> None:
    """Exported from trials.csv, a trial's `source.memory` holds its estimate, as a front
    member's does: the allocated peak, the device total and its share of the 8 GB budget."""
    import yaml

    export_config(STUDY, tmp_path / "t4.yaml", pick="trial:4", runs_dir=runs)
    memory = yaml.safe_load((tmp_path / "t4.yaml").read_text())["source"]["memory"]
    assert memory["allocated_peak"] == 100_000_004 and memory["device_total"] == 400_000_004
    assert memory["budget_bytes"] == 8_000_000_000 and memory["budget_share"] == 0.05


def test_json_by_suffix_or_flag(runs: Path, tmp_path: Path) -> None:
    export_config(STUDY, tmp_path / "a.json", pick="knee", runs_dir=runs)
    assert json.loads((tmp_path / "a.json").read_text())["config"]["dim"] == 16
    export_config(STUDY, tmp_path / "b.cfg", pick="knee", fmt="json", runs_dir=runs)
    assert json.loads((tmp_path / "b.cfg").read_text())["config"]["dim"] == 16
    assert load_config(tmp_path / "b.cfg") == config(16)


def test_refuses_to_overwrite_without_force(runs: Path, tmp_path: Path) -> None:
    out = tmp_path / "best.yaml"
    out.write_text("keep me")
    with pytest.raises(ConfigError, match="exists; pass --force"):
        export_config(STUDY, out, runs_dir=runs)
    assert out.read_text() == "keep me"
    export_config(STUDY, out, runs_dir=runs, force=True)
    assert load_config(out) == config(4)


def test_exports_beside_each_other_never_change_each_others_vocab(
    runs: Path, tmp_path: Path
) -> None:
    """A vocab folder beside the output (another study's) is left as it is, and `--force`
    replaces only the output file: an earlier export keeps the vocabulary it names."""
    import yaml

    (tmp_path / "vocab").mkdir()
    (tmp_path / "vocab" / "vocab.json").write_text("other study")
    export_config(STUDY, tmp_path / "a.yaml", runs_dir=runs)
    first = yaml.safe_load((tmp_path / "a.yaml").read_text())["vocab"]
    (runs / STUDY / "vocab" / "vocab.json").write_text('{"format": "autoembed-vocab/1", "v": 2}')
    export_config(STUDY, tmp_path / "b.yaml", runs_dir=runs)
    export_config(STUDY, tmp_path / "b.yaml", runs_dir=runs, force=True)
    second = yaml.safe_load((tmp_path / "b.yaml").read_text())["vocab"]
    assert first != second
    assert (tmp_path / "vocab" / "vocab.json").read_text() == "other study"
    assert (tmp_path / first / "vocab.json").read_text() == '{"format": "autoembed-vocab/1"}'
    assert json.loads((tmp_path / second / "vocab.json").read_text())["v"] == 2


def test_bad_input_errors(runs: Path, tmp_path: Path) -> None:
    out = tmp_path / "o.yaml"
    with pytest.raises(ConfigError, match=r"unknown study 'nope'.*studies there: hand"):
        export_config("nope", out, runs_dir=runs)
    with pytest.raises(ConfigError, match=r"unknown trial 99 in study 'hand' \(known trials: 0, 1"):
        export_config(STUDY, out, pick="trial:99", runs_dir=runs, tracking_uri="none")
    with pytest.raises(ConfigError, match="trial 6 is infeasible"):
        export_config(STUDY, out, pick="trial:6", runs_dir=runs)
    with pytest.raises(ConfigError, match="--format 'toml'"):
        export_config(STUDY, out, fmt="toml", runs_dir=runs)
    with pytest.raises(ConfigError, match="not both"):
        export_config(STUDY, out, pick="knee", run_id="abc", runs_dir=runs)
    with pytest.raises(ConfigError, match="needs an MLflow store, and there is none at"):
        export_config(STUDY, out, run_id="abc", runs_dir=runs)
    assert not out.exists()


def test_flat_params_round_trip() -> None:
    cfg = EmbeddingConfig(
        task="ctr",
        tables=config(8).tables,
        dim=8,
        dense_layers=(32, 16),
        compression="hash",
        hash_buckets=500,
        adam_eps=1e-8,
        checkpointing=True,
    )
    assert config_from_dict(config_from_flat(cfg.flat_params(), "t")) == cfg


def test_cli_exit_codes(runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "c.yaml"
    args = ["export", "--study", STUDY, "--out", str(out), "--runs-dir", str(runs)]
    assert main([*args, "--pick", "knee"]) == 0
    assert f"wrote {out}: study 'hand' trial 3 (knee)" in capsys.readouterr().out
    assert main([*args, "--pick", "knee"]) == 2
    assert main([*args, "--pick", "trial:42", "--force", "--tracking-uri", "none"]) == 2
    assert main(["export", "--study", "zzz", "--out", str(out), "--runs-dir", str(runs)]) == 2
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln]
    assert len(lines) == 3 and all(ln.startswith("autoembed: error: ") for ln in lines)
    assert "Traceback" not in err


# ------------------------------------------------------------------ from the MLflow store


@pytest.fixture(scope="module")
def store_runs(store_dir: Path) -> tuple[Path, dict[int, str]]:
    """A runs directory whose embedded store holds a tracked search (see test_tracking)."""
    from mlflow import MlflowClient

    from autoembed.tracking import make_tracker
    from autoembed.tracking.mlflow_store import trial_runs

    runs = store_dir
    tracker = make_tracker(f"sqlite:///{runs / 'mlflow.db'}", runs)
    tracker.start("tracked", {**PARAMS, "budget_bytes": "8000000000"}, None)  # a search's
    for r in make_records():
        tracker.trial(r)
    tracker.finish([0, 4], [])
    tracker.close("FINISHED")
    client = MlflowClient(f"sqlite:///{runs / 'mlflow.db'}")
    exp = client.get_experiment_by_name("tracked")
    assert exp is not None
    ids = {n: r.info.run_id for n, r in trial_runs(client, exp.experiment_id).items()}
    ids[-1] = str(tracker.parent_run_id)  # type: ignore[attr-defined]
    return runs, ids


def test_run_id_exports_the_trials_config(
    store_runs: tuple[Path, dict[int, str]], tmp_path: Path
) -> None:
    runs, ids = store_runs
    out = tmp_path / "r.yaml"
    done = export_config(None, out, run_id=ids[1], runs_dir=runs)
    assert done.study == "tracked" and done.trial == 1 and done.run_id == ids[1]
    cfg = load_config(out)
    assert cfg == make_records()[1].config and cfg.data == make_records()[1].config.data


def test_run_id_export_carries_the_searchs_budget_as_other_exports(
    store_runs: tuple[Path, dict[int, str]], tmp_path: Path
) -> None:
    """The search's run holds its budget (its params): an export of a trial run names it in
    `source` as best.yaml's does, with the trial's memory judged against it (before: no
    budget, budget_bytes or memory)."""
    import yaml

    runs, ids = store_runs
    export_config(None, tmp_path / "r.yaml", run_id=ids[1], runs_dir=runs)
    source = yaml.safe_load((tmp_path / "r.yaml").read_text())["source"]
    total = make_records()[1].estimate["device_total"]
    assert (source["budget"], source["budget_bytes"]) == ("8GB", 8_000_000_000)
    assert source["memory"]["device_total"] == total
    assert source["memory"]["budget_share"] == round(total / 8e9, 4)


def test_trial_not_in_files_comes_from_the_store(
    store_runs: tuple[Path, dict[int, str]], tmp_path: Path
) -> None:
    runs, ids = store_runs
    (runs / "tracked").mkdir(exist_ok=True)  # the study's files exist, without trial 4 in them
    done = export_config("tracked", tmp_path / "t.yaml", pick="trial:4", runs_dir=runs)
    assert done.run_id == ids[4] and load_config(tmp_path / "t.yaml") == make_records()[4].config


def test_bad_run_ids(store_runs: tuple[Path, dict[int, str]], tmp_path: Path) -> None:
    runs, ids = store_runs
    out = tmp_path / "r.yaml"
    with pytest.raises(ConfigError, match="run id '0123abc' is not in the MLflow store"):
        export_config(None, out, run_id="0123abc", runs_dir=runs)
    with pytest.raises(ConfigError, match="parent run; give the run id of one trial"):
        export_config(None, out, run_id=ids[-1], runs_dir=runs)
    with pytest.raises(ConfigError, match="is infeasible"):
        export_config(None, out, run_id=ids[2], runs_dir=runs)
    with pytest.raises(ConfigError, match="belongs to study 'tracked', not 'hand'"):
        export_config("hand", out, run_id=ids[1], runs_dir=runs)
    assert not out.exists()


def test_unreachable_tracking_uri_fails_fast(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    rc = main(["export", "--run-id", "abc", "--out", str(tmp_path / "x.yaml"),
               "--tracking-uri", f"http://127.0.0.1:{port}"])
    assert rc == 2 and time.monotonic() - t0 < 5
    err = capsys.readouterr().err  # --run-id needs the store: 'none' (which it refuses) no fix
    assert "not reachable" in err and "--tracking-uri none" not in err, err
