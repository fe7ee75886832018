"""`autoembed train` checks before it works and publishes only what it was asked for: a
file's `trained_on.run` settings are checked through their rules before `--out` is made,
and a checkpoint past the asked length is never resumed into a result of that length."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from autoembed.cli import main
from autoembed.config import EmbeddingConfig
from autoembed.config.io import config_text
from autoembed.errors import ConfigError
from autoembed.training import CHECKPOINT, train

DATA = {"name": "synthetic-ctr", "vocab_sizes": [300, 200], "rows": [2000, 300, 300]}
BATCH = 32


def small() -> EmbeddingConfig:
    return EmbeddingConfig(dim=4, batch_size=BATCH, dense_layers=(8,), data=DATA,
                           table_optimizer="adam")


def _rerun_file(tmp_path: Path, run: Any) -> Path:
    """A config file as a search exports it, its `trained_on.run` block set to `run`."""
    cfg = small()
    trained = json.loads(json.dumps(cfg.to_dict(), default=str))
    path = tmp_path / "best.yaml"
    path.write_text(config_text(cfg, "yaml", {
        "train": {"max_steps": 5},
        "trained_on": {"stand_in": False, "config": trained, "run": run}}))
    return path


@pytest.mark.parametrize("run, names", [
    ({"threads": 0}, "trained_on.run.threads' = 0: must be an integer in 1..1024"),
    ({"test_batches": "x"}, "trained_on.run.test_batches' = 'x': must be an integer >= 1"),
    ({"eval_batches": -3}, "trained_on.run.eval_batches' = -3"),
    ({"warmup_steps": 1.5}, "trained_on.run.warmup_steps' = 1.5"),
    ({"thread": 2}, "unknown key 'trained_on.run.thread' (did you mean 'threads'?)"),
    ("fast", "trained_on.run' = 'fast': must be a mapping"),
])
def test_a_bad_trained_on_run_setting_is_one_line_and_creates_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], run: Any, names: str) -> None:
    out = tmp_path / "out"
    rc = main(["train", "--config", str(_rerun_file(tmp_path, run)), "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert names in err and "best.yaml" in err, err
    assert not out.exists()  # checked before --out (and its .lock) is made


def test_a_thread_count_torch_cannot_take_is_refused_not_a_crash(tmp_path: Path) -> None:
    """10**6 threads crashed the process (SIGSEGV, exit -11/139) after creating --out."""
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "autoembed", "train", "--config",
                        str(_rerun_file(tmp_path, {"threads": 1_000_000})), "--out", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr[-2000:]
    assert "threads' = 1000000" in r.stderr and not out.exists()


def test_a_space_run_setting_is_checked_by_the_same_rules(tmp_path: Path) -> None:
    from autoembed.space import load_space

    space = tmp_path / "s.yaml"
    space.write_text("params: {dim: {choices: [4, 8]}}\nrun: {eval_batches: 0}\n")
    with pytest.raises(ConfigError, match=r"key 'run.eval_batches' = 0: must be an integer"):
        load_space(space)
    space.write_text("params: {dim: {choices: [4, 8]}}\nrun: {eval_every: null}\n")
    with pytest.raises(ConfigError, match=r"key 'run.eval_every' = None"):
        load_space(space)


class _Kill(Exception):
    pass


def _killed_at(out: Path, step: int, max_steps: int, force: bool = False) -> None:
    """A run of `max_steps` into `out` stopped right after its checkpoint at `step`."""
    def stop(at: int, total: int) -> None:
        if at == step:
            raise _Kill

    try:  # the runner turns the exception into the run's failure
        stopped = train(small(), out_dir=out, max_steps=max_steps, checkpoint_every=step,
                        on_step=stop, force=force)
        assert stopped.status == "failed" and "_Kill" in str(stopped.error)
    except _Kill:
        pass
    assert torch.load(out / CHECKPOINT, weights_only=True)["step"] == step


def test_a_checkpoint_past_the_asked_length_is_never_published_as_that_length(
        tmp_path: Path) -> None:
    """A 40-step run killed at step 30, then 10 steps asked into the same --out: refused
    (it used to publish the 30-step model as the 10-step result)."""
    out = tmp_path / "out"
    _killed_at(out, 30, 40)
    with pytest.raises(ConfigError, match=r"at step 30 of a run of 40 steps.*--no-resume"):
        train(small(), out_dir=out, max_steps=10)
    assert not (out / "metrics.json").exists()
    # --no-resume trains the 10 steps asked for, from step 0
    done = train(small(), out_dir=out, max_steps=10, resume=False)
    assert done.status == "complete" and done.steps == 10 and done.env["resumed_from"] == 0
    assert json.loads((out / "metrics.json").read_text())["steps"] == 10


def test_a_killed_forced_run_cannot_replace_a_result_with_more_steps_than_asked(
        tmp_path: Path) -> None:
    """A finished 20-step result, a forced 40-step run killed at 30, then 25 steps asked: the
    20-step result stays (it used to become a 30-step model labelled 25)."""
    out = tmp_path / "out"
    assert train(small(), out_dir=out, max_steps=20).steps == 20
    before = (out / "metrics.json").read_bytes(), (out / "model.pt").read_bytes()
    _killed_at(out, 30, 40, force=True)
    with pytest.raises(ConfigError, match="at step 30"):
        train(small(), out_dir=out, max_steps=25)
    assert ((out / "metrics.json").read_bytes(), (out / "model.pt").read_bytes()) == before


def test_a_resumed_result_holds_the_steps_and_samples_it_says(tmp_path: Path) -> None:
    """Resuming a checkpoint on the way to the asked length: the result says the steps and
    samples its model holds (all of them, not this run's share)."""
    out = tmp_path / "out"
    _killed_at(out, 10, 40)
    done = train(small(), out_dir=out, max_steps=30)
    assert done.env["resumed_from"] == 10 and done.env["trained_for"] == {"max_steps": 30}
    held = json.loads((out / "metrics.json").read_text())
    assert held["steps"] == 30 and held["samples"] == 30 * BATCH
    assert torch.load(out / CHECKPOINT, weights_only=True)["step"] == 30


@pytest.mark.parametrize("data, said", [("nowhere.csv", "--data 'nowhere.csv' is not a file"),
                                        ("best.yaml", "unknown extension '.yaml'")])
def test_a_bad_data_file_is_refused_by_a_dry_run_too(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], data: str, said: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`--data` that is no data file (not there, or a config file by mistake) is one line,
    exit 2, under --dry-run as in a real run; and --full-size names the data it would use."""
    monkeypatch.chdir(tmp_path)
    cfg = _rerun_file(tmp_path, None)
    for extra in (["--dry-run"], ["--dry-run", "--full-size"], ["--out", "o"]):
        assert main(["train", "--config", str(cfg), "--data", data, *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and said in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.yaml"]
    (tmp_path / "other.csv").write_text("f0,label\na,1\nb,0\n")
    assert main(["train", "--config", str(cfg), "--data", "other.csv", "--dry-run",
                 "--full-size"]) == 0
    assert capsys.readouterr().out.startswith("full size: the priced config on other.csv, ")


def test_a_dry_run_of_a_hand_written_config_says_what_would_train(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`train --config my.yaml --dry-run` on a config no search wrote printed nothing and
    exited 0; one without data passed the dry run and was refused only by the real run."""
    (tmp_path / "c.csv").write_text("user,y\n" + "".join(f"u{i % 5},{i % 2}\n" for i in range(60)))
    cfg = tmp_path / "my.yaml"
    cfg.write_text(f"dim: 8\ndata: {{name: {tmp_path / 'c.csv'}, label: y}}\n")
    assert main(["train", "--config", str(cfg), "--dry-run", "--max-steps", "7"]) == 0
    said = capsys.readouterr().out
    assert said == f"training the config of {cfg} on {tmp_path / 'c.csv'}, 7 steps\n"
    bare = tmp_path / "bare.yaml"
    bare.write_text("dim: 8\n")
    assert main(["train", "--config", str(bare), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "carries no data spec" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bare.yaml", "c.csv", "my.yaml"]


@pytest.mark.parametrize(("device", "said"), [("tpu", "device 'tpu'"),
                                              ("cuda:7", "device 'cuda:7'")])
def test_a_dry_run_refuses_the_device_the_run_would(
        device: str, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`train --dry-run --device tpu` passed (exit 0) and the real run then refused it."""
    cfg = _rerun_file(tmp_path, None)
    for extra in (["--dry-run"], ["--dry-run", "--full-size"]):
        assert main(["train", "--config", str(cfg), "--device", device, *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and said in err, err
    assert main(["train", "--config", str(cfg), "--device", "cpu", "--dry-run"]) == 0


@pytest.mark.parametrize("device", ["cuda:2", "cuda:4096", "cuda:255"])
def test_a_gpu_index_past_those_present_is_refused_by_train_and_search_alike(
        device: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """torch keeps a device index in 8 bits (cuda:4096 is cuda:0, cuda:255 plain cuda), so
    `train --device cuda:4096` trained on GPU 0 and `search` took any cuda:N: both now refuse
    an index past the GPUs present (two, faked here), naming them."""
    import autoembed.tracking as tracking

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)

    def would_search(*_: Any, **__: Any) -> None:
        raise AssertionError("the search went on to run")

    monkeypatch.setattr(tracking, "open_tracker", would_search)
    said = f"device '{device}': 2 GPU(s) visible here, cuda:0 to cuda:1; use one of them"
    for argv in (["train", "--config", str(_rerun_file(tmp_path, None)), "--dry-run"],
                 ["search", "--budget", "8GB", "--runs-dir", str(tmp_path / "runs")]):
        assert main([*argv, "--device", device]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and said in err, err
    assert not (tmp_path / "runs").exists()


def test_a_record_of_a_search_of_your_own_model_is_refused_with_the_way_to_train_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A user search's best.yaml or export (embedding settings + `params`) is not a config
    of autoembed's models (no task, tower or data of the user's model): `train` refuses it,
    with or without --data, naming the export that rebuilds it for the user's loop."""
    import yaml

    record = {"config": {"precision": "fp32", "tables": [
                  {"name": "embedding", "vocab_size": 1000, "dim": 16}]},
              "params": {"dim": 16, "lr": 0.01}, "source": {"study": "mine", "trial": 3}}
    path = tmp_path / "best.yaml"
    path.write_text(yaml.safe_dump(record))
    for extra in ([], ["--data", "synthetic-ctr"], ["--dry-run"]):
        out = tmp_path / "out"
        assert main(["train", "--config", str(path), "--out", str(out), *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and "export --study mine --format python" in err, err
        assert not out.exists()


def test_other_data_trains_hot_cold_tables_with_its_own_hot_sets(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The hot sets exported beside a config hold ids of the data it was searched on; with
    `--data OTHER` the hot/cold tables take the other data's hot sets (its own ids and
    vocabulary size), never the exported ones (a set of another size: refused)."""
    import yaml

    from autoembed.models.hot_cold import export_hot_sets

    def clicks(name: str, users: range) -> str:
        rows = "".join(f"u{u},{(u // 3) % 2}\n" for u in users for _ in range(2))  # no row id
        (tmp_path / name).write_text("user,clicked\n" + rows)
        return str(tmp_path / name)

    spec = {"name": clicks("a.csv", range(300)), "label": "clicked", "categorical": ["user"]}
    raw = {"dim": 4, "batch_size": BATCH, "dense_layers": [8], "data": spec, "tables": [
        {"name": "user", "vocab_size": 242, "compression": "hot_cold", "hot_share": 0.1,
         "hash_buckets": 20}]}
    from autoembed.config import config_from_dict

    cfg = config_from_dict(raw).resolve()
    hot, _ = export_hot_sets(cfg, tmp_path, None)
    assert hot is not None
    path = tmp_path / "best.yaml"
    path.write_text(yaml.safe_dump({"config": raw, "hot_sets": hot.name}))
    other = clicks("b.csv", range(1000, 1900))
    assert main(["train", "--config", str(path), "--data", other, "--max-steps", "2",
                 "--out", str(tmp_path / "out")]) == 0, capsys.readouterr().err
    weights = torch.load(tmp_path / "out" / "model.pt", weights_only=True)
    hot_ids = next(v for k, v in weights.items() if k.endswith("hot_ids"))
    assert len(hot_ids) > len(np.load(hot)["user"])  # b.csv has 3x the users of a.csv


@pytest.mark.parametrize("throughput, said", [(1e9, "under a second for 5 steps"),
                                              (1.0, "about 2.7 min for 5 steps")])
def test_the_full_size_time_reads_as_english(tmp_path: Path, throughput: float,
                                             said: str) -> None:
    """5 steps of 32 samples at the trial's throughput: 'under a second' (not 'about under
    a second') or 'about 2.7 min' (160 s)."""
    from autoembed.training import plan_training

    path = _rerun_file(tmp_path, None)
    path.write_text(path.read_text() + f"source: {{metrics: {{throughput: {throughput}}}}}\n")
    lines = plan_training(path, full_size=True).lines
    assert lines[-1].startswith(said), lines


def test_a_pareto_front_given_as_the_config_names_the_export(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`train --config runs/S/pareto.json` (the search's front, not a config) is refused in
    one line that gives the export of a member (was "unknown key 'study'")."""
    front = tmp_path / "runs" / "s1" / "pareto.json"
    front.parent.mkdir(parents=True)
    front.write_text(json.dumps({"study": "s1", "members": [{"trial": 0}], "best": {}}))
    assert main(["train", "--config", str(front)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"export --study s1 --runs-dir {tmp_path / 'runs'} --out best.yaml" in err


@pytest.mark.parametrize("kw, said", [
    ({"max_steps": 0}, "max_steps 0: must be an integer > 0"),
    ({"checkpoint_every": 0, "max_steps": 5}, "checkpoint_every 0: must be an integer > 0"),
    ({"epochs": -1}, "epochs -1: must be an integer > 0"),
])
def test_train_refuses_a_length_below_one_as_the_command_does(
        tmp_path: Path, kw: dict[str, int], said: str) -> None:
    """`autoembed.train(config, max_steps=0)` trained one step and said `complete`, and
    `checkpoint_every=0` fell back to the default, where `autoembed train` refuses
    `--max-steps 0`: both check the one rule, before --out is made."""
    out = tmp_path / "out"
    with pytest.raises(ConfigError) as e:
        train(small(), out_dir=out, **kw)
    assert str(e.value) == said and not out.exists()


def test_the_command_names_its_length_flags(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _rerun_file(tmp_path, {})
    assert main(["train", "--config", str(path), "--checkpoint-every", "0"]) == 2
    assert capsys.readouterr().err.strip() == (
        "autoembed: error: --checkpoint-every 0: must be an integer > 0")


def test_train_takes_device_auto_as_search_does(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`search --device auto` is search's default, but `train --device auto` was refused
    ("device 'auto' is not a torch device"): train reads it as search does, a GPU where
    one is visible, else the CPU."""
    from autoembed.training import check_device

    here = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    assert check_device("auto") == here
    cfg = _rerun_file(tmp_path, None)
    assert main(["train", "--config", str(cfg), "--device", "auto", "--dry-run"]) == 0
    assert "autoembed: error" not in capsys.readouterr().err
