"""`DecodedTable`: what a compressed (or host_cached) layer's ``weight`` attribute returns,
the table decoded from its storage (a new tensor each read; host_cached: the host rows). It
reads as any tensor (a tied output layer, a norm, a copy; results are plain tensors), and
refuses a write in one line: an in-place op, item assignment, ``out=``, or setting an
attribute (``.data``, ``.requires_grad``) on it or on a view of it would not change the rows
the layer reads (docs/apply.md)."""

from __future__ import annotations

from typing import Any

import torch

from autoembed.errors import ConfigError

__all__ = ["DecodedTable", "decoded"]

# in-place methods whose names do not end in "_" (a += b, a[i] = x)
_WRITES = frozenset({"__setitem__", "__iadd__", "__isub__", "__imul__", "__itruediv__",
                     "__ifloordiv__", "__imod__", "__ipow__", "__iand__", "__ior__",
                     "__ixor__", "__ilshift__", "__irshift__", "__imatmul__"})


class DecodedTable(torch.Tensor):
    """A compressed layer's decoded [V, D] table. `layer` (a string) names the layer in the
    message refusing a write."""

    layer = "the layer"

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = _name(func)
        written = _written(name, args, kwargs)
        if isinstance(written, cls):
            raise ConfigError(_refusal(written.layer, name))
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **kwargs)
        return _keep_views(out, [a for a in args if isinstance(a, cls)])


def decoded(table: torch.Tensor, layer: str) -> DecodedTable:
    """`table` (a layer's decoded table) as a DecodedTable naming `layer`."""
    out = table.as_subclass(DecodedTable)
    out.layer = layer
    return out


def _refusal(layer: str, op: str) -> str:
    freeze = op in ("requires_grad_", ".requires_grad = ...")
    fix = ("set it on the layer: layer.requires_grad_(False) freezes it" if freeze else
           "set the rows before autoembed.apply (from_trained=True fits the table to them) "
           "or build the layer with init=")
    return (f"{layer}.weight is the table decoded from the layer's storage, not the storage, "
            f"so {op} on it would not change the rows the layer reads; {fix}")


def _name(func: Any) -> str:
    """An op's name; a property's setter (x.data = y): '.data = ...'."""
    name = getattr(func, "__name__", "")
    if name == "__set__":
        return f".{getattr(getattr(func, '__self__', None), '__name__', '?')} = ..."
    return name


def _written(name: str, args: Any, kwargs: dict[str, Any]) -> Any:
    """The tensor an op writes into: an in-place op's (or a setter's) first argument, or an
    ``out=`` tensor (the first DecodedTable among them); None for an op that writes none."""
    out = kwargs.get("out")
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    if args and (name in _WRITES or name.startswith(".")
                 or (name.endswith("_") and not name.endswith("__"))):
        outs.insert(0, args[0])
    return next((o for o in outs if isinstance(o, DecodedTable)), None)


def _keep_views(out: Any, tables: list[DecodedTable]) -> Any:
    """A result that is a view of the decoded table (w[0], w.t(), w.data) stays one, so a
    write into it is refused too; any other result is a plain tensor."""
    if isinstance(out, (tuple, list)):
        return type(out)(_keep_views(o, tables) for o in out)
    if not isinstance(out, torch.Tensor) or isinstance(out, DecodedTable) or not tables:
        return out
    for t in tables:
        if torch._C._is_alias_of(out, t):  # type: ignore[attr-defined]
            return decoded(out, t.layer)
    return out
