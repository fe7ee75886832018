"""One table shared by a user and an item projection (a two-tower recommender whose users
and items live in one id space), scored by a dot product.

    python -m examples.shared_table
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

SIZES = {
    "full": {"vocab": 5_000_000, "dim": 128, "hidden": 256, "batch": 4096},
    "test": {"vocab": 600_000, "dim": 64, "hidden": 128, "batch": 2048},
    "twin": {"vocab": 1000, "dim": 8, "hidden": 8, "batch": 8},
}


class TwoTower(nn.Module):
    def __init__(self, vocab: int, dim: int, hidden: int) -> None:
        super().__init__()
        self.ids = nn.Embedding(vocab, dim)  # users and items, one table
        self.user_proj = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, dim))
        self.item_proj = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, dim))

    def forward(self, users: torch.Tensor, items: torch.Tensor,
                clicked: torch.Tensor) -> torch.Tensor:
        u = self.user_proj(self.ids(users))
        i = self.item_proj(self.ids(items))
        score = (u * i).sum(-1)
        return F.binary_cross_entropy_with_logits(score.float(), clicked)


def build_model(vocab: int = 5_000_000, dim: int = 128, hidden: int = 256, **_: int) -> TwoTower:
    return TwoTower(vocab, dim, hidden)


def make_example(vocab: int = 5_000_000, batch: int = 4096, **_: int) -> dict[str, torch.Tensor]:
    return {"users": torch.randint(0, vocab, (batch,)), "items": torch.randint(0, vocab, (batch,)),
            "clicked": torch.randint(0, 2, (batch,)).float()}


def full_model() -> TwoTower:
    return build_model(**SIZES["full"])


def full_example() -> dict[str, torch.Tensor]:
    return make_example(**SIZES["full"])


if __name__ == "__main__":
    import sys

    from examples._demo import demo

    demo(sys.modules[__name__])
