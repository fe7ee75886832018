"""Search the seed's text classifier (nn.Embedding, a mean over the sequence, nn.Linear) in
your own training loop, under a memory budget.

    python -m examples.text_search                       # a local search, then the pick
    autoembed search --budget 800MB --space examples/text_space.yaml \\
        --model examples.text_search:build --example examples.text_search:example \\
        --train examples.text_search:train

Everything here is the user's: the model, the batches (autoembed's synthetic-text loader,
100k tokens), the optimizer and the loop. autoembed prices each proposal's training step
before it runs (`build` + `example`), rewrites the embedding as the proposal says, and calls
`train`; the loop reports validation accuracy with `report(...)`.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

VOCAB, SEQ_LEN, CLASSES = 100_000, 64, 4
DATA = {"name": "synthetic-text", "vocab_size": VOCAB, "seq_len": SEQ_LEN,
        "num_classes": CLASSES, "rows": [20_000, 2_000, 2_000]}
EVAL_EVERY = 25


class TextClassifier(nn.Module):
    """The seed's model: the forward returns the loss, `logits` the class scores."""

    def __init__(self, vocab: int, dim: int, classes: int = CLASSES) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, dim)
        self.fc = nn.Linear(dim, classes)

    def logits(self, ids: torch.Tensor) -> torch.Tensor:
        return self.fc(self.embedding(ids).mean(dim=1))

    def forward(self, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.logits(ids).float(), labels)


@functools.lru_cache(maxsize=1)
def dataset() -> Any:
    """The data, loaded once per process."""
    from autoembed.data import DataSpec, load_dataset

    return load_dataset(DataSpec.from_dict(DATA, "examples.text_search"))


def batches(split: str, batch_size: int, seed: int = 0) -> Any:
    for b in dataset().batches(split, batch_size, seed=seed, shuffle=split == "train",
                               drop_last=split == "train"):
        yield b.features["tokens"], b.labels


def build(params: Mapping[str, Any]) -> TextClassifier:
    torch.manual_seed(params.get("seed", 0))
    return TextClassifier(VOCAB, params["dim"])


def example(params: Mapping[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """One batch as the forward takes it, at this trial's batch size."""
    return next(batches("train", params["batch_size"]))


@torch.no_grad()
def validate(model: TextClassifier) -> float:
    model.eval()
    right = total = 0
    for ids, labels in batches("valid", 512):
        right += int((model.logits(ids).argmax(1) == labels).sum())
        total += len(labels)
    model.train()
    return right / total


def train(model: TextClassifier, params: Mapping[str, Any], report: Any) -> dict[str, float]:
    """The user's loop: Adam, `steps` steps, validation accuracy every EVAL_EVERY steps."""
    opt = torch.optim.Adam(model.parameters(), lr=params["lr"])
    bs, steps, step, epoch = params["batch_size"], params["steps"], 0, 0
    while step < steps:
        for ids, labels in batches("train", bs, seed=epoch):
            opt.zero_grad()  # the last step's gradients freed before the forward, as priced
            loss = model(ids, labels)
            loss.backward()
            opt.step()
            step += 1
            if step % EVAL_EVERY == 0:
                with report.evaluating():  # not training time
                    q = validate(model)
                report(step=step, samples=step * bs, quality=q, loss=loss.item())
            if step == steps:
                break
        epoch += 1
    return {"quality": validate(model)}


if __name__ == "__main__":
    import autoembed

    result = autoembed.search(budget="800MB", model=build, example=example, train=train,
                              space="examples/text_space.yaml", executor="local")
    print(result)
