"""autoembed.models: hashing, quotient-remainder indices and int8/int4 serving."""

from __future__ import annotations

import math
import subprocess
import sys
from collections.abc import Iterator

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from autoembed.config import EmbeddingConfig, TableConfig
from autoembed.errors import ConfigError
from autoembed.models import (
    EmbeddingModel,
    build_model,
    hash_id_reference,
    hash_ids,
    pack_rows,
    qr_indices,
    quantize,
    row_bytes,
    serving_bytes,
    unpack_rows,
)

HYP = settings(deadline=None, derandomize=True, max_examples=60)


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    """Tiny tensors: one intra-op thread is faster than two (and fair on a shared CPU)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _one_table(**kw: object) -> EmbeddingConfig:
    base: dict[str, object] = {"tables": (TableConfig("a", 1000),), "dim": 16, "dense_layers": (8,)}
    base.update(kw)
    return EmbeddingConfig(**base)  # type: ignore[arg-type]


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


# ===================================================================== hashing


@HYP
@given(
    ids=st.lists(st.integers(0, 2**62), min_size=1, max_size=50),
    buckets=st.integers(1, 2**40),
    seed=st.integers(0, 2**32),
)
def test_hash_matches_pure_python_splitmix64(ids: list[int], buckets: int, seed: int) -> None:
    got = hash_ids(torch.tensor(ids), buckets, seed).tolist()
    assert got == [hash_id_reference(i, buckets, seed) for i in ids]
    assert all(0 <= b < buckets for b in got)


def test_hash_known_values() -> None:
    # splitmix64 seeded with 0: its first output is 0xE220A8397B1DCDAF (Vigna's reference)
    assert hash_id_reference(0, 2**63, 0) == 0xE220A8397B1DCDAF & (2**63 - 1)
    assert hash_ids(torch.tensor([0]), 2**62, 0).item() == 0xE220A8397B1DCDAF % 2**62


def test_hash_is_identical_across_processes() -> None:
    """A fresh process hashes as this one; and importing autoembed.nn there left Dynamo
    unloaded (torch.compiler.assume_constant_result imported it: ~3 CPU s a process)."""
    code = (
        "import sys, torch; from autoembed.nn.hashing import hash_ids; "
        "print(hash_ids(torch.arange(0, 100000, 7), 1009, 42).tolist()); "
        "print('torch._dynamo' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    ).stdout.splitlines()
    here = hash_ids(torch.arange(0, 100000, 7), 1009, 42).tolist()
    assert eval(out[0]) == here  # noqa: S307 - our own subprocess's list literal
    assert out[1] == "False"


def test_hash_spreads_ids_over_buckets() -> None:
    b = hash_ids(torch.arange(100_000), 1000, 0)
    counts = torch.bincount(b, minlength=1000)
    # 100 ids a bucket on average; binomial sd ~10: every bucket used, none three times full
    assert counts.min() > 0 and counts.max() < 300
    assert not torch.equal(b, hash_ids(torch.arange(100_000), 1000, 1))


def test_hash_table_lookups() -> None:
    ids = torch.tensor([[5, 999]])
    # V <= buckets: identity, no collisions
    fits = build_model(_one_table(compression="hash", hash_buckets=1000, pooling="sum"))
    w = weight(fits, "a")
    torch.testing.assert_close(lookup(fits, "a", ids), (w[5] + w[999]).unsqueeze(0))
    # V > buckets: the rows the reference hash names
    hashed = build_model(
        _one_table(compression="hash", hash_buckets=97, hash_seed=3, pooling="sum")
    )
    w = weight(hashed, "a")
    r5, r999 = hash_id_reference(5, 97, 3), hash_id_reference(999, 97, 3)
    torch.testing.assert_close(lookup(hashed, "a", ids), (w[r5] + w[r999]).unsqueeze(0))


@HYP
@given(data=st.data())
def test_qr_pairs_distinct_and_in_range(data: st.DataObject) -> None:
    v = data.draw(st.integers(3, 5000))
    m = data.draw(st.integers(2, v - 1))
    q, r = qr_indices(torch.arange(v), m)
    assert int(q.max()) < math.ceil(v / m) and int(r.max()) < m
    assert int(q.min()) >= 0 and int(r.min()) >= 0
    assert len(set(zip(q.tolist(), r.tolist(), strict=True))) == v


# ===================================================================== row format


@pytest.mark.parametrize(
    ("dim", "bits", "expected"),
    [
        (16, 8, 32),  # 16 + 4 = 20 -> 32
        (16, 4, 16),  # 8 + 4 = 12 -> 16
        (12, 8, 16),  # 12 + 4 = 16
        (13, 8, 32),  # 17 -> 32
        (300, 8, 304),  # 304 = 19 x 16
        (300, 4, 160),  # 150 + 4 = 154 -> 160
        (128, 8, 144),  # FBGEMM's 10M x 128 example: 1.44 GB
        (128, 4, 80),  # 0.80 GB
    ],
)
def test_row_bytes_hand_computed(dim: int, bits: int, expected: int) -> None:
    assert row_bytes(dim, bits) == expected


def test_packed_row_layout() -> None:
    row = torch.tensor([[0.0, 1.0, 2.0, 3.0]])
    p8 = pack_rows(row, 8)
    assert p8.dtype == torch.uint8 and p8.shape == (1, 16)
    assert (
        p8[0, 0:2].view(torch.float16).item() == torch.tensor(3 / 255, dtype=torch.float16).item()
    )
    assert p8[0, 2:4].view(torch.float16).item() == 0.0
    assert p8[0, 4:8].tolist() == [0, 85, 170, 255]
    assert p8[0, 8:].tolist() == [0] * 8
    p4 = pack_rows(row, 4)  # scale 3/15 = 0.2: q = 0, 5, 10, 15; element 2i in the low nibble
    assert p4[0, 4:6].tolist() == [0 | 5 << 4, 10 | 15 << 4]
    torch.testing.assert_close(unpack_rows(p4, 4, 4, torch.float32), row, atol=2e-3, rtol=0)


@HYP
@given(
    rows=st.integers(1, 8),
    half_dim=st.integers(1, 20),
    scale=st.floats(1e-3, 1e3),
    offset=st.floats(-100, 100),
    seed=st.integers(0, 1000),
)
def test_int8_int4_round_trip_bound(
    rows: int, half_dim: int, scale: float, offset: float, seed: int
) -> None:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, 2 * half_dim, generator=g) * scale + offset
    lo, hi = x.amin(1, keepdim=True), x.amax(1, keepdim=True)
    for bits, levels in ((8, 255), (4, 15)):
        y = unpack_rows(pack_rows(x, bits), x.shape[1], bits, torch.float32)
        # fp16 rounds v to within max(|v| 2**-11, 2**-25) (half an ulp; 2**-25 for
        # subnormals): the bias once, the scale `levels` times over; twice that as slack
        bias_err = torch.clamp(lo.abs() * 2.0**-11, min=2.0**-25)
        scale_err = levels * torch.clamp((hi - lo) / levels * 2.0**-11, min=2.0**-25)
        bound = (hi - lo) / levels / 2 + 2 * (bias_err + scale_err)
        assert ((y - x).abs() <= bound).all()


def test_constant_rows_round_trip_exactly() -> None:
    x = torch.full((3, 8), 0.25)
    for bits in (8, 4):
        assert torch.equal(unpack_rows(pack_rows(x, bits), 8, bits, torch.float32), x)


# ===================================================================== quantized models


@pytest.mark.parametrize(
    ("kw", "serving", "expected"),
    [
        # 1000 rows x 32 B + tower 145 x 4 = 580
        ({}, "int8", 32_000 + 580),
        # 1000 rows x 16 B + 580
        ({}, "int4", 16_000 + 580),
        # fp16 tower stays fp16: 145 x 2 = 290
        ({"precision": "fp16"}, "int8", 32_000 + 290),
        # qr m=4: (250 + 4) rows x 32 B
        ({"compression": "qr"}, "int8", 8_128 + 580),
        # qr concat: 8 columns: 8 + 4 = 12 -> 16 B a row for int8 and int4 (4 + 4 -> 16)
        ({"compression": "qr", "qr_operation": "concat"}, "int8", 4_064 + 580),
        ({"compression": "qr", "qr_operation": "concat"}, "int4", 4_064 + 580),
        # hash 100 buckets: 100 x 32
        ({"compression": "hash", "hash_buckets": 100}, "int8", 3_200 + 580),
        # not quantized: every parameter, 64,000 + 580
        ({}, "none", 64_580),
    ],
)
def test_serving_bytes_hand_computed(kw: dict[str, object], serving: str, expected: int) -> None:
    model = build_model(_one_table(**kw))
    assert serving_bytes(quantize(model, serving)) == expected


def test_serving_bytes_mixed_dim() -> None:
    tables = (TableConfig("a", 1000, frequency=0.01), TableConfig("b", 100, frequency=0.0001))
    config = EmbeddingConfig(
        tables=tables, dim=16, dense_layers=(8,), compression="mixed_dim", mixed_dim_alpha=0.5
    )
    # a: 1000 x 32 B; b (dim 4): 4 + 4 = 8 -> 16 B x 100 = 1,600;
    # dense: proj 16 x 4 = 64, tower 8 x 32 + 8 + 8 + 1 = 273 -> 337 x 4 = 1,348
    assert serving_bytes(quantize(build_model(config), "int8")) == 32_000 + 1_600 + 1_348


@pytest.mark.parametrize("compression", ["none", "hash", "qr", "mixed_dim"])
@pytest.mark.parametrize("pooling", ["mean", "naive"])
def test_quantized_model_predicts_close(compression: str, pooling: str) -> None:
    config = EmbeddingConfig(
        task="text",
        tables=(TableConfig("tok", 1000),),
        dim=16,
        num_classes=3,
        seq_len=6,
        dense_layers=(8,),
        compression=compression,
        hash_buckets=100,
        pooling=pooling,
    )
    model = build_model(config)
    ids = torch.randint(1, 1000, (8, 6), generator=torch.Generator().manual_seed(0))
    ids[:, 4:] = 0
    with torch.no_grad():
        ref = model({"tok": ids})
        q8 = quantize(model, "int8")
        q4 = quantize(model, "int4")
        assert not any(n.startswith("tables.") for n, _ in q8.named_parameters())
        packed = dict(q8.named_buffers())
        assert all(b.dtype == torch.uint8 for b in packed.values())
        torch.testing.assert_close(q8({"tok": ids}), ref, atol=5e-3, rtol=0)
        torch.testing.assert_close(q4({"tok": ids}), ref, atol=8e-2, rtol=0)
    # the trained model is left as it was
    assert [n for n, _ in model.named_parameters()][0].startswith("tables.tok.")
    assert quantize(model, "none") is model


def test_quantized_ctr_shared_with_missing_ids() -> None:
    config = EmbeddingConfig(
        tables=(TableConfig("a", 50), TableConfig("b", 20)), dim=8, compression="shared"
    )
    model = build_model(config)
    feats = {"a": torch.tensor([[1, 2, -1], [3, -1, -1]]), "b": torch.tensor([[4], [-1]])}
    with torch.no_grad():
        torch.testing.assert_close(quantize(model, "int8")(feats), model(feats), atol=5e-3, rtol=0)
    # shared: 50 rows x 16 B (8 + 4 -> 16)
    dense = sum(p.numel() for n, p in model.named_parameters() if n.startswith("tower.")) * 4
    assert serving_bytes(quantize(model, "int8")) == 50 * 16 + dense


def test_quantize_rejects_what_it_cannot_pack() -> None:
    model = build_model(_one_table(dim=5))
    with pytest.raises(ConfigError, match="odd dim"):
        quantize(model, "int4")
    with pytest.raises(ConfigError, match="serving = 'int2'"):
        quantize(model, "int2")
