"""A text classifier whose MLP blocks run under torch.utils.checkpoint (recomputed in the
backward instead of saving their activations).

    python -m examples.checkpointed
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

SIZES = {
    "full": {"vocab": 2_000_000, "dim": 256, "blocks": 4, "batch": 256, "seq": 256},
    "test": {"vocab": 400_000, "dim": 128, "blocks": 3, "batch": 64, "seq": 128},
    "twin": {"vocab": 1000, "dim": 16, "blocks": 2, "batch": 4, "seq": 8},
}


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mlp(self.norm(x))


class CheckpointedClassifier(nn.Module):
    def __init__(self, vocab: int, dim: int, blocks: int, classes: int = 4) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim) for _ in range(blocks))
        self.head = nn.Linear(dim, classes)

    def forward(self, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        x = self.embedding(ids)
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False)
        return F.cross_entropy(self.head(x.mean(1)).float(), labels)


def build_model(vocab: int = 2_000_000, dim: int = 256, blocks: int = 4,
                **_: int) -> CheckpointedClassifier:
    return CheckpointedClassifier(vocab, dim, blocks)


def make_example(vocab: int = 2_000_000, batch: int = 256, seq: int = 256,
                 **_: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randint(0, vocab, (batch, seq)), torch.randint(0, 4, (batch,))


def full_model() -> CheckpointedClassifier:
    return build_model(**SIZES["full"])


def full_example() -> tuple[torch.Tensor, torch.Tensor]:
    return make_example(**SIZES["full"])


if __name__ == "__main__":
    import sys

    from examples._demo import demo

    demo(sys.modules[__name__])
