"""`pkg.module:name` or `path/to/file.py:name` specs (the CLI's --model / --example /
--train): a module is imported with the current directory on sys.path, as `python -m` has
it; a file path is imported under the module name it has from the first directory above it
that is not a package (that directory goes on sys.path), so a resume or a Ray worker finds
it again by that name. Every failure is one ConfigError line naming the flag."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Any

from autoembed.errors import ConfigError

__all__ = ["load_object", "module_for_path"]


def _on_path(directory: str) -> None:
    if directory not in sys.path:
        sys.path.insert(0, directory)


def module_for_path(path: str | Path, flag: str, spec: str) -> str:
    """The module name of the .py file `path` (`examples/seed_mean.py` in a directory whose
    `examples/` has an `__init__.py`: `examples.seed_mean`), with the directory it is named
    from put on sys.path."""
    p = Path(path)
    if p.suffix != ".py":
        raise ConfigError(f"{flag} '{spec}': '{path}' is not a .py file; give "
                          "path/to/file.py:name or pkg.module:name")
    if not p.is_file():
        raise ConfigError(f"{flag} '{spec}': there is no file '{path}' (looked in "
                          f"{Path.cwd()}); give the path of the .py file that defines it")
    p = p.resolve()
    parts, top = [p.stem], p.parent
    while (top / "__init__.py").is_file() and top.parent != top:
        parts.insert(0, top.name)
        top = top.parent
    _on_path(str(top))
    return ".".join(parts)


def _import(mod_name: str, spec: str, flag: str) -> Any:
    try:
        return importlib.import_module(mod_name)
    except Exception as e:  # noqa: BLE001 - the user's module: any error is bad input
        text = str(e).strip().splitlines()[0] if str(e).strip() else ""
        missing = isinstance(e, ModuleNotFoundError) and e.name is not None and (
            mod_name == e.name or mod_name.startswith(f"{e.name}."))
        fix = ("run from the directory that holds it, give its file path "
               "(path/to/file.py:name) or install it" if missing
               else "fix the error in that module")
        raise ConfigError(f"{flag} '{spec}': module '{mod_name}' does not import "
                          f"({type(e).__name__}: {text}); {fix}") from None


def mute_fx_notice() -> None:
    """torch.fx prints a tracing notice once per process (an lru_cache) the first time a
    model asks whether it is being traced (TorchRec's modules do): spend it, muted, before
    the user's code runs, so it never reaches the user's terminal."""
    import logging

    from torch.fx import _symbolic_trace

    notice = getattr(_symbolic_trace, "is_fx_tracing_warning", None)
    if notice is None:
        return
    log = logging.getLogger("torch.fx._symbolic_trace")
    was, log.disabled = log.disabled, True
    try:
        notice()
    finally:
        log.disabled = was


def load_object(spec: str, flag: str) -> Any:
    """The object `spec` ("pkg.module:name" or "path/to/file.py:name"; name may be dotted)
    names (torch.fx's tracing notice muted first: `mute_fx_notice`)."""
    mute_fx_notice()
    mod_part, sep, attr = spec.rpartition(":")
    if not sep or not mod_part or not attr:
        raise ConfigError(f"{flag} '{spec}': give pkg.module:name or path/to/file.py:name, "
                          "e.g. examples.seed_mean:full_model or ./twotower.py:build")
    if mod_part.endswith(".py") or "/" in mod_part or os.sep in mod_part:  # a file's path
        mod_name = module_for_path(mod_part, flag, spec)
    else:
        mod_name = mod_part
        if "" not in sys.path:
            _on_path(os.getcwd())
    obj: Any = _import(mod_name, spec, flag)
    for part in attr.split("."):
        if not hasattr(obj, part):
            from autoembed.errors import did_you_mean

            names = {n for n in dir(obj) if not n.startswith("_")}
            raise ConfigError(f"{flag} '{spec}': '{mod_part}' has no '{attr}'"
                              f"{did_you_mean(part, sorted(names))}")
        obj = getattr(obj, part)
    return obj
