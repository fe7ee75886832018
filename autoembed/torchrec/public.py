"""The public `autoembed.tables`, `estimate_model` and `apply`, for any user model: one with
TorchRec collections (or KJT examples) goes through `autoembed.torchrec`, every other model
through `autoembed.user.model` unchanged. This is the one place that decides (the package's
`__init__` points those three names here)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autoembed.errors import ConfigError

__all__ = ["tables", "estimate_model", "apply", "is_torchrec"]


def is_torchrec(model: Any, example: Any = None) -> bool:
    """Whether a model (or its example) is TorchRec's: it holds an EmbeddingBagCollection /
    EmbeddingCollection, or the example holds a KeyedJaggedTensor."""
    from autoembed.torchrec.lib import has_collections
    from autoembed.torchrec.unsharded import has_jagged

    return has_collections(model) or (example is not None and has_jagged(example))


def tables(model: Any) -> tuple[Any, ...]:
    """The model's tables: TorchRec tables (``module.path.table_name``), then every
    nn.Embedding / nn.EmbeddingBag outside the collections (by module path)."""
    from autoembed.user.model.apply import tables as torch_tables

    if not is_torchrec(model):
        try:
            return torch_tables(model)
        except ConfigError as e:  # name TorchRec's modules too
            if "has no nn.Embedding" not in str(e):
                raise
            raise ConfigError(f"model {type(model).__name__} has no nn.Embedding or "
                              "nn.EmbeddingBag, and no TorchRec EmbeddingBagCollection or "
                              "EmbeddingCollection; autoembed rewrites embedding tables") \
                from None
    from autoembed.torchrec.model import collections
    from autoembed.torchrec.model import tables as torchrec_tables

    inside = tuple(p + "." if p else "" for p, _ in collections(model))
    try:
        plain = [t for t in torch_tables(model) if not t.name.startswith(inside)
                 and ".embedding_bags." not in t.name and ".embeddings." not in t.name]
    except ConfigError:
        plain = []
    return (*torchrec_tables(model), *plain)


def estimate_model(model: Any, example: Any, **kwargs: Any) -> Any:
    """The one `estimate_model` (the API's and the CLI's): `user.model.estimate_torch_model`;
    a TorchRec model's KJTs made traceable (`autoembed.torchrec.estimate_unsharded`)."""
    from autoembed.user.model.estimate import estimate_torch_model as torch_estimate

    if is_torchrec(model, example):
        from autoembed.torchrec.unsharded import estimate_unsharded

        return estimate_unsharded(model, example, **kwargs)
    return torch_estimate(model, example, **kwargs)


def _torchrec_settings(config: Any) -> bool:
    from autoembed.torchrec.settings import TorchRecTable

    if isinstance(config, Mapping):
        config = list(config.values())
    return isinstance(config, (list, tuple)) and all(
        isinstance(c, (TorchRecTable, Mapping)) for c in config)


def apply(model: Any, config: Any, **kwargs: Any) -> Any:
    """`autoembed.user.model.apply` (an EmbeddingConfig); TorchRec settings (a list of
    `TorchRecTable`s or their dicts) rewrite a TorchRec model (`autoembed.torchrec.apply`)."""
    if _torchrec_settings(config):
        from autoembed.torchrec.model import apply as torchrec_apply

        return torchrec_apply(model, config, **kwargs)
    from autoembed.user.model.apply import apply as torch_apply

    return torch_apply(model, config, **kwargs)
