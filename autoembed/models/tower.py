"""Feature interaction and the dense tower (Linear layers, ReLU between them)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["build_tower", "run_tower", "interact"]


def build_tower(
    in_width: int,
    hidden: tuple[int, ...],
    out: int,
    *,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> nn.ModuleList:
    """Linear layers in_width -> hidden... -> out (torch's default init)."""
    widths = (in_width, *hidden, out)
    return nn.ModuleList(nn.Linear(a, b, device=device, dtype=dtype)
                         for a, b in zip(widths, widths[1:], strict=False))


def run_tower(tower: nn.ModuleList, x: torch.Tensor) -> torch.Tensor:
    """ReLU after every layer but the last."""
    last = len(tower) - 1
    for i, layer in enumerate(tower):
        x = layer(x)
        if i < last:
            x = F.relu(x)
    return x


def interact(pooled: list[torch.Tensor], how: str) -> torch.Tensor:
    """Tower input from F pooled [B, D] vectors: `concat` -> [B, F*D]; `dot` (DLRM) -> the
    mean of the F vectors followed by their F(F-1)/2 pairwise dot products, i < j."""
    if how == "concat":
        return torch.cat(pooled, dim=1)
    stacked = torch.stack(pooled, dim=1)  # [B, F, D]
    n = stacked.shape[1]
    gram = torch.bmm(stacked, stacked.transpose(1, 2))  # [B, F, F]
    i, j = torch.triu_indices(n, n, offset=1, device=stacked.device)
    return torch.cat((stacked.mean(dim=1), gram[:, i, j]), dim=1)
