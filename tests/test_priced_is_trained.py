"""What a search prices is what its trial trains: the model each trial's loop receives has the
parameters (names, shapes, bytes) its row's estimate was judged by, for autoembed's own
models, a user model with autoembed's apply or with a custom `apply` (in process and on a Ray
worker), and a TorchRec model planned per rank."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _user_code import install_loop

import autoembed
from autoembed.errors import ConfigError
from autoembed.torchrec.lib import available
from autoembed.torchrec.settings import INSTALL
from autoembed.tracking import NullTracker

ROOT = Path(__file__).resolve().parent.parent
BLOCK = 512  # the estimate counts each tensor in the CUDA caching allocator's 512-byte blocks
DIM = 16

USER = '''
import json
import torch
from torch import nn

RECORD = {record!r}


class Bag(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.emb = nn.Embedding(400_000, dim)
        self.out = nn.Linear(dim, 2)

    def forward(self, ids, y):
        return nn.functional.cross_entropy(self.out(self.emb(ids).mean(1)), y)


def build(params):
    return Bag(params["dim"])


def example(params):
    n = params["batch_size"]
    return torch.zeros(n, 4, dtype=torch.long), torch.zeros(n, dtype=torch.long)


def shrink(model, config):
    """A custom apply: the 400k-row table becomes a 1k-row one."""
    model.emb = nn.Embedding(1000, model.emb.embedding_dim)
    return model


def train(model, params, report):
    with open(RECORD, "a") as f:
        f.write(json.dumps([[n, list(p.shape), p.nbytes]
                            for n, p in model.named_parameters()]) + "\\n")
    return 0.5
'''

USER_SPACE = f"""
embedding: {{precision: fp32, table_optimizer: adam}}
user: {{dim: {{choices: [{DIM}]}}, batch_size: 8}}
trials: 1
"""


def blocks(nbytes: int) -> int:
    return -(-nbytes // BLOCK) * BLOCK


def trained_models(record: Path) -> list[list[tuple[str, tuple[int, ...], int]]]:
    """Each trial's model as its loop received it: (name, shape, bytes) per parameter."""
    return [[(n, tuple(s), b) for n, s, b in json.loads(line)]
            for line in record.read_text().splitlines()]


def assert_trained_as_priced(trained: list[tuple[str, tuple[int, ...], int]],
                             estimate: dict[str, Any], tables_only: bool = False) -> None:
    """Every priced table is a parameter `<table>.weight` of the trained model, of its rows
    x dim and its bytes; unless `tables_only`, the priced parameter bytes are the trained
    model's, tensor by tensor in allocator blocks."""
    by_name = {n: (s, b) for n, s, b in trained}
    for t in estimate["tables"]:
        names = [n for n in by_name if n == f"{t['name']}.weight"
                 or n.endswith(f".{t['name']}.weight")]
        assert len(names) == 1, (t["name"], sorted(by_name))
        shape, nbytes = by_name[names[0]]
        assert shape == (t["rows"], t["dim"]) and blocks(nbytes) == blocks(t["parameters"])
    if not tables_only:
        assert sum(blocks(b) for _, _, b in trained) == estimate["parameters"]


@pytest.fixture
def user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Path]:
    record = tmp_path / "trained.jsonl"
    package = f"priced_{tmp_path.name}"  # a package per test: each records to its own file
    mod = install_loop(tmp_path, package, USER.format(record=str(record)), monkeypatch)
    (tmp_path / "space.yaml").write_text(USER_SPACE)
    return mod, tmp_path


def user_search(user: tuple[Any, Path], study: str, **kw: Any) -> Any:
    mod, root = user
    return autoembed.search("1GB", str(root / "space.yaml"), model=mod.build,
                            example=mod.example, train=mod.train, study=study,
                            runs_dir=root / "runs", tracker=NullTracker(), **kw)


@pytest.mark.parametrize("custom", [False, True], ids=["autoembed-apply", "custom-apply"])
def test_a_user_search_trains_the_model_it_priced(user, custom: bool) -> None:
    """The custom apply swaps the 400k-row table for a 1k-row one: priced and trained both
    hold the 1k rows (the trial trained the 400k table before)."""
    mod, root = user
    res = user_search(user, "u", executor="local", reference=False,
                      **({"apply": mod.shrink} if custom else {}))
    [row] = [r for r in res.rows if r.status == "complete"]
    [trained] = trained_models(root / "trained.jsonl")
    rows = 1000 if custom else 400_000
    assert dict((n, s) for n, s, _ in trained)["emb.weight"] == (rows, DIM)
    # by hand: the fp32 table, then the head's weight and bias, one block each
    assert row.estimate["parameters"] == rows * DIM * 4 + 2 * BLOCK
    assert_trained_as_priced(trained, dict(row.estimate))


SHRINK = """
from torch import nn


def shrink(model, config):
    model.emb = nn.Embedding(1000, model.emb.embedding_dim)
    return model
"""


def test_a_custom_apply_travels_to_a_worker_by_name(user, monkeypatch) -> None:
    """What a Ray worker gets: the payload as JSON, `apply` recorded by name beside build and
    train, and a runtime_env that ships apply's package (one of its own here); the worker
    finds them by name and trains the priced model."""
    from autoembed.pipeline.user_workload import UserWorkload
    from autoembed.space import load_space
    from autoembed.user.run import UserCode
    from autoembed.user.trainer import run_payload

    mod, root = user
    other = install_loop(root, f"apply_{root.name}", SHRINK, monkeypatch)
    code = UserCode(mod.build, mod.example, mod.train, apply=other.shrink)
    work = UserWorkload(load_space(root / "space.yaml", "user"), code, code.records())
    priced = work.price({"user.dim": DIM})
    payload = json.loads(json.dumps({**priced.launch(0).payload, "number": 0}))
    assert payload["functions"]["apply"]["module"] == other.__name__
    assert str(Path(other.__file__).parent) in work.ray_options()["runtime_env"]["py_modules"]
    assert run_payload(payload)["status"] == "complete"  # no `code`: found by name
    [trained] = trained_models(root / "trained.jsonl")
    assert dict((n, s) for n, s, _ in trained)["emb.weight"] == (1000, DIM)
    assert_trained_as_priced(trained, priced.estimate.to_dict())


def test_a_resume_applies_as_the_study_started(user) -> None:
    """A study's trials were priced and trained with one apply: a resume with another (or
    without it) is refused in one line."""
    from autoembed.pipeline.user_workload import UserWorkload
    from autoembed.space import load_space
    from autoembed.user.run import UserCode

    mod, root = user
    space = load_space(root / "space.yaml", "user")
    plain = UserCode(mod.build, mod.example, mod.train)
    custom = UserCode(mod.build, mod.example, mod.train, apply=mod.shrink)

    def resume(started: UserCode, now: UserCode) -> None:
        meta = UserWorkload(space, started, started.records()).meta()
        UserWorkload(space, now, now.records()).check_resume({"kind": "user", **meta})

    resume(custom, custom)
    with pytest.raises(ConfigError, match=r"^apply: the study was run with apply = "
                       r".*:shrink; resume autoembed.search with apply='.*:shrink'$"):
        resume(custom, plain)
    with pytest.raises(ConfigError, match=r"^apply: .*with autoembed.apply; resume without"):
        resume(plain, custom)


def test_an_apply_a_ray_worker_cannot_find_is_one_line(user) -> None:
    with pytest.raises(ConfigError, match=r"^apply = .*<lambda>.*a lambda cannot be found"):
        user_search(user, "l", executor="ray", apply=lambda m, c: None)


BUILTIN_SPACE = """
data: {name: synthetic-ctr, vocab_sizes: [5000, 300], rows: [2000, 500, 500]}
base: {dense_layers: [16], dense_optimizer: adam}
params:
  dim: {choices: [8]}
  compression: {choices: [none, hash]}
  hash_buckets: {when: {compression: hash}, choices: [1000]}
"""


def test_a_builtin_search_trains_the_model_it_priced(tmp_path: Path, monkeypatch) -> None:
    """autoembed's own model without a stand-in: the trial's model (as the runner built it)
    holds the priced tables, hashed or not."""
    import autoembed.runner as runner

    built: list[list[tuple[str, tuple[int, ...], int]]] = []
    new_trainer = runner._new_trainer

    def spy(*args: Any, **kw: Any) -> Any:
        trainer = new_trainer(*args, **kw)
        built.append([(n, tuple(p.shape), p.nbytes)
                      for n, p in trainer.model.named_parameters()])
        return trainer

    monkeypatch.setattr(runner, "_new_trainer", spy)
    (tmp_path / "space.yaml").write_text(BUILTIN_SPACE)
    res = autoembed.search("1GB", str(tmp_path / "space.yaml"), trials=2, sampler="grid",
                           executor="local", runs_dir=tmp_path / "runs", study="b",
                           tracker=NullTracker())
    done = sorted((r for r in res.rows if r.status == "complete"), key=lambda r: r.number)
    assert len(done) == len(built) == 2
    f0_rows = set()
    for row, trained in zip(done, built, strict=True):
        assert_trained_as_priced(trained, dict(row.estimate))
        f0_rows.add(dict((n, s) for n, s, _ in trained)["tables.f0.weight"][0])
    assert f0_rows == {5000, 1000}  # the full table and its 1000 hash buckets


TORCHREC_SPACE = """
topology: {world_size: 2, compute_device: cpu}
embedding:
  dense_optimizer: adagrad
  tables:
    "*": {optimizer: {choices: [sgd]}, sharding_type: table_wise}
    model.sparse_arch.embedding_bag_collection.t_cat_2: {num_embeddings: 300}
user: {scale: 0.0002, batch_size: 32, dim: 8, steps: 2, record: RECORD}
trials: 1
"""


@pytest.mark.slow  # two spawned ranks: 15-40 s on 2 busy cores
@pytest.mark.skipif(not available(), reason=f"TorchRec is not installed ({INSTALL})")
def test_a_torchrec_search_trains_the_tables_it_priced(tmp_path: Path, monkeypatch) -> None:
    """Each rank's model under DMP holds the priced tables, whole: rows, dim and bytes."""
    monkeypatch.chdir(ROOT)
    record = tmp_path / "trained.jsonl"
    space = tmp_path / "space.yaml"
    space.write_text(TORCHREC_SPACE.replace("RECORD", json.dumps(str(record))))
    res = autoembed.search("2GB", str(space), model="examples.torchrec_dlrm:build",
                           example="examples.torchrec_dlrm:example",
                           train="_torchrec_code:recording_train",
                           loss="examples.torchrec_dlrm:loss", executor="local",
                           runs_dir=tmp_path / "runs", study="t", tracker=NullTracker())
    [row] = [r for r in res.rows if r.status == "complete"]
    trained = trained_models(record)
    assert len(trained) == 2  # one record per rank, each the whole tables' global shapes
    from examples.torchrec_dlrm import cardinalities

    rows = cardinalities(0.0002)
    rows[2] = 300
    for rank in trained:
        assert_trained_as_priced(rank, dict(row.estimate), tables_only=True)
        assert sorted(s for n, s, _ in rank) == sorted((r, 8) for r in rows)


def test_an_apply_beside_a_torchrec_topology_is_refused(tmp_path: Path) -> None:
    if not available():
        pytest.skip(f"TorchRec is not installed ({INSTALL})")
    space = tmp_path / "space.yaml"
    space.write_text(TORCHREC_SPACE.replace("RECORD", '"x"'))
    with pytest.raises(ConfigError, match=r"^apply = .*topology.*drop apply"):
        autoembed.search("2GB", str(space), model="examples.torchrec_dlrm:build",
                         example="examples.torchrec_dlrm:example",
                         train="examples.torchrec_dlrm:train", apply="examples.torchrec_dlrm:loss",
                         executor="local", runs_dir=tmp_path / "runs", tracker=NullTracker())
