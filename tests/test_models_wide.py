"""The wide part (`wide: true`): per-id logit weights beside the deep tower (wide & deep).
Layout and bytes by hand, exact representation of a per-id bias model, and learning planted
per-id biases."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from autoembed.batch import Batch
from autoembed.config import (
    EmbeddingConfig,
    TableConfig,
    config_from_dict,
    load_config,
    param_specs,
    save_config,
)
from autoembed.errors import ConfigError
from autoembed.models import EmbeddingModel, build_model, make_trainer, quantize, serving_bytes
from autoembed.models.embedding import WideTable
from autoembed.trace import estimate


def ctr(**kw: object) -> EmbeddingConfig:
    base: dict[str, object] = dict(
        tables=(TableConfig("user", 50), TableConfig("genre", 7, 2.0)),
        dim=4,
        dense_layers=(8,),
        wide=True,
        batch_size=32,
    )
    base.update(kw)
    return EmbeddingConfig(**base)  # type: ignore[arg-type]


def test_layout_by_hand() -> None:
    shapes = [(s.name, s.shape, s.kind) for s in param_specs(ctr())]
    assert shapes == [
        ("tables.user.weight", (50, 4), "table"),
        ("tables.genre.weight", (7, 4), "table"),
        ("wide.user.weight", (50, 1), "table"),
        ("wide.genre.weight", (7, 1), "table"),
        ("tower.0.weight", (8, 8), "dense"),
        ("tower.0.bias", (8,), "dense"),
        ("tower.1.weight", (1, 8), "dense"),
        ("tower.1.bias", (1,), "dense"),
    ]
    # hash: the wide part has the deep table's rows (min(V, buckets)); text: one per class
    hashed = {s.name: s.shape for s in param_specs(ctr(compression="hash", hash_buckets=20))}
    assert hashed["wide.user.weight"] == (20, 1)
    assert hashed["wide.genre.weight"] == (7, 1)
    text = EmbeddingConfig(
        task="text",
        tables=(TableConfig("tokens", 100),),
        seq_len=6,
        num_classes=3,
        dim=4,
        dense_layers=(),
        wide=True,
    )
    assert {s.name: s.shape for s in param_specs(text)}["wide.tokens.weight"] == (100, 3)
    assert [n for n, _ in build_model(text).named_parameters()] == [
        "tables.tokens.weight",
        "wide.tokens.weight",
        "tower.0.weight",
        "tower.0.bias",
    ]


def test_wide_is_validated_and_round_trips(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"'wide' = 'yes': must be true or false"):
        ctr(wide="yes")
    assert config_from_dict(ctr().to_dict()) == ctr()
    assert load_config(save_config(ctr(), tmp_path / "c.yaml")).wide is True
    assert config_from_dict({"wide": True}).wide is True
    assert EmbeddingConfig().wide is False
    assert ctr().flat_params()["wide"] == "True"


def test_bytes_by_hand() -> None:
    # fp32 adam, each tensor in 512 B blocks: tables.user 50*4*4 = 800 B -> 2 blocks; the
    # other 7 tensors (genre 112 B, wide 200 B and 28 B, tower 256, 32, 32, 4 B) 1 block each
    est = estimate(ctr(table_optimizer="adam"))
    assert est.parameters == 9 * 512
    assert est.optimizer_state == 2 * 9 * 512
    # the per-table breakdown lists the wide part apart from the deep tables
    assert [(t.name, t.rows, t.dim, t.parameters) for t in est.tables] == [
        ("user", 50, 4, 1024),
        ("genre", 7, 4, 512),
        ("wide.user", 50, 1, 512),
        ("wide.genre", 7, 1, 512),
    ]
    # serving int8: deep rows 16 B (4 + 4 -> 16), wide rows stay fp32 (4 B), tower fp32
    cfg = ctr(serving="int8")
    want = (50 + 7) * 16 + (50 + 7) * 4 + (64 + 8 + 8 + 1) * 4
    assert estimate(cfg).serving_bytes == want
    assert serving_bytes(quantize(build_model(cfg), "int8")) == want
    # int4 accepts the 1-wide wide tables: they are not packed
    cfg4 = ctr(serving="int4")
    want4 = (50 + 7) * 16 + (50 + 7) * 4 + (64 + 8 + 8 + 1) * 4  # 2 + 4 -> 16 B rows
    assert (
        serving_bytes(quantize(build_model(cfg4), "int4"))
        == want4
        == (estimate(cfg4).serving_bytes)
    )


def wide_weight(model: torch.nn.Module, field: str) -> torch.Tensor:
    assert isinstance(model, EmbeddingModel) and model.wide is not None
    table = model.wide[field]
    assert isinstance(table, WideTable)
    return table.weight


def batch_of(users: list[int], genres: list[list[int]]) -> Batch:
    width = max(len(g) for g in genres)
    bags = [g + [-1] * (width - len(g)) for g in genres]
    return Batch(
        {"user": torch.tensor(users).unsqueeze(1), "genre": torch.tensor(bags)},
        torch.zeros(len(users)),
    )


def test_starts_as_the_deep_model() -> None:
    b = batch_of([1, 2, 3], [[0], [1, 2], [6]])
    with torch.no_grad():
        assert torch.equal(build_model(ctr())(b), build_model(ctr(wide=False))(b))


@pytest.mark.parametrize("pooling", ["mean", "sum"])
def test_represents_a_per_id_bias_model_exactly(pooling: str) -> None:
    """Tower silenced, wide weights set to planted biases: the logit is the bias sum (bags
    pooled like the deep tables: mean or sum over the real ids, missing ids left out)."""
    model = build_model(ctr(pooling=pooling))
    user_bias = [0.1 * i - 2.0 for i in range(50)]
    genre_bias = [0.5, -1.0, 2.0, 0.25, 0.0, -0.75, 1.5]
    with torch.no_grad():
        wide_weight(model, "user").copy_(torch.tensor(user_bias).unsqueeze(1))
        wide_weight(model, "genre").copy_(torch.tensor(genre_bias).unsqueeze(1))
        last = model.tower[-1]
        assert isinstance(last, torch.nn.Linear)
        last.weight.zero_()
        last.bias.fill_(0.125)
        got = model(batch_of([3, 49, 0], [[1], [2, 5], [0, 6, 3]]))
    pool = (lambda xs: sum(xs) / len(xs)) if pooling == "mean" else sum
    want = [
        0.125 + user_bias[3] + pool([genre_bias[1]]),
        0.125 + user_bias[49] + pool([genre_bias[2], genre_bias[5]]),
        0.125 + user_bias[0] + pool([genre_bias[0], genre_bias[6], genre_bias[3]]),
    ]
    assert got.tolist() == pytest.approx(want, abs=1e-6)


def planted(n: int, seed: int) -> tuple[Batch, torch.Tensor]:
    """Labels from per-user biases alone: users 0-24 click with p = 0.9, 25-49 with 0.1;
    the genres are noise. Returns the batch and the planted probabilities."""
    g = torch.Generator().manual_seed(seed)
    users = torch.randint(0, 50, (n, 1), generator=g)
    genres = torch.randint(0, 7, (n, 2), generator=g)
    p = torch.where(users[:, 0] < 25, 0.9, 0.1)
    return Batch({"user": users, "genre": genres}, torch.bernoulli(p, generator=g)), p


def test_wide_part_learns_planted_per_id_biases() -> None:
    """On labels made of per-user biases, the wide model's held-out loss comes within 0.02
    nats of the planted model's own, and its per-user wide weights alone rank the users as
    planted: every 0.9 user above every 0.1 user."""
    held, p = planted(4000, seed=999)
    bce = torch.nn.functional.binary_cross_entropy
    oracle = float(bce(p, held.labels))
    cfg = ctr(table_optimizer="adagrad", dense_optimizer="adagrad", lr=0.05, batch_size=64)
    tr = make_trainer(cfg)
    for step in range(300):
        tr.step([planted(64, seed=step)[0]])
    loss = float(bce(torch.sigmoid(tr.predict(held)), held.labels))
    assert loss < oracle + 0.02, (loss, oracle)
    w = wide_weight(tr.model, "user").detach()[:, 0]
    assert float(w[:25].min()) > float(w[25:].max()), w


def test_text_wide_trains_and_traces() -> None:
    """Text: per-token, per-class weights; pads (id 0) stay zero. The fake-tensor trace of a
    wide ctr step agrees with the analytic peak within 1%."""
    text = EmbeddingConfig(
        task="text",
        tables=(TableConfig("tokens", 100),),
        seq_len=6,
        num_classes=3,
        dim=4,
        dense_layers=(),
        wide=True,
        batch_size=8,
        table_optimizer="adagrad",
        dense_optimizer="adagrad",
    )
    tr = make_trainer(text)
    ids = torch.tensor([[5, 7, 0, 0, 0, 0]] * 8)
    tr.step([Batch({"tokens": ids}, torch.full((8,), 2))])
    w = wide_weight(tr.model, "tokens")
    assert torch.all(w[0] == 0) and torch.all(w[5] != 0) and torch.all(w[6] == 0)
    big = ctr(tables=(TableConfig("user", 200_000), TableConfig("genre", 30, 2.0)), dim=16)
    ana, traced = estimate(big), estimate(big, method="traced")
    assert abs(traced.allocated_peak - ana.allocated_peak) <= 0.01 * ana.allocated_peak
