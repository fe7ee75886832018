"""ROBE-Z table (Desai et al., MLSys 2022): rows read blocks of one shared 1-D array.

Layout and offsets: `autoembed.compression` (module docstring). Field f of the table hashes
with seed `robe_seed(hash_seed, f)`, so two fields sharing the array read different places
for the same id. The array's gradient is dense: every (row, column) read adds into the
value it read (`weight[pos]`'s backward accumulates).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from autoembed.models.computed_rows import ComputedRowsTable, projection
from autoembed.models.embedding import LookupSpec
from autoembed.nn.methods import _Robe
from autoembed.nn.storage import _Storage

__all__ = ["RobeTable"]


class RobeTable(ComputedRowsTable, _Robe):
    """The `autoembed.nn` robe storage (one array `weight` [size], `positions`), read by
    fields of dims `dims` in blocks of `block` values, pooled as a built-in table.

    Field f hashes as field `first_field + f`. `weight`: an existing array [size] to read
    instead of a new one (`robe_shared`: config-built tables of one group hold the same
    Parameter, so the model has it once and its gradient sums every table's reads).
    """

    def __init__(
        self,
        size: int,
        block: int,
        dims: tuple[int, ...],
        spec: LookupSpec,
        *,
        seed: int = 0,
        out_dim: int | None = None,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
        first_field: int = 0,
        weight: nn.Parameter | None = None,
    ) -> None:
        # the storage's layout from a resolved size (the config has turned shares to counts)
        _Storage.__init__(self, 0, dims[0], {"device": device, "dtype": dtype})
        self._layout(size, block, dims, seed, first_field)
        self.spec = spec
        if weight is None:
            weight = nn.Parameter(torch.empty((size,), device=device, dtype=dtype))
            with torch.no_grad():
                weight.normal_(0.0, 1.0 / math.sqrt(max(dims)))
        elif tuple(weight.shape) != (size,):
            raise ValueError(f"a shared robe array of shape {tuple(weight.shape)}, not ({size},)")
        self.weight = weight
        self.proj = projection(dims[0], out_dim, device, dtype)

    def field_rows(self, idx: torch.Tensor, field: int) -> torch.Tensor:
        return self.rows(idx, field)
