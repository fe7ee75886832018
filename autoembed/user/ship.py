"""Ship the user's code to every Ray node, and check each node runs the recorded copy.

Ray puts the driver's working directory on a local worker's path by accident; on a second
machine that hides a stale copy. So the code travels explicitly in Ray's `runtime_env`: each
recorded function's top-level package directory as a `py_modules` entry, or, for a module
that is a single file, its directory as the `working_dir`. Before a node's first trial,
`check_node` imports each recorded module there and compares the SHA-256 of its source with
the driver's record; a different copy is an error naming the module and both hashes.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from autoembed.errors import ConfigError
from autoembed.user.functions import FunctionRef, module_hash

__all__ = ["runtime_env", "check_node", "StaleCode", "EXCLUDES"]

# Never shipped from a working_dir: outputs, environments, VCS data, caches.
EXCLUDES = ["runs/", ".git/", ".venv/", "__pycache__/", "*.pyc", "mlruns/", ".pytest_cache/"]


class StaleCode(ConfigError):
    """A node imports a different copy of the user's code than the driver recorded."""


def _origin(module: str) -> tuple[str, Path]:
    """("py_modules" | "working_dir", path) that makes `module` importable elsewhere."""
    top = module.split(".")[0]
    mod = sys.modules.get(top) or importlib.import_module(top)
    paths = list(getattr(mod, "__path__", []) or [])
    if paths:
        return "py_modules", Path(paths[0]).resolve()
    file = getattr(mod, "__file__", None)
    if not file:
        raise ConfigError(f"module '{top}' has no file to ship to Ray workers; put the code "
                          "in a .py file or package")
    return "working_dir", Path(file).resolve().parent


def runtime_env(refs: Iterable[FunctionRef], base: Mapping[str, Any] | None = None
                ) -> dict[str, Any]:
    """`base` (a runtime_env) plus what ships the modules of `refs`. Packages installed in
    site-packages are not shipped (every node has its own install, checked by hash)."""
    env = dict(base or {})
    modules: list[str] = list(env.get("py_modules") or [])
    working = env.get("working_dir")
    for ref in refs:
        kind, path = _origin(ref.module)
        if "site-packages" in path.parts or "dist-packages" in path.parts:
            continue
        if kind == "py_modules":
            if str(path) not in modules:
                modules.append(str(path))
        elif working is None or Path(working).resolve() == path:
            working = str(path)
        else:
            raise ConfigError(f"{ref.spec}: its file lies in {path}, while other code ships "
                              f"from {working}; Ray ships one working directory: put the "
                              "modules in one directory or a package")
    if modules:
        env["py_modules"] = modules
    if working is not None:
        env["working_dir"] = working
        env["excludes"] = list(dict.fromkeys([*env.get("excludes", []), *EXCLUDES]))
    return env


def check_node(refs: Iterable[FunctionRef], node: str = "this node") -> None:
    """Import each recorded module here and compare its source hash (StaleCode if not)."""
    for ref in refs:
        try:
            mod = importlib.import_module(ref.module)
        except Exception as e:  # noqa: BLE001 - missing or broken copy on the node
            raise StaleCode(f"{ref.spec}: module '{ref.module}' does not import on {node} "
                            f"({type(e).__name__}: {e}); ship it with the search's "
                            "runtime_env") from None
        got = module_hash(mod)
        if got != ref.source_hash:
            raise StaleCode(f"{ref.spec}: {node} has another copy of '{ref.module}' (source "
                            f"sha256 {got[:12]}, the driver recorded {ref.source_hash[:12]}) "
                            f"at {getattr(mod, '__file__', '?')}; update it or let the "
                            "runtime_env ship it")
