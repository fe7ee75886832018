"""Text's seq_len as a searched value: documents truncated or padded to the trial's length,
the priced bytes that follow it, tokens per batch split by it, and a text search whose
trials differ in it."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import torch

from autoembed.batch import PAD_ID
from autoembed.config import EmbeddingConfig
from autoembed.data import DataSpec, load_dataset
from autoembed.data.sequence import with_seq_len
from autoembed.errors import ConfigError
from autoembed.runner import resolve_for_data
from autoembed.space import parse_space
from autoembed.trace import estimate


def _docs(tmp_path: Path) -> object:
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa".split()
    rows = [{"text": " ".join(words[: 2 + i % 8]), "label": i % 2} for i in range(60)]
    path = tmp_path / "docs.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return load_dataset(DataSpec(str(path), label="label", text_column="text", seq_len=8))


def test_documents_are_truncated_or_padded_to_the_trial_length(tmp_path: Path) -> None:
    data = _docs(tmp_path)
    full = torch.cat([b.features["tokens"] for b in data.batches("train", 16, shuffle=False)])
    short = with_seq_len(data, 3)
    long = with_seq_len(data, 12)
    got3 = torch.cat([b.features["tokens"] for b in short.batches("train", 16, shuffle=False)])
    got12 = torch.cat([b.features["tokens"] for b in long.batches("train", 16, shuffle=False)])
    assert torch.equal(got3, full[:, :3])  # the first three tokens of each document
    assert torch.equal(got12[:, :8], full) and bool((got12[:, 8:] == PAD_ID).all())
    assert short.seq_len == 3 and short.tables[0].pooling_factor == 3.0
    assert short.num_rows("train") == data.num_rows("train")  # the rest is the data's
    assert with_seq_len(data, 8) is data
    with pytest.raises(ConfigError, match="seq_len = 0"):
        with_seq_len(data, 0)


def test_seq_len_moves_the_priced_activation_bytes_by_hand(tmp_path: Path) -> None:
    data = _docs(tmp_path)
    base = EmbeddingConfig(task="text", dim=16, dense_layers=(), batch_size=64)

    def acts(seq_len: int) -> int:
        cfg = resolve_for_data(EmbeddingConfig(**{**base.__dict__, "seq_len": seq_len}), data)
        assert cfg.seq_len == seq_len  # the trial's, not the data's 8
        return estimate(cfg).activations

    # what grows with the sequence: the [64, S] int64 id matrix, and embedding_bag's saved
    # indices and offset2bag (int64 [64 x S] each): 3 x 64 x S x 8 bytes (512-byte blocks)
    assert acts(128) - acts(64) == 3 * 64 * (128 - 64) * 8
    # a config that names no length takes the data's
    assert resolve_for_data(base, data).seq_len == 8


def test_tokens_per_batch_is_split_by_seq_len() -> None:
    space = parse_space({
        "data": {"name": "synthetic-text", "vocab_size": 1000, "seq_len": 64},
        "params": {"seq_len": {"choices": [16, 64]},
                   "tokens_per_batch": {"choices": [1024, 4096]}},
    }, "t")
    assert space.config_for({"seq_len": 16, "tokens_per_batch": 4096}).batch_size == 256
    assert space.config_for({"seq_len": 64, "tokens_per_batch": 1024}).batch_size == 16
    with pytest.raises(ConfigError, match="search seq_len too"):
        parse_space({"params": {"tokens_per_batch": {"choices": [1024]}}}, "t")
    with pytest.raises(ConfigError, match="follows from tokens_per_batch"):
        parse_space({"params": {"seq_len": {"choices": [8]}, "batch_size": {"choices": [8]},
                                "tokens_per_batch": {"choices": [1024]}}}, "t")


def test_a_text_search_trains_trials_of_different_lengths(tmp_path: Path) -> None:
    from autoembed.pipeline import search
    from autoembed.pipeline.executor import InProcessExecutor
    from autoembed.tracking import NullTracker

    space = tmp_path / "text.yaml"
    space.write_text("""
data: {name: synthetic-text, vocab_size: 2000, seq_len: 64, rows: [2000, 400, 400]}
base: {dense_layers: [], lr: 0.05}
params:
  dim: {choices: [16]}
  seq_len: {grid: [16, 64], type: int, low: 16, high: 64}
  tokens_per_batch: {choices: [2048]}
run: {max_steps: 20, eval_every: 10, eval_batches: 2, test_batches: 2}
""")
    res = search(1_000_000_000, str(space), trials=2, sampler="grid", runs_dir=tmp_path / "r",
                 study="t", tracker=NullTracker(), early_stop=False,
                 executor=InProcessExecutor())
    done = [r for r in res.rows if r.status == "complete"]
    assert sorted(r.result.config.seq_len for r in done) == [16, 64]
    for r in done:
        assert r.result.config.batch_size == 2048 // r.result.config.seq_len
        assert r.config.seq_len == r.result.config.seq_len  # priced at the trained length
    # the same tokens per batch, split otherwise: 4x the rows of the pooled and tower
    # activations at seq_len 16
    acts = {r.config.seq_len: r.estimate["activations"] for r in done}
    assert acts[16] > acts[64]


class _Widths:
    """Stands in for a Trainer and notes the token width of every batch it is given."""

    def __init__(self) -> None:
        self.device = torch.device("cpu")
        self.model = torch.nn.Linear(1, 1)
        self.widths: set[int] = set()

    def step(self, batches: list) -> float:
        self.widths.update(int(b.features["tokens"].shape[1]) for b in batches)
        return 0.5

    def predict(self, batch: object) -> torch.Tensor:
        ids = batch.features["tokens"]  # type: ignore[attr-defined]
        self.widths.add(int(ids.shape[1]))
        return torch.zeros(ids.shape[0], 2)


def test_a_trial_trains_and_evaluates_at_its_own_length(tmp_path: Path) -> None:
    from autoembed.runner import RunSettings, run_trial

    data = _docs(tmp_path)
    trainer = _Widths()
    cfg = EmbeddingConfig(task="text", dim=8, dense_layers=(), batch_size=8, seq_len=3)
    r = run_trial(cfg, data, RunSettings(max_steps=4, eval_every=2), trainer=trainer)
    assert r.status == "complete" and r.config.seq_len == 3
    assert trainer.widths == {3}  # training, validation, test and latency batches


@pytest.mark.parametrize("params", [
    {"seq_len": {"choices": [1, 8, 64]}},
    {"seq_len": {"choices": [8, 64]}, "tokens_per_batch": {"choices": [512, 1024]}},
])
def test_a_text_setting_searched_on_ctr_data_is_refused(params: dict) -> None:
    # CTR resolves seq_len to 1: each of its values trained the same config again
    from autoembed.pipeline.builtin import BuiltinWorkload

    data = {"name": "synthetic-ctr", "vocab_sizes": [2000, 50], "rows": [400, 100, 100]}
    space = parse_space({"data": data, "params": {"dim": {"choices": [8]}, **params}}, "ctr")
    with pytest.raises(ConfigError, match=r"^search space 'ctr': key 'params.seq_len' = .*: "
                       r"is a text setting, and these data are ctr: every value trains the "
                       r"same config; drop it$"):
        BuiltinWorkload.of(space)
    text = {"name": "synthetic-text", "vocab_size": 500, "seq_len": 64, "rows": [40, 10, 10]}
    assert BuiltinWorkload.of(parse_space({"data": text, "params": params}, "text"))
