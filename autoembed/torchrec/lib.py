"""TorchRec, imported on demand: `require()` returns the module or raises one line naming the
install command; `has_collections(model)` tells whether a model holds TorchRec tables without
importing TorchRec when it is not already loaded (a model built from TorchRec has loaded it)."""

from __future__ import annotations

import importlib
import sys
from types import ModuleType
from typing import Any

from autoembed.errors import ConfigError
from autoembed.torchrec.settings import INSTALL
from autoembed.user.model.load import mute_fx_notice

__all__ = ["require", "available", "has_collections", "collection_types"]


def available() -> bool:
    """TorchRec and FBGEMM import (the version pinned by scripts/setup.sh loads)."""
    try:
        require()
    except ConfigError:
        return False
    return True


def quiet() -> None:
    """Keep TorchRec's and torch's import- and plan-time chatter (warnings about how the
    planner was built, torch.fx's tracing notice) off the user's terminal."""
    import logging
    import warnings

    for name in ("torch.fx._symbolic_trace", "torchrec"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"torchrec\.")
    warnings.filterwarnings("ignore", message=r".*DistributedDataParallel.*")
    mute_fx_notice()


def require() -> ModuleType:
    """The `torchrec` module, or a ConfigError naming the install command."""
    quiet()
    try:
        return importlib.import_module("torchrec")
    except Exception as e:  # noqa: BLE001 - ImportError, or fbgemm's OSError (undefined symbol)
        raise ConfigError(f"TorchRec is not installed or does not load ({type(e).__name__}: "
                          f"{str(e).splitlines()[0] if str(e) else ''}); install it with "
                          f"{INSTALL} (torchrec 1.8.0 with fbgemm-gpu-cpu 1.8.0)") from None


def collection_types() -> tuple[type, ...]:
    """TorchRec's unsharded table collections (EmbeddingBagCollection, EmbeddingCollection)."""
    from torchrec.modules.embedding_modules import (
        EmbeddingBagCollection,
        EmbeddingCollection,
    )

    return (EmbeddingBagCollection, EmbeddingCollection)


def has_collections(model: Any) -> bool:
    """Whether `model` (an nn.Module) holds a TorchRec table collection."""
    if "torchrec" not in sys.modules or isinstance(model, type) or not hasattr(model, "modules"):
        return False  # a class is a factory: nothing built yet
    types = collection_types()
    return any(isinstance(m, types) for m in model.modules())
