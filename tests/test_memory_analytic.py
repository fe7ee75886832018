"""Analytic estimates against bytes computed by hand (not by the code under test)."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from autoembed.config import EmbeddingConfig, TableConfig
from autoembed.trace import estimate


def blk(n: int) -> int:
    """CUDA caching allocator block: a multiple of 512 B."""
    return -(-n // 512) * 512


def text(v: int = 1_000_000, d: int = 300, **kw: object) -> EmbeddingConfig:
    base: dict[str, object] = dict(
        task="text",
        tables=(TableConfig("tokens", v),),
        dim=d,
        seq_len=512,
        batch_size=64,
        num_classes=4,
        dense_layers=(),
        pooling="naive",
    )
    base.update(kw)
    return EmbeddingConfig(**base)  # type: ignore[arg-type]


def ctr(vocabs: tuple[int, ...], d: int = 64, **kw: object) -> EmbeddingConfig:
    base: dict[str, object] = dict(
        task="ctr",
        tables=tuple(TableConfig(f"f{i}", v) for i, v in enumerate(vocabs)),
        dim=d,
        batch_size=1024,
        dense_layers=(),
    )
    base.update(kw)
    return EmbeddingConfig(**base)  # type: ignore[arg-type]


# The seed case: V=1M, D=300, fp32, Adam. Table 1M*300*4 = 1,200,000,000 B; the linear head
# 4x300 fp32 = 4,800 B -> one 5,120 B block, its bias 16 B -> 512 B.
SEED_TABLE = 1_000_000 * 300 * 4
SEED_HEAD = blk(4 * 300 * 4) + blk(4 * 4)


def test_seed_case_parameters_state_and_peak() -> None:
    e = estimate(text())
    assert e.tables[0].parameters == SEED_TABLE == 1_200_000_000
    assert e.parameters == SEED_TABLE + SEED_HEAD
    assert e.optimizer_state == 2 * (SEED_TABLE + SEED_HEAD)  # Adam: exp_avg + exp_avg_sq
    assert e.gradients == SEED_TABLE + SEED_HEAD  # dense V x D gradient
    # Peak in the foreach Adam step: params + grads + 2 state + one table-sized temporary,
    # plus what Trainer.step still holds: the batch (64 x 512 int64 ids, 64 int64 labels),
    # the 64 x 4 fp32 logits and the scalar loss.
    held = blk(64 * 512 * 8) + blk(64 * 8) + blk(64 * 4 * 4) + blk(4)
    assert e.peak_phase == "step"
    # No unsplit rest: the five table-sized blocks share one size, each in its own segment
    # of 573 x 2 MiB, whose rest (1,668,096 B) is over 1 MiB and split off.
    assert e.allocated_peak == 4 * (SEED_TABLE + SEED_HEAD) + SEED_TABLE + held
    assert e.reserved_peak >= e.allocated_peak
    assert e.device_total == e.reserved_peak + e.overhead


def test_fp16_halves_bf16_master_adds_fp32_copy() -> None:
    e16 = estimate(text(precision="fp16"))
    assert e16.tables[0].parameters == 600_000_000
    assert e16.optimizer_state == 2 * (600_000_000 + blk(4 * 300 * 2) + blk(8))
    em = estimate(text(precision="bf16_master"))
    # bf16 params (2 B) + fp32 master (4 B); Adam state in fp32 on the master.
    assert em.tables[0].parameters == 600_000_000 + 1_200_000_000
    assert em.tables[0].optimizer_state == 2 * 1_200_000_000
    # step: bf16 grads are converted one at a time into fp32 master grads.
    assert em.gradients == 1_200_000_000 + blk(4 * 300 * 4) + blk(16)
    ea = estimate(text(precision="amp_fp16"))
    assert ea.tables[0].parameters == 1_200_000_000  # autocast keeps fp32 parameters


def test_optimizer_state_per_optimizer() -> None:
    v, d = 100_000, 64
    table = v * d * 4  # 25,600,000 B
    cases = {
        "sgd": 0,
        "momentum": table,
        "adam": 2 * table,
        "adamw": 2 * table,
        "adagrad": table,
        "sparse_adam": 2 * table,
        "rowwise_adagrad": blk(v * 4),  # one fp32 per row, 400,000 B -> 400,384 B block
    }
    for opt, expected in cases.items():
        dense = "adagrad" if opt == "rowwise_adagrad" else ("adam" if opt == "sparse_adam" else opt)
        e = estimate(text(v, d, table_optimizer=opt, dense_optimizer=dense))
        assert e.tables[0].optimizer_state == expected, opt


def test_sparse_gradient_is_one_row_per_lookup() -> None:
    # batch 64 x seq 512 = 32,768 lookups; values 32,768 x 64 x 4 B, indices 32,768 x 8 B.
    e = estimate(text(100_000, 64, table_optimizer="sparse_adam", dense_optimizer="adam"))
    assert e.tables[0].gradients == blk(32_768 * 64 * 4) + blk(32_768 * 8)
    e2 = estimate(
        text(100_000, 64, table_optimizer="sparse_adam", dense_optimizer="adam", grad_accum_steps=3)
    )
    assert e2.tables[0].gradients == blk(3 * 32_768 * 64 * 4) + blk(3 * 32_768 * 8)


def test_hash_qr_mixed_shared_parameters() -> None:
    assert estimate(text(compression="hash", hash_buckets=100_000)).tables[0].parameters == (
        100_000 * 300 * 4
    )
    # QR mult: ceil(1M / 4) = 250,000 quotient rows + 4 remainder rows, both 300 wide.
    qr = estimate(text(compression="qr", qr_collisions=4)).tables[0]
    assert qr.parameters == blk(250_000 * 300 * 4) + blk(4 * 300 * 4)
    # QR concat: each half 150 wide; ceil(1,000,001 / 7) = 142,858.
    qc = estimate(text(1_000_001, compression="qr", qr_collisions=7, qr_operation="concat"))
    assert qc.tables[0].parameters == blk(142_858 * 150 * 4) + blk(7 * 150 * 4)
    # mixed_dim: V=1,000 keeps 64; V=1e6 gets max(4, round(64 * 1e-3 ** 0.5)) = 4.
    md = estimate(ctr((1000, 1_000_000), compression="mixed_dim", mixed_dim_alpha=0.5))
    assert [t.dim for t in md.tables] == [64, 4]
    assert md.tables[1].parameters == 1_000_000 * 4 * 4
    # shared: one table of max(V) rows for both fields.
    sh = estimate(ctr((1000, 50_000), compression="shared"))
    assert [(t.rows, t.parameters) for t in sh.tables] == [(50_000, 50_000 * 64 * 4)]


def test_serving_bytes_fbgemm_rows() -> None:
    # 10M x 128 (docs/contracts.md#fbgemm-row-formats): int8 rows 128 + 4 -> 144 B aligned;
    # int4 64 + 4 -> 80 B.
    for serving, row in (("int8", 144), ("int4", 80), ("none", 512)):
        e = estimate(
            text(10_000_000, 128, serving=serving, table_optimizer="sgd", dense_optimizer="sgd")
        )
        assert e.tables[0].serving_bytes == 10_000_000 * row
    assert estimate(text(10_000_000, 128, serving="int8")).tables[0].serving_bytes == 1_440_000_000


def test_row_sharding_splits_rows_and_budget_flag() -> None:
    e = estimate(text(table_optimizer="sgd", dense_optimizer="sgd"), gpus=4, sharding="row")
    assert len(e.per_gpu) == 4
    one = estimate(text(table_optimizer="sgd", dense_optimizer="sgd"))
    assert e.allocated_peak < one.allocated_peak / 2
    assert estimate(text(), budget=8_000_000_000).fits is True
    assert estimate(text(), budget=6_000_000_000).fits is False


def test_table_sharding_places_whole_tables() -> None:
    e = estimate(ctr((1_000_000, 1_000_000, 1000)), gpus=2, sharding="table")
    assert sorted(len(g.tables) for g in e.per_gpu) == [1, 2]


def test_absurd_sizes_are_priced_not_crashed() -> None:
    e = estimate(text(10**12, 128), budget=8_000_000_000)
    assert e.fits is False and e.allocated_peak > 10**15


@given(
    v=st.integers(10, 10**9), d=st.integers(1, 512), dv=st.integers(1, 10**6), dd=st.integers(1, 64)
)
def test_monotone_in_vocab_and_dim(v: int, d: int, dv: int, dd: int) -> None:
    a = estimate(text(v, d)).allocated_peak
    assert estimate(text(v + dv, d)).allocated_peak >= a
    assert estimate(text(v, d + dd)).allocated_peak >= a


@given(
    b=st.integers(1, 4096),
    s=st.integers(1, 2048),
    db=st.integers(1, 512),
    ds=st.integers(1, 512),
    opt=st.sampled_from(["adam", "sgd", "sparse_adam"]),
)
def test_monotone_in_batch_and_seq(b: int, s: int, db: int, ds: int, opt: str) -> None:
    dense = "adam" if opt == "sparse_adam" else opt
    kw = dict(table_optimizer=opt, dense_optimizer=dense)
    a = estimate(text(50_000, 32, batch_size=b, seq_len=s, **kw)).allocated_peak
    assert estimate(text(50_000, 32, batch_size=b + db, seq_len=s, **kw)).allocated_peak >= a
    assert estimate(text(50_000, 32, batch_size=b, seq_len=s + ds, **kw)).allocated_peak >= a


@given(v=st.integers(1000, 10**8), frac=st.floats(0.01, 0.99))
def test_hash_below_none_when_buckets_below_vocab(v: int, frac: float) -> None:
    buckets = max(1, int(v * frac))
    assert estimate(text(v, 64, compression="hash", hash_buckets=buckets)).parameters < (
        estimate(text(v, 64)).parameters
    )


@given(v=st.integers(100, 10**8), m=st.integers(2, 10_000))
def test_qr_below_none_when_it_shrinks_rows(v: int, m: int) -> None:
    if m >= v or math.ceil(v / m) + m >= v:
        return
    assert estimate(text(v, 64, compression="qr", qr_collisions=m)).tables[0].parameters < (
        estimate(text(v, 64)).tables[0].parameters
    )


@given(v=st.integers(1, 10**8), d=st.integers(1, 512))
def test_fp16_is_half_of_fp32_up_to_rounding(v: int, d: int) -> None:
    p32 = estimate(text(v, d)).tables[0].parameters
    p16 = estimate(text(v, d, precision="fp16")).tables[0].parameters
    assert abs(2 * p16 - p32) <= 1024


@given(v=st.integers(1, 10**9), d=st.integers(1, 512))
def test_rowwise_adagrad_state_is_rows_times_4(v: int, d: int) -> None:
    e = estimate(text(v, d, table_optimizer="rowwise_adagrad", dense_optimizer="adagrad"))
    assert e.tables[0].optimizer_state == blk(v * 4)


def test_block_rounding_is_exact_past_2_53_bytes() -> None:
    from autoembed.memory.types import round_block

    # by hand: the next multiple of 512 B; float division used to round 2**60 + 1 down
    assert round_block(2**60 + 1) == 2**60 + 512
    assert round_block(2**63 - 1) == 2**63
    assert round_block(1) == 512 and round_block(512) == 512


def test_qr_rows_of_an_absurd_vocab_are_exact() -> None:
    from autoembed.config import param_specs

    v = 2**63 - 1
    c = EmbeddingConfig(tables=(TableConfig("t", v),), dim=8, compression="qr", qr_collisions=3)
    q = next(s for s in param_specs(c) if s.name.endswith("q_weight"))
    # ceil((2**63 - 1) / 3) = 3074457345618258603 (2**63 - 1 = 3 * 3074457345618258602 + 1);
    # float division gave 3074457345618258432
    assert q.rows == 3074457345618258603
