"""Price a TorchRec model's training step unsharded (`estimate_unsharded`) by the traced
estimate every user model gets, its KeyedJaggedTensors made traceable (`traceable`: how and
why, docs/torchrec.md, "Pricing"). The sharded path prices FBGEMM's fused kernels by formula
instead (`autoembed.torchrec.sharded`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from typing import Any

import torch.utils._pytree as pytree
from torch import nn

from autoembed.errors import ConfigError
from autoembed.torchrec.lib import require
from autoembed.torchrec.model import table_infos

__all__ = ["estimate_unsharded", "traceable", "build_model", "has_jagged"]


class _KJTSpec:
    """A KeyedJaggedTensor's tensors (faked by the tracer) and its sizes (kept)."""

    def __init__(self, kjt: Any) -> None:
        kjt.sync()
        self.tensors = [kjt.values(), kjt.lengths(), kjt.weights_or_none()]
        self.meta = (tuple(kjt.keys()), kjt.stride(), list(kjt.length_per_key()),
                     list(kjt.offset_per_key()))


def _kjt_flatten(s: _KJTSpec) -> tuple[list[Any], Any]:
    return list(s.tensors), s.meta


def _kjt_unflatten(children: Iterable[Any], meta: Any) -> Any:
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    values = list(children)
    keys, stride, lpk, opk = meta
    return KeyedJaggedTensor(keys=list(keys), values=values[0], lengths=values[1],
                             weights=values[2], stride=stride, length_per_key=list(lpk),
                             offset_per_key=list(opk))


class _BatchSpec:
    """torchrec.datasets.utils.Batch (dense, sparse KJT, labels)."""

    def __init__(self, batch: Any) -> None:
        self.parts = [batch.dense_features, _KJTSpec(batch.sparse_features), batch.labels]


def _batch_unflatten(children: Iterable[Any], _: Any) -> Any:
    from torchrec.datasets.utils import Batch

    values = list(children)
    return Batch(dense_features=values[0], sparse_features=values[1], labels=values[2])


pytree.register_pytree_node(_KJTSpec, _kjt_flatten, _kjt_unflatten)
pytree.register_pytree_node(_BatchSpec, lambda s: (list(s.parts), None), _batch_unflatten)


def _is_jagged(x: Any) -> bool:
    from torchrec.datasets.utils import Batch
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    return isinstance(x, (KeyedJaggedTensor, Batch))


def has_jagged(example: Any) -> bool:
    """Whether an example holds a KeyedJaggedTensor (or a torchrec Batch)."""
    import sys

    if "torchrec" not in sys.modules:
        return False
    return any(_is_jagged(x) for x in pytree.tree_leaves(example, is_leaf=_is_jagged))


def traceable(example: Any) -> Any:
    """`example` with each KJT (and torchrec Batch) replaced by a node the tracer can fake."""
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    def conv(x: Any) -> Any:
        if isinstance(x, KeyedJaggedTensor):
            return _KJTSpec(x)
        if _is_jagged(x):
            return _BatchSpec(x)
        return x

    return pytree.tree_map(conv, example, is_leaf=_is_jagged)


def build_model(model: nn.Module | Callable[[], nn.Module]) -> nn.Module:
    """The model, or what its factory returns (called outside fake tensors: a TorchRec
    collection built on the meta device allocates nothing)."""
    if isinstance(model, nn.Module):
        return model
    built = model()
    if not isinstance(built, nn.Module):
        raise ConfigError(f"model factory returned {type(built).__name__}, not an nn.Module")
    return built


def _renamed(est: Any, model: nn.Module) -> Any:
    """Tables named module.path.table_name (the trace names them by their nn.EmbeddingBag's
    path, ``...embedding_bags.t``)."""
    names = {}
    for t in table_infos(model):
        inner = "embedding_bags" if t.pooled else "embeddings"
        where = t.path + ("" if t.path == "" else ".")
        for prefix in (where, where + "collection."):
            names[f"{prefix}{inner}.{t.config.name}".lstrip(".")] = t.name
    return replace(est, tables=tuple(replace(t, name=names.get(t.name, t.name))
                                     for t in est.tables))


def estimate_unsharded(model: nn.Module | Callable[[], nn.Module], example: Any,
                       **kwargs: Any) -> Any:
    """`autoembed.estimate_model` of a TorchRec model (unsharded: its collections' tables
    are nn.EmbeddingBag / nn.Embedding trained by the optimizer named), `example` holding
    KeyedJaggedTensors; keyword arguments as `estimate_model`'s."""
    from autoembed.user.model.estimate import estimate_torch_model

    require()
    built = build_model(model)
    if isinstance(example, list):
        return max((estimate_unsharded(built, x, **kwargs) for x in example),
                   key=lambda e: e.device_total)
    return _renamed(estimate_torch_model(built, traceable(example), **kwargs), built)


def _kjts(example: Any) -> Iterator[Any]:
    """The example's KJTs (a torchrec Batch's sparse features), in pytree order."""
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    for x in pytree.tree_leaves(example, is_leaf=_is_jagged):
        kjt = x if isinstance(x, KeyedJaggedTensor) else getattr(x, "sparse_features", None)
        if kjt is not None:
            yield kjt


def example_ids(example: Any) -> Mapping[str, int]:
    """Feature name -> ids in the example's KJTs (summed over KJTs naming it)."""
    out: dict[str, int] = {}
    for kjt in _kjts(example):
        for k, n in zip(kjt.keys(), kjt.length_per_key(), strict=True):
            out[k] = out.get(k, 0) + int(n)
    return out


def batch_of(example: Any) -> int:
    """Samples per step: the stride of the example's first KJT."""
    kjt = next(_kjts(example), None)
    if kjt is None:
        raise ConfigError("the example holds no KeyedJaggedTensor; give the batch your model's "
                          "forward takes (its sparse features as a KJT)")
    return int(kjt.stride())
