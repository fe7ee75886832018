"""autoembed: find the best embedding-layer configuration under a GPU memory budget.

The public API mirrors the CLI. Heavy parts (torch models, Ray, MLflow) load on first use,
so `import autoembed` and `autoembed estimate` stay fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from autoembed.budget import Budget
from autoembed.config import EmbeddingConfig, TableConfig, load_config, save_config
from autoembed.errors import AutoembedError, ConfigError, DataError, UnsupportedError
from autoembed.memory import MemoryEstimate
from autoembed.trace import estimate

if TYPE_CHECKING:  # its signature is `SearchOptions`' (pipeline.search_options), seen by mypy too
    from autoembed.pipeline.driver import search

__version__ = "0.1.0"

__all__ = ["Budget", "EmbeddingConfig", "TableConfig", "MemoryEstimate", "AutoembedError",
           "ConfigError", "DataError", "UnsupportedError", "estimate", "estimate_model", "Example",
           "apply", "tables", "materialize", "load_config", "save_config", "build_model",
           "build_optimizer", "autocast", "quantize", "search", "train", "TrialStopped",
           "__version__"]

# name -> module that defines it, imported on first access (PEP 562).
_LAZY = {
    "build_model": "autoembed.models",
    "build_optimizer": "autoembed.models",
    "autocast": "autoembed.models.device_precision",
    "quantize": "autoembed.models",
    "train": "autoembed.training",
    "TrialStopped": "autoembed.user.report",
    # any user model; TorchRec's go through autoembed.torchrec (the one dispatch)
    "estimate_model": "autoembed.torchrec.public",
    "apply": "autoembed.torchrec.public",
    "tables": "autoembed.torchrec.public",
    "materialize": "autoembed.user.model.apply",
    "Example": "autoembed.example",
    # a search (Ray, Optuna and MLflow load only when it runs): every option in its signature
    "search": "autoembed.pipeline.driver",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'autoembed' has no attribute {name!r}")
