"""`autoembed train`: checkpoints, resume after a hard kill, nothing half-written."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from autoembed.config import EmbeddingConfig, save_config
from autoembed.training import CHECKPOINT, train

DATA = {"name": "synthetic-ctr", "vocab_sizes": [500, 2000], "rows": [20000, 2000, 2000]}


def small(**kw: object) -> EmbeddingConfig:
    base: dict[str, object] = dict(
        dim=8, batch_size=64, dense_layers=(16,), table_optimizer="sparse_adam", data=DATA
    )
    base.update(kw)
    return EmbeddingConfig(**base)  # type: ignore[arg-type]


def test_train_then_resume_in_process(tmp_path: Path) -> None:
    r1 = train(small(), out_dir=tmp_path, max_steps=30, checkpoint_every=10)
    assert r1.status == "complete" and r1.steps == 30 and r1.env["resumed_from"] == 0
    assert (tmp_path / "metrics.json").exists() and (tmp_path / "model.pt").exists()
    st = torch.load(tmp_path / CHECKPOINT, weights_only=True)
    assert st["step"] == 30
    r2 = train(small(), out_dir=tmp_path, max_steps=50, checkpoint_every=10)
    assert r2.status == "complete" and r2.steps == 50 and r2.env["resumed_from"] == 30
    assert json.loads((tmp_path / "metrics.json").read_text())["steps"] == 50


def test_other_data_that_resizes_the_tables_is_said(tmp_path: Path) -> None:
    """Trained on data whose vocabularies differ from the config's tables (priced at those
    sizes), the result names each resized table; on its own data, nothing."""
    from autoembed.config import TableConfig
    from autoembed.data import DataSpec

    tables = (TableConfig("f0", 500), TableConfig("f1", 2000))
    other = DataSpec.from_dict({**DATA, "vocab_sizes": [900, 2000], "rows": [2000, 500, 500]})
    r = train(small(tables=tables), data=other, out_dir=tmp_path / "a", max_steps=3)
    assert r.status == "complete" and r.env["resized"] == ["f0: 500 -> 900 rows"]
    own = DataSpec.from_dict({**DATA, "rows": [2000, 500, 500]})
    r = train(small(tables=tables), data=own, out_dir=tmp_path / "b", max_steps=3)
    assert r.status == "complete" and "resized" not in r.env


def test_measure_eval_every_sets_how_often_train_evaluates(tmp_path: Path) -> None:
    # `eval_every` is one of `measure`'s keys, not a parameter of its own
    r = train(small(), out_dir=tmp_path / "a", max_steps=20, measure={"eval_every": 5})
    assert [e.step for e in r.curve] == [5, 10, 15, 20]
    r = train(small(), out_dir=tmp_path / "b", max_steps=20)  # default: a tenth of the steps
    assert [e.step for e in r.curve] == list(range(2, 21, 2))


def test_the_old_eval_every_keyword_still_works_with_a_deprecation_line(tmp_path: Path) -> None:
    import inspect

    with pytest.warns(DeprecationWarning, match=r"measure=\{'eval_every': N\}"):
        r = train(small(), out_dir=tmp_path, max_steps=20, eval_every=5)  # type: ignore[call-arg]
    assert [e.step for e in r.curve] == [5, 10, 15, 20]
    assert "eval_every" not in inspect.signature(train).parameters


def test_checkpoint_of_another_config_is_refused(tmp_path: Path) -> None:
    from autoembed.errors import ConfigError

    train(small(), out_dir=tmp_path, max_steps=10, checkpoint_every=5)
    with pytest.raises(ConfigError, match="another config"):
        train(small(dim=16), out_dir=tmp_path, max_steps=10)


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """`autoembed ARGV` run by the CLI's `main` in this process (exit status, stdout,
    stderr): a rerun that needs no process of its own (a fresh one imports torch: ~7 CPU s)."""
    from autoembed.cli import main

    capsys.readouterr()
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def _sigkill_when(cmd: list[str], ready: Callable[[], bool],
                  sig: int = signal.SIGKILL) -> tuple[int, str]:
    """Start `cmd`, and send it `sig` (SIGKILL) as soon as `ready()` (it must not exit
    before); its exit status and stderr."""
    # Ctrl-C as a terminal gives it, though this process may ignore SIGINT (a job started
    # with `&` by a script does) and a child inherits that
    p = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 240
    try:
        while not ready():
            assert p.poll() is None, p.communicate()
            assert time.time() < deadline, "never ready"
            time.sleep(0.1)
        os.kill(p.pid, sig)
    finally:
        _, err = p.communicate(timeout=30)
    return p.returncode, err


@pytest.mark.slow
def test_cli_resumes_after_sigkill(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "best.yaml"
    save_config(small(), cfg)
    out = tmp_path / "out"
    cmd = [
        sys.executable,
        "-m",
        "autoembed",
        "train",
        "--config",
        str(cfg),
        "--max-steps",
        "400",
        "--checkpoint-every",
        "20",
        "--out",
        str(out),
    ]
    _sigkill_when(cmd, lambda: (out / CHECKPOINT).exists())
    assert not (out / "metrics.json").exists()  # a killed run leaves no finished result
    step = torch.load(out / CHECKPOINT, weights_only=True)["step"]
    assert 20 <= step < 400
    rc, out_text, err = _cli([*cmd[3:], "--json"], capsys)  # the rerun, in this process
    assert rc == 0, err
    res = json.loads(out_text)
    assert res["steps"] == 400 and res["env"]["resumed_from"] >= step
    assert (out / "metrics.json").exists()


@pytest.mark.slow
def test_ctrl_c_says_the_checkpoint_kept_and_the_rerun_resumes_from_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Ctrl-C (SIGINT) in the middle: exit 130 with one line naming the checkpoint's step and
    that the same command resumes; nothing looks finished, and the rerun resumes there."""
    cfg = tmp_path / "best.yaml"
    save_config(small(), cfg)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "autoembed", "train", "--config", str(cfg), "--max-steps",
           "100000", "--checkpoint-every", "10", "--out", str(out)]
    rc, err = _sigkill_when(cmd, lambda: (out / CHECKPOINT).exists(), signal.SIGINT)
    step = torch.load(out / CHECKPOINT, weights_only=True)["step"]
    line = err.strip().splitlines()[-1]
    assert rc == 130 and line.startswith("autoembed: interrupted: "), err
    assert f"holds step {step:,}" in line and "same command resumes" in line, line
    assert not (out / "metrics.json").exists()
    rc, out_text, err = _cli([*cmd[3:7], str(step + 10), *cmd[8:], "--json"], capsys)
    assert rc == 0, err
    assert json.loads(out_text)["env"]["resumed_from"] == step


def _bytes(d: Path) -> dict[str, bytes]:
    return {n: (d / n).read_bytes() for n in ("metrics.json", "model.pt", CHECKPOINT)}


@pytest.mark.slow
def test_finished_result_survives_another_config(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """A's finished model outlives B: refused without --force, and a forced B killed (SIGKILL)
    mid-run leaves A's metrics.json and model.pt byte for byte."""
    train(small(), out_dir=tmp_path, max_steps=20, checkpoint_every=10)
    before = _bytes(tmp_path)
    cfg_b = tmp_path / "b.yaml"
    save_config(small(dim=16), cfg_b)
    cmd = [sys.executable, "-m", "autoembed", "train", "--config", str(cfg_b),
           "--max-steps", "100000", "--checkpoint-every", "5", "--out", str(tmp_path)]
    rc, _, err = _cli(cmd[3:], capsys)
    assert rc == 2, err
    line = err.strip()
    assert "\n" not in line and str(tmp_path) in line and "--force" in line, line
    assert _bytes(tmp_path) == before  # refused without touching anything

    inode = (tmp_path / CHECKPOINT).stat().st_ino
    # killed once B's own checkpoint has replaced A's: B is mid-run, past its start
    _sigkill_when([*cmd, "--force"], lambda: (tmp_path / CHECKPOINT).stat().st_ino != inode)
    assert torch.load(tmp_path / CHECKPOINT, weights_only=True)["step"] < 100000
    for name in ("metrics.json", "model.pt"):
        assert (tmp_path / name).read_bytes() == before[name], name


def test_forced_run_replaces_the_result_on_completion(tmp_path: Path) -> None:
    from autoembed.errors import ConfigError

    train(small(), out_dir=tmp_path, max_steps=10, checkpoint_every=5)
    with pytest.raises(ConfigError, match="--force"):
        train(small(dim=16), out_dir=tmp_path, max_steps=10)
    r = train(small(dim=16), out_dir=tmp_path, max_steps=10, force=True)
    assert r.status == "complete" and r.env["resumed_from"] == 0
    assert json.loads((tmp_path / "metrics.json").read_text())["config"]["dim"] == 16
    assert torch.load(tmp_path / "model.pt", weights_only=True)["tables.f0.weight"].shape[1] == 16


def test_cli_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = _cli(["train", "--config", str(tmp_path / "missing.yaml")], capsys)
    assert rc == 2 and "does not exist" in err and "Traceback" not in err
    cfg = tmp_path / "nodata.yaml"
    save_config(small(data=None), cfg)
    rc, _, err = _cli(["train", "--config", str(cfg)], capsys)
    assert rc == 2 and "--data" in err


class _Interrupt(Exception):
    pass


def test_resumed_run_ends_with_the_weights_of_a_straight_run(tmp_path: Path) -> None:
    """README: a run resumes 'with the same data order'. A run stopped at step 20 (after its
    checkpoint) and resumed to 40 must end with a straight 40-step run's weights: a resume
    that replays batches from the start (or skips too few/many) trains on other batches."""
    straight = train(small(), out_dir=tmp_path / "a", max_steps=40, checkpoint_every=10)
    assert straight.status == "complete"

    def stop_at_20(step: int, total: int) -> None:
        if step == 20:
            raise _Interrupt

    try:
        first = train(small(), out_dir=tmp_path / "b", max_steps=40, checkpoint_every=10,
                      on_step=stop_at_20)
        assert first.status != "complete"
    except _Interrupt:
        pass
    assert not (tmp_path / "b" / "metrics.json").exists()
    resumed = train(small(), out_dir=tmp_path / "b", max_steps=40, checkpoint_every=10)
    assert resumed.status == "complete" and resumed.env["resumed_from"] == 20
    a = torch.load(tmp_path / "a" / "model.pt", weights_only=True)
    b = torch.load(tmp_path / "b" / "model.pt", weights_only=True)
    assert a.keys() == b.keys()
    for k in a:  # CPU training is deterministic: equal to float rounding, not merely close
        torch.testing.assert_close(b[k], a[k], rtol=0, atol=1e-6, msg=k)


def _clicks_csv(path: Path, users: range, items: int) -> Path:
    """A click log: user, item, clicked (not 'label'), two rows per (user, item % items) (a
    user on one row only would be a row id, which a categorical column refuses)."""
    rows = [f"u{u},i{u % items},{(u // 3) % 2}" for u in users for _ in range(2)]
    path.write_text("user,item,clicked\n" + "\n".join(rows) + "\n")
    return path


def test_other_data_file_is_read_with_the_config_files_label_and_columns(tmp_path: Path) -> None:
    """`--data OTHER.csv` for a config searched on a CSV reads the other file as the first
    was read (its label column and categorical columns), its tables sized by the new ids."""
    own = _clicks_csv(tmp_path / "a.csv", range(400), 20)
    other = _clicks_csv(tmp_path / "b.csv", range(300, 900), 40)
    spec = {"name": str(own), "label": "clicked", "categorical": ["user"]}
    from autoembed.config import TableConfig

    cfg = small(tables=(TableConfig("user", 321),), data=spec)
    r = train(cfg, data=str(other), out_dir=tmp_path / "out", max_steps=3)
    assert r.status == "complete", r.error
    # 'item' is not a categorical column of the spec: one table, ~576 train users + OOV
    assert [t.split(":")[0] for t in r.env["resized"]] == ["user"]
    assert int(r.env["resized"][0].split("-> ")[1].split()[0].replace(",", "")) > 321


def test_data_with_other_tables_than_the_configs_is_refused(tmp_path: Path) -> None:
    """A config searched on columns user and item, trained on data whose tables are f0, f1:
    refused before anything is written (its model would have other tables than the ones
    priced), naming both; a config without tables takes the data's."""
    from autoembed.config import TableConfig
    from autoembed.errors import ConfigError

    cfg = small(tables=(TableConfig("user", 500), TableConfig("item", 2000)))
    with pytest.raises(ConfigError, match=r"tables \(f0, f1\) are not the config's \(user, "):
        train(cfg, out_dir=tmp_path / "out", max_steps=3)
    assert not (tmp_path / "out").exists()
    assert train(small(), out_dir=tmp_path / "own", max_steps=3).status == "complete"


def test_the_interrupt_note_says_how_to_resume_with_and_without_force(tmp_path: Path) -> None:
    """After Ctrl-C: the step the checkpoint holds and the command that resumes from it (a
    --force or --no-resume run starts from step 0: the command without that flag); none
    yet: the same command starts again."""
    from autoembed.training import interrupted_note

    assert "before a checkpoint was written" in interrupted_note(tmp_path)
    torch.save({"step": 1234}, tmp_path / CHECKPOINT)
    assert interrupted_note(tmp_path).endswith("holds step 1,234: the same command resumes "
                                               "from it")
    for flag in ("--force", "--no-resume"):  # both train from step 0
        assert f"the same command without {flag} resumes" in interrupted_note(tmp_path, flag)


def test_a_run_on_an_edited_data_file_is_not_mixed_with_one_on_its_old_bytes(
        tmp_path: Path) -> None:
    """A finished run, or a checkpoint, in --out was trained on the data file's bytes of
    then: after the file is edited (same ids, so the same config), the same command neither
    answers "already complete" with the old figures nor resumes the old weights on the new
    rows; it says so with both digests. --force / --no-resume train on the file as it is."""
    import hashlib

    from autoembed.config import TableConfig
    from autoembed.errors import ConfigError

    csv = _clicks_csv(tmp_path / "a.csv", range(400), 20)
    cfg = small(tables=(TableConfig("user", 321),),
                data={"name": str(csv), "label": "clicked", "categorical": ["user"]})
    out, cut = tmp_path / "out", tmp_path / "cut"
    first = train(cfg, out_dir=out, max_steps=3)
    old = hashlib.sha256(csv.read_bytes()).hexdigest()
    assert first.status == "complete" and first.env["data_sha256"] == old
    assert train(cfg, out_dir=out, max_steps=3).env["already_complete"]  # same bytes

    def stop(step: int, total: int) -> None:
        if step == 2:
            raise KeyboardInterrupt  # Ctrl-C after the checkpoint of step 2

    with pytest.raises(KeyboardInterrupt):
        train(cfg, out_dir=cut, max_steps=5, checkpoint_every=1, on_step=stop)
    # a checkpoint of a version before KEYS_RULE (no data_keys, nor, older, data_sha256):
    # the same file, other ids
    state = torch.load(cut / CHECKPOINT, weights_only=True)
    assert state["data_keys"] == 2
    old_keys = {k: v for k, v in state.items() if k not in ("data_keys", "data_sha256")}
    torch.save(old_keys, cut / CHECKPOINT)
    with pytest.raises(ConfigError, match=r"checkpoint .* keyed by autoembed's earlier rule "
                                          r".*'007' was '7'.*--no-resume"):
        train(cfg, out_dir=cut, max_steps=5)
    torch.save(state, cut / CHECKPOINT)
    lines = csv.read_text().splitlines()  # the labels flipped: same ids, other rows
    csv.write_text("\n".join([lines[0], *(
        ",".join([*r.split(",")[:-1], "0" if r.endswith("1") else "1"])
        for r in lines[1:])]) + "\n")
    new = hashlib.sha256(csv.read_bytes()).hexdigest()
    with pytest.raises(ConfigError, match=f"finished run on other bytes .*{old[:12]}.* then, "
                                          f"{new[:12]}.* now.*--force"):
        train(cfg, out_dir=out, max_steps=3)
    with pytest.raises(ConfigError, match=r"checkpoint .* written on other bytes .*--no-resume"):
        train(cfg, out_dir=cut, max_steps=5)
    again = train(cfg, out_dir=cut, max_steps=5, resume=False)
    assert again.status == "complete" and again.env["data_sha256"] == new
    assert train(cfg, out_dir=out, max_steps=3, force=True).env["data_sha256"] == new
