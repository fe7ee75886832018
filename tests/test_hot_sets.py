"""Hot sets are state (issue 16): computed from the data, saved beside an exported config,
read back by `autoembed train`, so the trained model holds the set it was exported with.

Expected sets are worked out here: the synthetic generator's by its own permutation
(`permute`), a counted split's by hand."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from autoembed.batch import Batch
from autoembed.cli import main
from autoembed.config import EmbeddingConfig, TableConfig, load_config
from autoembed.data import DataSpec, load_dataset
from autoembed.errors import ConfigError
from autoembed.export import export_config
from autoembed.models import build_model
from autoembed.models.hot_cold import (
    HotColdTable,
    hot_sets_beside,
    hot_sets_for,
    install_hot_sets,
    load_hot_sets,
    save_hot_sets,
)

pytestmark = pytest.mark.filterwarnings("ignore:Sparse invariant checks")

DATA = {"name": "synthetic-ctr", "vocab_sizes": [1000, 300], "rows": [200, 50, 50]}


def _config(**kw: object) -> EmbeddingConfig:
    base: dict[str, object] = dict(
        tables=(TableConfig("f0", 1000), TableConfig("f1", 300, compression="hash",
                                                      hash_buckets=30)),
        dim=8, dense_layers=(8,), compression="hot_cold", hot_share=0.02, hash_buckets=50,
        batch_size=32, data=DATA,
    )
    base.update(kw)
    return EmbeddingConfig(**base)  # type: ignore[arg-type]


def _generator_hot(field: str, vocab: int, count: int) -> list[int]:
    """The ids of Zipf ranks 0..count-1, read off the data: the same spec unscrambled draws
    the same ranks row by row, and ids there are the ranks themselves."""
    spec = {**DATA, "rows": [3000, 10, 10]}
    ids, ranks = (
        next(iter(load_dataset(DataSpec.from_dict({**spec, "scramble": s})).batches(
            "train", 3000, shuffle=False))).features[field].numpy().reshape(-1)
        for s in (True, False)
    )
    id_of = dict(zip(ranks.tolist(), ids.tolist(), strict=True))
    assert all(r in id_of for r in range(count))  # every head rank was drawn
    assert len(set(id_of.values())) == len(id_of)  # a permutation
    return sorted(id_of[r] for r in range(count))


def test_hot_sets_for_a_config_come_from_its_data() -> None:
    cfg = _config()
    data = load_dataset(DataSpec.from_dict(DATA))
    sets = hot_sets_for(cfg, data)
    assert list(sets) == ["f0"]  # f1 is hashed: no hot set
    assert sets["f0"].tolist() == _generator_hot("f0", 1000, 20)  # ceil(0.02 x 1000)
    # and those ids are the most looked-up ones of the train split (Zipf head, permuted)
    counts = np.zeros(1000, dtype=np.int64)
    for b in data.batches("train", 200, shuffle=False):
        ids = b.features["f0"].numpy().reshape(-1)
        np.add.at(counts, ids[ids >= 0], 1)
    assert counts[sets["f0"][:5]].sum() > counts[np.setdiff1d(np.arange(1000), sets["f0"])
                                                  ].max() * 5


def test_save_load_round_trip(tmp_path: Path) -> None:
    sets = {"f0": np.array([3, 9, 700], dtype=np.int64), "u.a": np.array([1], dtype=np.int64)}
    p = save_hot_sets(sets, tmp_path / "h.npz")
    got = load_hot_sets(p)
    assert {k: v.tolist() for k, v in got.items()} == {"f0": [3, 9, 700], "u.a": [1]}
    assert p.stat().st_size < 2000  # int64 ids, not a pickle or a remap


def _bad_files(d: Path) -> dict[str, tuple[Path, str]]:
    """name -> (a bad hot sets file, what its one-line message says)."""
    good = save_hot_sets({"f0": np.arange(20)}, d / "good.npz").read_bytes()
    (d / "truncated.npz").write_bytes(good[: len(good) // 2])
    (d / "text.npz").write_text("f0: [1, 2, 3]\n")
    with (d / "npy.npz").open("wb") as fh:
        np.save(fh, np.arange(20))  # one .npy array, no archive (np.load: an array)
    with (d / "floats.npz").open("wb") as fh:
        np.savez(fh, f0=np.arange(20) + 0.5)
    with (d / "extra.npz").open("wb") as fh:
        np.savez(fh, f0=np.arange(20), nosuch=np.arange(3))
    with (d / "twod.npz").open("wb") as fh:
        np.savez(fh, f0=np.arange(20).reshape(4, 5))
    return {"truncated": (d / "truncated.npz", "not a whole .npz archive"),
            "text": (d / "text.npz", "not a whole .npz archive"),
            "npy": (d / "npy.npz", "not a whole .npz archive"),
            "floats": (d / "floats.npz", "float64 array; a hot set is a 1-D array of integer"),
            "extra": (d / "extra.npz", "'nosuch' named, but the config has no such hot/cold"),
            "twod": (d / "twod.npz", "2-D int64 array")}


@pytest.mark.parametrize("bad", ["truncated", "text", "npy", "floats", "extra", "twod"])
def test_a_bad_hot_sets_file_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bad: str
) -> None:
    """Each bad file named by a config is exit 2 with one line naming the problem, before
    anything trains (before: BadZipFile exit 1, 'pickled data', floats truncated to ids,
    extra tables ignored)."""
    path, needle = _bad_files(tmp_path)[bad]
    cfg = tmp_path / "c.yaml"
    cfg.write_text(json.dumps({"config": _config().to_dict(), "hot_sets": path.name}))
    out = tmp_path / "t"
    assert main(["train", "--config", str(cfg), "--max-steps", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert not (out / "model.pt").exists()


def test_given_hot_ids_are_checked_as_built_ones(tmp_path: Path) -> None:
    """Float ids are refused, not truncated; a state_dict's hot set is checked (sorted, in
    range, of the built size) and becomes the set `reset_parameters` keeps."""
    cfg = _config().resolve()
    model = build_model(cfg)
    with pytest.raises(ConfigError, match="float64 values given"):
        install_hot_sets(model, None, {"f0": np.arange(20) + 0.5})
    table = model.tables["f0"]
    assert isinstance(table, HotColdTable)
    state = model.state_dict()
    for ids, needle in ((torch.arange(20).flip(0), "sorted"), (torch.arange(990, 1010),
                                                              r"in \[0, 1000\)"),
                        (torch.arange(5), "built for 20")):
        with pytest.raises(ConfigError, match=needle):
            model.load_state_dict({**state, "tables.f0.hot_ids": ids})
    mine = torch.arange(300, 320)
    model.load_state_dict({**state, "tables.f0.hot_ids": mine})
    table.reset_parameters()  # keeps the hot set it holds: the loaded one
    assert table.hot_ids.tolist() == mine.tolist()


def test_install_takes_given_sets_and_refuses_missing_tables() -> None:
    cfg = _config().resolve()
    model = build_model(cfg)
    install_hot_sets(model, None, {"f0": np.arange(100, 120)})
    assert model.tables["f0"].hot_ids.tolist() == list(range(100, 120))
    with pytest.raises(ConfigError, match="none for table 'f0'"):
        install_hot_sets(model, None, {"other": np.arange(20)})
    with pytest.raises(ConfigError, match="built for 20"):
        install_hot_sets(model, None, {"f0": np.arange(5)})


def _study(runs: Path, cfg: EmbeddingConfig) -> None:
    sdir = runs / "s"
    sdir.mkdir(parents=True)
    member = {"trial": 0, "config": cfg.to_dict(), "metrics": {"quality": 0.7, "memory": 1.0},
              "device_total": 1, "allocated_peak": 1}
    (sdir / "pareto.json").write_text(json.dumps({
        "study": "s", "budget_bytes": 10**9, "members": [member], "best": 0,
        "objectives": [{"name": "quality", "direction": "maximize"},
                       {"name": "memory", "direction": "minimize"}]}))


def test_export_writes_the_hot_sets_and_train_uses_them(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    _study(runs, _config())
    out = tmp_path / "exp" / "best.yaml"
    done = export_config(study="s", out=out, runs_dir=runs)
    assert not [n for n in done.notes if "hot" in n]  # (this hand-made front has no trained
    # config: a note says train trains the priced config, not a rerun of the trial)
    body = yaml.safe_load(out.read_text())
    assert re.fullmatch(r"hot_sets-[0-9a-f]{16}\.npz", body["hot_sets"])
    saved = hot_sets_beside(out)
    assert saved is not None and saved["f0"].tolist() == _generator_hot("f0", 1000, 20)
    assert load_config(out).compression == "hot_cold"

    # a hand-made hot set in its place: train must use it, not recompute the data's
    mine = np.arange(500, 520, dtype=np.int64)
    save_hot_sets({"f0": mine}, out.parent / body["hot_sets"])
    rc = main(["train", "--config", str(out), "--max-steps", "2", "--out",
               str(tmp_path / "t"), "--json"])
    assert rc == 0
    state = torch.load(tmp_path / "t" / "model.pt", weights_only=True)
    assert state["tables.f0.hot_ids"].tolist() == mine.tolist()


def test_exports_into_one_directory_keep_their_own_hot_sets(tmp_path: Path) -> None:
    """Issue 26: `export --force` of another config into a directory holding an earlier
    export overwrote the one shared hot_sets.npz, and the earlier best.yaml then failed
    ('hot ids: 10000 given, the table was built for 2000'). Each export's sets are named by
    their content: both configs keep loading their own."""
    from torch import nn

    import autoembed

    runs = tmp_path / "runs"
    _study(runs, _config())
    a, b = tmp_path / "exp" / "a.yaml", tmp_path / "exp" / "b.yaml"
    export_config(study="s", out=a, runs_dir=runs)
    pareto = runs / "s" / "pareto.json"
    body = json.loads(pareto.read_text())
    body["members"][0]["config"] = _config(hot_share=0.05).to_dict()  # 50 hot ids, not 20
    pareto.write_text(json.dumps(body))
    export_config(study="s", out=b, runs_dir=runs)
    export_config(study="s", out=a, runs_dir=runs, force=True)  # a: now the 0.05 config
    export_config(study="s", out=b, runs_dir=runs, force=True)
    pareto.write_text(json.dumps({**body, "members": [{**body["members"][0],
                                                        "config": _config().to_dict()}]}))
    export_config(study="s", out=a, runs_dir=runs, force=True)  # a: the 0.02 config again
    for path, hot in ((a, 20), (b, 50)):
        sets = hot_sets_beside(path)
        assert sets is not None and sets["f0"].tolist() == _generator_hot("f0", 1000, hot)

        class Two(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.f0, self.f1 = nn.Embedding(1000, 8), nn.Embedding(300, 8)

        model = autoembed.apply(Two(), str(path))  # a file's path: its own hot sets with it
        assert model.f0.store.hot_ids.tolist() == _generator_hot("f0", 1000, hot)
    names = sorted(p.name for p in (tmp_path / "exp").iterdir())
    assert names == sorted(["a.yaml", "b.yaml", hot_sets_beside_name(a),
                            hot_sets_beside_name(b)]), names


def hot_sets_beside_name(path: Path) -> str:
    return str(yaml.safe_load(path.read_text())["hot_sets"])


def test_train_without_saved_sets_uses_the_datas(tmp_path: Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_text(json.dumps({"config": _config().to_dict()}))
    assert hot_sets_beside(p) is None
    assert main(["train", "--config", str(p), "--max-steps", "1", "--out",
                 str(tmp_path / "t"), "--json"]) == 0
    state = torch.load(tmp_path / "t" / "model.pt", weights_only=True)
    assert state["tables.f0.hot_ids"].tolist() == _generator_hot("f0", 1000, 20)


def test_a_named_file_that_is_missing_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    p = tmp_path / "c.yaml"
    p.write_text(json.dumps({"config": _config().to_dict(), "hot_sets": "gone.npz"}))
    assert main(["train", "--config", str(p), "--max-steps", "1", "--out",
                 str(tmp_path / "t")]) == 2
    err = capsys.readouterr().err.strip()
    assert "gone.npz" in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_counted_data_without_a_generator() -> None:
    cfg = EmbeddingConfig(tables=(TableConfig("f0", 10),), dim=4, compression="hot_cold",
                          hot_share=0.2, hash_buckets=3)

    class Counted:
        def batches(self, split: str, size: int, shuffle: bool = True) -> list[Batch]:
            f0 = torch.tensor([[9], [9], [9], [4], [4], [1], [-1]])
            return [Batch({"f0": f0}, torch.zeros(7))]

    assert hot_sets_for(cfg, Counted())["f0"].tolist() == [4, 9]  # 2 hot ids: 9 (3), 4 (2)


def test_text_padding_never_takes_a_hot_row() -> None:
    cfg = EmbeddingConfig(task="text", tables=(TableConfig("tok", 10),), dim=4, num_classes=2,
                          seq_len=4, compression="hot_cold", hot_share=0.2, hash_buckets=3)

    class Text:
        task = "text"

        def batches(self, split: str, size: int, shuffle: bool = True) -> list[Batch]:
            tok = torch.tensor([[7, 3, 0, 0], [7, 5, 0, 0], [3, 0, 0, 0]])  # 0: padding
            return [Batch({"tok": tok}, torch.zeros(3))]

    assert hot_sets_for(cfg, Text())["tok"].tolist() == [3, 7]
