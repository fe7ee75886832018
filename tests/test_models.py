"""autoembed.models: layout, bytes, optimizers, precision, the training step.

Expected byte counts are worked out by hand in the comments, never read from the code.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator

import pytest
import torch

from autoembed.batch import MISSING_ID, PAD_ID, Batch
from autoembed.config import (
    COMPRESSIONS,
    OPTIMIZERS,
    PRECISIONS,
    TABLE_ONLY_OPTIMIZERS,
    EmbeddingConfig,
    TableConfig,
    param_specs,
)
from autoembed.errors import ConfigError, DataError, UnsupportedError
from autoembed.models import (
    EmbeddingModel,
    MasterWeights,
    RowWiseAdagrad,
    build_model,
    build_optimizer,
    check_supported,
    loss_fn,
    make_trainer,
    state_bytes,
)

pytestmark = pytest.mark.filterwarnings("ignore:Sparse invariant checks")


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    """Tiny tensors: one intra-op thread is faster than two (and fair on a shared CPU)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


DTYPES = {
    "fp32": torch.float32,
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
    "fp16_master": torch.float16,
    "bf16_master": torch.bfloat16,
    "amp_fp16": torch.float32,
    "amp_bf16": torch.float32,
}


def ctr_config(**kw: object) -> EmbeddingConfig:
    """Three fields: a multi-hot 1000-row field, a 50-row and a 3-row one-hot field."""
    base: dict[str, object] = {
        "tables": (
            TableConfig("a", 1000, pooling_factor=2.0, frequency=0.2),
            TableConfig("b", 50, frequency=0.01),
            TableConfig("c", 3, frequency=0.5),
        ),
        "dim": 16,
        "dense_layers": (8,),
        "hash_buckets": 100,
        "qr_collisions": 4,
    }
    base.update(kw)
    return EmbeddingConfig(**base)  # type: ignore[arg-type]


def text_config(**kw: object) -> EmbeddingConfig:
    base: dict[str, object] = {
        "task": "text",
        "tables": (TableConfig("tok", 1000),),
        "dim": 16,
        "num_classes": 5,
        "seq_len": 6,
        "dense_layers": (8,),
        "hash_buckets": 100,
    }
    base.update(kw)
    return EmbeddingConfig(**base)  # type: ignore[arg-type]


def ctr_batch(b: int = 8, seed: int = 0) -> Batch:
    g = torch.Generator().manual_seed(seed)
    a = torch.randint(0, 1000, (b, 3), generator=g)
    a[:, 2] = MISSING_ID  # right padding
    a[0, 1] = MISSING_ID
    feats = {
        "a": a,
        "b": torch.randint(0, 50, (b, 1), generator=g),
        "c": torch.randint(0, 3, (b, 1), generator=g),
    }
    return Batch(feats, torch.randint(0, 2, (b,), generator=g).float())


def text_batch(b: int = 8, seed: int = 0) -> Batch:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, 1000, (b, 6), generator=g)
    ids[:, 4:] = PAD_ID
    return Batch({"tok": ids}, torch.randint(0, 5, (b,), generator=g))


def nbytes(model: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def weight(model: EmbeddingModel, table: str = "a", name: str = "weight") -> torch.Tensor:
    """A table tensor of a built model (typed access for the assertions)."""
    w = getattr(model.tables[table], name)
    assert isinstance(w, torch.Tensor)
    return w


def lookup(model: EmbeddingModel, table: str, ids: torch.Tensor) -> torch.Tensor:
    """One table's pooled output for [B, L] ids."""
    out = model.tables[table](ids)
    assert isinstance(out, torch.Tensor)
    return out


# ===================================================================== layout and bytes


@pytest.mark.parametrize(
    ("compression", "precision"), list(itertools.product(COMPRESSIONS, PRECISIONS))
)
def test_parameters_are_param_specs(compression: str, precision: str) -> None:
    for cfg in (ctr_config, text_config):
        if cfg is text_config and compression == "shared":
            continue
        config = cfg(compression=compression, precision=precision)
        model = build_model(config)
        got = [(n, tuple(p.shape), p.dtype) for n, p in model.named_parameters()]
        want = [(s.name, s.shape, DTYPES[precision]) for s in param_specs(config)]
        assert got == want


def _one_table(**kw: object) -> EmbeddingConfig:
    base: dict[str, object] = {
        "tables": (TableConfig("a", 1000),),
        "dim": 16,
        "dense_layers": (8,),
    }
    base.update(kw)
    return EmbeddingConfig(**base)  # type: ignore[arg-type]


# tower for one 16-wide field: Linear(16 -> 8) = 8*16 + 8 = 136, Linear(8 -> 1) = 9: 145 params
TOWER_1 = 145


@pytest.mark.parametrize(
    ("kw", "expected"),
    [
        # 1000 x 16 fp32 table = 64,000 B, tower 145 * 4 = 580 B
        ({}, 64_000 + 580),
        # fp16 halves everything: 32,000 + 290
        ({"precision": "fp16"}, 32_000 + 290),
        ({"precision": "bf16_master"}, 32_000 + 290),
        # amp keeps fp32 parameters
        ({"precision": "amp_fp16"}, 64_000 + 580),
        # hash into 100 buckets: 100 x 16 x 4 = 6,400
        ({"compression": "hash", "hash_buckets": 100}, 6_400 + 580),
        # hash with more buckets than ids: 1000 rows, no compression
        ({"compression": "hash", "hash_buckets": 5000}, 64_000 + 580),
        # qr m=4 mult: ceil(1000/4)=250 x 16 + 4 x 16 = 4,064 params = 16,256 B
        ({"compression": "qr", "qr_collisions": 4}, 16_256 + 580),
        # qr concat: 250 x 8 + 4 x 8 = 2,032 params = 8,128 B
        ({"compression": "qr", "qr_collisions": 4, "qr_operation": "concat"}, 8_128 + 580),
        # qr m=3: ceil(1000/3) = 334 rows: (334 + 3) x 16 x 4 = 21,568
        ({"compression": "qr", "qr_collisions": 3}, 21_568 + 580),
    ],
)
def test_model_bytes_hand_computed(kw: dict[str, object], expected: int) -> None:
    assert nbytes(build_model(_one_table(**kw))) == expected


def test_mixed_dim_and_shared_bytes_hand_computed() -> None:
    tables = (TableConfig("a", 1000, frequency=0.01), TableConfig("b", 100, frequency=0.0001))
    # alpha 0.5: b gets round(16 * (0.0001 / 0.01) ** 0.5) = round(1.6) = 2, raised to the
    # minimum 4. a: 1000 x 16 = 16,000; b: 100 x 4 = 400 + proj 16 x 4 = 64;
    # tower input 2 x 16 = 32: 8 x 32 + 8 = 264, 8 + 1 = 9. Total 16,737 params.
    md = EmbeddingConfig(
        tables=tables, dim=16, dense_layers=(8,), compression="mixed_dim", mixed_dim_alpha=0.5
    )
    model = build_model(md)
    assert dict(model.named_parameters())["tables.b.proj.weight"].shape == (16, 4)
    assert nbytes(model) == 16_737 * 4
    # shared: one 1000 x 16 table for both fields (16,000) + the same tower (273)
    sh = EmbeddingConfig(tables=tables, dim=16, dense_layers=(8,), compression="shared")
    assert nbytes(build_model(sh)) == 16_273 * 4


def test_build_is_seeded_and_leaves_global_rng_alone() -> None:
    before = torch.get_rng_state()
    a = build_model(ctr_config(seed=3))
    b = build_model(ctr_config(seed=3))
    c = build_model(ctr_config(seed=4))
    assert torch.equal(torch.get_rng_state(), before)
    for (_, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters(), strict=True):
        assert torch.equal(pa, pb)
    assert not torch.equal(weight(a, "a"), weight(c, "a"))


def test_unresolved_mixed_dim_config_is_resolved() -> None:
    config = ctr_config(compression="mixed_dim")
    assert not config.is_resolved
    model = build_model(config)
    assert model.config.is_resolved
    assert [n for n, _ in model.named_parameters()] == [s.name for s in param_specs(config)]


# ===================================================================== forward


@pytest.mark.parametrize(
    ("compression", "pooling", "interaction"),
    list(itertools.product(COMPRESSIONS, ("mean", "sum", "naive"), ("concat", "dot"))),
)
def test_output_shapes(compression: str, pooling: str, interaction: str) -> None:
    config = ctr_config(compression=compression, pooling=pooling, interaction=interaction)
    out = build_model(config)(ctr_batch(8))
    assert out.shape == (8,) and out.dtype == torch.float32
    if compression != "shared":
        out = build_model(text_config(compression=compression, pooling=pooling))(text_batch(8))
        assert out.shape == (8, 5)


def test_forward_takes_features_dict_and_names_missing_feature() -> None:
    model = build_model(ctr_config())
    batch = ctr_batch()
    assert torch.equal(model(batch), model(batch.features))
    with pytest.raises(DataError, match="no feature 'c'"):
        model({k: v for k, v in batch.features.items() if k != "c"})


def test_ctr_missing_ids_are_left_out_of_mean_and_sum() -> None:
    for pooling in ("mean", "sum", "naive"):
        model = build_model(_one_table(pooling=pooling))
        w = weight(model, "a")
        ids = torch.tensor(
            [[3, 7, MISSING_ID, MISSING_ID], [5, MISSING_ID, MISSING_ID, MISSING_ID]]
        )
        pooled = lookup(model, "a", ids)
        s0, s1 = w[3] + w[7], w[5]
        if pooling == "sum":
            want = torch.stack((s0, s1))
        else:
            want = torch.stack((s0 / 2, s1))
        torch.testing.assert_close(pooled, want)


def test_text_mean_excludes_padding_and_naive_is_plain_mean() -> None:
    ids = torch.tensor([[4, 9, PAD_ID, PAD_ID]])
    for compression in ("none", "hash", "qr"):
        mean = build_model(text_config(compression=compression, hash_buckets=50))
        w_mean = lookup(mean, "tok", ids)
        w_short = lookup(mean, "tok", ids[:, :2])
        torch.testing.assert_close(w_mean, w_short)  # pads do not count
    naive = build_model(text_config(pooling="naive"))
    w = weight(naive, "tok")
    assert torch.count_nonzero(w[PAD_ID]) == 0
    torch.testing.assert_close(lookup(naive, "tok", ids), ((w[4] + w[9]) / 4).unsqueeze(0))


def test_dot_interaction_width_and_values() -> None:
    config = ctr_config(interaction="dot", dense_layers=())
    model = build_model(config)
    # F = 3 fields: 3 pairwise dots + the 16-wide mean = 19 inputs
    assert model.tower[0].weight.shape == (1, 19)
    batch = ctr_batch(4)
    x = model.embed(batch.features)
    p = [lookup(model, n, batch.features[n]) for n in ("a", "b", "c")]
    torch.testing.assert_close(x[:, :16], (p[0] + p[1] + p[2]) / 3)
    torch.testing.assert_close(x[:, 16], (p[0] * p[1]).sum(1))
    torch.testing.assert_close(x[:, 18], (p[1] * p[2]).sum(1))


def test_qr_naive_combines_rows_per_lookup() -> None:
    for op in ("mult", "add", "concat"):
        model = build_model(_one_table(compression="qr", qr_operation=op, pooling="naive"))
        q, r = weight(model, "a", "q_weight"), weight(model, "a", "r_weight")
        ids = torch.tensor([[9, 10]])  # 9 -> (2, 1), 10 -> (2, 2)
        rows = {
            "mult": (q[2] * r[1], q[2] * r[2]),
            "add": (q[2] + r[1], q[2] + r[2]),
            "concat": (torch.cat((q[2], r[1])), torch.cat((q[2], r[2]))),
        }[op]
        torch.testing.assert_close(lookup(model, "a", ids), ((rows[0] + rows[1]) / 2).unsqueeze(0))


def test_loss_fn_per_task() -> None:
    assert isinstance(loss_fn(ctr_config()), torch.nn.BCEWithLogitsLoss)
    assert isinstance(loss_fn(text_config()), torch.nn.CrossEntropyLoss)


# ===================================================================== gradients


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_table_gradients_sparse_exactly_when_config_says(optimizer: str) -> None:
    dense_opt = "adam" if optimizer in TABLE_ONLY_OPTIMIZERS else optimizer
    for pooling in ("mean", "naive"):
        config = ctr_config(table_optimizer=optimizer, dense_optimizer=dense_opt, pooling=pooling)
        model = build_model(config)
        loss_fn(config)(model(ctr_batch()), ctr_batch().labels).backward()
        for name, p in model.named_parameters():
            assert p.grad is not None
            is_table = name.startswith("tables.")
            assert p.grad.is_sparse == (is_table and config.sparse_tables), name


def test_sparse_gradient_has_one_row_per_real_lookup() -> None:
    config = _one_table(table_optimizer="sgd")
    model = build_model(config)
    ids = torch.tensor([[3, 3, MISSING_ID], [5, MISSING_ID, MISSING_ID]])
    model({"a": ids}).sum().backward()
    grad = weight(model, "a").grad
    assert grad is not None and grad.is_sparse
    assert sorted(grad._indices()[0].tolist()) == [3, 3, 5]  # missing ids touch no row


# ===================================================================== optimizers


@pytest.mark.parametrize(
    ("optimizer", "precision", "expected"),
    [
        # table 1000 x 16: fp32 64,000 B; fp16 32,000 B
        ("adam", "fp32", 128_000),  # exp_avg + exp_avg_sq
        ("adamw", "fp32", 128_000),
        ("momentum", "fp32", 64_000),  # momentum_buffer
        ("sgd", "fp32", 0),
        ("adagrad", "fp32", 64_000),  # sum
        ("rowwise_adagrad", "fp32", 4_000),  # one fp32 per row: 1000 x 4
        ("sparse_adam", "fp32", 128_000),
        ("adam", "fp16", 64_000),  # state in the parameter dtype
        ("rowwise_adagrad", "fp16", 4_000),  # row state stays fp32
        ("adam", "fp16_master", 128_000),  # fp32 state of the fp32 masters
        ("adam", "amp_bf16", 128_000),
    ],
)
def test_optimizer_state_bytes_after_one_step(
    optimizer: str, precision: str, expected: int
) -> None:
    dense = "adam" if optimizer in TABLE_ONLY_OPTIMIZERS else optimizer
    config = _one_table(table_optimizer=optimizer, dense_optimizer=dense, precision=precision)
    trainer = make_trainer(config)
    ids = torch.tensor([[1, 2], [3, MISSING_ID]])
    trainer.step([Batch({"a": ids}, torch.tensor([0.0, 1.0]))])
    assert state_bytes(trainer.optimizers.table) == expected


def test_optimizer_types_and_settings() -> None:
    config = _one_table(
        table_optimizer="momentum",
        dense_optimizer="adamw",
        lr=0.1,
        dense_lr=0.01,
        momentum=0.8,
        weight_decay=0.01,
        adam_eps=1e-6,
    )
    opts = build_optimizer(build_model(config), config)
    t, d = opts.table, opts.dense
    assert isinstance(t, torch.optim.SGD) and isinstance(d, torch.optim.AdamW)
    assert t.param_groups[0]["momentum"] == 0.8 and t.param_groups[0]["lr"] == 0.1
    assert t.param_groups[0]["foreach"] is True and d.param_groups[0]["foreach"] is True
    assert d.param_groups[0]["lr"] == 0.01 and d.param_groups[0]["eps"] == 1e-6
    assert d.param_groups[0]["weight_decay"] == 0.01
    assert len(t.param_groups[0]["params"]) == 1 and len(d.param_groups[0]["params"]) == 4
    sparse = _one_table(table_optimizer="adagrad", dense_optimizer="sgd")
    opts = build_optimizer(build_model(sparse), sparse)
    assert isinstance(opts.table, torch.optim.Adagrad)
    assert opts.table.param_groups[0]["foreach"] is False
    assert opts.dense.param_groups[0]["momentum"] == 0
    fp16 = _one_table(precision="fp16")
    assert build_optimizer(build_model(fp16), fp16).table.param_groups[0]["eps"] == 1e-4
    sa = _one_table(table_optimizer="sparse_adam")
    assert isinstance(build_optimizer(build_model(sa), sa).table, torch.optim.SparseAdam)


def test_optimizers_state_dict_round_trip() -> None:
    config = _one_table(warmup_steps=3)
    a = make_trainer(config)
    a.step([Batch({"a": torch.tensor([[1], [2]])}, torch.tensor([0.0, 1.0]))])
    b = make_trainer(config)
    b.optimizers.load_state_dict(a.optimizers.state_dict())
    assert b.optimizers.table.param_groups[0]["lr"] == a.optimizers.table.param_groups[0]["lr"]
    assert state_bytes(b.optimizers.table) == state_bytes(a.optimizers.table) == 128_000


def test_rowwise_adagrad_hand_computed() -> None:
    w = torch.nn.Parameter(torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]))
    opt = RowWiseAdagrad([w], lr=0.1, eps=1e-8)
    # uncoalesced: row 0 twice (sums to [1, 1]), row 2 once
    grad = torch.sparse_coo_tensor(
        torch.tensor([[0, 2, 0]]), torch.tensor([[0.5, 0.5], [2.0, 0.0], [0.5, 0.5]]), (3, 2)
    )
    w.grad = grad
    opt.step()
    # row 0: s = mean(1, 1) = 1, w -= 0.1 * [1, 1] / 1
    # row 2: s = mean(4, 0) = 2, w -= 0.1 * [2, 0] / sqrt(2)
    r2 = 5.0 - 0.2 / math.sqrt(2.0)
    want = torch.tensor([[0.9, 1.9], [3.0, 4.0], [r2, 6.0]])
    torch.testing.assert_close(w.detach(), want)
    torch.testing.assert_close(opt.state[w]["sum"], torch.tensor([1.0, 0.0, 2.0]))
    # second, dense step: row 1 g = [3, 1]: s1 = 5, w1 -= 0.1 * [3, 1] / sqrt(5);
    # row 0 g = 0: unchanged; state a 3-vector of fp32
    w.grad = torch.tensor([[0.0, 0.0], [3.0, 1.0], [0.0, 0.0]])
    opt.step()
    s5 = math.sqrt(5.0)
    want = torch.tensor([[0.9, 1.9], [3.0 - 0.3 / s5, 4.0 - 0.1 / s5], [r2, 6.0]])
    torch.testing.assert_close(w.detach(), want)
    assert opt.state[w]["sum"].dtype == torch.float32 and opt.state[w]["sum"].shape == (3,)


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad", "rowwise_adagrad", "sparse_adam"])
def test_sparse_optimizers_change_only_touched_rows(optimizer: str) -> None:
    config = _one_table(table_optimizer=optimizer, dense_optimizer="adam", lr=0.1)
    trainer = make_trainer(config)
    w = weight(trainer.model, "a")
    # step 1 touches rows 0, 1, 2 (row 0 so SparseAdam has momentum there)
    trainer.step([Batch({"a": torch.tensor([[0, 1], [2, MISSING_ID]])}, torch.tensor([0.0, 1.0]))])
    before = w.detach().clone()
    # step 2 touches rows 5 and 7; its missing ids must not touch row 0
    ids = torch.tensor([[5, MISSING_ID, MISSING_ID], [7, 5, MISSING_ID]])
    trainer.step([Batch({"a": ids}, torch.tensor([1.0, 0.0]))])
    changed = (w.detach() != before).any(dim=1).nonzero().flatten().tolist()
    assert changed == [5, 7]


def test_adam_first_step_moves_only_touched_rows() -> None:
    # dense table gradients: untouched rows have zero gradient and zero moments, so no move
    trainer = make_trainer(_one_table(table_optimizer="adam"))
    w = weight(trainer.model, "a")
    before = w.detach().clone()
    trainer.step([Batch({"a": torch.tensor([[1], [2]])}, torch.tensor([0.0, 1.0]))])
    changed = (w.detach() != before).any(dim=1).nonzero().flatten().tolist()
    assert changed == [1, 2]


def test_warmup_ramps_lr_linearly() -> None:
    trainer = make_trainer(_one_table(lr=0.1, dense_lr=0.01, warmup_steps=4))
    batch = Batch({"a": torch.tensor([[1], [2]])}, torch.tensor([0.0, 1.0]))
    lrs = []
    for _ in range(5):
        lrs.append(
            (
                trainer.optimizers.table.param_groups[0]["lr"],
                trainer.optimizers.dense.param_groups[0]["lr"],
            )
        )
        trainer.step([batch])
    want = [(0.1 * k / 4, 0.01 * k / 4) for k in (1, 2, 3, 4, 4)]
    for got, exp in zip(lrs, want, strict=True):
        assert got == pytest.approx(exp)


# ===================================================================== precision


@pytest.mark.parametrize("precision", PRECISIONS)
def test_every_precision_runs_on_cpu(precision: str) -> None:
    config = ctr_config(precision=precision)
    check_supported(config, "cpu")
    trainer = make_trainer(config)
    losses = [trainer.step([ctr_batch(16, seed=k % 2)]) for k in range(3)]
    assert all(math.isfinite(x) for x in losses)
    assert (trainer.scaler is not None) == (precision == "amp_fp16")
    assert (trainer.masters is not None) == precision.endswith("_master")
    out = trainer.predict(ctr_batch(4))
    assert out.dtype == torch.float32 and out.shape == (4,)
    assert all(p.dtype == DTYPES[precision] for p in trainer.model.parameters())


@pytest.mark.parametrize("precision", ["fp16_master", "bf16_master"])
def test_master_weights(precision: str) -> None:
    trainer = make_trainer(ctr_config(precision=precision))
    assert trainer.masters is not None
    trainer.step([ctr_batch(16)])
    for name, p in trainer.model.named_parameters():
        m = trainer.masters.masters[name]
        assert m.dtype == torch.float32 and p.dtype == DTYPES[precision]
        assert torch.equal(p.detach(), m.to(p.dtype))
        assert p.grad is None and m.grad is None  # both freed after the step
    # the optimizers hold the masters, and their state is fp32
    held = {id(t) for o in trainer.optimizers.all for g in o.param_groups for t in g["params"]}
    assert held == {id(m) for m in trainer.masters.masters.values()}
    for st in trainer.optimizers.table.state.values():
        assert st["exp_avg"].dtype == torch.float32


def test_master_grads_converted_one_at_a_time() -> None:
    trainer = make_trainer(ctr_config(precision="fp16_master"))
    assert trainer.masters is not None
    params = trainer.masters.params
    names = list(params)
    live: list[tuple[int, int]] = []  # (half grads alive, fp32 master grads alive) per step

    class Recording(dict[str, torch.Tensor]):
        def __getitem__(self, key: str) -> torch.Tensor:
            halves = sum(params[n].grad is not None for n in names)
            fulls = sum(dict.__getitem__(self, n).grad is not None for n in names)
            live.append((halves, fulls))
            return dict.__getitem__(self, key)

    masters = MasterWeights(params, Recording(trainer.masters.masters))
    model = trainer.model
    loss_fn(trainer.config)(model(ctr_batch()).float(), ctr_batch().labels).backward()
    masters.grads_to_master()
    n = len(names)
    # before converting parameter k: k fp32 grads exist and n - k half grads remain
    assert live == [(n - k, k) for k in range(n)]
    for name in names:
        assert params[name].grad is None
        g = masters.masters[name].grad
        assert g is not None and g.dtype == torch.float32


def test_fp16_adam_and_adagrad_leave_untouched_rows_finite() -> None:
    for opt in ("adam", "adagrad"):
        trainer = make_trainer(
            _one_table(precision="fp16", table_optimizer=opt, dense_optimizer=opt)
        )
        for _ in range(2):
            trainer.step([Batch({"a": torch.tensor([[1], [2]])}, torch.tensor([0.0, 1.0]))])
        for p in trainer.model.parameters():
            assert torch.isfinite(p).all()


def test_amp_autocasts_tower_but_not_lookups() -> None:
    for precision, dtype in (("amp_fp16", torch.float16), ("amp_bf16", torch.bfloat16)):
        trainer = make_trainer(ctr_config(precision=precision))
        with torch.autocast("cpu", dtype=dtype):
            emb = trainer.model.embed(ctr_batch().features)
            out = trainer.model(ctr_batch())
        assert emb.dtype == torch.float32 and out.dtype == dtype


def test_check_supported_refuses_what_cannot_run() -> None:
    if not torch.cuda.is_available():
        with pytest.raises(UnsupportedError, match="CUDA is not available"):
            check_supported(ctr_config(), "cuda")
        with pytest.raises(UnsupportedError, match="CUDA"):
            make_trainer(ctr_config(), "cuda")
        with pytest.raises(UnsupportedError, match="CUDA"):
            build_model(ctr_config(), "cuda")
    # CPU has no fp16 sparse add: sparse fp16 gradients cannot accumulate there
    config = ctr_config(precision="fp16", table_optimizer="sgd", grad_accum_steps=2)
    with pytest.raises(UnsupportedError, match="grad_accum_steps = 2"):
        check_supported(config, "cpu")
    check_supported(ctr_config(precision="bf16", table_optimizer="sgd", grad_accum_steps=2), "cpu")
    with pytest.raises(ConfigError, match="'gpu0' is not a torch device"):
        make_trainer(ctr_config(), "gpu0")


# ===================================================================== the step


def test_step_rejects_wrong_number_of_micro_batches() -> None:
    trainer = make_trainer(ctr_config(grad_accum_steps=2))
    with pytest.raises(ValueError, match="grad_accum_steps is 2"):
        trainer.step([ctr_batch()])


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_grad_accumulation_equals_one_big_batch(optimizer: str) -> None:
    big = ctr_batch(16, seed=1)
    halves = [
        Batch({k: v[s] for k, v in big.features.items()}, big.labels[s])
        for s in (slice(0, 8), slice(8, 16))
    ]
    one = make_trainer(ctr_config(table_optimizer=optimizer, dense_optimizer="sgd", lr=0.1))
    two = make_trainer(
        ctr_config(table_optimizer=optimizer, dense_optimizer="sgd", lr=0.1, grad_accum_steps=2)
    )
    l1 = one.step([big])
    l2 = two.step(halves)
    assert l1 == pytest.approx(l2, rel=1e-5)
    for (n, a), (_, b) in zip(
        one.model.named_parameters(), two.model.named_parameters(), strict=True
    ):
        torch.testing.assert_close(a, b, msg=n)


@pytest.mark.parametrize("pooling", ["mean", "naive"])
def test_checkpointing_gives_the_same_step(pooling: str) -> None:
    for compression in ("none", "qr"):
        runs = []
        for ckpt in (False, True):
            config = text_config(compression=compression, pooling=pooling, checkpointing=ckpt)
            trainer = make_trainer(config)
            losses = [trainer.step([text_batch(8, seed=k)]) for k in range(2)]
            runs.append((losses, [p.detach().clone() for p in trainer.model.parameters()]))
        assert runs[0][0] == pytest.approx(runs[1][0], rel=1e-6)
        for a, b in zip(runs[0][1], runs[1][1], strict=True):
            torch.testing.assert_close(a, b)


def test_predict_is_eval_no_grad() -> None:
    trainer = make_trainer(text_config())
    out = trainer.predict(text_batch())
    assert out.shape == (8, 5) and not out.requires_grad and trainer.model.training


# ===================================================================== learning

# (table lr, dense lr) per optimizer, tuned so 16 steps show the fall
LR = {
    "sgd": (50.0, 1.0),
    "momentum": (20.0, 0.3),
    "adam": (0.05, 0.01),
    "adamw": (0.05, 0.01),
    "adagrad": (0.3, 0.1),
    "rowwise_adagrad": (0.3, 0.01),
    "sparse_adam": (0.05, 0.01),
}


def _planted(seed: int, b: int = 64) -> Batch:
    """Label = whether field a's first id is below 32; field b is noise."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randint(0, 64, (b, 2), generator=g)
    a[:, 1] = torch.where(torch.rand(b, generator=g) < 0.5, a[:, 1], MISSING_ID)
    return Batch({"a": a, "b": torch.randint(0, 16, (b, 1), generator=g)}, (a[:, 0] < 32).float())


PLANTED = [_planted(i) for i in range(4)]


@pytest.mark.parametrize(
    ("compression", "optimizer"), list(itertools.product(COMPRESSIONS, OPTIMIZERS))
)
def test_loss_falls_on_planted_problem(compression: str, optimizer: str) -> None:
    lr, dense_lr = LR[optimizer]
    config = EmbeddingConfig(
        tables=(
            TableConfig("a", 64, pooling_factor=1.5, frequency=0.5),
            TableConfig("b", 16, frequency=0.01),
        ),
        dim=8,
        dense_layers=(8,),
        compression=compression,
        hash_buckets=48,
        qr_collisions=4,
        mixed_dim_alpha=0.5,
        table_optimizer=optimizer,
        dense_optimizer="adam" if optimizer in TABLE_ONLY_OPTIMIZERS else optimizer,
        lr=lr,
        dense_lr=dense_lr,
        batch_size=64,
    )
    trainer = make_trainer(config)
    losses = [trainer.step([PLANTED[k % 4]]) for k in range(16)]
    assert sum(losses[-4:]) / 4 < 0.93 * losses[0], losses


# ===================================================================== rejections


def test_bad_configs_rejected_at_build() -> None:
    with pytest.raises(ConfigError, match="weight_decay' = 0.01.*rowwise_adagrad"):
        build_model(
            _one_table(table_optimizer="adagrad", dense_optimizer="adam", weight_decay=0.01)
        )
    with pytest.raises(ConfigError, match="sparse_adam"):
        build_model(_one_table(table_optimizer="sparse_adam", weight_decay=0.1))
    # rowwise_adagrad decays the rows it touches: allowed
    build_model(_one_table(table_optimizer="rowwise_adagrad", weight_decay=0.01))
    # int4 packs two values a byte: qr concat of dim 6 stores 3 columns
    with pytest.raises(ConfigError, match="'dim' = 6.*divisible by 4"):
        build_model(_one_table(dim=6, compression="qr", qr_operation="concat", serving="int4"))
    build_model(_one_table(dim=8, compression="qr", qr_operation="concat", serving="int4"))
    for name in ("items", "enc.keys"):  # a ModuleDict attribute cannot name a module
        with pytest.raises(ConfigError, match="rename the field"):
            build_model(EmbeddingConfig(tables=(TableConfig(name, 10),)))
    # a dotted name is a module path
    model = build_model(EmbeddingConfig(tables=(TableConfig("a.b", 10),)))
    assert [n for n, _ in model.named_parameters()][0] == "tables.a.b.weight"


def test_model_class_is_exported() -> None:
    assert isinstance(build_model(_one_table()), EmbeddingModel)


@pytest.mark.parametrize(
    ("optimizer", "precision"), list(itertools.product(OPTIMIZERS, PRECISIONS))
)
def test_every_optimizer_under_every_precision(optimizer: str, precision: str) -> None:
    dense = "adam" if optimizer in TABLE_ONLY_OPTIMIZERS else optimizer
    config = ctr_config(table_optimizer=optimizer, dense_optimizer=dense, precision=precision)
    trainer = make_trainer(config)
    for k in range(2):
        assert math.isfinite(trainer.step([ctr_batch(8, seed=k)]))
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())
