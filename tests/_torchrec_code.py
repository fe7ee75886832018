"""A user's module for the sharded-runner tests (importable by spawned ranks): `slow_build`
sleeps before building (the SIGKILL test kills the driver meanwhile); `recording_train`
appends the tables of the model its rank trains to `params["record"]`, then trains."""

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
