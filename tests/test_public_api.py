"""No public function takes more than 12 parameters.

The public API walked: the names of `autoembed.__all__`, every public name of the modules
that define them and of the documented packages `autoembed.nn` and `autoembed.torchrec`
(a module's `__all__`, else the names it defines without a leading underscore), each public
class's own public methods and constructor, and every command of the CLI.

What does not count:
* a parameter generated from an option declaration (`autoembed.options`: `takes` gives
  `autoembed.search` its declaration's signature, `cli.declared_command` builds the estimate
  and search commands from theirs): an option is declared once, so the declaration, not the
  function, is where it is read. The parameters written beside the declaration still count;
* a parameter of torch's own signature in a layer constructor that mirrors it (`MIRRORS`);
  what autoembed adds still counts;
* a dataclass record's generated constructor: its parameters are its fields.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import torch

import autoembed
import autoembed.nn
from autoembed.cli import app
from autoembed.options import cli_fields, flag_of
from autoembed.pipeline.driver import SearchCall
from autoembed.pipeline.search_options import SearchOptions
from autoembed.pricing.estimate_options import EstimateOptions

LIMIT = 12
DOCUMENTED = ("autoembed.nn", "autoembed.torchrec")

# Functions whose signature is generated from an option declaration -> that declaration.
DECLARED: dict[str, type] = {
    "autoembed.search": SearchCall,
    "autoembed.pipeline.driver.search": SearchCall,
    "cli estimate": EstimateOptions,
    "cli search": SearchOptions,
}

# Torch-mirroring layer constructors -> the torch layer whose signature they take as it is
# (docs/apply.md: torch's arguments in torch's order); only autoembed's additions count.
MIRRORS: dict[str, type[torch.nn.Module]] = {
    "autoembed.nn.Embedding.__init__": torch.nn.Embedding,
    "autoembed.nn.EmbeddingBag.__init__": torch.nn.EmbeddingBag,
}


def own_parameters(f: Callable[..., Any]) -> list[str]:
    """The names of `f`'s parameters, without a method's self or cls."""
    names = list(inspect.signature(f).parameters)
    return names[1:] if names[:1] in (["self"], ["cls"]) else names


def declared_names(options: type) -> set[str]:
    """The parameter names a declaration generates: its fields' names, and the CLI's
    spelling of each CLI field (`--pick` -> pick)."""
    cli = {flag_of(f).removeprefix("--").replace("-", "_") for f in cli_fields(options)}
    return {f.name for f in dataclasses.fields(options)} | cli


def is_record_constructor(cls: type, init: Callable[..., Any]) -> bool:
    """Whether `init` is the constructor a dataclass generated from its fields."""
    if not dataclasses.is_dataclass(cls):
        return False
    return own_parameters(init) == [f.name for f in dataclasses.fields(cls) if f.init]


def counted(name: str, f: Callable[..., Any]) -> list[str]:
    """The parameters of `f` (named `name`) that count against the limit."""
    names = own_parameters(f)
    if name in DECLARED:
        return [n for n in names if n not in declared_names(DECLARED[name])]
    if name in MIRRORS:
        torch_own = own_parameters(MIRRORS[name].__init__)
        return [n for n in names if n not in torch_own]
    return names


def public_modules() -> list[str]:
    """The modules whose public names are the public API."""
    homes = {getattr(getattr(autoembed, n), "__module__", None) for n in autoembed.__all__}
    return sorted({"autoembed", *DOCUMENTED, *(m for m in homes if m)})


def public_names(mod: Any) -> list[str]:
    """A module's `__all__`, else the public names it defines."""
    if hasattr(mod, "__all__"):
        return [n for n in mod.__all__ if not n.startswith("__")]
    return [n for n, v in vars(mod).items() if not n.startswith("_")
            and getattr(v, "__module__", None) == mod.__name__]


def methods(cls: type) -> Iterator[tuple[str, Callable[..., Any]]]:
    """A class's own public methods and its constructor (not a record's generated one)."""
    for name, value in vars(cls).items():
        if name.startswith("_") and name != "__init__":
            continue
        if not isinstance(value, (staticmethod, classmethod)) and not inspect.isfunction(value):
            continue
        f = getattr(cls, name)
        if name == "__init__" and is_record_constructor(cls, f):
            continue
        yield name, f


def python_api() -> Iterator[tuple[str, Callable[..., Any]]]:
    """(dotted name, callable) of every public function, method and constructor."""
    for module in public_modules():
        mod = importlib.import_module(module)
        for name in public_names(mod):
            value = getattr(mod, name)
            if inspect.isclass(value):
                for meth, f in methods(value):
                    yield f"{module}.{name}.{meth}", f
            elif inspect.isfunction(value):
                yield f"{module}.{name}", value


def cli_commands(group: Any = app, prefix: str = "cli") -> Iterator[tuple[str, Callable[..., Any]]]:
    """("cli <command>", its typer function) of every command, groups included."""
    for command in group.registered_commands:
        yield f"{prefix} {command.name or command.callback.__name__}", command.callback
    for sub in group.registered_groups:
        yield from cli_commands(sub.typer_instance, f"{prefix} {sub.name}")


def over_limit(api: Iterator[tuple[str, Callable[..., Any]]]) -> dict[str, int]:
    """name -> counted parameters, of each callable over the limit."""
    found = {name: len(counted(name, f)) for name, f in api}
    return {name: n for name, n in found.items() if n > LIMIT}


def test_no_public_function_takes_more_than_12_parameters() -> None:
    assert over_limit(python_api()) == {}
    assert over_limit(cli_commands()) == {}


def test_the_walk_reaches_train_search_the_layers_and_the_commands() -> None:
    names = {name for name, _ in python_api()} | {name for name, _ in cli_commands()}
    assert {"autoembed.train", "autoembed.search", "autoembed.estimate", *MIRRORS,
            "cli train", "cli estimate", "cli search"} <= names


def test_each_exemption_is_still_needed() -> None:
    # an entry whose function no longer exceeds the limit on its own goes from the list
    api = dict(python_api()) | dict(cli_commands())
    for name in (*DECLARED, *MIRRORS):
        assert len(own_parameters(api[name])) > LIMIT, name
    for name in MIRRORS:
        cls = getattr(autoembed.nn, name.split(".")[2])
        assert issubclass(cls, torch.nn.Module), name


def test_13_parameters_fail_and_a_records_fields_do_not() -> None:
    def wide(a, b, c, d, e, f, g, h, i, j, k, m, *, n):
        return None

    @dataclasses.dataclass
    class Record:
        a: int = 0
        b: int = 0
        c: int = 0
        d: int = 0
        e: int = 0
        f: int = 0
        g: int = 0
        h: int = 0
        i: int = 0
        j: int = 0
        k: int = 0
        m: int = 0
        n: int = 0

    assert over_limit(iter([("wide", wide)])) == {"wide": 13}
    assert list(methods(Record)) == []
    # a mirrored layer's own additions still count
    assert counted("autoembed.nn.Embedding.__init__", autoembed.nn.Embedding.__init__) == [
        "compression", "placement", "init", "settings"]
