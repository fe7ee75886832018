"""Tables whose rows are computed from shared parameters (ROBE, tensor-train), not stored.

`ComputedRowsTable.forward` pools a field's ids as the stored tables do
(`autoembed.models.embedding`), but computes every position's row ([B, L, D] exists under
every pooling) and masks the missing ones, which then add exactly zero to the gradient.
Gradients are dense over the parameters whatever `spec.sparse` says; these tables are not
quantized for serving.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from autoembed.models.embedding import TableModule

__all__ = ["ComputedRowsTable", "projection"]


def projection(
    dim: int, out_dim: int | None, device: torch.device | str, dtype: torch.dtype
) -> nn.Linear | None:
    """``proj`` (Linear dim -> out_dim, no bias) of a table whose dim is not the model's."""
    if out_dim is None or out_dim == dim:
        return None
    return nn.Linear(dim, out_dim, bias=False, device=device, dtype=dtype)


class ComputedRowsTable(TableModule):
    """Base class of a table that also subclasses its compression's `autoembed.nn` storage,
    whose `rows(idx)` ([...] int64 ids -> [..., D]) computes the rows; `field_rows` is field
    f's (the same for a table of one field)."""

    quantizable = False
    proj: nn.Linear | None  # set by every subclass (a class default would shadow the module)
    rows: Callable[..., torch.Tensor]  # the storage's (a definition would shadow it)

    def field_rows(self, idx: torch.Tensor, field: int) -> torch.Tensor:
        return self.rows(idx)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Pooled [B, D] of one field's [B, L] ids."""
        return self.forward_many([ids])[0]

    def forward_many(self, ids: list[torch.Tensor]) -> list[torch.Tensor]:
        """Pooled [B, D] of fields 0, 1, ... (a table serving several fields)."""
        out = []
        for f, field_ids in enumerate(ids):
            idx, valid = self._masked(field_ids)
            if self.spec.pooling == "naive":
                out.append(self._maybe_checkpoint(self._pooled, idx, valid, f))
            else:
                out.append(self._pooled(idx, valid, f))
        return out if self.proj is None else [self.proj(o) for o in out]

    def _pooled(self, idx: torch.Tensor, valid: torch.Tensor, field: int) -> torch.Tensor:
        rows = self.field_rows(idx, field)
        rows = rows * valid.unsqueeze(-1).to(rows.dtype)
        if self.spec.pooling == "naive":
            return self._pool_rows(rows, valid)
        total = rows.sum(dim=1)
        if self.spec.pooling == "mean":
            total = total / valid.sum(dim=1, keepdim=True).clamp(min=1).to(total.dtype)
        return total
