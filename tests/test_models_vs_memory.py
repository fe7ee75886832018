"""The built modules and the memory model agree byte for byte (issue 3): parameter and
optimizer-state bytes counted from the real tensors after one step equal the analytic
figures, for every compression x precision x table optimizer."""

from __future__ import annotations

import itertools

import pytest
import torch

from autoembed.batch import Batch
from autoembed.compression import takes_optimizer
from autoembed.config import COMPRESSIONS, OPTIMIZERS, PRECISIONS, EmbeddingConfig, TableConfig
from autoembed.models import make_trainer
from autoembed.trace import estimate


def block(nbytes: int) -> int:
    return -(-nbytes // 512) * 512  # the CUDA caching allocator's 512 B blocks


def config(compression: str, precision: str, opt: str, wide: bool = False) -> EmbeddingConfig:
    dense = {"rowwise_adagrad": "adagrad", "sparse_adam": "adam"}.get(opt, opt)
    return EmbeddingConfig(
        tables=(TableConfig("a", 3000), TableConfig("b", 700, 2.0), TableConfig("c", 90)),
        dim=16, batch_size=64, dense_layers=(32,), compression=compression,
        hash_buckets=500, qr_collisions=7, mixed_dim_alpha=0.5, precision=precision,
        table_optimizer=opt, dense_optimizer=dense, wide=wide,
    )


def batch(cfg: EmbeddingConfig) -> Batch:
    g = torch.Generator().manual_seed(0)
    feats = {t.name: torch.randint(0, t.vocab_size, (cfg.batch_size, int(t.pooling_factor)),
                                   generator=g) for t in cfg.tables}
    return Batch(feats, torch.randint(0, 2, (cfg.batch_size,), generator=g).float())


def stepped_bytes(cfg: EmbeddingConfig) -> tuple[int, int, int]:
    """(parameter bytes, optimizer-state bytes, optimizers) counted from the real tensors
    after one step, in 512 B blocks."""
    tr = make_trainer(cfg, "cpu")
    tr.step([batch(cfg)])
    params = sum(block(p.numel() * p.element_size()) for p in tr.model.parameters())
    if tr.masters is not None:
        params += sum(block(m.numel() * m.element_size()) for _, m in tr.masters.items())
    state = 0
    for o in tr.optimizers.all:
        for st in o.state.values():
            for v in st.values():
                if isinstance(v, torch.Tensor) and v.dim() > 0:  # scalar step counters: host
                    state += block(v.numel() * v.element_size())
    return params, state, len(tr.optimizers.all)


@pytest.mark.parametrize(
    ("compression", "precision", "opt", "wide"),
    [
        (c, p, o, w)
        for c, p, o, w in itertools.product(COMPRESSIONS, PRECISIONS, OPTIMIZERS, (False, True))
        if takes_optimizer(c, o)  # robe / tt: dense-gradient optimizers only
    ],
)
def test_built_bytes_equal_analytic(compression: str, precision: str, opt: str, wide: bool) -> None:
    cfg = config(compression, precision, opt, wide).resolve()
    params, state, _ = stepped_bytes(cfg)
    est = estimate(cfg)
    assert params == est.parameters
    assert state == est.optimizer_state


# Per-table settings: each table its own compression, size and (for one) its own optimizer.
# The override is a sparse optimizer under a dense default and the reverse, so every cell
# mixes sparse and dense table gradients in one step.
OTHER = {"sgd": "adam", "momentum": "rowwise_adagrad", "adam": "sparse_adam", "adamw": "sgd",
         "adagrad": "momentum", "rowwise_adagrad": "adamw", "sparse_adam": "adagrad"}


def mixed_config(precision: str, opt: str, wide: bool) -> EmbeddingConfig:
    dense = {"rowwise_adagrad": "adagrad", "sparse_adam": "adam"}.get(opt, opt)
    return EmbeddingConfig(
        tables=(
            TableConfig("u.a", 3000, compression="hash", hash_buckets=0.1),
            TableConfig("u.b", 700, 2.0, compression="qr", qr_collisions=0.2,
                        table_optimizer=OTHER[opt], dim=8),
            TableConfig("c", 90, compression="mixed_dim", frequency=0.001),
            TableConfig("d", 400, compression="qr", qr_collisions=7, qr_operation="concat"),
        ),
        dim=16, batch_size=64, dense_layers=(32,), mixed_dim_alpha=0.5, precision=precision,
        table_optimizer=opt, dense_optimizer=dense, wide=wide,
    )


@pytest.mark.parametrize(
    ("precision", "opt", "wide"), list(itertools.product(PRECISIONS, OPTIMIZERS, (False, True)))
)
def test_mixed_tables_built_bytes_equal_analytic(precision: str, opt: str, wide: bool) -> None:
    cfg = mixed_config(precision, opt, wide).resolve()
    params, state, optimizers = stepped_bytes(cfg)
    est = estimate(cfg)
    assert params == est.parameters
    assert state == est.optimizer_state
    assert optimizers == 3  # two table optimizers and the dense one


def hand_tensors(cfg: EmbeddingConfig) -> list[tuple[int, int]]:
    """(rows, cols) of every parameter, from the definitions (README's techniques), not from
    the code's layout: hash keeps min(V, buckets) rows; qr a ceil(V / collisions) x dim
    quotient and a collisions x dim remainder table; shared one table of the largest V; the
    wide part one weight per id (hashed like the table under hash); the tower
    (fields x dim) -> 32 -> 1 with biases."""
    c, d, n = cfg.compression, cfg.dim, cfg.qr_collisions
    shapes: list[tuple[int, int]] = []
    vocab = [t.vocab_size for t in cfg.tables]
    if c == "shared":
        shapes.append((max(vocab), d))
    for v in vocab:
        if c == "none":
            shapes.append((v, d))
        elif c == "hash":
            shapes.append((min(v, cfg.hash_buckets), d))
        elif c == "qr":
            shapes += [(-(-v // n), d), (n, d)]
        if cfg.wide:
            shapes.append((min(v, cfg.hash_buckets) if c == "hash" else v, 1))
    hidden = cfg.dense_layers[0]
    return shapes + [(hidden, len(vocab) * d), (hidden, 1), (1, hidden), (1, 1)]


@pytest.mark.parametrize(
    ("compression", "precision", "wide"),
    list(itertools.product(("none", "hash", "qr", "shared"), PRECISIONS, (False, True))),
)
def test_parameter_bytes_by_hand(compression: str, precision: str, wide: bool) -> None:
    """Parameter (and fp32 master) bytes against shapes and dtypes written down here, so a
    layout that the model and the analytic estimate got wrong together is caught."""
    cfg = config(compression, precision, "adam", wide).resolve()
    half = precision in ("fp16", "bf16", "fp16_master", "bf16_master")  # stored in 2 bytes
    copies = [2 if half else 4] + ([4] if precision.endswith("_master") else [])
    hand = sum(block(r * k * size) for r, k in hand_tensors(cfg) for size in copies)
    tr = make_trainer(cfg, "cpu")
    built = sum(block(p.numel() * p.element_size()) for p in tr.model.parameters())
    if tr.masters is not None:
        built += sum(block(m.numel() * m.element_size()) for _, m in tr.masters.items())
    assert built == hand
    assert estimate(cfg).parameters == hand


# robe_shared: the three tables read ONE array of 0.25 x (3000 + 700 + 90) x 16 = 15,160
# values; per table they would hold 0.25 x V x 16 = 12,000, 2,800 and 360 values.
ROBE_ARRAYS = {True: [15_160], False: [12_000, 2_800, 360]}


@pytest.mark.parametrize(
    ("shared", "opt", "states"),
    [(s, o, n) for s in (True, False) for o, n in (("adam", 2), ("adagrad", 1))],
)
def test_robe_shared_array_counted_once_by_hand(shared: bool, opt: str, states: int) -> None:
    """Parameters and optimizer state after a real step, and both estimates, against the
    array sizes written above (fp32, `states` tensors of the parameter's size per tensor)."""
    cfg = EmbeddingConfig(
        tables=(TableConfig("a", 3000), TableConfig("b", 700, 2.0), TableConfig("c", 90)),
        dim=16, batch_size=64, dense_layers=(32,), compression="robe", robe_size=0.25,
        robe_block=4, robe_shared=shared, table_optimizer=opt, dense_optimizer=opt,
    ).resolve()
    tower = [32 * 48, 32, 32, 1]
    hand = sum(block(n * 4) for n in ROBE_ARRAYS[shared] + tower)
    params, state, _ = stepped_bytes(cfg)
    assert params == hand == estimate(cfg).parameters == estimate(cfg, method="traced").parameters
    assert state == states * hand == estimate(cfg).optimizer_state
