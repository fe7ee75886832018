"""The ways a user copies a whole model, for the tests that check a copy behaves as the
original: `copy.deepcopy` (EMA, transformers' Trainer) and `torch.save(model)` then
`torch.load(weights_only=False)` (pickle)."""

from __future__ import annotations

import copy
import io
from typing import Any

import torch


def saved_and_loaded(model: Any) -> Any:
    """`torch.save(model)` whole, then `torch.load` (pickle)."""
    buf = io.BytesIO()
    torch.save(model, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=False)


COPIES = {"deepcopy": copy.deepcopy, "torch.save": saved_and_loaded}
