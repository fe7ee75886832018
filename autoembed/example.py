"""`autoembed.Example`: an example batch with its targets, for pricing a model whose forward
takes the inputs and whose loss takes the targets (no torch import: `import autoembed`
stays light; `models.user_step` registers it as a pytree node)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Example"]


@dataclass(frozen=True)
class Example:
    """One batch as the training step sees it: `model(*args, **kwargs)` is the forward and
    `loss(output, targets)` the loss (`targets`: any tensor or structure of tensors; None
    when the loss needs none). Only shapes and dtypes are read.

    `Example(args=(users, items), targets=labels)` prices `model(users, items)` and
    `loss(output, labels)`; the plain forms (a tensor, a tuple, a dict) keep meaning
    `model(x)`, `model(*x)`, `model(**x)` with `loss(output, x)`."""

    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    targets: Any = None

    def __post_init__(self) -> None:
        from autoembed.errors import ConfigError

        if not isinstance(self.args, tuple):  # a list of inputs, or one: Example(args=x)
            args = self.args
            object.__setattr__(self, "args", tuple(args) if isinstance(args, list) else (args,))
        if not isinstance(self.kwargs, Mapping):
            raise ConfigError(f"Example(kwargs={type(self.kwargs).__name__}): give a dict "
                              "of the forward's keyword arguments")
