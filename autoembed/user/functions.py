"""The user's functions (`build`, `example`, `train`) as records a resume can find again.

A function is recorded as `module:qualname` with the SHA-256 of its module's source (the
whole file: a helper the function calls changes results as much as the function itself).
A function a later process could not import by that name is refused with one line saying
why: a lambda, a function nested in another, one defined in `__main__` (a script run as
`python my_search.py`, or a notebook cell), a `functools.partial` or other callable object
without a name, or a name in its module that holds another object.

Strings "pkg.module:name" are resolved with the current directory on `sys.path`, as
`python -m` has it. Every failure is a `ConfigError` (exit 2) naming the role and the fix.
"""

from __future__ import annotations

import hashlib
import inspect
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from autoembed.errors import ConfigError

__all__ = ["FunctionRef", "record_function", "resolve_function", "check_unchanged",
           "module_hash"]


@dataclass(frozen=True)
class FunctionRef:
    """How a study remembers a user function: where it lives and what its module held."""

    module: str
    qualname: str
    source_hash: str  # sha256 hex of the module's source text

    @property
    def spec(self) -> str:
        return f"{self.module}:{self.qualname}"

    def to_dict(self) -> dict[str, str]:
        return {"module": self.module, "qualname": self.qualname,
                "source_hash": self.source_hash}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> FunctionRef:
        return cls(str(raw["module"]), str(raw["qualname"]), str(raw["source_hash"]))


def module_hash(module: ModuleType) -> str:
    """SHA-256 of the module's source text (what each Ray node checks before its first
    trial); ConfigError when the module has no readable source."""
    try:
        text = inspect.getsource(module)
    except (OSError, TypeError):
        raise ConfigError(f"module '{module.__name__}' has no source file autoembed can read; "
                          "put the function in a .py file on the import path") from None
    return hashlib.sha256(text.encode()).hexdigest()


def record_function(fn: Any, role: str) -> FunctionRef:
    """The record of `fn` (role: "model", "example" or "train", for the message), or a
    ConfigError saying why a resume could not find it."""
    if not callable(fn):
        raise ConfigError(f"{role} = {fn!r}: must be a function")
    name = getattr(fn, "__qualname__", None)
    mod_name = getattr(fn, "__module__", None)
    if not isinstance(name, str) or not isinstance(mod_name, str):
        raise ConfigError(f"{role} = {fn!r}: a callable without a module and name (a "
                          "functools.partial or an object) cannot be found again on resume; "
                          "pass a function defined at the top level of a module")
    where = f"{role} = {mod_name}:{name}"
    if name == "<lambda>" or name.endswith(".<lambda>"):
        raise ConfigError(f"{where}: a lambda cannot be found again on resume; define it with "
                          "def at the top level of a module")
    if "<locals>" in name:
        raise ConfigError(f"{where}: a function nested in another cannot be found again on "
                          "resume; move it to the top level of its module")
    if mod_name == "__main__":
        raise ConfigError(f"{where}: a function defined in the script being run or in a "
                          "notebook cannot be found again on resume (or on a Ray worker); "
                          "move it to a module and import it from there")
    module = sys.modules.get(mod_name)
    if module is None:
        raise ConfigError(f"{where}: its module is not imported; import it from a .py file")
    if _lookup(module, name) is not fn:
        raise ConfigError(f"{where}: '{name}' in '{mod_name}' is another object, so a "
                          "resume would call something else; pass the module-level function")
    return FunctionRef(mod_name, name, module_hash(module))


def _lookup(module: ModuleType, qualname: str) -> Any:
    obj: Any = module
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def resolve_function(spec: str, flag: str) -> Callable[..., Any]:
    """The callable "pkg.module:name" names (`flag`, e.g. "--train", for the message);
    importing is `user_model.load.load_object`'s (the current directory on sys.path)."""
    from autoembed.user_model.load import load_object

    obj = load_object(str(spec), flag)
    if not callable(obj):
        raise ConfigError(f"{flag} '{spec}': '{str(spec).partition(':')[2]}' is a "
                          f"{type(obj).__name__}, not a function")
    return obj


def check_unchanged(stored: FunctionRef, current: FunctionRef, role: str,
                    allow_changed: bool) -> None:
    """A resume must call the code the study started with: a different name or module
    source is a ConfigError unless `allow_changed` (--allow-changed-code)."""
    if stored.spec != current.spec:
        raise ConfigError(f"{role}: the study was run with {stored.spec}, not {current.spec}; "
                          f"resume with --{role} {stored.spec}")
    if stored.source_hash != current.source_hash and not allow_changed:
        raise ConfigError(f"{role} {current.spec}: module '{current.module}' changed since the "
                          "study started; restore it, or resume with --allow-changed-code to "
                          "mix results of both versions")
