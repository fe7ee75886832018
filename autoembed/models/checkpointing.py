"""Gradient checkpointing: the one wrapper the built-in models and a user's model (through
`autoembed.apply(..., checkpoint=[...])`) run blocks under.

`checkpointed(fn, *args)` runs `fn(*args)` under `torch.utils.checkpoint.checkpoint`
(non-reentrant) while grad is enabled, so the block's activations are dropped after the
forward and recomputed in the backward; without grad it is a plain call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import torch
from torch.utils.checkpoint import checkpoint

__all__ = ["checkpointed"]

T = TypeVar("T")


def checkpointed(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`fn(*args, **kwargs)`, its activations recomputed in the backward when grad is on."""
    if not torch.is_grad_enabled():
        return fn(*args, **kwargs)
    out: T = checkpoint(fn, *args, use_reentrant=False, **kwargs)
    return out
