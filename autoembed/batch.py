"""`Batch`: what the data stage yields and the model consumes (the data/model contract)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["Batch", "PAD_ID", "MISSING_ID"]

# Text: token id 0 is padding; real tokens are 1..V-1 (V counts the padding row).
PAD_ID = 0
# CTR multi-hot bags of different lengths are right-padded with -1 to a [B, L] matrix.
MISSING_ID = -1


@dataclass(frozen=True)
class Batch:
    """One mini-batch.

    features: field name -> int64 tensor [B, L]. CTR: one column per id in the bag (L = 1 for
        one-hot), right-padded with MISSING_ID; ids in [0, vocab_size). Text: one field
        (the table's name) holding token ids [B, seq_len], PAD_ID for padding.
    labels: CTR float32 [B] in {0, 1}; text int64 [B] class indices.
    """

    features: dict[str, torch.Tensor]
    labels: torch.Tensor

    @property
    def size(self) -> int:
        return int(self.labels.shape[0])

    def take(self, positions: torch.Tensor) -> Batch:
        """The rows at `positions` (int64 [n], in that order), as new tensors."""
        return Batch({k: v.index_select(0, positions) for k, v in self.features.items()},
                     self.labels.index_select(0, positions))

    @staticmethod
    def concat(parts: list[Batch]) -> Batch:
        """The rows of `parts`, one after another (same fields in each)."""
        if len(parts) == 1:
            return parts[0]
        return Batch({k: torch.cat([p.features[k] for p in parts]) for k in parts[0].features},
                     torch.cat([p.labels for p in parts]))

    def to(self, device: torch.device | str) -> Batch:
        return Batch({k: v.to(device) for k, v in self.features.items()}, self.labels.to(device))
