"""Compress a trained table: the parameters of a compressed table fitted to a full one W
[V, D] (fp32 arithmetic), least-squares optimal where the method is linear in them:

* `hash_init`: each bucket's row the mean of the rows hashed into it (an empty one zero);
  `hot_cold_init`: hot rows copied, cold buckets so; `robe_init`: each array value the mean
  of the entries that read it.
* `qr_init` (id = (i // m, i % m)): ``concat`` the means of the ids' halves; ``add`` the
  two-way additive fit (alternating means); ``mult`` per column the best rank-1 fit of the
  [ceil(V/m), m] grid (alternating least squares from an SVD start; the padded cells left out).
* `tt_svd`: TT-SVD (Oseledets, 2011) of W padded to v1 v2 v3 rows, truncated to rank r
  (exact when W has TT ranks <= r); `mixed_dim_init`: the truncated SVD (small = U_d S_d,
  proj = V_d); `quantized_init`: W through int8/int4 row packing and back.

`fit_to(module, weight)` sets a compressed table (an `autoembed.nn` storage, what
`apply(..., from_trained=True)` does, or a config-built table) in place by its method.
"""

from __future__ import annotations

from typing import Any

import torch

from autoembed.compression import tt_dims, tt_rows
from autoembed.nn.hashing import hash_ids
from autoembed.nn.rowformat import pack_rows, unpack_rows

__all__ = ["hash_init", "qr_init", "tt_svd", "robe_init", "hot_cold_init", "quantized_init",
           "mixed_dim_init", "fit_to", "bucket_means"]


def bucket_means(weight: torch.Tensor, rows: torch.Tensor, buckets: int) -> torch.Tensor:
    """[buckets, D]: the mean of weight's rows per target row `rows` (zero where none)."""
    w = weight.detach().to(torch.float32)
    total = torch.zeros((buckets, w.shape[1]), dtype=torch.float32, device=w.device)
    total.index_add_(0, rows, w)
    count = torch.bincount(rows, minlength=buckets).clamp(min=1).to(torch.float32)
    return total / count.unsqueeze(1)


def hash_init(weight: torch.Tensor, buckets: int, seed: int = 0) -> torch.Tensor:
    """Rows of a hashed table of `buckets` rows (`hash_ids` map) fitted to `weight`."""
    ids = torch.arange(weight.shape[0], device=weight.device)
    return bucket_means(weight, hash_ids(ids, buckets, seed), buckets)


def _grid(weight: torch.Tensor, m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """W as [ceil(V/m), m, D] (padded with zeros) and the mask of real cells."""
    v, d = weight.shape
    q = -(-v // m)
    grid = torch.zeros((q * m, d), dtype=torch.float32, device=weight.device)
    grid[:v] = weight.detach().to(torch.float32)
    mask = torch.zeros(q * m, dtype=torch.float32, device=weight.device)
    mask[:v] = 1.0
    return grid.view(q, m, d), mask.view(q, m, 1)


def qr_init(
    weight: torch.Tensor, m: int, operation: str, iterations: int = 50
) -> tuple[torch.Tensor, torch.Tensor]:
    """(q_weight, r_weight) of a QR table with `m` collisions fitted to `weight`."""
    grid, mask = _grid(weight, m)
    n_q = mask.sum(dim=1).clamp(min=1)  # [Q, 1]: real cells per quotient row
    n_r = mask.sum(dim=0).clamp(min=1)  # [m, 1]
    if operation == "concat":
        h = weight.shape[1] // 2
        return (grid[..., :h].sum(1) / n_q, grid[..., h:].sum(0) / n_r)
    if operation == "add":
        q = grid.sum(1) / n_q
        r = torch.zeros_like(grid[0])
        for _ in range(iterations):
            r = ((grid - q[:, None]) * mask).sum(0) / n_r
            q = ((grid - r[None]) * mask).sum(1) / n_q
        return q, r
    if operation != "mult":
        raise ValueError(f"qr operation {operation!r}: use mult, add or concat")
    # start: per column, the top singular pair of the complete quotient rows' [Q', m] grid
    full = grid[: weight.shape[0] // m].permute(2, 0, 1)  # [D, Q', m]
    _, s, vh = torch.linalg.svd(full, full_matrices=False)
    r = (vh[:, 0, :] * s[:, :1]).T.contiguous()  # [m, D]
    r = torch.where(r.abs() < 1e-12, torch.full_like(r, 1e-12), r)
    q = torch.zeros_like(grid[:, 0])
    for _ in range(iterations):
        q = (grid * r[None] * mask).sum(1) / ((r[None] ** 2) * mask).sum(1).clamp(min=1e-30)
        r = (grid * q[:, None] * mask).sum(0) / ((q[:, None] ** 2) * mask).sum(0).clamp(min=1e-30)
    return q, r


def tt_svd(weight: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Cores (core0, core1, core2) in `TTTable`'s layout fitted to `weight` by TT-SVD."""
    v, d = weight.shape
    (v1, v2, v3), (d1, d2, d3) = tt_rows(v), tt_dims(d)
    full = torch.zeros((v1 * v2 * v3, d), dtype=torch.float64, device=weight.device)
    full[:v] = weight.detach().to(torch.float64)
    # [v1, v2, v3, d1, d2, d3] -> [(v1 d1), (v2 d2), (v3 d3)]
    t = full.view(v1, v2, v3, d1, d2, d3).permute(0, 3, 1, 4, 2, 5).reshape(v1 * d1, -1)
    u, s, vh = torch.linalg.svd(t, full_matrices=False)
    r1 = min(rank, s.shape[0])
    g0 = u[:, :r1]  # [(v1 d1), r1]
    rest = (s[:r1, None] * vh[:r1]).reshape(r1 * v2 * d2, v3 * d3)
    u, s, vh = torch.linalg.svd(rest, full_matrices=False)
    r2 = min(rank, s.shape[0])
    g1 = u[:, :r2]  # [(r1 v2 d2), r2]
    g2 = s[:r2, None] * vh[:r2]  # [r2, (v3 d3)]
    # zero-pad the ranks to `rank` (a smaller exact rank leaves the rest zero)
    c0 = torch.zeros((v1, d1, rank), dtype=torch.float64, device=weight.device)
    c0[:, :, :r1] = g0.view(v1, d1, r1)
    c1 = torch.zeros((v2, rank, d2, rank), dtype=torch.float64, device=weight.device)
    c1[:, :r1, :, :r2] = g1.view(r1, v2, d2, r2).permute(1, 0, 2, 3)
    c2 = torch.zeros((v3, rank, d3), dtype=torch.float64, device=weight.device)
    c2[:, :r2, :] = g2.view(r2, v3, d3).permute(1, 0, 2)
    dt = weight.dtype
    return (c0.reshape(v1, -1).to(dt), c1.reshape(v2, -1).to(dt), c2.reshape(v3, -1).to(dt))


def robe_init(weight: torch.Tensor, positions: torch.Tensor, size: int) -> torch.Tensor:
    """Array [size] fitted to `weight` [V, D], given the array position of every entry
    (`RobeTable.positions(arange(V))`, [V, D])."""
    return bucket_means(weight.reshape(-1, 1), positions.reshape(-1), size).squeeze(1)


def hot_cold_init(
    weight: torch.Tensor, hot_ids: torch.Tensor, cold: int, seed: int = 0
) -> torch.Tensor:
    """Weight [hot + cold, D] of a `HotColdTable`: hot rows copied, cold buckets averaged."""
    v = weight.shape[0]
    hot = hot_ids.shape[0]
    is_hot = torch.zeros(v, dtype=torch.bool, device=weight.device)
    is_hot[hot_ids] = True
    out = torch.empty((hot + cold, weight.shape[1]), dtype=torch.float32, device=weight.device)
    out[:hot] = weight.detach()[hot_ids].to(torch.float32)
    if cold:
        cold_ids = (~is_hot).nonzero().squeeze(1)
        out[hot:] = bucket_means(weight[cold_ids], hash_ids(cold_ids, cold, seed), cold)
    return out


def quantized_init(weight: torch.Tensor, bits: int) -> torch.Tensor:
    """W after int8 (`bits` 8) or int4 (4) row quantization and back, in W's dtype."""
    return unpack_rows(pack_rows(weight, bits), weight.shape[1], bits, weight.dtype)


def mixed_dim_init(weight: torch.Tensor, small_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(small [V, d], proj [D, d]) with small @ proj.T the best rank-d fit of `weight`."""
    w = weight.detach().to(torch.float64)
    u, s, vh = torch.linalg.svd(w, full_matrices=False)
    d = min(small_dim, s.shape[0])
    small = torch.zeros((w.shape[0], small_dim), dtype=torch.float64, device=w.device)
    proj = torch.zeros((w.shape[1], small_dim), dtype=torch.float64, device=w.device)
    small[:, :d] = u[:, :d] * s[:d]
    proj[:, :d] = vh[:d].T
    return small.to(weight.dtype), proj.to(weight.dtype)


@torch.no_grad()
def fit_to(module: Any, weight: torch.Tensor) -> None:
    """Set `module` (an `autoembed.nn` storage, or a config-built robe / tt / hot_cold / QR /
    hashed / plain table) fitted to the trained table `weight` [V, D], in place."""
    from autoembed.nn.methods import _TT, _HotCold, _Robe
    from autoembed.nn.storage import _QR, _Plain

    # the built-in PlainTable / RobeTable / TTTable / HotColdTable / QRTable are these storages
    w = weight.detach()
    ids = torch.arange(w.shape[0], device=w.device)
    if isinstance(module, _TT):
        for p, c in zip((module.core0, module.core1, module.core2), tt_svd(w, module.rank),
                        strict=True):
            p.copy_(c)
    elif isinstance(module, _Robe):
        module.weight.copy_(robe_init(w, module.positions(ids), module.size))
    elif isinstance(module, _HotCold):
        module.weight.copy_(hot_cold_init(w, module.hot_ids, module.cold, module.seed))
    elif isinstance(module, _QR):
        q, r = qr_init(w, module.m, module.op)
        module.q_weight.copy_(q)
        module.r_weight.copy_(r)
    elif isinstance(module, _Plain):  # none / hash / mixed_dim, built-in or layer
        rows = w if module.buckets is None else hash_init(w, module.buckets, module.seed)
        if module.proj is None:
            module.weight.copy_(rows)
        else:  # mixed_dim (of the bucket means, when also hashed)
            small, proj = mixed_dim_init(rows, module.weight.shape[1])
            module.weight.copy_(small)
            module.proj.weight.copy_(proj)
    else:
        raise TypeError(f"{type(module).__name__}: no fit from a trained table")
