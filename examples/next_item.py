"""A next-item recommender whose forward returns logits, the common case: the loss lives in
the training loop. A user table and the user's recent items (an nn.EmbeddingBag, mean) go
through an MLP to scores over the whole catalog (a full softmax). Three losses a training
loop puts on those logits: `cross_entropy` (the next item), `bce` (multi-hot clicks) and
`mse` (ratings); `loss` is the first. The example is an `autoembed.Example`: the forward
gets the inputs (`kwargs`), the loss the targets. Price it with yours:

    autoembed estimate --model examples.next_item:full_model \\
        --example examples.next_item:full_example --loss examples.next_item:cross_entropy

    python -m examples.next_item
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import autoembed

SIZES: dict[str, dict[str, Any]] = {
    "full": {"users": 2_000_000, "items": 1_000_000, "dim": 64, "hidden": 256,
             "catalog": 50_000, "batch": 1024, "history": 20},
    "test": {"users": 300_000, "items": 200_000, "dim": 64, "hidden": 128,
             "catalog": 4000, "batch": 512, "history": 10},
    "twin": {"users": 100, "items": 100, "dim": 8, "hidden": 8, "catalog": 50, "batch": 8,
             "history": 3},
}
TARGETS = ("next", "clicked", "ratings")  # the target make_example(target=...) holds


class NextItem(nn.Module):
    def __init__(self, users: int, items: int, dim: int, hidden: int, catalog: int) -> None:
        super().__init__()
        self.users = nn.Embedding(users, dim)
        self.history = nn.EmbeddingBag(items, dim, mode="mean")
        self.mlp = nn.Sequential(nn.Linear(2 * dim, hidden), nn.ReLU())
        self.scores = nn.Linear(hidden, catalog)

    def forward(self, user: torch.Tensor, history: torch.Tensor) -> torch.Tensor:
        """Logits over the catalog."""
        return self.scores(self.mlp(torch.cat([self.users(user), self.history(history)], 1)))


def cross_entropy(output: torch.Tensor, targets: dict[str, torch.Tensor]) -> torch.Tensor:
    return F.cross_entropy(output, targets["next"])


def bce(output: torch.Tensor, targets: dict[str, torch.Tensor]) -> torch.Tensor:
    return F.binary_cross_entropy_with_logits(output, targets["clicked"])


def mse(output: torch.Tensor, targets: dict[str, torch.Tensor]) -> torch.Tensor:
    return F.mse_loss(output, targets["ratings"])


loss = cross_entropy
LOSSES = {"next": cross_entropy, "clicked": bce, "ratings": mse}


def build_model(users: int = 2_000_000, items: int = 1_000_000, dim: int = 64,
                hidden: int = 256, catalog: int = 50_000, **_: Any) -> NextItem:
    return NextItem(users, items, dim, hidden, catalog)


def make_example(users: int = 2_000_000, items: int = 1_000_000, catalog: int = 50_000,
                 batch: int = 1024, history: int = 20, target: str = "next",
                 **_: Any) -> autoembed.Example:
    """A batch: user ids and each user's recent items (the forward's), and the target one
    loss reads (the loss's)."""
    inputs = {"user": torch.randint(0, users, (batch,)),
              "history": torch.randint(0, items, (batch, history))}
    if target == "next":
        y = torch.randint(0, catalog, (batch,))
    elif target == "clicked":
        y = (torch.rand(batch, catalog) < 0.01).float()
    elif target == "ratings":
        y = torch.rand(batch, catalog) * 5
    else:
        raise ValueError(f"target '{target}': use one of {', '.join(TARGETS)}")
    return autoembed.Example(kwargs=inputs, targets={target: y})


def full_model() -> NextItem:
    return build_model(**SIZES["full"])


def full_example() -> autoembed.Example:
    return make_example(**SIZES["full"])


if __name__ == "__main__":
    import sys

    from examples._demo import demo

    demo(sys.modules[__name__])
