"""Embedding tables (one module per field, or one shared) and their pooled lookups.

Pooling of a field's [B, L] ids into [B, D]:

* ``mean`` / ``sum``: `F.embedding_bag`, so [B, L, D] is never materialised.
  - Text, identity id map: the ids go in with ``padding_idx=PAD_ID`` (pads out of the mean
    and the gradient; row PAD_ID starts at zero and never trains).
  - Otherwise missing positions (CTR: ids < 0; text under hash/QR: PAD_ID) form a mask.
    Dense gradients: ``mode="sum"`` with the mask as ``per_sample_weights``, divided by the
    bag size for the mean (fixed shapes: no host sync, runs under fake tensors). Sparse
    gradients: the mask selects the real lookups, so missing positions touch no row (a
    zero-weight lookup of row 0 would still move it under SparseAdam); under fake tensors
    every position is looked up instead (same shapes; fake gradients have no rows).
* ``idf`` (text, identity id map): ``mode="sum"`` weighted by each token's idf (the table's
  ``idf`` buffer, `autoembed.models.idf`), divided by the weights' sum.
* ``naive``: `F.embedding` to [B, L, D], then the mean over dim 1 (text: over all S
  positions, pad rows zero; CTR: over the bag). Checkpointing this block saves little
  (docs/contracts.md#checkpointing-after-mean-pooling).

Each table is its compression's `autoembed.nn` storage (layout and id -> row math; shapes
from `autoembed.config.param_specs`) plus pooling. QR under mean/sum pools each part first
and combines the pooled vectors, as DLRM's ``QREmbeddingBag`` (exact for one-hot fields);
naive pooling combines per lookup. A table whose own dim differs from the config's gets
``proj`` (Linear d -> D, no bias) after pooling.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch._subclasses.fake_tensor import is_fake

from autoembed.batch import PAD_ID
from autoembed.models.checkpointing import checkpointed
from autoembed.nn.hashing import qr_indices
from autoembed.nn.seed_record import SeedRecorded
from autoembed.nn.storage import _QR, PackedWeights, _Plain, _Storage

__all__ = ["LookupSpec", "PackedWeights", "TableModule", "PlainTable", "QRTable", "WideTable"]


@dataclass(frozen=True)
class LookupSpec:
    """How a table pools: `pooling` mean/sum/naive/idf; `sparse` table gradients; `text` task
    (pads are PAD_ID, naive is the plain mean); `checkpoint` the naive lookup block."""

    pooling: str
    sparse: bool
    text: bool
    checkpoint: bool = False


class TableModule(SeedRecorded, PackedWeights):
    """Base class: weight access (trainable or packed for serving) and pooling helpers.
    A table subclasses its compression's `autoembed.nn` storage too (layout and id -> row
    math in one place; the host-cached table excepted) and calls the storage's `__init__`
    instead of this one's; its own initialisation is its `reset_parameters`. Its state_dict
    records the storage's `hash_seed` as an `autoembed.nn` layer's does (`SeedRecorded`)."""

    draws_init = False  # the storages' N(0, 1) draw is replaced by reset_parameters

    def __init__(self, spec: LookupSpec) -> None:
        super().__init__()
        self.spec = spec

    # ----------------------------------------------------------------- lookups
    def _rows(
        self, name: str, idx: torch.Tensor, valid: torch.Tensor | None, pad: int | None
    ) -> torch.Tensor:
        """[B, L] rows -> [B, L, D], zero where `valid` is False."""
        if name in self.packed:
            out = self.unpacked(name, idx)
            mask = valid if pad is None else idx != pad
            return out if mask is None else out * mask.unsqueeze(-1).to(out.dtype)
        w = getattr(self, name)
        sparse = self.spec.sparse
        if valid is None:
            return F.embedding(idx, w, padding_idx=pad, sparse=sparse)
        if sparse and not is_fake(idx):
            b, n = idx.shape
            pos = valid.reshape(-1).nonzero().squeeze(1)
            got = F.embedding(idx.reshape(-1)[pos], w, sparse=True)
            return got.new_zeros((b * n, w.shape[1])).index_copy(0, pos, got).view(b, n, -1)
        return F.embedding(idx, w, sparse=sparse) * valid.unsqueeze(-1).to(w.dtype)

    def _rows_many(
        self, name: str, idxs: list[torch.Tensor], valids: list[torch.Tensor]
    ) -> list[torch.Tensor]:
        """`_rows` of several fields in one lookup (one gradient for a shared table)."""
        if len(idxs) == 1:
            return [self._rows(name, idxs[0], valids[0], None)]
        flat = torch.cat([i.reshape(1, -1) for i in idxs], dim=1)
        ok = torch.cat([v.reshape(1, -1) for v in valids], dim=1)
        rows = self._rows(name, flat, ok, None)[0]
        parts = rows.split([i.numel() for i in idxs])
        return [r.view(*i.shape, -1) for r, i in zip(parts, idxs, strict=True)]

    def _bag_padded(self, name: str, idx: torch.Tensor, pad: int) -> torch.Tensor:
        """Mean or sum of each [B, S] row's ids other than `pad` (row `pad` is padding)."""
        if name in self.packed:
            return self._bags(name, [idx], [idx != pad])[0]
        w = getattr(self, name)
        return F.embedding_bag(
            idx, w, mode=self.spec.pooling, sparse=self.spec.sparse, padding_idx=pad
        )

    def _bags(
        self, name: str, idxs: list[torch.Tensor], valids: list[torch.Tensor]
    ) -> list[torch.Tensor]:
        """Mean or sum (spec.pooling) of the valid rows of each bag: per field [B, L_f] ->
        [B, D], all fields in one `embedding_bag` call (so a shared table gets one gradient)."""
        mode = self.spec.pooling
        if name in self.packed:
            out = []
            for idx, valid in zip(idxs, valids, strict=True):
                total = self._rows(name, idx, valid, None).sum(dim=1)
                if mode == "mean":
                    total = total / valid.sum(dim=1, keepdim=True).clamp(min=1).to(total.dtype)
                out.append(total)
            return out
        w = getattr(self, name)
        sparse = self.spec.sparse
        counts = torch.cat([v.sum(dim=1) for v in valids])
        if sparse and not is_fake(idxs[0]):
            # real lookups only: one sparse-gradient row per real lookup
            flat = torch.cat([i[v] for i, v in zip(idxs, valids, strict=True)])
            offsets = torch.cumsum(counts, 0) - counts
            return list(
                F.embedding_bag(flat, w, offsets, mode=mode, sparse=True).split(
                    [i.shape[0] for i in idxs]
                )
            )
        # fixed shape: every position is looked up
        flat = torch.cat([i.reshape(-1) for i in idxs])
        starts, offsets_list = 0, []
        for i in idxs:
            b, n = i.shape
            offsets_list.append(torch.arange(starts, starts + b * n, n, device=i.device))
            starts += b * n
        offsets = torch.cat(offsets_list)
        if sparse:
            # fake tensors only: the values do not exist, so missing positions need no
            # weights (torch 2.13's meta sparse backward rejects per_sample_weights)
            pooled = F.embedding_bag(flat, w, offsets, mode=mode, sparse=True)
        else:
            # missing positions weigh 0; the mean divides by the real bag size
            weights = torch.cat([v.reshape(-1) for v in valids]).to(w.dtype)
            pooled = F.embedding_bag(flat, w, offsets, mode="sum", per_sample_weights=weights)
            if mode == "mean":
                pooled = pooled / counts.clamp(min=1).unsqueeze(1).to(pooled.dtype)
        return list(pooled.split([i.shape[0] for i in idxs]))

    def _pool_rows(self, rows: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
        """Naive pooling of [B, L, D]: text the plain mean, CTR the mean over valid ids."""
        if self.spec.text or valid is None:
            return rows.mean(dim=1)
        return rows.sum(dim=1) / valid.sum(dim=1, keepdim=True).clamp(min=1).to(rows.dtype)

    def _masked(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(non-negative ids, valid mask): CTR drops ids < 0, text drops PAD_ID."""
        if self.spec.text:
            return ids, ids != PAD_ID
        return ids.clamp(min=0), ids >= 0

    def _maybe_checkpoint(self, fn: Callable[..., Any], *args: object) -> Any:
        """`fn(*args)`, checkpointed when the spec says (`fn` returns a tensor or a list)."""
        return checkpointed(fn, *args) if self.spec.checkpoint else fn(*args)


class PlainTable(TableModule, _Plain):
    """The `autoembed.nn` plain storage (none / hash / shared / mixed_dim): one ``weight``
    [rows, dim], ids hashed into `buckets` rows when given (`_Plain._map`), rows projected to
    `out_dim` by ``proj`` when `dim` differs (`_Plain._project`); `vocab` (default `rows`)
    is the number of ids. Rows start N(0, 1/dim), the text padding row at zero."""

    def __init__(
        self,
        rows: int,
        dim: int,
        out_dim: int,
        spec: LookupSpec,
        *,
        buckets: int | None = None,
        seed: int = 0,
        vocab: int | None = None,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        _Storage.__init__(self, rows if vocab is None else vocab, out_dim,
                          {"device": device, "dtype": dtype})
        self.spec = spec
        self._plain(rows, dim, buckets, seed, proj=dim != out_dim)
        self.reset_parameters()
        if spec.pooling == "idf":
            # each row's weight in the bag (`models.idf.install_idf` writes the data's); until
            # then 1, with padding 0: the mean
            idf = torch.ones(rows, device=device, dtype=dtype)
            idf[PAD_ID] = 0
            self.register_buffer("idf", idf)

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Rows of N(0, 1/dim); with text padding in place, row PAD_ID zero."""
        self.weight.normal_(0.0, 1.0 / math.sqrt(self.weight.shape[1]))
        if self.pads_in_place:
            self.weight[PAD_ID].zero_()

    @property
    def pads_in_place(self) -> bool:
        """Text ids index rows unchanged, so row PAD_ID is the padding row."""
        return self.spec.text and self.buckets is None

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Pooled [B, out_dim] of one field's [B, L] ids."""
        return self.forward_many([ids])[0]

    def forward_many(self, ids: list[torch.Tensor]) -> list[torch.Tensor]:
        """Pooled [B, out_dim] of several fields' ids, looked up together (shared table)."""
        pooled: list[torch.Tensor]
        if self.pads_in_place:
            (only,) = ids  # text: one field
            if self.spec.pooling == "naive":
                pooled = [self._maybe_checkpoint(self._naive_padded, only)]
            elif self.spec.pooling == "idf":
                pooled = [self._bag_idf(only)]
            else:
                pooled = [self._bag_padded("weight", only, PAD_ID)]
        else:
            idxs, valids = [], []
            for field_ids in ids:
                idx, valid = self._masked(field_ids)
                idxs.append(self._map(idx))
                valids.append(valid)
            if self.spec.pooling == "naive":
                pooled = self._maybe_checkpoint(self._naive, idxs, valids)
            else:
                pooled = self._bags("weight", idxs, valids)
        return [self._project(p) for p in pooled]

    def _bag_idf(self, ids: torch.Tensor) -> torch.Tensor:
        """The idf-weighted mean of each [B, S] row's rows (padding and OOV weigh 0)."""
        idf = self.idf
        assert isinstance(idf, torch.Tensor)  # a buffer under pooling idf
        iw = idf[ids]
        if "weight" in self.packed:
            total = (self._rows("weight", ids, None, PAD_ID) * iw.unsqueeze(-1)).sum(dim=1)
        else:
            total = F.embedding_bag(ids, self.weight, mode="sum", per_sample_weights=iw,
                                    sparse=self.spec.sparse, padding_idx=PAD_ID)
        return total / iw.sum(dim=1, keepdim=True).clamp(min=torch.finfo(iw.dtype).tiny)

    def _naive_padded(self, ids: torch.Tensor) -> torch.Tensor:
        # the seed's baseline: F.embedding then the plain mean over the S positions
        return self._rows("weight", ids, None, PAD_ID).mean(dim=1)

    def _naive(self, idxs: list[torch.Tensor], valids: list[torch.Tensor]) -> list[torch.Tensor]:
        rows = self._rows_many("weight", idxs, valids)
        return [self._pool_rows(r, v) for r, v in zip(rows, valids, strict=True)]


class WideTable(PlainTable):
    """The wide part of one field (wide & deep): `width` weights per id (1 for ctr, one per
    class for text), pooled like the deep tables and added to the logits. Starts at zero
    (building it draws nothing, so the deep part of a wide model is the same as without
    it); served unquantized (a 1-value row gains nothing). Built as a `PlainTable` whose
    dim and out_dim are the width."""

    quantizable = False

    @torch.no_grad()
    def reset_parameters(self) -> None:
        self.weight.zero_()


class QRTable(TableModule, _QR):
    """Quotient-remainder table (Shi et al., 2019): the `autoembed.nn` qr storage
    (q_weight [ceil(V/m), Dq], r_weight [m, Dq], `_combine`); with `out_dim` other than
    `dim`, ``proj`` (Linear dim -> out_dim, no bias) after combining."""

    def __init__(
        self,
        vocab: int,
        collisions: int,
        dim: int,
        operation: str,
        spec: LookupSpec,
        *,
        out_dim: int | None = None,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        _QR.__init__(self, vocab, dim, {"device": device, "dtype": dtype},
                     qr_collisions=collisions, qr_operation=operation)
        self.spec = spec
        self.proj = None if out_dim in (None, dim) else nn.Linear(
            dim, out_dim, bias=False, device=device, dtype=dtype)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Rows of std 1/sqrt(dim) once combined (mult: r rows near 1, so q * r starts near q)."""
        std = 1.0 / math.sqrt(self.dim)
        if self.op == "mult":
            self.q_weight.normal_(0.0, std)
            self.r_weight.normal_(1.0, std)
        elif self.op == "add":
            self.q_weight.normal_(0.0, std / math.sqrt(2.0))
            self.r_weight.normal_(0.0, std / math.sqrt(2.0))
        else:
            self.q_weight.normal_(0.0, std)
            self.r_weight.normal_(0.0, std)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        idx, valid = self._masked(ids)
        q, r = qr_indices(idx, self.m)
        if self.spec.pooling == "naive":
            out = self._maybe_checkpoint(self._naive, q, r, valid)
        else:
            pq = self._bags("q_weight", [q], [valid])[0]
            pr = self._bags("r_weight", [r], [valid])[0]
            out = self._combine(pq, pr)
        return out if self.proj is None else self.proj(out)

    def _naive(self, q: torch.Tensor, r: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        rows = self._combine(
            self._rows("q_weight", q, valid, None), self._rows("r_weight", r, valid, None)
        )
        return self._pool_rows(rows, valid)
