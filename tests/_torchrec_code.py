"""A user's module for the sharded-runner tests (importable by spawned ranks): `slow_build`
sleeps before building (the SIGKILL test kills the driver meanwhile); `recording_train`
appends the tables of the model its rank trains to `params["record"]`, then trains;
`small_build` / `small_batch` / `small_train`: two tables under a linear top, trained on
torchrec `Batch`es as the loop's params say (the rank guard's tests)."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any


def slow_build(params: Mapping[str, Any]) -> Any:
    time.sleep(float(params.get("sleep", 120)))
    from examples.torchrec_dlrm import build

    return build(params)


def recording_train(model: Any, params: Mapping[str, Any], report: Any) -> Any:
    """One JSON line per rank: each table's (name, global shape, bytes) as DMP holds it,
    named as autoembed names tables (`module.path.table_name`, + `.weight`); then the
    example's loop."""
    from examples.torchrec_dlrm import train

    def named(key: str) -> str:
        return key.replace(".collection.embedding_bags.", ".").replace(".embedding_bags.", ".")

    tables = [[named(name), list(t.size()),
               t.dtype.itemsize * t.size().numel()]
              for name, t in model.state_dict().items() if ".embedding_bags." in name]
    with open(params["record"], "a") as f:
        f.write(json.dumps(tables) + "\n")
    return train(model, params, report)


DRAWS: dict[str, float] = {}  # `drawing_build` / `drawing_train`: torch's first draw in each


def drawing_build(params: Mapping[str, Any]) -> Any:
    """One small table (on the meta device: DMP allocates it) after a draw of torch's
    generator, seeded by nothing here."""
    import torch
    from torchrec import EmbeddingBagCollection
    from torchrec.modules.embedding_configs import EmbeddingBagConfig

    DRAWS["build"] = torch.rand(1, device="cpu").item()  # not meta: priced on it
    return EmbeddingBagCollection(tables=[EmbeddingBagConfig(
        name="t", embedding_dim=4, num_embeddings=10, feature_names=["f"])],
        device=torch.device("meta"))


def ids_example(params: Mapping[str, Any]) -> Any:
    import torch
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    return KeyedJaggedTensor.from_lengths_sync(["f"], torch.arange(8) % 10,
                                               torch.ones(8, dtype=torch.int32))


def sum_loss(out: Any, example: Any) -> Any:
    return out.values().sum()


def drawing_train(model: Any, params: Mapping[str, Any], report: Any) -> float:
    import torch

    DRAWS["train"] = torch.rand(1).item()
    return 0.5


SMALL_TABLES = (("t", 10, "f"), ("u", 20, "g"))  # name, rows, feature; dim 4 each
SMALL_DENSE = 3  # dense features


def small_build(params: Mapping[str, Any]) -> Any:
    """Two tables (on the meta device: DMP allocates them) pooled beside `SMALL_DENSE`
    dense features into a linear top; the forward takes a torchrec `Batch`, returns the
    loss."""
    import torch
    from torch import nn
    from torchrec import EmbeddingBagCollection
    from torchrec.modules.embedding_configs import EmbeddingBagConfig

    class Small(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ebc = EmbeddingBagCollection(tables=[
                EmbeddingBagConfig(name=n, embedding_dim=4, num_embeddings=rows,
                                   feature_names=[f]) for n, rows, f in SMALL_TABLES],
                device=torch.device("meta"))
            self.top = nn.Linear(4 * len(SMALL_TABLES) + SMALL_DENSE, 1)

        def forward(self, batch: Any) -> Any:
            pooled = self.ebc(batch.sparse_features).values()
            return self.top(torch.cat([pooled, batch.dense_features], 1)).square().mean()

    return Small()


def small_batch(samples: int, ids: int = 1, seed: int = 0) -> Any:
    """`samples` rows: `ids` ids per feature each, dense features, labels."""
    import torch
    from torchrec.datasets.utils import Batch
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    g = torch.Generator().manual_seed(seed)
    n = len(SMALL_TABLES) * samples
    kjt = KeyedJaggedTensor.from_lengths_sync(
        [f for _, _, f in SMALL_TABLES], torch.randint(0, 10, (n * ids,), generator=g),
        torch.full((n,), ids, dtype=torch.int32))
    return Batch(dense_features=torch.randn(samples, SMALL_DENSE, generator=g),
                 sparse_features=kjt, labels=torch.zeros(samples))


def small_example(params: Mapping[str, Any]) -> Any:
    return small_batch(int(params.get("batch_size", 4)))


def small_train(model: Any, params: Mapping[str, Any], report: Any) -> float:
    """`params["steps"]` steps of `params["optimizer"]` (a torch.optim class name, default
    Adagrad) on the dense part, each on `small_batch(batch_size, ids)`; from step
    `params["grow_at"]` on, rank `params["grow_rank"]` alone trains on twice the samples;
    `params["autocast"]`: under CPU bf16 autocast. The gradients zeroed before each forward
    (after it where `params["zero_after"]`). A report after each step (none where
    `params["reports"]` is False)."""
    import contextlib

    import torch
    import torch.distributed as dist

    rank = dist.get_rank()
    dense = [p for p in model.parameters()
             if p.requires_grad and not hasattr(p, "_in_backward_optimizers")]
    opt = getattr(torch.optim, params.get("optimizer", "Adagrad"))(dense, lr=0.01)
    cast = (torch.autocast("cpu", dtype=torch.bfloat16) if params.get("autocast")
            else contextlib.nullcontext())
    for step in range(1, int(params.get("steps", 2)) + 1):
        samples = int(params.get("batch_size", 4))
        if step >= params.get("grow_at", 10**9) and rank == params.get("grow_rank", rank):
            samples *= 2
        if not params.get("zero_after"):
            opt.zero_grad()
        with cast:
            loss = model(small_batch(samples, int(params.get("ids", 1)), seed=step))
        if params.get("zero_after"):
            opt.zero_grad()
        loss.backward()
        opt.step()
        if params.get("reports", True):
            report(step=step, samples=step * samples, quality=0.5)
    return 0.5
