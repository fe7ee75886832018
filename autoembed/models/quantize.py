"""Serving: row-wise int8 / int4 tables (FBGEMM row format, `autoembed.nn.rowformat`).

`quantize(model, serving)` returns a copy of the model for inference in which every table
weight is one uint8 buffer [rows, row_bytes] (`<weight>_packed`); rows are dequantized as
they are looked up. The tower, mixed-dim projections and wide (per-id bias) tables stay as
they are. A table serving cannot pack (robe's array, tt's cores, a host_cached table: the
module's `why_not_packed`) is refused, one line naming it. A layer with `max_norm` packs its
rows renormalised (every lookup would renormalise them first, and renormalising twice
changes nothing). The copy is self-contained: a head that reads a tied table decoded
(`autoembed.apply`) reads the copy's.
`serving_bytes(model)` = the packed buffers + the remaining (dense) parameters + idf weights:
rows * align16(D + 4) per int8 table, rows * align16(D/2 + 4) per int4 table.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from autoembed.config import SERVING
from autoembed.errors import ConfigError
from autoembed.models.embedding import PackedWeights
from autoembed.nn.rowformat import SERVING_BITS, pack_rows, row_bytes
from autoembed.rules import OneOf

__all__ = ["quantize", "serving_bytes", "QUANTIZE_CHUNK_ROWS"]

# Rows quantized at a time: bounds the fp32 temporaries to about chunk * D * 4 bytes * a few.
QUANTIZE_CHUNK_ROWS = 65_536


def _pack(weight: torch.Tensor, bits: int) -> torch.Tensor:
    rows, dim = weight.shape
    out = torch.empty((rows, row_bytes(dim, bits)), dtype=torch.uint8, device=weight.device)
    for start in range(0, rows, QUANTIZE_CHUNK_ROWS):
        stop = min(rows, start + QUANTIZE_CHUNK_ROWS)
        out[start:stop] = pack_rows(weight[start:stop], bits)
    return out


def quantize(model: nn.Module, serving: str) -> nn.Module:
    """An inference copy of `model` with packed int8/int4 tables; `none` returns `model`."""
    OneOf(SERVING).check_argument("serving", serving)
    if not isinstance(model, nn.Module):
        raise ConfigError(f"quantize: model = {type(model).__name__}; give the torch.nn.Module")
    if serving == "none":
        return model
    bits = SERVING_BITS[serving]
    _refuse_unpackable(model, serving)
    tables = [
        (m, n, p)
        for m in model.modules()
        if _quantizable(m)
        for n, p in m.named_parameters(recurse=False)
    ]
    for _, name, p in tables:
        if bits == 4 and p.shape[1] % 2:
            raise ConfigError(
                f"serving 'int4': table weight '{name}' has an odd dim ({p.shape[1]}); int4 packs "
                "two values a byte: use an even dim or serving int8"
            )
    # copy everything but the table weights (they are replaced by packed rows)
    memo: dict[int, object] = {id(p): None for _, _, p in tables}
    out = copy.deepcopy(model, memo)
    for m_old, m_new in zip(model.modules(), out.modules(), strict=True):
        if not _quantizable(m_old):
            continue
        assert isinstance(m_new, PackedWeights)
        for name, p in list(m_old.named_parameters(recurse=False)):
            with torch.no_grad():
                packed = _pack(_renormed(m_old, p.detach()), bits)
            m_new.pack_weight(name, packed, bits, dim=int(p.shape[1]), dtype=p.dtype)
    return out.eval()


def _refuse_unpackable(model: nn.Module, serving: str) -> None:
    for path, m in model.named_modules():
        why = getattr(m, "why_not_packed", "")
        if why:
            raise ConfigError(f"serving '{serving}': '{path or type(m).__name__}' cannot be "
                              f"packed ({why}); serve it with 'none', or apply a config whose "
                              "tables serving packs (none, hash, qr, mixed_dim, hot_cold)")


def _renormed(m: nn.Module, weight: torch.Tensor) -> torch.Tensor:
    """`weight`'s rows as a layer with `max_norm` reads them (torch's renormalisation of
    every row), or `weight` itself."""
    max_norm = getattr(m, "max_norm", None)
    if max_norm is None:
        return weight
    rows = torch.arange(weight.shape[0], device=weight.device)
    return torch.embedding_renorm_(weight.clone(), rows, max_norm, getattr(m, "norm_type", 2.0))


def _quantizable(m: nn.Module) -> bool:
    """A built-in table or an `autoembed.nn` layer's storage that serving packs."""
    return isinstance(m, PackedWeights) and m.quantizable


def serving_bytes(model: nn.Module) -> int:
    """Bytes to serve `model`: packed table rows plus every remaining parameter."""
    packed = sum(b.nbytes for n, b in model.named_buffers() if n.endswith("_packed"))
    params = sum(p.nbytes for p in model.parameters())
    idf = sum(b.nbytes for n, b in model.named_buffers() if n.rsplit(".", 1)[-1] == "idf")
    return packed + params + idf
