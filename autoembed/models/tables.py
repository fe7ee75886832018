"""Which modules of a model are embedding tables: torch's nn.Embedding / nn.EmbeddingBag and
`autoembed.nn`'s drop-ins (a user's own model; the built-in `EmbeddingModel`'s tables are
`autoembed.nn` storages and go by `config.param_specs` instead)."""

from __future__ import annotations

from torch import nn

from autoembed import nn as ae_nn

__all__ = ["EMBEDDING_TYPES", "embedding_modules"]

EMBEDDING_TYPES: tuple[type[nn.Module], ...] = (
    nn.Embedding, nn.EmbeddingBag, ae_nn.Embedding, ae_nn.EmbeddingBag)


def embedding_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """(module path, module) of every embedding table in `model`, in module order."""
    return [(n, m) for n, m in model.named_modules() if isinstance(m, EMBEDDING_TYPES)]
