"""Options declared once (as config fields declare their rule: `rules.field_rule`), so an
option is added in one place (docs/ARCHITECTURE.md, "rules"): a command's options are the
fields of one frozen dataclass, each with its type, default and, in its metadata (`option`),
its help, `Rule`, CLI spelling and the type the CLI parses where that differs. `takes`
(the public function's signature, for `inspect.signature` and mypy), `check_options` and
`autoembed.cli.declared_command` (the typer command, so docs/cli.md) read the declaration.
Pure Python: no torch, no typer.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import MISSING, Field, field, fields
from pathlib import PurePath
from typing import Any, ParamSpec, TypeVar

from autoembed.rules import Rule

__all__ = ["option", "declared", "check_options", "flag_of", "help_of", "keyword_lines", "takes",
           "cli_fields"]

P = ParamSpec("P")
R = TypeVar("R")


def declared(*, help: str | Callable[[], str], rule: Rule | None = None,
             flags: tuple[str, ...] = (), cli_type: Any = None, cli: bool = True) -> dict[str, Any]:
    """An option's field metadata: its `help` (or a function that words it, called when
    the CLI is built), its `rule` (None passes where the default is None), its CLI spelling
    `flags` (typer's param decls, e.g. ``("--pick",)``; default: ``--name-with-dashes``),
    `cli_type` (what the CLI parses where the field's type is wider, e.g. str for a
    callable-or-name) and `cli` (False: a keyword of the Python API only). A required
    option is ``field(metadata=declared(...))`` (so mypy sees it required)."""
    return {"help": help, "rule": rule, "flags": flags, "cli_type": cli_type, "cli": cli}


def option(default: Any, **meta: Any) -> Any:
    """An option with a `default`: a dataclass field with `declared(**meta)` metadata."""
    return field(default=default, metadata=declared(**meta))


def flag_of(f: Field[Any]) -> str:
    """The option as the CLI spells it (and as messages name it): ``--time-budget``."""
    flags = f.metadata.get("flags") or ()
    return flags[0].split("/")[0] if flags else "--" + f.name.replace("_", "-")


def check_options(obj: Any) -> None:
    """Check every declared field of `obj` against its rule; the first bad one raises
    ConfigError (`Rule.check_argument`: the one message shape, naming the CLI flag)."""
    for f in fields(obj):
        rule = f.metadata.get("rule")
        value = getattr(obj, f.name)
        if rule is None or (value is None and f.default is None):
            continue
        rule.check_argument(flag_of(f), value)


def cli_fields(options: type) -> list[Field[Any]]:
    """The declared fields the CLI takes, in declaration order."""
    return [f for f in fields(options) if "help" in f.metadata and f.metadata.get("cli", True)]


def help_of(f: Field[Any]) -> str:
    """The declared help of option `f` (worded now when declared as a function)."""
    text = f.metadata.get("help", "")
    return str(text() if callable(text) else text)


def keyword_lines(options: Any) -> list[str]:
    """The declared options as a docstring's list: one item per keyword, its default and
    its help."""
    lines = ["Keywords (with the command line's spelling of each):", ""]
    for f in fields(options):
        if "help" not in f.metadata:
            continue
        value = str(f.default) if isinstance(f.default, PurePath) else f.default
        said = ["required" if f.default is MISSING else f"default {value!r}",
                flag_of(f) if f.metadata.get("cli", True) else "Python only"]
        lines.append(f"* `{f.name}` ({', '.join(said)}): {help_of(f)}")
    return ["\n".join(lines)]


def takes(options: Callable[P, Any]) -> Callable[[Callable[[Any], R]], Callable[P, R]]:
    """Decorate `f(options_object)` into a function whose signature is the declaration's:
    its arguments build `options(...)` (a wrong keyword is a TypeError, as for any call)
    and `f` gets the object. `inspect.signature` shows the declaration; mypy types the
    result from it (a ParamSpec bound to the dataclass's constructor)."""

    def wrap(f: Callable[[Any], R]) -> Callable[P, R]:
        @functools.wraps(f)
        def call(*args: P.args, **kwargs: P.kwargs) -> R:
            return f(options(*args, **kwargs))

        sig = inspect.signature(options)
        ret = inspect.signature(f).return_annotation
        call.__signature__ = sig.replace(return_annotation=ret)  # type: ignore[attr-defined]
        call.__doc__ = "\n\n".join([inspect.cleandoc(f.__doc__ or ""), *keyword_lines(options)])
        return call

    return wrap
