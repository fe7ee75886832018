"""Your model, as written, is trial 0 (issue 42): a user search trains the model exactly as
`build` returns it, nothing applied, priced and judged like any proposal; `enqueue` trains
configs of the user's choice next; both survive a resume."""

from __future__ import annotations

import textwrap

import pytest
from _user_code import BAG_MODEL, install_loop

import autoembed
from autoembed.cli import main
from autoembed.tracking import NullTracker

# _user_code's bag classifier at 100k rows, and a loop that notes what it was given
LOOP = BAG_MODEL.replace("nn.Embedding(1000, dim)", "nn.Embedding(100_000, dim)") + \
    textwrap.dedent('''

    TRAINED = []  # (the table's type, dim) of each model train() received


    def example(params):
        return torch.zeros(64, 4, dtype=torch.long), torch.zeros(64, dtype=torch.long)


    def train(model, params, report):
        TRAINED.append((type(model.emb).__module__, model.emb.embedding_dim))
        opt = torch.optim.Adam(model.parameters(), lr=0.05)
        g = torch.Generator().manual_seed(0)
        ids = torch.randint(0, 50, (64, 4), generator=g)
        y = (ids < 25).sum(1).gt(2).long()
        for step in range(1, 11):
            opt.zero_grad()
            loss = model(ids, y)
            loss.backward(); opt.step()
        with torch.no_grad():
            q = float((model.out(model.emb(ids).mean(1)).argmax(1) == y).float().mean())
        report(step=10, samples=640, quality=q, loss=loss.item())
''')
assert "nn.Embedding(100_000, dim)" in LOOP
SPACE = """
embedding:
  precision: fp32
  table_optimizer: adam
  tables:
    emb: {compression: hash, hash_buckets: {choices: [0.01, 0.02]}}
user:
  dim: {choices: [DIMS]}
trials: 3
"""


@pytest.fixture
def loop(tmp_path, monkeypatch):
    mod = install_loop(tmp_path, "aswritten", LOOP, monkeypatch)
    return mod, tmp_path


def search(loop, dims: str = "8, 16", study: str = "r", **kw):
    mod, root = loop
    (root / "space.yaml").write_text(SPACE.replace("DIMS", dims))
    return autoembed.search("650MB", root / "space.yaml", model=mod.build, example=mod.example,
                            train=mod.train, executor="local", study=study,
                            runs_dir=root / "runs", tracker=NullTracker(), **kw)


def test_trial_0_is_the_model_as_written(loop, capsys) -> None:
    mod, _ = loop
    res = search(loop, trials=2)
    first = res.rows[0]
    assert first.number == 0 and first.origin == "as written" and first.status == "complete"
    # the space's first dim, and no table rule: nothing was applied to the model it trained
    assert first.params == {"user.dim": 8}
    assert mod.TRAINED[0] == ("torch.nn.modules.sparse", 8)
    assert all(m.startswith("autoembed.nn") for m, _ in mod.TRAINED[1:])
    assert not first.config.tables[0].overrides and first.config.compression == "none"
    # priced like any proposal: the unapplied model's own training step
    est = autoembed.estimate_model(lambda: mod.build({"dim": 8}), mod.example({}),
                                   optimizer="adam", precision="fp32")
    assert first.device_total == est.device_total
    assert res.rows[1].origin is None and "embedding.tables.emb.hash_buckets" in \
        res.rows[1].params
    res.show()
    out = capsys.readouterr().out
    q0, q1 = first.metrics["quality"], res.rows[1].metrics["quality"]
    if res.best.number == 1:
        assert (f"the pick, trial 1, against the model as written (trial 0): quality "
                f"{q1:.4f} vs {q0:.4f} ({q1 - q0:+.4f})") in out
    else:
        assert "the pick is the model as written (trial 0)" in out


def test_the_model_as_written_is_judged_against_the_budget(loop) -> None:
    """dim 64 uncompressed: 100k x 64 fp32 under Adam (4 copies, 102 MB) and the CUDA
    context (570 MB) are over 650MB: the as-written trial is infeasible, never trained."""
    mod, _ = loop
    res = search(loop, dims="64, 8", trials=1)
    first = res.rows[0]
    assert first.origin == "as written" and first.status == "infeasible"
    assert first.device_total > 650e6 and first.result is None
    assert all(m.startswith("autoembed.nn") for m, _ in mod.TRAINED)


def test_no_reference_turns_it_off(loop) -> None:
    mod, _ = loop
    res = search(loop, trials=1, reference=False)
    assert all(r.origin is None for r in res.rows)
    assert all(m.startswith("autoembed.nn") for m, _ in mod.TRAINED)


def test_enqueued_configs_train_after_the_model_as_written(loop) -> None:
    res = search(loop, trials=2, enqueue=[{"dim": 16, "tables.emb.hash_buckets": 0.02}])
    assert [r.origin for r in res.rows[:2]] == ["as written", "enqueued"]
    assert res.rows[1].params == {"user.dim": 16, "embedding.tables.emb.hash_buckets": 0.02}


@pytest.mark.parametrize(("entries", "says"), [
    ("- {dimm: 16}", "--enqueue entry 1: 'dimm' is not in the space (did you mean 'dim'?)"),
    ("- {dim: 12}", "--enqueue entry 1: dim=12: not one of its choices [8, 16]"),
    ("dim: 16", "is not a list of param dicts"),
])
def test_an_invalid_enqueue_file_is_one_line_exit_2(loop, capsys, entries, says) -> None:
    _, root = loop
    (root / "space.yaml").write_text(SPACE.replace("DIMS", "8, 16"))
    (root / "queue.yaml").write_text(entries + "\n")
    rc = main(["search", "--budget", "650MB", "--space", str(root / "space.yaml"),
               "--model", "aswritten.loop:build", "--example", "aswritten.loop:example",
               "--train", "aswritten.loop:train", "--executor", "local", "--study", "bad",
               "--runs-dir", str(root / "runs"), "--tracking-uri", "none",
               "--enqueue", str(root / "queue.yaml")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and says in err and "\n" not in err, err
    assert not (root / "runs" / "bad").exists()


def test_both_survive_a_resume(loop, capsys) -> None:
    """Cut after trial 0, resumed without --enqueue: the model as written is not trained
    again and the enqueued config is not lost."""
    mod, _ = loop
    first = search(loop, study="again", trials=1, enqueue=[{"dim": 16}])
    assert [r.origin for r in first.rows] == ["as written"]
    first.show()
    out = capsys.readouterr().out  # the front's one member, shown as what it is
    assert "model=as written dim=8" in out
    assert "the pick is the model as written (trial 0)" in out
    again = search(loop, study="again", trials=3, resume=True)
    origins = [r.origin for r in again.rows]
    assert origins[:2] == ["as written", "enqueued"] and origins.count("as written") == 1
    assert again.rows[1].params["user.dim"] == 16
    assert [d for m, d in mod.TRAINED if m.startswith("torch")] == [8]  # trained once
