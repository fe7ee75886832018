"""`DecodedTable`: what a compressed (or host_cached) layer's ``weight`` attribute returns,
the table decoded from its storage (host_cached: the host rows). It reads as any tensor (a
tied output layer, a norm, a copy; results are plain tensors), and refuses a write in one
line: an in-place op, item assignment, ``out=``, or setting an attribute (``.data``,
``.requires_grad``) on it or on a view of it would not change the rows the layer reads
(docs/apply.md).

``weight`` itself is a `LazyTable`: its shape, dtype, device, requires_grad and the like are
answered without decoding; the first op that reads its values decodes the table (under the
grad mode, inference mode and autocast ``weight`` was read in) and that read keeps the
decode for its later ops.

A copy (deepcopy, pickle, torch.save) is a plain tensor of the values. Under torch.compile
(while Dynamo traces) an op runs on the values as plain tensors, a LazyTable decoded in the
graph under the read's grad mode and autocast; a write is refused there too."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._pytree import tree_map

from autoembed.errors import ConfigError

__all__ = ["DecodedTable", "LazyTable", "decoded", "lazy"]

# in-place methods whose names do not end in "_" (a += b, a[i] = x)
_WRITES = frozenset({"__setitem__", "__iadd__", "__isub__", "__imul__", "__itruediv__",
                     "__ifloordiv__", "__imod__", "__ipow__", "__iand__", "__ior__",
                     "__ixor__", "__ilshift__", "__irshift__", "__imatmul__"})
# what a LazyTable answers without decoding: properties, then methods
_METADATA = frozenset({".shape", ".dtype", ".device", ".ndim", ".requires_grad", ".is_meta",
                       ".is_cuda", ".is_cpu", ".layout", ".is_sparse", ".is_quantized",
                       ".itemsize", ".nbytes", "size", "dim", "numel", "nelement",
                       "element_size", "is_floating_point", "is_complex", "get_device",
                       "__len__"})


class DecodedTable(torch.Tensor):
    """A compressed layer's decoded [V, D] table. `layer` (a string) names the layer in the
    message refusing a write."""

    layer = "the layer"

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = _refuse_writes(func, args, kwargs)
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **kwargs)
        # ._base as it is: wrapped it would be a view again, and Dynamo follows ._base until
        # a tensor is no view; while Dynamo traces, results are plain (it traces no alias test)
        if name == "._base" or torch.compiler.is_dynamo_compiling():
            return out
        return _keep_views(out, [a for a in args if isinstance(a, cls)])

    def __deepcopy__(self, memo: dict[int, Any]) -> torch.Tensor:
        """A copy is a plain tensor of the values (writes into it are its own), copied as
        torch copies one: a table that requires grad and is no leaf is refused as torch
        refuses such a tensor."""
        plain = _plain(self)
        memo.setdefault(id(memo), []).append(plain)  # its id stays taken while memo lives
        return plain.__deepcopy__(memo)

    def __reduce_ex__(self, proto: Any) -> Any:
        """Pickled (torch.save) as a plain tensor of the values, as torch pickles one: a
        load (weights_only too) needs no autoembed and gives no layer's table."""
        return _plain(self).__reduce_ex__(proto)


class LazyTable(DecodedTable):
    """A layer's ``weight`` not decoded yet: a tensor of the table's shape, dtype, device and
    requires_grad that holds no values. Those (`_METADATA`) are answered as they are; a write
    is refused as `DecodedTable` refuses it; any other op runs on the table `decode()` gives
    (decoded once, as the read would have: under its grad mode, inference mode and
    autocast, and kept for the later ops)."""

    _decode: Callable[[], torch.Tensor]
    _grad_enabled: bool  # the grad mode `weight` was read in
    _modes: _Modes  # and its other modes
    _table: DecodedTable | None

    @staticmethod
    def __new__(cls, decode: Callable[[], torch.Tensor], row: torch.Tensor,
                shape: tuple[int, int], layer: str) -> LazyTable:
        out = torch.Tensor._make_wrapper_subclass(
            cls, shape, dtype=row.dtype, device=row.device, requires_grad=row.requires_grad)
        out.layer, out._decode, out._table = layer, decode, None
        out._grad_enabled = torch.is_grad_enabled()
        out._modes = _Modes.now(row.device.type)
        return out

    def _values(self) -> DecodedTable:
        """The table decoded (by the first call)."""
        if self._table is None:
            with self._modes.entered(), torch.set_grad_enabled(self._grad_enabled):
                self._table = decoded(self._decode(), self.layer)
        return self._table

    def _traced(self) -> torch.Tensor:
        """The table decoded in the graph torch.compile traces (as `_values` decodes it,
        kept by no tensor: a compiled call reads the rows as they are at that call): under
        the read's autocast and grad mode; its inference mode, which Dynamo does not trace,
        changes nothing there (it read under no grad)."""
        with self._modes.autocast_entered(), torch.set_grad_enabled(self._grad_enabled):
            return self._decode()

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = _refuse_writes(func, args, kwargs)
        if torch.compiler.is_dynamo_compiling():
            args, kwargs = tree_map(_traced, (args, kwargs))
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **kwargs)
        if args and isinstance(args[0], LazyTable) and name in _METADATA:
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **kwargs)
        args, kwargs = tree_map(_values, (args, kwargs))
        return DecodedTable.__torch_function__(func, types, args, kwargs)

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (),  # type: ignore[override]
                           kwargs: Any = None) -> Any:
        """An op that reached dispatch (past `__torch_function__`) runs on the decoded
        values as plain tensors; one that writes into a LazyTable is refused."""
        kwargs = kwargs or {}
        schema = func._schema.arguments
        given = [*zip([a for a in schema if not a.kwarg_only], args, strict=False),
                 *((a, kwargs.get(a.name)) for a in schema if a.kwarg_only)]
        for arg, value in given:
            if isinstance(value, LazyTable) and arg.alias_info is not None \
                    and arg.alias_info.is_write:
                raise ConfigError(_refusal(value.layer, str(func)))
        return func(*tree_map(_plain, args), **tree_map(_plain, kwargs))


@dataclass(frozen=True)
class _Modes:
    """The inference mode and autocast (on the table's device type) in force at a read."""

    device_type: str
    inference: bool
    autocast: bool
    autocast_dtype: torch.dtype | None

    @classmethod
    def now(cls, device_type: str) -> _Modes:
        cast = torch.amp.is_autocast_available(device_type)
        return cls(device_type, torch.is_inference_mode_enabled(),
                   cast and torch.is_autocast_enabled(device_type),
                   torch.get_autocast_dtype(device_type) if cast else None)

    def entered(self) -> contextlib.ExitStack:
        """These modes, entered (an ExitStack to leave them; inference mode sets the grad
        mode too: enter the read's after it)."""
        stack = contextlib.ExitStack()
        stack.enter_context(torch.inference_mode(self.inference))
        stack.enter_context(self.autocast_entered())
        return stack

    def autocast_entered(self) -> contextlib.AbstractContextManager[Any]:
        """The autocast of the read alone (a context Dynamo traces)."""
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.autocast_dtype,
                              enabled=self.autocast)


def lazy(decode: Callable[[], torch.Tensor], row: torch.Tensor, shape: tuple[int, int],
         layer: str) -> LazyTable:
    """A layer's ``weight`` (a LazyTable naming `layer`): the table `decode()` gives, of
    `shape` and of the dtype, device and requires_grad of `row` (a row of it)."""
    return LazyTable(decode, row, shape, layer)


def _values(a: Any) -> Any:
    return a._values() if isinstance(a, LazyTable) else a


def _traced(a: Any) -> Any:
    return a._traced() if isinstance(a, LazyTable) else a


def _plain(a: Any) -> Any:
    """A DecodedTable's (or a LazyTable's decoded) values as a plain tensor (no copy)."""
    if isinstance(a, LazyTable):
        a = a._values()
    return a.as_subclass(torch.Tensor) if isinstance(a, DecodedTable) else a


def decoded(table: torch.Tensor, layer: str) -> DecodedTable:
    """`table` (a layer's decoded table) as a DecodedTable naming `layer`."""
    out = table.as_subclass(DecodedTable)
    out.layer = layer
    return out


def _refuse_writes(func: Any, args: Any, kwargs: dict[str, Any]) -> str:
    """`func`'s name (`_name`); a ConfigError where it writes into a DecodedTable."""
    name = _name(func)
    written = _written(name, args, kwargs)
    if written is not None:
        raise ConfigError(_refusal(written.layer, name))
    return name


def _refusal(layer: str, op: str) -> str:
    freeze = op in ("requires_grad_", ".requires_grad = ...")
    fix = ("set it on the layer: layer.requires_grad_(False) freezes it" if freeze else
           "set the rows before autoembed.apply (from_trained=True fits the table to them) "
           "or build the layer with init=")
    return (f"{layer}.weight is the table decoded from the layer's storage, not the storage, "
            f"so {op} on it would not change the rows the layer reads; {fix}")


def _name(func: Any) -> str:
    """An op's name; a property's getter (x.shape): '.shape'; its setter (x.data = y):
    '.data = ...'."""
    name = getattr(func, "__name__", "")
    if name in ("__get__", "__set__"):
        prop = f".{getattr(getattr(func, '__self__', None), '__name__', '?')}"
        return prop if name == "__get__" else f"{prop} = ..."
    return name


# Dynamo runs it as it traces (a function's name): the mark torch.compiler.assume_constant_result
# sets, set here without it, as the decorator imports torch._dynamo (about 3 CPU s, half of
# `import autoembed.nn`'s cost) in every process that imports autoembed, compiled or not
_name._dynamo_marked_constant = True  # type: ignore[attr-defined]


def _written(name: str, args: Any, kwargs: dict[str, Any]) -> Any:
    """The tensor an op writes into: an in-place op's (or a setter's) first argument (the
    first keyword one where none is positional: torch.nn.init's `normal_`, `uniform_`,
    `constant_`, `kaiming_uniform_` pass theirs as ``tensor=``), or an ``out=`` tensor (the
    first DecodedTable among them); None for an op that writes none."""
    out = kwargs.get("out")
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    first = args[0] if args else next(iter(kwargs.values()), None)
    if first is not None and (name in _WRITES or name.endswith(" = ...")
                              or (name.endswith("_") and not name.endswith("__"))):
        outs.insert(0, first)
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
