"""DLRM-style click model: one nn.EmbeddingBag per sparse field (sum of the field's ids),
a bottom MLP for the dense features, all concatenated into a projector MLP.

    python -m examples.dlrm
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

SIZES = {
    "full": {"vocabs": [10_000_000, 2_000_000, 500_000, 100_000, 10_000, 1000], "dim": 64,
             "batch": 8192, "bag": 4},
    "test": {"vocabs": [800_000, 200_000, 50_000, 1000], "dim": 64, "batch": 2048, "bag": 4},
    "twin": {"vocabs": [100, 50], "dim": 8, "batch": 8, "bag": 2},
}
DENSE = 13


class DLRM(nn.Module):
    def __init__(self, vocabs: list[int], dim: int) -> None:
        super().__init__()
        self.bottom = nn.Sequential(nn.Linear(DENSE, 128), nn.ReLU(), nn.Linear(128, dim))
        self.fields = nn.ModuleList(nn.EmbeddingBag(v, dim, mode="sum") for v in vocabs)
        width = dim * (len(vocabs) + 1)
        self.top = nn.Sequential(nn.Linear(width, 256), nn.ReLU(), nn.Linear(256, 1))

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor,
                label: torch.Tensor) -> torch.Tensor:
        parts = [self.bottom(dense)]
        parts += [bag(sparse[f]) for f, bag in enumerate(self.fields)]
        logit = self.top(torch.cat(parts, dim=1)).squeeze(1)
        return F.binary_cross_entropy_with_logits(logit.float(), label)


def build_model(vocabs: list[int] | None = None, dim: int = 64, **_: object) -> DLRM:
    return DLRM(vocabs or SIZES["full"]["vocabs"], dim)  # type: ignore[arg-type]


def make_example(vocabs: list[int] | None = None, batch: int = 8192, bag: int = 4,
                 **_: object) -> dict[str, torch.Tensor]:
    vocabs = vocabs or SIZES["full"]["vocabs"]  # type: ignore[assignment]
    sparse = torch.stack([torch.randint(0, v, (batch, bag)) for v in vocabs])  # type: ignore[union-attr]
    return {"dense": torch.randn(batch, DENSE), "sparse": sparse,
            "label": torch.randint(0, 2, (batch,)).float()}


def full_model() -> DLRM:
    return build_model(**SIZES["full"])


def full_example() -> dict[str, torch.Tensor]:
    return make_example(**SIZES["full"])


if __name__ == "__main__":
    import sys

    from examples._demo import demo

    demo(sys.modules[__name__])
