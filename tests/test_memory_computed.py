"""Saved activations of robe / tt lookups: the formula against the allocation tracker
replaying the real forward on fake tensors (bytes alive after the forward, less the pooled
output)."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from autoembed.memory.computed import computed_activations
from autoembed.memory.tracker import AllocationTracker
from autoembed.models.embedding import LookupSpec
from autoembed.models.robe import RobeTable
from autoembed.models.tt import TTTable


def _live(tr: AllocationTracker) -> int:
    return tr.alloc.allocated  # the allocator model's count: 512 B blocks


def _block(n: int) -> int:
    return -(-n // 512) * 512


@pytest.mark.parametrize("method", ["robe", "tt"])
@pytest.mark.parametrize(("batch", "width"), [(512, 1), (300, 4), (64, 33)])
@pytest.mark.parametrize(("pooling", "text"), [("mean", False), ("sum", False),
                                                ("naive", False), ("naive", True)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_saved_bytes_equal_the_traced_forward(
    method: str, batch: int, width: int, pooling: str, text: bool, dtype: torch.dtype
) -> None:
    dim, rank, block = 16, 3, 6
    e = torch.finfo(dtype).bits // 8
    tr = AllocationTracker()
    with FakeTensorMode(), tr:
        spec = LookupSpec(pooling, False, text)
        table = (RobeTable(5000, block, (dim,), spec, dtype=dtype) if method == "robe"
                 else TTTable(5000, dim, rank, spec, dtype=dtype))
        ids = torch.randint(1, 5000, (batch, width))
        before = _live(tr)
        out = table(ids)
        saved = _live(tr) - before - _block(batch * dim * e)
        del out
    want, _ = computed_activations(method, batch=batch, width=width, dim=dim, element_bytes=e,
                                   pooling=pooling, text=text, rank=rank, block=block)
    assert saved == sum(want)


def test_by_hand() -> None:
    # robe, 100 lookups of dim 16 in blocks of 8 (2 blocks), fp32, sum: positions 100*16*8 B
    # = 12800 -> 12800; mask 400 -> 512
    saved, _ = computed_activations("robe", batch=100, width=1, dim=16, element_bytes=4,
                                    pooling="sum", text=False, block=8)
    assert sorted(saved) == [512, 12800]
