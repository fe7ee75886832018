"""autoembed: find the best embedding-layer configuration under a GPU memory budget."""

from __future__ import annotations

from autoembed.config import EmbeddingConfig, TableConfig, load_config, save_config

__version__ = "0.1.0"

__all__ = [
    "EmbeddingConfig",
    "TableConfig",
    "load_config",
    "save_config",
    "__version__",
]
