"""TorchRec's own DLRM (`torchrec.models.dlrm.DLRM` inside `DLRMTrain`) on synthetic
Criteo-shaped data: 13 dense features and 26 sparse fields with the cardinalities of Criteo's
Kaggle Display Advertising data (as published with Meta's DLRM), scaled by ``params["scale"]``
so the tables fit this machine (1.0: 33.8M rows in all; the largest field 10.1M).

    autoembed estimate --model examples.torchrec_dlrm:model \\
        --example examples.torchrec_dlrm:batch --world-size 2     # per rank, beside TorchRec

`build(params)`, `example(params)` and `train(model, params, report)` are the user's side of a
search (the shape of `examples/text_search.py`): `train` receives the model rewritten and, in
a sharded trial, wrapped by `DistributedModelParallel`; it steps the dense part with its own
optimizer (the tables' fused optimizer runs inside the backward) and reports validation
AUC. Needs TorchRec (`AUTOEMBED_TORCHREC=1 bash scripts/setup.sh`). A search over it, each
trial as 2 ranks (`examples/torchrec_dlrm_space.yaml`; docs/torchrec.md, "Search"):

    autoembed search --budget 2GB --space examples/torchrec_dlrm_space.yaml \\
        --model examples.torchrec_dlrm:build --example examples.torchrec_dlrm:example \\
        --train examples.torchrec_dlrm:train --loss examples.torchrec_dlrm:loss
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

# Criteo Kaggle (DAC) per-field cardinalities, C1..C26 (facebookresearch/dlrm's
# dlrm_data_pytorch.py counts of the Kaggle train.txt)
CRITEO_CARDINALITIES = (
    1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194, 27,
    14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572,
)
DENSE_FEATURES = 13
KEYS = tuple(f"cat_{i}" for i in range(len(CRITEO_CARDINALITIES)))
DEFAULTS = {"dim": 16, "scale": 0.01, "batch_size": 512, "lr": 0.05, "steps": 60,
            "seed": 0, "dense_arch": [64, None], "over_arch": [64, 1], "device": "meta"}
# sizes for the unsharded priced-right check (`autoembed.user.model.measure` layout)
SIZES = {"test": {"scale": 0.02, "batch_size": 2048, "dim": 16},
         "twin": {"scale": 0.0005, "batch_size": 64, "dim": 16}}
EVAL_EVERY = 20


def _p(params: Mapping[str, Any], key: str) -> Any:
    return params.get(key, DEFAULTS[key])


def cardinalities(scale: float) -> list[int]:
    """Each field's rows at `scale` (at least 1 row)."""
    return [max(1, math.ceil(n * scale)) for n in CRITEO_CARDINALITIES]


def table_configs(params: Mapping[str, Any]) -> list[Any]:
    from torchrec.modules.embedding_configs import EmbeddingBagConfig

    dim = int(_p(params, "dim"))
    return [EmbeddingBagConfig(name=f"t_{k}", embedding_dim=dim, num_embeddings=n,
                               feature_names=[k])
            for k, n in zip(KEYS, cardinalities(float(_p(params, "scale"))), strict=True)]


def build(params: Mapping[str, Any]) -> Any:
    """DLRMTrain over DLRM: the tables on ``params["device"]`` (default meta: DMP allocates
    each rank's shards), the dense part on the CPU."""
    from torchrec import EmbeddingBagCollection
    from torchrec.models.dlrm import DLRM, DLRMTrain

    torch.manual_seed(int(_p(params, "seed")))
    dim = int(_p(params, "dim"))
    dense = [int(x) if x is not None else dim for x in _p(params, "dense_arch")]
    ebc = EmbeddingBagCollection(tables=table_configs(params),
                                 device=torch.device(_p(params, "device")))
    return DLRMTrain(DLRM(ebc, dense_in_features=DENSE_FEATURES, dense_arch_layer_sizes=dense,
                          over_arch_layer_sizes=list(_p(params, "over_arch"))))


def _batch(batch_size: int, scale: float, seed: int) -> Any:
    """A synthetic batch: Zipf-like ids per field (a few rows take most lookups), log-normal
    dense features, labels from a fixed logistic model of both (so AUC can rise above 0.5)."""
    from torchrec.datasets.utils import Batch
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    g = torch.Generator().manual_seed(seed)
    rows = torch.tensor(cardinalities(scale), dtype=torch.float64)
    u = torch.rand(len(KEYS), batch_size, generator=g, dtype=torch.float64)
    ids = torch.minimum((rows[:, None] ** u).long() - 1, rows[:, None].long() - 1).clamp(min=0)
    dense = torch.log1p(torch.exp(torch.randn(batch_size, DENSE_FEATURES, generator=g)))
    signal = dense[:, :4].sum(1) - 2.0 + ((ids[:8] % 7) - 3).float().sum(0) * 0.15
    labels = (torch.rand(batch_size, generator=g) < torch.sigmoid(signal)).long()
    kjt = KeyedJaggedTensor.from_lengths_sync(
        keys=list(KEYS), values=ids.reshape(-1),
        lengths=torch.ones(len(KEYS) * batch_size, dtype=torch.int64))
    return Batch(dense_features=dense, sparse_features=kjt, labels=labels)


def example(params: Mapping[str, Any]) -> Any:
    """One training batch (a torchrec `Batch`) at this trial's batch size (per rank)."""
    return _batch(int(_p(params, "batch_size")), float(_p(params, "scale")),
                  int(_p(params, "seed")))


# the CLI's zero-argument factory and example: Criteo's full cardinalities (the tables on the
# meta device, so pricing allocates none of them), 4096 samples per rank
FULL = {"scale": 1.0, "batch_size": 4096}


def model() -> Any:
    return build(FULL)


def batch() -> Any:
    return example(FULL)


def build_model(**size: Any) -> Any:
    """The unsharded model with real CPU tables (what a plain CPU step trains)."""
    return build({**size, "device": "cpu"})


def make_example(**size: Any) -> Any:
    return example(size)


def loss(output: Any, example: Any) -> torch.Tensor:
    """DLRMTrain returns (loss, (loss, logits, labels))."""
    return output[0]


def _auc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """ROC AUC by the rank statistic (ties at their mean rank)."""
    order = torch.argsort(scores)
    ranks = torch.empty_like(scores, dtype=torch.float64)
    ranks[order] = torch.arange(1, len(scores) + 1, dtype=torch.float64)
    pos = labels.bool()
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    if n_pos == 0 or n_neg == 0:
        return 0.5
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


@torch.no_grad()
def validate(model: Any, params: Mapping[str, Any], rank: int = 0) -> float:
    model.eval()
    scores, labels = [], []
    for i in range(4):
        b = _batch(int(_p(params, "batch_size")), float(_p(params, "scale")),
                   10_000 + 97 * i + rank)
        _, (_, logits, lab) = model(b)
        scores.append(logits.float())
        labels.append(lab)
    model.train()
    return _auc(torch.cat(scores), torch.cat(labels))


def _dense_optimizer(model: Any, lr: float) -> torch.optim.Optimizer:
    """Adagrad over every parameter the tables' fused optimizer does not own."""
    params = [p for _, p in model.named_parameters()
              if p.requires_grad and not hasattr(p, "_in_backward_optimizers")]
    return torch.optim.Adagrad(params, lr=lr)


def train(model: Any, params: Mapping[str, Any], report: Any) -> dict[str, float]:
    """The user's loop: Adagrad on the dense part, the tables' fused optimizer in the
    backward, validation AUC every EVAL_EVERY steps."""
    import torch.distributed as dist

    rank = dist.get_rank() if dist.is_initialized() else 0
    opt = _dense_optimizer(model, float(_p(params, "lr")))
    bs, steps = int(_p(params, "batch_size")), int(_p(params, "steps"))
    scale, seed = float(_p(params, "scale")), int(_p(params, "seed"))
    for step in range(1, steps + 1):
        opt.zero_grad()  # the last step's gradients freed before the forward, as priced
        out = model(_batch(bs, scale, seed * 1_000_003 + step * 31 + rank))
        loss(out, None).backward()
        opt.step()
        if step % EVAL_EVERY == 0 or step == steps:
            with report.evaluating():
                q = validate(model, params, rank)
            report(step=step, samples=step * bs, quality=q)
    return {"quality": validate(model, params, rank)}
