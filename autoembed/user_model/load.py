"""`pkg.module:name` specs (the CLI's --model / --example): import with the current directory
on sys.path, as `python -m` has it; every failure is one ConfigError line naming the flag."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from autoembed.errors import ConfigError

__all__ = ["load_object"]


def load_object(spec: str, flag: str) -> Any:
    """The object `spec` ("pkg.module:name", name may be dotted) names."""
    mod_name, sep, attr = spec.partition(":")
    if not sep or not mod_name or not attr:
        raise ConfigError(f"{flag} '{spec}': give pkg.module:name, e.g. "
                          "examples.seed_mean:build_model")
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        obj: Any = importlib.import_module(mod_name)
    except Exception as e:  # noqa: BLE001 - the user's module: any error is bad input
        text = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise ConfigError(f"{flag} '{spec}': module '{mod_name}' does not import "
                          f"({type(e).__name__}: {text}); run from the directory that holds "
                          "it or install it") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            from autoembed.errors import did_you_mean

            names = {n for n in dir(obj) if not n.startswith("_")}
            raise ConfigError(f"{flag} '{spec}': '{mod_name}' has no '{attr}'"
                              f"{did_you_mean(part, sorted(names))}")
        obj = getattr(obj, part)
    return obj
