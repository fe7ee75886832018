"""The user's functions (`build`, `example`, `train`, `loss`) as records another process can
find again.

A function is recorded as `module:qualname` with the SHA-256 of its module's whole source (a
helper it calls changes results as much as the function itself). Any function runs in the
searching process (`executor="local"`); where another process must find it by name (a Ray
worker, a resume: `check_findable`), a lambda, a nested function, a nameless callable, a
module without a source file or a name that holds another object is refused in one line
saying why; a function of the running script (`__main__`) is found by a resume run from that
script, never by a Ray worker. Strings "pkg.module:name" resolve with the current directory
on `sys.path`, as `python -m` has it; every failure is a ConfigError naming role and fix.
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
           "check_findable", "module_hash", "takes_params", "with_params"]


@dataclass(frozen=True)
class FunctionRef:
    """How a study remembers a user function: where it lives and what its module held.
    `missing`: why another process could not find it by that name (a lambda, a nested
    function, one defined in a notebook ...); None when it can. Such a function runs in
    this process only: a resume or a Ray worker refuses it (`check_findable`)."""

    module: str
    qualname: str
    source_hash: str  # sha256 hex of the module's source text ("" when it has none)
    missing: str | None = None
    takes_params: bool = True  # False: a zero-argument build/example (`takes_params`)
    root: str | None = None  # the sys.path folder its module was imported from (None: unknown)

    @property
    def spec(self) -> str:
        return f"{self.module}:{self.qualname}"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"module": self.module, "qualname": self.qualname,
               "source_hash": self.source_hash}
        if self.missing is not None:
            out["missing"] = self.missing
        if not self.takes_params:
            out["takes_params"] = False
        if self.root is not None:
            out["root"] = self.root
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> FunctionRef:
        missing = raw.get("missing")
        root = raw.get("root")
        return cls(str(raw["module"]), str(raw["qualname"]), str(raw["source_hash"]),
                   None if missing is None else str(missing),
                   bool(raw.get("takes_params", True)), None if root is None else str(root))


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
    """The record of `fn` (role: "model", "example", "train" or "loss"); `missing` says
    why a later process could not find it again (see `FunctionRef`). ConfigError when `fn`
    is not callable."""
    if not callable(fn):
        raise ConfigError(f"{role} = {fn!r}: must be a function")
    fn = getattr(fn, _ORIGINAL, fn)  # `with_params`' wrapper records the user's function
    name = getattr(fn, "__qualname__", None)
    mod_name = getattr(fn, "__module__", None)
    if not isinstance(name, str) or not isinstance(mod_name, str):
        return FunctionRef(str(mod_name), repr(fn), "", "a callable without a module and "
                           "name (a functools.partial or an object) cannot be found by name")
    module = sys.modules.get(mod_name)
    try:
        digest = module_hash(module) if module is not None else ""
    except ConfigError:
        digest = ""
    return FunctionRef(mod_name, name, digest, _why_unfindable(fn, name, mod_name, module,
                                                               digest), takes_params(fn),
                       _import_root(module, mod_name))


def _import_root(module: ModuleType | None, mod_name: str) -> str | None:
    """The sys.path folder `module` was imported from as `mod_name` (pkg/mod.py as pkg.mod:
    the folder holding pkg/); None for the running script or a module without a file."""
    from pathlib import Path

    file = getattr(module, "__file__", None)
    if not isinstance(file, str) or mod_name == "__main__":
        return None
    path = Path(file).resolve()
    root = path.parent
    for _ in range(mod_name.count(".") + (path.stem == "__init__")):
        root = root.parent
    return str(root)


_ORIGINAL = "_autoembed_original"  # the attribute `with_params` keeps the user's function in


def takes_params(fn: Any, required: bool = False) -> bool:
    """Whether `fn` takes params, read from its signature (one that cannot be read: it
    does): a search calls `fn(params)` when it accepts one positional argument, else `fn()`;
    with `required`, only when it cannot be called without one (`estimate --model` calls a
    factory whose arguments all have defaults with none, as before)."""
    fn = getattr(fn, _ORIGINAL, fn)
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return True
    try:
        sig.bind() if required else sig.bind(None)
    except TypeError:
        return required
    return not required


def with_params(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` as a function of params: itself when it takes them, else a wrapper that calls
    `fn()` (the user's function kept for `record_function`)."""
    if takes_params(fn):
        return fn

    def call(params: Any) -> Any:
        del params
        return fn()

    setattr(call, _ORIGINAL, fn)
    return call


def _why_unfindable(fn: Any, name: str, mod_name: str, module: ModuleType | None,
                    digest: str) -> str | None:
    """Why a later process could not import `fn` as `mod_name:name` (None: it can)."""
    if name == "<lambda>" or name.endswith(".<lambda>"):
        return "a lambda cannot be found by name; define it with def at the top level of a module"
    if "<locals>" in name:
        return ("a function nested in another cannot be found by name; move it to the top "
                "level of its module")
    if module is None:
        return "its module is not imported; import it from a .py file"
    if not digest:
        return f"module '{mod_name}' has no source file; put the function in a .py file"
    if _lookup(module, name) is not fn:
        return (f"'{name}' in '{mod_name}' is another object; pass the module-level function")
    return None


def check_findable(refs: Mapping[str, FunctionRef], who: str, script: bool) -> None:
    """Refuse functions `who` (a Ray worker, a resume) cannot find again by name, one line
    naming the function and the fix; `script`: whether `who` finds the running script's
    functions (a resume run from the same script does; a Ray worker does not)."""
    for role, ref in refs.items():
        why = ref.missing
        if why is None and ref.module == "__main__" and not script:
            why = ("it is defined in the script being run (or a notebook), which another "
                   "process cannot import; move it to a module and import it from there")
        if why is not None:
            raise ConfigError(f"{role} = {ref.spec}: {who} finds your functions by name, and "
                              f"{why}; or search in this process (executor 'local', "
                              "--executor local) without resuming")


def _lookup(module: ModuleType, qualname: str) -> Any:
    obj: Any = module
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def resolve_function(spec: str, flag: str) -> Callable[..., Any]:
    """The callable "pkg.module:name" names (`flag`, e.g. "--train", for the message);
    importing is `user.model.load.load_object`'s (the current directory on sys.path)."""
    from autoembed.user.model.load import load_object

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
