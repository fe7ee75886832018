"""A guard Ray runs in every worker process (runtime_env `worker_process_setup_hook`): any
import of mlflow or optuna there raises ImportError and is logged, so a trial that opened
the study's stores (docs/contracts.md: only the driver writes them) fails and is seen to."""

from __future__ import annotations

import importlib.abc
import os
import sys
from pathlib import Path
from typing import Any

BLOCKED = ("mlflow", "optuna")
LOG_ENV = "AUTOEMBED_STORE_GUARD_LOG"


def _log(line: str) -> None:
    with Path(os.environ[LOG_ENV]).open("a") as fh:
        fh.write(f"{os.getpid()} {line}\n")


class _Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name.split(".")[0] in BLOCKED:
            _log(f"blocked {name}")
            raise ImportError(f"a trial worker imported {name}: workers never open the store")
        return None


def install() -> None:
    """Block the imports from here on; log the install and anything loaded before it."""
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
    _log("installed" + "".join(f" preloaded:{m}" for m in loaded))
    sys.meta_path.insert(0, _Block())
