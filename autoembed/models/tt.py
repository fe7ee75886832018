"""Tensor-train table (TT-Rec, Yin et al., MLSys 2021): rows are products of core slices.

Factorisation and core layout: `autoembed.compression` (`tt_rows`, `tt_dims`, `tt_shapes`).
Row i = (i1, i2, i3) is G0[i1] (d1 x r) . G1[i2] (r x d2*r, read as r x (d2, r)) . G2[i3]
(r x d3), two batched matmuls per lookup. Cores are read with dense-gradient lookups.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from autoembed.compression import tt_init_std
from autoembed.models.computed import ComputedRowsTable, projection
from autoembed.models.embedding import LookupSpec
from autoembed.nn.methods import _TT

__all__ = ["TTTable", "tt_indices", "tt_lookup"]


def tt_indices(
    idx: torch.Tensor, factors: tuple[int, int, int]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(i1, i2, i3) of ids: i = i1 * v2 * v3 + i2 * v3 + i3."""
    _, v2, v3 = factors
    return (
        torch.div(idx, v2 * v3, rounding_mode="floor"),
        torch.remainder(torch.div(idx, v3, rounding_mode="floor"), v2),
        torch.remainder(idx, v3),
    )


class TTTable(ComputedRowsTable, _TT):
    """The `autoembed.nn` tt storage (cores ``core0`` [v1, d1 r], ``core1`` [v2, r d2 r],
    ``core2`` [v3, r d3], rows by `tt_lookup`), pooled as a built-in table; cores start with
    std `tt_init_std(dim, rank)` (a row's entries have variance 1 / dim)."""

    def __init__(
        self,
        vocab: int,
        dim: int,
        rank: int,
        spec: LookupSpec,
        *,
        out_dim: int | None = None,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        _TT.__init__(self, vocab, dim, {"device": device, "dtype": dtype}, tt_rank=rank)
        self.vocab, self.spec = vocab, spec
        self.proj = projection(dim, out_dim, device, dtype)

    @torch.no_grad()
    def reset_parameters(self) -> None:
        for c in (self.core0, self.core1, self.core2):
            c.normal_(0.0, tt_init_std(self.dim, self.rank))


def tt_lookup(
    idx: torch.Tensor,
    cores: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    row_factors: tuple[int, int, int],
    dim_factors: tuple[int, int, int],
    rank: int,
) -> torch.Tensor:
    """Rows [..., d1 d2 d3] of ids `idx` from cores in `tt_shapes`' layout: G0[i1] . G1[i2]
    . G2[i3], two batched matmuls."""
    d1, d2, d3 = dim_factors
    r = rank
    i1, i2, i3 = (i.reshape(-1) for i in tt_indices(idx, row_factors))
    n = i1.shape[0]
    g0 = F.embedding(i1, cores[0]).view(n, d1, r)
    g1 = F.embedding(i2, cores[1]).view(n, r, d2 * r)
    g2 = F.embedding(i3, cores[2]).view(n, r, d3)
    t = torch.bmm(g0, g1).view(n, d1 * d2, r)
    return torch.bmm(t, g2).view(*idx.shape, d1 * d2 * d3)
