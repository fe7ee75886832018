"""ROBE, tensor-train and hot/cold tables (issue 16) against references written here.

Each lookup is recomputed independently: ROBE offsets from the pure-Python splitmix64
(`hash_id_reference`, itself tested against the specification), TT rows by explicit sums
of core products, hot/cold rows by a dictionary. Gradients are checked position by position.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from autoembed.batch import MISSING_ID, PAD_ID
from autoembed.compression import hot_cold_shapes, param_bytes, robe_shapes, tt_shapes
from autoembed.errors import ConfigError
from autoembed.models.compress_init import (
    hash_init,
    hot_cold_init,
    qr_init,
    quantized_init,
    robe_init,
    tt_svd,
)
from autoembed.models.embedding import LookupSpec
from autoembed.models.hot_cold import HotColdTable, hot_ids_from_counts
from autoembed.models.quantize import quantize
from autoembed.models.robe import RobeTable
from autoembed.models.tt import TTTable
from autoembed.nn.hashing import hash_id_reference

pytestmark = pytest.mark.filterwarnings("ignore:Sparse invariant checks")


def _spec(pooling: str = "sum", sparse: bool = False, text: bool = False) -> LookupSpec:
    return LookupSpec(pooling, sparse, text)


# ------------------------------------------------------------------------------------ ROBE
def _robe_row_ref(
    array: list[float], i: int, dim: int, block: int, hash_seed: int, field: int
) -> tuple[list[int], list[float]]:
    """Positions and values of id i's row: ROBE-Z as the paper states it, in plain Python."""
    m = len(array)
    seed = hash_id_reference(field, 1 << 63, hash_seed)
    blocks = -(-dim // block)
    pos = []
    for c in range(blocks):
        start = hash_id_reference(i * blocks + c, m, seed)
        pos.extend((start + j) % m for j in range(block))
    pos = pos[:dim]
    return pos, [array[p] for p in pos]


@pytest.mark.parametrize(("dim", "block"), [(8, 4), (8, 3), (6, 6), (5, 16)])
def test_robe_rows_match_reference(dim: int, block: int) -> None:
    torch.manual_seed(0)
    t = RobeTable(37, block, (dim, dim), _spec(), seed=5)
    arr = t.weight.detach().tolist()
    ids = torch.tensor([0, 1, 2, 36, 1000, 123456789])
    for field in (0, 1):
        got = t.rows(ids, field)
        for k, i in enumerate(ids.tolist()):
            _, want = _robe_row_ref(arr, i, dim, block, 5, field)
            assert got[k].tolist() == pytest.approx(want, abs=0)
    # two fields read different places for the same id
    assert not torch.equal(t.positions(ids, 0), t.positions(ids, 1))


def test_robe_gradient_summed_into_exact_positions() -> None:
    torch.manual_seed(1)
    dim, block, m = 6, 4, 23
    t = RobeTable(m, block, (dim,), _spec("sum"), seed=3)
    ids = torch.tensor([[4, 9, MISSING_ID], [4, MISSING_ID, MISSING_ID]])
    g = torch.randn(2, dim)
    (t(ids) * g).sum().backward()
    want = [0.0] * m
    for b, row in enumerate(ids.tolist()):
        for i in row:
            if i < 0:
                continue  # missing: reaches no value
            pos, _ = _robe_row_ref([0.0] * m, i, dim, block, 3, 0)
            for k, p in enumerate(pos):
                want[p] += float(g[b, k])
    assert t.weight.grad is not None and not t.weight.grad.is_sparse
    assert t.weight.grad.tolist() == pytest.approx(want, abs=1e-6)


def _shared_model() -> tuple[nn.Module, RobeTable, RobeTable]:
    """robe_shared: a (dim 16) and b (dim 8, projected) read one array of 101 values; c is
    a plain table."""
    from autoembed.config import EmbeddingConfig, TableConfig
    from autoembed.models import build_model

    cfg = EmbeddingConfig(
        tables=(TableConfig("a", 3000), TableConfig("b", 700, 2.0, dim=8),
                TableConfig("c", 90, compression="none")),
        dim=16, compression="robe", robe_shared=True, robe_size=101, robe_block=3, hash_seed=7,
        dense_layers=(8,), pooling="sum",
    )
    model = build_model(cfg)
    a, b = model.table("a"), model.table("b")
    assert isinstance(a, RobeTable) and isinstance(b, RobeTable)
    return model, a, b


def test_robe_shared_tables_read_one_array_at_their_own_offsets() -> None:
    torch.manual_seed(0)
    model, a, b = _shared_model()
    # one array of 101 values, counted once: + c (90 x 16) + b's projection (16 x 8) + the
    # tower (3 fields x 16 -> 8 -> 1, with biases)
    assert sum(p.numel() for p in model.parameters()) == 101 + 90 * 16 + 16 * 8 + 48 * 8 + 8 + 8 + 1
    arr = a.weight.detach().tolist()
    ids = torch.tensor([0, 1, 2, 699, 100, 123456])
    for table, dim, field in ((a, 16, 0), (b, 8, 1)):  # field: the table's index in the group
        got = table.rows(ids)
        for k, i in enumerate(ids.tolist()):
            assert got[k].tolist() == pytest.approx(_robe_row_ref(arr, i, dim, 3, 7, field)[1],
                                                    abs=0)
    # the same id reads different places in the two tables (the table's field in the hash)
    assert not torch.equal(a.positions(ids)[:, :8], b.positions(ids))
    # b's rows are projected to the model's dim
    assert b(ids.view(2, 3)).shape == (2, 16)


@pytest.mark.parametrize("compression", ["robe", "tt"])
def test_computed_table_with_its_own_dim_is_projected(compression: str) -> None:
    """A robe / tt table of dim 8 in a dim-16 model ends in its projection (16 columns)."""
    from autoembed.config import EmbeddingConfig, TableConfig
    from autoembed.models import build_model

    cfg = EmbeddingConfig(tables=(TableConfig("a", 500, dim=8), TableConfig("b", 90)), dim=16,
                          compression=compression, dense_layers=(8,))
    model = build_model(cfg)
    ids = torch.tensor([[1, 2], [3, MISSING_ID]])
    assert model.table("a")(ids).shape == (2, 16)
    assert model({"a": ids, "b": ids}).shape == (2,)


def _shared_grad_ref(lookups: list[tuple[list[int], torch.Tensor, int, int]]) -> list[float]:
    """The array's gradient by hand: each (ids, row gradients, dim, field) adds every row
    gradient's entry k into the position the reference gives for column k."""
    want = [0.0] * 101
    for ids, g, dim, field in lookups:
        for n, i in enumerate(ids):
            for k, p in enumerate(_robe_row_ref(want, i, dim, 3, 7, field)[0]):
                want[p] += float(g[n, k])
    return want


def test_robe_shared_gradient_lands_in_the_array_at_each_tables_positions() -> None:
    torch.manual_seed(2)
    _, a, b = _shared_model()
    ia, ib = [5, 17, 5], [3, 2999]
    ga, gb = torch.randn(3, 16), torch.randn(2, 8)
    (a.rows(torch.tensor(ia)) * ga).sum().backward()
    assert a.weight.grad is not None
    assert a.weight.grad.tolist() == pytest.approx(_shared_grad_ref([(ia, ga, 16, 0)]), abs=1e-6)
    # b's lookup adds into the same array: one gradient for both tables
    (b.rows(torch.tensor(ib)) * gb).sum().backward()
    assert b.weight.grad is a.weight.grad
    both = _shared_grad_ref([(ia, ga, 16, 0), (ib, gb, 8, 1)])
    assert a.weight.grad.tolist() == pytest.approx(both, abs=1e-6)


def test_robe_block_longer_than_array_refused() -> None:
    with pytest.raises(ConfigError, match="robe_block' = 11"):
        RobeTable(10, 11, (4,), _spec())


# -------------------------------------------------------------------------------------- TT
def _tt_row_ref(t: TTTable, i: int) -> list[float]:
    """Row i by explicit sums: sum_{a,b} G0[i1,k1,a] G1[i2,a,k2,b] G2[i3,b,k3]."""
    v1, v2, v3 = t.row_factors
    d1, d2, d3 = t.dim_factors
    r = t.rank
    i1, rem = divmod(i, v2 * v3)
    i2, i3 = divmod(rem, v3)
    c0, c1, c2 = (c.detach().double().tolist() for c in (t.core0, t.core1, t.core2))
    out = []
    for k1 in range(d1):
        for k2 in range(d2):
            for k3 in range(d3):
                out.append(sum(
                    c0[i1][k1 * r + a] * c1[i2][a * d2 * r + k2 * r + b] * c2[i3][b * d3 + k3]
                    for a in range(r) for b in range(r)
                ))
    return out


@pytest.mark.parametrize(("vocab", "dim", "rank"), [(1000, 8, 3), (50, 12, 2), (7, 5, 1)])
def test_tt_rows_are_core_products(vocab: int, dim: int, rank: int) -> None:
    torch.manual_seed(0)
    t = TTTable(vocab, dim, rank, _spec())
    ids = torch.tensor([0, 1, vocab // 2, vocab - 1])
    got = t.rows(ids).double()
    for k, i in enumerate(ids.tolist()):
        assert got[k].tolist() == pytest.approx(_tt_row_ref(t, i), rel=1e-5, abs=1e-7)


def test_tt_gradients_reach_only_the_slices_read() -> None:
    torch.manual_seed(2)
    t = TTTable(1000, 8, 2, _spec("mean"))  # (10, 10, 10) rows
    ids = torch.tensor([[123, 456], [123, MISSING_ID]])
    g = torch.randn(2, 8)
    (t(ids) * g).sum().backward()
    # reference: the same loss from explicit products on copies of the cores
    c = [p.detach().clone().double().requires_grad_(True) for p in (t.core0, t.core1, t.core2)]
    v2 = v3 = 10
    d1, d2, d3 = t.dim_factors
    r = 2

    def row(i: int) -> torch.Tensor:
        i1, rem = divmod(i, v2 * v3)
        i2, i3 = divmod(rem, v3)
        a = c[0][i1].view(d1, r)
        b = c[1][i2].view(r, d2, r)
        e = c[2][i3].view(r, d3)
        return torch.stack([
            (a[k1][:, None] * b[:, k2, :] * e[:, k3][None, :]).sum()
            for k1 in range(d1) for k2 in range(d2) for k3 in range(d3)
        ])

    loss = (((row(123) + row(456)) / 2) * g[0].double()).sum() + (row(123) * g[1].double()).sum()
    loss.backward()
    for p, ref in zip((t.core0, t.core1, t.core2), c, strict=True):
        assert p.grad is not None and not p.grad.is_sparse
        assert torch.allclose(p.grad.double(), ref.grad, atol=1e-6)  # type: ignore[arg-type]
    touched0 = set(t.core0.grad.abs().sum(1).nonzero().squeeze(1).tolist())  # type: ignore[union-attr]
    assert touched0 <= {1, 4}  # i1 of 123 and 456


# -------------------------------------------------------------------------------- hot/cold
def _hot_cold(sparse: bool = False, pooling: str = "sum") -> HotColdTable:
    torch.manual_seed(0)
    hot = torch.tensor([3, 10, 42, 99])
    return HotColdTable(100, 4, hot, 7, _spec(pooling, sparse), seed=11)


def test_hot_cold_rows_by_dictionary() -> None:
    t = _hot_cold()
    ref = {3: 0, 10: 1, 42: 2, 99: 3}
    ids = list(range(100))
    got = t.row_of(torch.tensor(ids)).tolist()
    for i in ids:
        want = ref[i] if i in ref else 4 + hash_id_reference(i, 7, 11)
        assert got[i] == want


@pytest.mark.parametrize("sparse", [False, True])
def test_hot_cold_gradient_rows(sparse: bool) -> None:
    t = _hot_cold(sparse)
    ids = torch.tensor([[42, 5, MISSING_ID], [42, 3, MISSING_ID]])
    t(ids).sum().backward()
    grad = t.weight.grad
    assert grad is not None and grad.is_sparse == sparse
    dense = grad.to_dense() if sparse else grad
    want = torch.zeros_like(dense)
    want[2] += 2.0  # id 42 twice, sum pooling, d(loss)/d(row) = 1 per lookup
    want[0] += 1.0  # id 3
    want[4 + hash_id_reference(5, 7, 11)] += 1.0
    assert torch.equal(dense, want)


def test_hot_cold_int8_serving_reads_its_rows() -> None:
    t = _hot_cold(pooling="mean")
    model = nn.ModuleDict({"t": t})
    served = quantize(model, "int8")
    ids = torch.tensor([[42, 5], [3, MISSING_ID]])
    a, b = t(ids), served["t"](ids)
    step = (t.weight.max() - t.weight.min()).item() / 255
    assert torch.allclose(a, b, atol=step)


def test_hot_cold_refuses_bad_hot_sets() -> None:
    with pytest.raises(ConfigError, match="sorted"):
        HotColdTable(100, 4, torch.tensor([5, 3]), 2, _spec())
    with pytest.raises(ConfigError, match="sorted"):
        HotColdTable(100, 4, torch.tensor([3, 100]), 2, _spec())
    t = _hot_cold()
    with pytest.raises(ConfigError, match="built for 4"):
        t.set_hot_ids(torch.tensor([1, 2]))


def test_hot_ids_from_counts_by_hand() -> None:
    counts = np.array([5, 0, 9, 5, 1, 9])
    assert hot_ids_from_counts(counts, 3).tolist() == [0, 2, 5]  # 9, 9, then 5 at id 0
    assert hot_ids_from_counts(counts, 1).tolist() == [2]


# ------------------------------------------------------------------- pooling and bytes
def _tables(pooling: str, text: bool = False) -> list[nn.Module]:
    torch.manual_seed(0)
    s = _spec(pooling, text=text)
    return [RobeTable(101, 4, (8,), s), TTTable(200, 8, 2, s),
            HotColdTable(200, 8, torch.arange(0, 200, 9), 13, s)]


@pytest.mark.parametrize("pooling", ["mean", "sum", "naive"])
def test_ctr_pooling_leaves_missing_out(pooling: str) -> None:
    ids = torch.tensor([[5, 17, MISSING_ID], [150, MISSING_ID, MISSING_ID]])
    for t in _tables(pooling):
        rows = t.rows(torch.tensor([5, 17, 150])) if hasattr(t, "rows") else (
            t.weight[t.row_of(torch.tensor([5, 17, 150]))])
        want = [rows[0] + rows[1], rows[2]]
        if pooling != "sum":
            want = [want[0] / 2, want[1]]
        got = t(ids)
        assert torch.allclose(got[0], want[0], atol=1e-6)
        assert torch.allclose(got[1], want[1], atol=1e-6)


@pytest.mark.parametrize("pooling", ["mean", "naive"])
def test_text_pads_left_out_of_mean_and_naive_is_plain_mean(pooling: str) -> None:
    ids = torch.tensor([[5, 17, PAD_ID, PAD_ID]])
    for t in _tables(pooling, text=True):
        rows = t.rows(torch.tensor([5, 17])) if hasattr(t, "rows") else (
            t.weight[t.row_of(torch.tensor([5, 17]))])
        want = (rows[0] + rows[1]) / (2 if pooling == "mean" else 4)
        assert torch.allclose(t(ids)[0], want, atol=1e-6)


def test_checkpointed_naive_matches() -> None:
    ids = torch.tensor([[5, 17, MISSING_ID]])
    for t in _tables("naive"):
        plain = t(ids)
        t.spec = LookupSpec("naive", False, False, checkpoint=True)
        assert torch.equal(t(ids), plain)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_bytes_equal_the_rules(dtype: torch.dtype) -> None:
    s, eb = _spec(), torch.finfo(dtype).bits // 8
    cases = [
        (RobeTable(1000, 4, (16,), s, dtype=dtype), robe_shapes(1000), 0),
        (TTTable(1000, 16, 8, s, dtype=dtype), tt_shapes(1000, 16, 8), 0),
        (HotColdTable(1000, 8, torch.arange(10), 100, s, dtype=dtype),
         hot_cold_shapes(1000, 8, 0.01, 100), 8 * 10),
    ]
    for t, shapes, state in cases:
        assert sum(p.nbytes for p in t.parameters()) == param_bytes(shapes, eb)
        assert sum(b.nbytes for b in t.buffers()) == state
    # by hand: TT (10*16 + 10*128 + 10*32) values; hot/cold 110 rows of 8
    assert param_bytes(tt_shapes(1000, 16, 8), eb) == 1760 * eb
    assert param_bytes(hot_cold_shapes(1000, 8, 0.01, 100), eb) == 880 * eb


# ---------------------------------------------------------------- init from a trained table
def test_tt_svd_reproduces_an_exactly_low_rank_table() -> None:
    torch.manual_seed(3)
    src = TTTable(1000, 8, 2, _spec())  # a table with TT ranks <= 2 by construction
    w = src.rows(torch.arange(1000)).detach()
    dst = TTTable(1000, 8, 3, _spec())
    with torch.no_grad():
        for p, c in zip((dst.core0, dst.core1, dst.core2), tt_svd(w, 3), strict=True):
            p.copy_(c)
    assert torch.allclose(dst.rows(torch.arange(1000)), w, atol=1e-5)
    # a random (full-rank) table: rank 1 is worse than rank 8
    noise = torch.randn(1000, 8)
    errs = []
    for r in (1, 8):
        t = TTTable(1000, 8, r, _spec())
        with torch.no_grad():
            for p, c in zip((t.core0, t.core1, t.core2), tt_svd(noise, r), strict=True):
                p.copy_(c)
        errs.append(float((t.rows(torch.arange(1000)).detach() - noise).norm()))
    assert errs[1] < errs[0] < float(noise.norm())


def test_hash_init_is_bucket_means() -> None:
    w = torch.arange(40, dtype=torch.float32).view(10, 4)
    got = hash_init(w, 3, seed=2)
    for b in range(3):
        members = [i for i in range(10) if hash_id_reference(i, 3, 2) == b]
        want = w[members].mean(0) if members else torch.zeros(4)
        assert torch.allclose(got[b], want)


@pytest.mark.parametrize("operation", ["mult", "add", "concat"])
def test_qr_init_reproduces_a_representable_table(operation: str) -> None:
    torch.manual_seed(4)
    m, vocab, dim = 5, 23, 6  # last quotient block partly empty
    dq = dim // 2 if operation == "concat" else dim
    q, r = torch.randn(-(-vocab // m), dq), torch.randn(m, dq)
    i = torch.arange(vocab)
    a, b = q[i // m], r[i % m]
    w = {"mult": a * b, "add": a + b, "concat": torch.cat((a, b), 1)}[operation]
    fq, fr = qr_init(w, m, operation, iterations=200)
    fa, fb = fq[i // m], fr[i % m]
    fit = {"mult": fa * fb, "add": fa + fb, "concat": torch.cat((fa, fb), 1)}[operation]
    assert torch.allclose(fit, w, atol=1e-4)


def test_robe_init_reproduces_a_table_read_from_an_array() -> None:
    torch.manual_seed(5)
    t = RobeTable(300, 4, (8,), _spec())
    w = t.rows(torch.arange(50)).detach()
    fitted = robe_init(w, t.positions(torch.arange(50)), 300)
    read = torch.zeros(300, dtype=torch.bool)
    read[t.positions(torch.arange(50)).reshape(-1)] = True
    assert torch.equal(fitted[read], t.weight.detach()[read])
    assert torch.equal(fitted[~read], torch.zeros(int((~read).sum())))


def test_hot_cold_init_copies_hot_and_averages_cold() -> None:
    w = torch.randn(20, 4)
    hot = torch.tensor([2, 7])
    got = hot_cold_init(w, hot, 3, seed=1)
    assert torch.equal(got[:2], w[hot])
    for b in range(3):
        members = [i for i in range(20) if i not in (2, 7) and hash_id_reference(i, 3, 1) == b]
        want = w[members].mean(0) if members else torch.zeros(4)
        assert torch.allclose(got[2 + b], want, atol=1e-6)


@pytest.mark.parametrize("bits", [8, 4])
def test_quantized_init_within_half_a_step(bits: int) -> None:
    w = torch.randn(50, 8)
    got = quantized_init(w, bits)
    step = (w.amax(1) - w.amin(1)) / (2**bits - 1)
    assert bool(((got - w).abs() <= step[:, None] * 0.5 + 2e-3 * w.abs().amax()).all())
    assert not torch.equal(got, w)


# ------------------------------------------------------------------------ from the data
def test_install_hot_sets_from_generator_and_from_counts() -> None:
    from autoembed.batch import Batch
    from autoembed.config import EmbeddingConfig, TableConfig
    from autoembed.data import DataSpec, load_dataset
    from autoembed.models import build_model
    from autoembed.models.hot_cold import install_hot_sets

    cfg = EmbeddingConfig(tables=(TableConfig("f0", 1000), TableConfig("f1", 300)), dim=8,
                          compression="hot_cold", hot_share=0.01, hash_buckets=50)
    model = build_model(cfg)
    data = load_dataset(DataSpec(vocab_sizes=(1000, 300), rows=(100, 10, 10)))
    install_hot_sets(model, data)
    assert model.tables["f0"].hot_ids.tolist() == data.hot_ids("f0", 10).tolist()
    assert model.tables["f1"].hot_ids.tolist() == data.hot_ids("f1", 3).tolist()

    class Counted:  # a dataset without a generator: the train split's counts decide
        def batches(self, split: str, size: int, shuffle: bool = True) -> list[Batch]:
            assert split == "train"
            f0 = torch.tensor([[7], [7], [7], [900], [900], [MISSING_ID]]
                              + [[i] for i in range(8)])
            f1 = torch.tensor([[5], [5], [5], [5], [6], [6]] + [[1]] * 8)
            return [Batch({"f0": f0, "f1": f1}, torch.zeros(14))]

    install_hot_sets(model, Counted())
    # f0: 7 (4 lookups), 900 (2), ids 0..6 (1 each), then the smallest unseen id, 8
    assert model.tables["f0"].hot_ids.tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 8, 900]
    assert model.tables["f1"].hot_ids.tolist() == [1, 5, 6]
