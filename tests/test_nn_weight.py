"""A layer's ``weight`` (docs/apply.md): where the storage is the [V, D] table as it is
(compression none; hash with no more ids than buckets) it is that parameter, and writes into
it land as in torch; elsewhere it is the decoded table, which reads as any tensor and refuses
a write in one line (it would change a copy, never the table)."""

from __future__ import annotations

import copy
import io
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from autoembed import nn as ae
from autoembed.errors import ConfigError

V, D = 12, 4
IDS = torch.tensor([0, 3, 11, 3])
STORED = [("none", {}), ("hash", {"hash_buckets": 50})]  # id i reads stored row i
COMPRESSED = [("hash", {"hash_buckets": 5}), ("qr", {}), ("none", {"small_dim": 2}),
              ("tt", {"tt_rank": 2}), ("robe", {"robe_size": 20}),
              ("hot_cold", {"hot_share": 0.25, "hash_buckets": 3}),
              ("host_cached", {"cache_rows": 4})]


def _layer(compression: str, kw: dict[str, Any], bag: bool = False) -> Any:
    if compression == "host_cached":
        return ae.Embedding(V, D, placement="host_cached", **kw)
    if "small_dim" in kw:
        compression = "mixed_dim"
    cls = ae.EmbeddingBag if bag else ae.Embedding
    return cls(V, D, compression=compression, **kw)


def _write(how: str, layer: Any, table: torch.Tensor) -> None:
    """Write `table` into ``layer.weight`` the ways users do."""
    with torch.no_grad():
        if how == "init":
            nn.init.zeros_(layer.weight)
            layer.weight.add_(table)
        elif how == "data":
            layer.weight.data.copy_(table)
        elif how == "rows":
            for i in range(V):
                layer.weight[i] = table[i]
        else:
            layer.weight = nn.Parameter(table.clone())


@pytest.mark.parametrize("how", ["init", "data", "rows", "assign"])
@pytest.mark.parametrize(("compression", "kw"), STORED)
def test_writes_into_a_stored_table_land_as_in_torch(compression: str, kw: dict,
                                                     how: str) -> None:
    layer, table = _layer(compression, kw), torch.randn(V, D)
    _write(how, layer, table)
    assert torch.equal(layer(IDS), F.embedding(IDS, table))
    assert [n for n, _ in layer.named_parameters()] == ["store.weight"]


@pytest.mark.parametrize("how", ["init", "data", "rows", "assign"])
def test_every_write_into_a_decoded_table_is_refused(how: str) -> None:
    layer = _layer("qr", {})
    before = layer(IDS).detach().clone()
    with pytest.raises(ConfigError, match=r"^Embedding\(12, 4, compression qr\)\.weight .*"
                                          "from_trained=True") as e:
        _write(how, layer, torch.randn(V, D))
    assert "\n" not in str(e.value)
    assert torch.equal(layer(IDS), before)


@pytest.mark.parametrize(("compression", "kw"), COMPRESSED)
def test_a_write_into_any_compressed_table_or_a_view_of_it_is_refused(compression: str,
                                                                       kw: dict) -> None:
    layer = _layer(compression, kw)
    w = layer.weight
    with torch.no_grad():
        for write in (lambda: w.normal_(), lambda: w[0].zero_(), lambda: w.t().fill_(1.0),
                      lambda: w.detach().copy_(torch.zeros(V, D)),
                      lambda: torch.add(w, 1.0, out=w), lambda: w.__iadd__(1.0)):
            with pytest.raises(ConfigError, match="decoded"):
                write()
    for freeze in (lambda: w.requires_grad_(False), lambda: setattr(w, "requires_grad", False)):
        with pytest.raises(ConfigError, match=r"layer\.requires_grad_\(False\)"):
            freeze()


@pytest.mark.parametrize("init", [
    lambda w: nn.init.normal_(w, std=0.01), lambda w: nn.init.uniform_(w, -0.1, 0.1),
    lambda w: nn.init.constant_(w, 0.5), lambda w: nn.init.kaiming_uniform_(w)])
def test_an_nn_init_that_passes_the_weight_by_keyword_is_refused(init: Any) -> None:
    """torch.nn.init's normal_, uniform_, constant_ and kaiming_uniform_ hand a tensor
    subclass to `__torch_function__` as ``tensor=``: on a compressed layer's weight they
    are refused as every other write is (before: they ran on a decoded copy and the rows
    stayed as they were, a model's own init silently lost after apply)."""
    layer = _layer("hash", {"hash_buckets": 5})
    rows = layer.store.weight.detach().clone()
    with pytest.raises(ConfigError, match="decoded"):
        init(layer.weight)
    assert torch.equal(layer.store.weight, rows)


@pytest.mark.parametrize("bag", [False, True])
def test_a_decoded_table_reads_as_a_plain_tensor(bag: bool) -> None:
    layer = _layer("qr", {}, bag)
    x = torch.randn(3, D)
    full = layer.full_weight().detach()
    logits = F.linear(x, layer.weight)  # a tied output layer
    assert type(logits) is torch.Tensor and torch.allclose(logits, x @ full.T)
    logits.relu_()  # a result is the caller's own tensor
    logits.sum().backward()
    assert layer.store.q_weight.grad is not None
    copy = layer.weight.clone()  # so is a copy
    copy.zero_()
    torch.nn.init.normal_(layer.weight.detach().clone())
    target = torch.randn(V, D)
    target.copy_(layer.weight)  # a decoded table as the source of a write
    assert torch.equal(target, full)


@pytest.mark.parametrize(("compression", "kw"), COMPRESSED)
def test_copies_of_a_decoded_weight_are_plain_tensors_of_its_table(compression: str,
                                                                    kw: dict) -> None:
    layer = _layer(compression, kw)
    want = layer.full_weight().detach().clone()
    saved = io.BytesIO()
    torch.save({"w": layer.weight, "d": layer.weight.detach()}, saved)
    saved.seek(0)
    loaded = torch.load(saved, weights_only=True)  # the file names no autoembed class
    a, b = copy.deepcopy([layer.weight.detach()] * 2)
    with torch.no_grad():
        frozen = copy.deepcopy(layer.weight)  # read under no_grad: a leaf
    for c in (loaded["w"], loaded["d"], a, frozen, layer.weight.clone()):
        assert type(c) is torch.Tensor and torch.equal(c, want)
    assert a is b  # one tensor, one copy (deepcopy's memo)
    a.zero_()  # a copy's own
    assert torch.equal(layer.full_weight(), want)
    if layer.weight.requires_grad:  # no leaf: refused as torch refuses its own
        with pytest.raises(RuntimeError) as torch_says:
            copy.deepcopy(nn.Parameter(torch.ones(2)) * 1)
        with pytest.raises(RuntimeError) as e:
            copy.deepcopy(layer.weight)
        assert str(e.value) == str(torch_says.value)


class _Tied(nn.Module):
    def __init__(self, emb: nn.Module) -> None:
        super().__init__()
        self.emb = emb

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.emb(ids) @ self.emb.weight.T


def test_a_weight_passed_into_a_compiled_function_reads_its_table() -> None:
    layer, x = _layer("qr", {}), torch.randn(3, D)
    full = layer.full_weight()
    want = full.detach().clone()
    ((x @ full.T).sum() + full[IDS].sum()).backward()
    grads = [p.grad.clone() for p in layer.parameters()]
    layer.zero_grad()
    both = torch.compile(lambda w: (F.linear(x, w), F.embedding(IDS, w)), backend="eager",
                         fullgraph=True)
    logits, rows = both(layer.weight)  # decoded in the graph
    assert torch.allclose(logits, x @ want.T) and torch.equal(rows, want[IDS])
    (logits.sum() + rows.sum()).backward()
    for p, g in zip(layer.parameters(), grads, strict=True):  # the sums' order differs:
        torch.testing.assert_close(p.grad, g, rtol=1e-5, atol=1e-5)  # float32 rounding
    method = torch.compile(lambda w: x @ w.t(), backend="eager", fullgraph=True)
    assert torch.allclose(method(layer.weight.detach()), x @ want.T)
    tied = torch.compile(_Tied(layer), backend="eager", fullgraph=True)  # reads it inside
    assert torch.allclose(tied(IDS), want[IDS] @ want.T)
    with torch.no_grad(), pytest.raises(ConfigError, match=r"\.weight .*add_ on it"):
        torch.compile(lambda w: w.add_(1.0), backend="eager")(layer.weight)


def test_the_write_check_is_marked_for_dynamo_without_importing_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Importing autoembed.nn imported Dynamo (about 3 CPU s in every process, traced or not)
    to mark the op-name function constant: the module loads with Dynamo unimportable, and
    the mark it sets is the one torch.compiler.assume_constant_result sets."""
    import importlib.util
    import sys

    from autoembed.nn import decoded

    marked = torch.compiler.assume_constant_result(lambda: None)
    assert vars(decoded._name).items() >= vars(marked).items() and vars(marked)
    monkeypatch.setitem(sys.modules, "torch._dynamo", None)  # `import torch._dynamo` fails
    spec = importlib.util.spec_from_file_location("_decoded_again", decoded.__file__)
    assert spec is not None and spec.loader is not None
    again = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, again)  # dataclasses look it up there
    spec.loader.exec_module(again)


def _decodes(layer: Any, monkeypatch: pytest.MonkeyPatch, refuse: bool = False) -> list[int]:
    """Count (or, `refuse`, fail) each decode of `layer`'s whole table by its storage."""
    calls: list[int] = []
    full = layer.store.full

    def counted() -> torch.Tensor:
        calls.append(1)
        assert not refuse, "the whole table was decoded"
        return full()

    monkeypatch.setattr(layer.store, "full", counted)
    return calls


def test_reading_a_huge_tables_shape_dtype_and_device_decodes_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rows, dim = 4_000_000, 64  # decoded: 2 GB of float64
    layer = ae.Embedding(rows, dim, compression="hash", hash_buckets=8, dtype=torch.float64)
    decodes = _decodes(layer, monkeypatch, refuse=True)
    w = layer.weight
    assert w.shape == (rows, dim) and w.size(0) == rows and w.size() == (rows, dim)
    assert (w.ndim, w.dim(), len(w), w.numel()) == (2, 2, rows, rows * dim)
    assert (w.dtype, w.device, w.nbytes) == (torch.float64, torch.device("cpu"), rows * dim * 8)
    assert w.requires_grad and w.is_floating_point() and not w.is_meta
    with torch.no_grad():
        assert not layer.weight.requires_grad  # as a decode under no_grad would be
    layer.requires_grad_(False)
    assert not layer.weight.requires_grad
    assert decodes == []


@pytest.mark.parametrize(("compression", "kw"), COMPRESSED)
def test_a_weight_decodes_once_at_its_first_op_as_full_weight_does(
        compression: str, kw: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    layer = _layer(compression, {**kw, "padding_idx": 2})
    want = layer.full_weight()
    decodes = _decodes(layer, monkeypatch)
    w = layer.weight
    assert (w.shape, w.dtype, w.device, w.requires_grad) == (
        want.shape, want.dtype, want.device, want.requires_grad)
    assert decodes == []
    with torch.no_grad():  # a host_cached lookup under grad needs its optimizer bound
        assert torch.equal(F.embedding(IDS, w), layer(IDS))
    assert torch.equal(w[2], torch.zeros(D)) and torch.equal(w, want)
    assert decodes == [1]  # one decode for the read's ops; a new read decodes anew
    with torch.no_grad():
        frozen = layer.weight
    assert not F.linear(torch.ones(1, D), frozen).requires_grad  # the grad mode of the read
    assert decodes == [1, 1]


def test_a_weight_decodes_as_it_was_read_whatever_mode_its_first_op_runs_in() -> None:
    """Read outside autocast and inference mode, first used inside them: the table decodes as
    at the read (float32, as `full_weight()` gives it there; with grad, so a later backward
    reaches the storage), not as the op's modes would (bf16 rows; no grad)."""
    torch.manual_seed(0)
    layer = _layer("none", {"small_dim": 2})  # mixed_dim: a projection autocast would cast
    want = layer.full_weight().detach()
    w = layer.weight
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = w.clone()
    assert got.dtype == torch.float32 and torch.equal(got.detach(), want)
    w = layer.weight
    with torch.inference_mode():
        F.embedding(IDS, w)
    (w * 2).sum().backward()
    grad = layer.store.proj.weight.grad
    assert grad is not None and torch.count_nonzero(grad) > 0


def test_a_compiled_op_decodes_a_weight_under_the_autocast_it_was_read_in() -> None:
    """Under torch.compile the table was decoded under the op's autocast, not the read's
    (as eagerly): read outside autocast and used under it, bf16 rows; read under it and used
    outside, float32. Each now matches `full_weight()` under the read's autocast."""
    torch.manual_seed(0)
    layer = _layer("none", {"small_dim": 2})  # mixed_dim: a projection autocast would cast
    rows = torch.compile(lambda w: F.embedding(IDS, w), backend="eager", fullgraph=True)
    want = layer.full_weight()[IDS]
    w = layer.weight
    with torch.autocast("cpu", dtype=torch.bfloat16):
        cast = layer.full_weight()[IDS]
        got = rows(w)
        w = layer.weight
    assert got.dtype == torch.float32 and torch.equal(got, want)
    got = rows(w)
    assert cast.dtype == got.dtype == torch.bfloat16 and torch.equal(got, cast)


def test_an_op_past_torch_function_reads_the_decoded_table_or_is_refused() -> None:
    layer = _layer("qr", {})
    w, want = layer.weight, layer.full_weight().detach()
    with torch._C.DisableTorchFunctionSubclass():  # ops reach __torch_dispatch__
        assert torch.equal(torch.add(w, 1.0), want + 1.0)
        with torch.no_grad(), pytest.raises(ConfigError, match=r"\.weight .*aten\.add_"):
            w.add_(1.0)


class _ScoresAll(nn.Module):
    """Scores a user against every item: a forward that reads the item table's weight."""

    def __init__(self) -> None:
        super().__init__()
        self.user, self.item = nn.Embedding(5, D), nn.Embedding(V, D)

    def forward(self, users: torch.Tensor) -> torch.Tensor:
        return self.user(users) @ self.item.weight.T


def test_a_forward_reading_a_decoded_weight_prices_on_fake_tensors() -> None:
    import autoembed

    def build() -> nn.Module:
        return autoembed.apply(_ScoresAll(), {"tables": [{"name": "item", "vocab_size": V,
                                                          "compression": "qr"}]})

    users = torch.tensor([0, 4])
    est = autoembed.estimate_model(build, users, loss=lambda out, _: out.sum())  # fake tensors
    assert est.allocated_peak > 0
    model = build()
    assert torch.equal(model(users), model.user(users) @ model.item.full_weight().T)


class _Two(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb, self.head = nn.Embedding(V, D), nn.Linear(D, 2)


@pytest.mark.parametrize("strict", [True, False])
def test_a_state_dict_saved_before_apply_loads_or_is_refused(strict: bool) -> None:
    import autoembed

    before = _Two()
    saved = before.state_dict()
    stored = autoembed.apply(_Two(), {"tables": [{"name": "emb", "vocab_size": V,
                                                  "compression": "hash", "hash_buckets": 50}]})
    stored.load_state_dict(saved, strict=strict)  # the same [V, D] table, stored as it is
    assert torch.equal(stored.emb(IDS), F.embedding(IDS, saved["emb.weight"]))
    assert torch.equal(stored.head.weight, saved["head.weight"])
    qr = autoembed.apply(_Two(), {"tables": [{"name": "emb", "vocab_size": V,
                                              "compression": "qr"}]})
    with pytest.raises(ConfigError, match=r"'emb\.weight' \(12, 4\) is the table before "
                                          r"autoembed\.apply.*from_trained=True"):
        qr.load_state_dict(saved, strict=strict)


@pytest.mark.parametrize("op", ["mult", "add", "concat"])
def test_a_qr_bag_against_its_decoded_rows_as_apply_md_says(op: str) -> None:
    bag = ae.EmbeddingBag(V, D, mode="sum", compression="qr", qr_operation=op,
                          qr_collisions=4)
    x, w = torch.tensor([[1, 6, 11]]), torch.tensor([[0.5, 2.0, 1.0]])
    s = bag.store
    q, r = s.q_weight.detach()[x[0] // 4], s.r_weight.detach()[x[0] % 4]
    want = {"mult": (w.T * q).sum(0) * (w.T * r).sum(0),  # the parts' pools, multiplied
            "add": (w.T * (q + r)).sum(0), "concat": (w.T * torch.cat([q, r], 1)).sum(0)}[op]
    assert torch.allclose(bag(x, per_sample_weights=w)[0], want, atol=1e-6)
    rows = (w.T * bag.full_weight().detach()[x[0]]).sum(0)  # the pool of the decoded rows
    assert torch.allclose(rows, want, atol=1e-6) == (op != "mult")
