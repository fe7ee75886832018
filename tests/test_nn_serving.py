"""Serving autoembed.nn layers: `autoembed.quantize(model, "int8" | "int4")` packs each layer's
stored weights into FBGEMM-style rows (align16(D + 4) bytes for int8) read back on lookup."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from autoembed import nn as ae_nn
from autoembed.models.quantize import quantize, serving_bytes

V, D, B, L = 300, 16, 6, 5
SETTINGS = {"none": {}, "hash": {"hash_buckets": 64}, "qr": {"qr_collisions": 4},
            "mixed_dim": {"small_dim": 8}}


def align16(n: int) -> int:
    return -(-n // 16) * 16


class Model(nn.Module):
    def __init__(self, compression: str) -> None:
        super().__init__()
        kw = SETTINGS[compression]
        self.emb = ae_nn.Embedding(V, D, compression=compression, **kw)
        self.bag = ae_nn.EmbeddingBag(V, D, mode="sum", compression=compression, **kw)

    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.emb(ids), self.bag(ids)


def _stored(m: nn.Module) -> list[torch.Tensor]:
    """The stored table weights (the projection of mixed_dim excluded)."""
    return [p.detach() for n, p in m.named_parameters() if n.endswith("weight") and "proj" not in n]


@pytest.mark.parametrize("compression", list(SETTINGS))
def test_int8_lookups_within_the_row_quantization_step(compression: str) -> None:
    torch.manual_seed(0)
    model = Model(compression).eval()
    ids = torch.randint(0, V, (B, L))
    with torch.no_grad():
        want_rows, want_bags = model(ids)
        served = quantize(model, "int8")
        got_rows, got_bags = served(ids)
    # one int8 step per stored row is (max - min) / 255; a lookup reads one row (qr: a
    # product or sum of two, mixed_dim: a projected one), a bag sums L of them
    step = max(float((w.max(1).values - w.min(1).values).max()) / 255 for w in _stored(model))
    big = max(float(w.abs().max()) for w in _stored(model)) + step
    proj = max(float(m.store.proj.weight.detach().abs().sum(1).max())
               for m in (model.emb, model.bag)) if compression == "mixed_dim" else 1.0
    # q * r: |q| dr + |r| dq; proj(x): the row sums of |proj| times the step
    scale = {"qr": 2 * big, "mixed_dim": proj}.get(compression, 1.0)
    bag_scale = L * scale * (L if compression == "qr" else 1)  # qr pools q and r, then combines
    assert (got_rows - want_rows).abs().max() <= step * scale
    assert (got_bags - want_bags).abs().max() <= step * bag_scale
    assert not any(n.endswith("weight") and "proj" not in n for n, _ in served.named_parameters())
    # bytes: each stored table as int8 rows of align16(D + 4) bytes, the rest as it was
    packed = sum(w.shape[0] * align16(w.shape[1] + 4) for w in _stored(model))
    rest = sum(p.numel() * 4 for n, p in model.named_parameters() if "proj" in n)
    assert serving_bytes(served) == packed + rest


def test_int4_halves_the_row_and_the_tied_head_decodes_it() -> None:
    torch.manual_seed(0)
    model = Model("hash").eval()
    served = quantize(model, "int4")
    packed = served.emb.store.weight_packed
    assert packed.dtype == torch.uint8 and packed.shape == (64, align16(D // 2 + 4))
    full = served.emb.full_weight()  # a tied output layer's weight: V x D, decoded
    assert full.shape == (V, D)
    ids = torch.arange(V)
    assert torch.equal(full, served.emb(ids))


@pytest.mark.parametrize("serving", ["none", "int8"])
@pytest.mark.parametrize("compression", [*SETTINGS, "qr add"])
def test_bag_leaves_out_padding(compression: str, serving: str) -> None:
    """With padding_idx, a mean bag (served or not; 2-D or by offsets) is the bag of its
    other ids: a twin without padding_idx, given them by offsets (qr mult: the mean of each
    part, then their product, as without padding)."""
    torch.manual_seed(0)
    name, *op = compression.split()
    kw = {"mode": "mean", "compression": name, **SETTINGS[name],
          **({"qr_operation": op[0]} if op else {})}
    bag = ae_nn.EmbeddingBag(V, D, padding_idx=0, **kw)  # type: ignore[arg-type]
    twin = ae_nn.EmbeddingBag(V, D, **kw)  # type: ignore[arg-type]
    twin.load_state_dict(bag.state_dict())
    bag, twin = quantize(bag.eval(), serving), quantize(twin.eval(), serving)
    ids = torch.tensor([[3, 0, 7, 0], [0, 0, 0, 9], [5, 6, 8, 2]])
    kept = torch.tensor([3, 7, 9, 5, 6, 8, 2])
    with torch.no_grad():
        want = twin(kept, torch.tensor([0, 2, 3]))
        assert torch.allclose(bag(ids), want, atol=1e-5)
        assert torch.allclose(bag(ids.view(-1), torch.tensor([0, 4, 8])), want, atol=1e-5)


@pytest.mark.parametrize("serving", ["int8", "int4"])
@pytest.mark.parametrize(("max_norm", "norm_type"), [(1.0, 2.0), (0.5, 1.0)])
def test_served_rows_keep_max_norm(serving: str, max_norm: float, norm_type: float) -> None:
    """A max_norm table served packed reads no row past max_norm: the rows are renormalised
    before packing, and rounding them (int4: steps of 1/15 of a row's range) can lift a norm
    past it again (to 1.02 for max_norm 1 here before this was kept)."""
    torch.manual_seed(0)
    model = Model("none")
    for m in (model.emb, model.bag):
        m.store.max_norm, m.store.norm_type = max_norm, norm_type
        with torch.no_grad():
            m.store.weight.mul_(3.0)  # most rows past max_norm
    served = quantize(model, serving)
    ids = torch.arange(V).view(-1, 1)
    rows, bags = served(ids)  # a bag of one id is that id's row of the bag's table
    for layer, out in ((served.emb, rows.squeeze(1)), (served.bag, bags)):
        norms = torch.linalg.vector_norm(out, ord=norm_type, dim=-1)
        assert float(norms.max()) <= max_norm * (1 + 1e-6)
        assert float(norms.min()) > 0.9 * max_norm  # scaled back, not emptied
        # each row is the dequantized row scaled as torch's embedding_renorm_ scales one
        raw = layer.store.unpacked("weight", ids.squeeze(1))
        raw_norm = torch.linalg.vector_norm(raw, ord=norm_type, dim=-1, keepdim=True)
        want = torch.where(raw_norm > max_norm, raw * max_norm / (raw_norm + 1e-7), raw)
        torch.testing.assert_close(out, want)
