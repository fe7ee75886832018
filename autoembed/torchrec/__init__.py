"""TorchRec models in autoembed: a model holding `EmbeddingBagCollection` /
`EmbeddingCollection` modules is a user model whose tables are TorchRec tables (this
package's modules and what each gives: docs/ARCHITECTURE.md, the "TorchRec models" row;
docs/torchrec.md). TorchRec is optional (`AUTOEMBED_TORCHREC=1 bash scripts/setup.sh`);
nothing here imports it until a function needs it, and then a missing install is one
ConfigError naming that command.
"""

from __future__ import annotations

import importlib
from typing import Any

from autoembed.torchrec.settings import INSTALL, RankTopology, TorchRecTable, table_settings

__all__ = ["INSTALL", "RankTopology", "TorchRecTable", "table_settings", "available",
           "has_collections", "tables", "apply", "HashedIds", "constraints", "estimate_unsharded",
           "plan_model", "estimate_sharded", "export_torchrec"]

_LAZY = {
    "available": "autoembed.torchrec.lib",
    "has_collections": "autoembed.torchrec.lib",
    "tables": "autoembed.torchrec.model",
    "apply": "autoembed.torchrec.model",
    "HashedIds": "autoembed.torchrec.model",
    "constraints": "autoembed.torchrec.model",
    "estimate_unsharded": "autoembed.torchrec.unsharded",
    "plan_model": "autoembed.torchrec.planner",
    "estimate_sharded": "autoembed.torchrec.sharded",
    "export_torchrec": "autoembed.torchrec.export_code",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'autoembed.torchrec' has no attribute {name!r}")
