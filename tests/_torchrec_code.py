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
