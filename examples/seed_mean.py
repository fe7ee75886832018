"""The seed article's text classifier: nn.Embedding, a mean over the sequence, nn.Linear.

    python -m examples.seed_mean     # estimate -> training in your own loop
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

SIZES = {
    "full": {"vocab": 1_000_000, "dim": 300, "batch": 64, "seq": 512},
    "test": {"vocab": 400_000, "dim": 128, "batch": 64, "seq": 256},
    "twin": {"vocab": 1000, "dim": 16, "batch": 4, "seq": 8},
}


class TextClassifier(nn.Module):
    def __init__(self, vocab: int, dim: int, classes: int = 4) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, dim)
        self.fc = nn.Linear(dim, classes)

    def forward(self, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits = self.fc(self.embedding(ids).mean(dim=1))
        return F.cross_entropy(logits.float(), labels)


def build_model(vocab: int = 1_000_000, dim: int = 300, **_: int) -> TextClassifier:
    return TextClassifier(vocab, dim)


def make_example(vocab: int = 1_000_000, batch: int = 64, seq: int = 512, **_: int) -> tuple:
    return torch.randint(0, vocab, (batch, seq)), torch.randint(0, 4, (batch,))


def full_model() -> TextClassifier:
    return build_model(**SIZES["full"])


def full_example() -> tuple:
    return make_example(**SIZES["full"])


if __name__ == "__main__":
    import sys

    from examples._demo import demo

    demo(sys.modules[__name__])
