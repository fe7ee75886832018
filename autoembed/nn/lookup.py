"""What an `autoembed.nn` layer does with ids around its storage: the id checks torch's own
layers make (`check_ids`, every compression and placement: docs/apply.md, "Ids"), bags
pooled from per-id rows, and gradients scaled by id frequency.

`pool_rows` pools per-id rows [N, D] into bags the way torch's EmbeddingBag does (sum, mean,
max; per-sample weights; padding entries left out; an empty bag is zeros), for storages whose
rows are computed (robe, tt) and for what a storage's own `bag` cannot do (max over combined
rows, scaled gradients). `by_frequency` scales the gradient each position sends to its row by
1 / (the number of times its id occurs in the batch), torch's ``scale_grad_by_freq``.
"""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import is_fake

from autoembed.errors import DataError

__all__ = ["ID_DTYPES", "check_ids", "bag_index", "pool_rows", "by_frequency", "sparse_bag_weights"]

ID_DTYPES = (torch.int64, torch.int32)  # what torch's embedding kernels index with


def check_ids(ids: torch.Tensor, num: int | None, what: str) -> None:
    """Refuse ids a torch embedding would refuse: not int64/int32, or outside [0, num)
    (`num` None: negative ids only)."""
    if ids.dtype not in ID_DTYPES:
        raise DataError(f"{what}: ids of dtype {ids.dtype}; embedding ids are integers "
                        "(torch.long or torch.int): convert them with .long()")
    if ids.numel() == 0 or ids.is_meta:
        return
    bounds = "[0, ...)" if num is None else f"[0, {num})"
    if torch.compiler.is_compiling() or (ids.device.type != "cpu" and not is_fake(ids)):
        ok = ids >= 0 if num is None else (ids >= 0) & (ids < num)
        torch._assert_async(ok.all(), f"{what}: an id is outside {bounds}")
        return
    if is_fake(ids):
        return
    lo, hi = (int(x) for x in torch.aminmax(ids))
    bad = lo if lo < 0 else hi
    if bad < 0 or (num is not None and bad >= num):
        raise DataError(f"{what}: id {bad} is outside {bounds}; give ids in that range (or "
                        "size the table to the data)")


def sparse_bag_weights(psw: torch.Tensor | None, ids: torch.Tensor,
                       sparse: bool) -> torch.Tensor | None:
    """The per-sample weights to give a bag lookup: None for a sparse-gradient bag under fake
    tensors (torch 2.13's meta kernel of the sparse backward refuses them; a trace prices
    shapes, which are the same without them), else `psw`."""
    return None if sparse and psw is not None and is_fake(ids) else psw


def bag_index(n: int, offsets: torch.Tensor) -> torch.Tensor:
    """The bag of each of `n` flat entries cut at `offsets` (torch's offsets: bag b starts at
    offsets[b])."""
    at = torch.arange(n, device=offsets.device)
    return torch.bucketize(at, offsets, right=True) - 1


def pool_rows(rows: torch.Tensor, offsets: torch.Tensor | None, mode: str,
              psw: torch.Tensor | None, keep: torch.Tensor | None = None) -> torch.Tensor:
    """Bags of per-id rows: `rows` [B, L, D] (no offsets: bag b is row b) or [N, D] cut at
    `offsets`; `psw` per-sample weights (sum); `keep` False where an entry is padding (left
    out: a mean divides by the entries kept, an empty bag is zeros)."""
    dim = rows.shape[-1]
    if offsets is None:
        b, length = rows.shape[0], rows.shape[-2]
        offsets = torch.arange(0, b * length, length, device=rows.device)
        rows = rows.reshape(-1, dim)
        psw = None if psw is None else psw.reshape(-1)
        keep = None if keep is None else keep.reshape(-1)
    bags = offsets.shape[0]
    where = bag_index(rows.shape[0], offsets)
    if keep is not None:
        where = torch.where(keep, where, bags)  # padding: into a bag that is dropped
    if psw is not None:
        rows = rows * psw.unsqueeze(-1).to(rows.dtype)
    out = rows.new_zeros(bags + 1, dim)
    if mode == "max":
        out = out.scatter_reduce(0, where.unsqueeze(1).expand(-1, dim), rows, "amax",
                                 include_self=False)
        return out[:bags]
    out = out.index_add(0, where, rows)[:bags]
    if mode == "mean":  # (an index_add, not bincount: a fixed shape under fake tensors)
        ones = torch.ones(where.shape, dtype=out.dtype, device=out.device)
        count = out.new_zeros(bags + 1).index_add(0, where, ones)[:bags].clamp(min=1)
        out = out / count.unsqueeze(1)
    return out


def by_frequency(rows: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """`rows` [*ids.shape, D] whose gradient is divided, position by position, by the number
    of times the position's id occurs in `ids` (counted by sorting: no host-device sync)."""
    if not rows.requires_grad:
        return rows
    flat = ids.reshape(-1)
    order = flat.sort().values
    count = (torch.searchsorted(order, flat, right=True)
             - torch.searchsorted(order, flat)).view(ids.shape)
    scale = 1.0 / count.unsqueeze(-1)
    rows = rows.view_as(rows)  # its own node: the hook scales only what reaches this lookup
    rows.register_hook(lambda g: g * scale.to(g.dtype))
    return rows
