"""A user's module for the sharded-runner tests (importable by spawned ranks): `slow_build`
sleeps before building (the SIGKILL test kills the driver meanwhile)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any


def slow_build(params: Mapping[str, Any]) -> Any:
    time.sleep(float(params.get("sleep", 120)))
    from examples.torchrec_dlrm import build

    return build(params)
