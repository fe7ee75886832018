"""Tensor-train table (TT-Rec, Yin et al., MLSys 2021): rows are products of core slices.

Factorisation and core layout: `autoembed.compression` (`tt_rows`, `tt_dims`, `tt_shapes`).
Row i = (i1, i2, i3) is G0[i1] (d1 x r) . G1[i2] (r x d2*r, read as r x (d2, r)) . G2[i3]
(r x d3), two batched matmuls per lookup. Cores are read with dense-gradient lookups.
"""

from __future__ import annotations

import torch

from autoembed.compression import tt_init_std
from autoembed.models.computed_rows import ComputedRowsTable, projection
from autoembed.models.embedding import LookupSpec
from autoembed.nn.methods import _TT

__all__ = ["TTTable"]


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
        if not self.core0.is_meta:
            self.reset_parameters()
        self.vocab, self.spec = vocab, spec
        self.proj = projection(dim, out_dim, device, dtype)

    @torch.no_grad()
    def reset_parameters(self) -> None:
        for c in (self.core0, self.core1, self.core2):
            c.normal_(0.0, tt_init_std(self.dim, self.rank))

