"""Activation bytes of the tables whose rows are computed (ROBE, tensor-train): torch-free.

`autoembed.models.computed_rows.ComputedRowsTable` builds every position's row ([B, L, D]) from
shared parameters, masks it and pools it. What autograd keeps for backward, per field of B
samples and L ids a sample (N = B L lookups, e = the parameters' bytes per element):

* both: the float mask [B, L, 1] (N e), and the bag sizes [B, 1] (B e) when the pooling
  divides by them (mean; naive on CTR).
* robe: the array positions of every looked-up value, int64 [N, C, Z] (C = ceil(D / Z)
  blocks of Z values; the slice to D is a view of it).
* tt: the three row-factor indices (int64 [N] each), the gathered core slices
  G0 [N, d1 r], G1 [N, r d2 r], G2 [N, r d3] and the first product [N, d1 d2 r] (bmm keeps
  both operands).

Transients (the largest, beside those): the rows and their masked copy (2 N D e; the same
again as gradients in backward), plus robe's hash temporaries (2 x [N, C] int64) or tt's
first product's gradient (N d1 d2 r e). Hot/cold tables look rows up like a plain table
(`embedding_bag`) and are priced as one.
"""

from __future__ import annotations

from autoembed.compression import robe_blocks, tt_dims
from autoembed.memory.types import round_block

__all__ = ["computed_activations", "INDEX_BYTES"]

INDEX_BYTES = 8  # int64


def computed_activations(
    method: str,
    *,
    batch: int,
    width: int,
    dim: int,
    element_bytes: int,
    pooling: str,
    text: bool,
    rank: int = 0,
    block: int = 0,
) -> tuple[list[int], int]:
    """(blocks saved for backward, the largest transient) of one robe or tt field whose id
    matrix is [batch, width]."""
    n, e = batch * width, element_bytes
    saved = [round_block(n * e)]  # the mask
    if pooling == "mean" or (pooling == "naive" and not text):
        saved.append(round_block(batch * e))
    rows = 2 * round_block(n * dim * e)
    if method == "robe":
        c = robe_blocks(dim, block)
        saved.append(round_block(n * c * block * INDEX_BYTES))
        return saved, rows + 2 * round_block(n * c * INDEX_BYTES)
    if method == "tt":
        d1, d2, d3 = tt_dims(dim)
        r = rank
        saved += [round_block(n * INDEX_BYTES)] * 3
        saved += [round_block(n * k * e) for k in (d1 * r, r * d2 * r, r * d3, d1 * d2 * r)]
        return saved, rows + round_block(n * d1 * d2 * r * e)
    raise ValueError(f"method {method!r}: computed rows are robe or tt")
