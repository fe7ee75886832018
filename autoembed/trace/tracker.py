"""Counting live tensor bytes the way the CUDA caching allocator would, without a GPU.

`AllocationTracker` is a TorchDispatchMode: every op's output storage is registered when it
is created and released (through a weakref finalizer) when Python drops it, so run under
FakeTensorMode it sees a real training step's allocations and frees without allocating
anything (tensors made under `memory.types.host_allocations` live on the host and are
not counted, nor are torch.optim's host scalars, its step counters). Each allocation is
replayed through `CachingAllocatorModel`, a small model of c10/cuda/CUDACachingAllocator.cpp
(block rounding, small/large pools, segment sizes, best-fit reuse, splitting and merging),
giving both `allocated_peak` and `reserved_peak`.
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from autoembed.memory.types import (
    LARGE_SEGMENT,
    MIN_LARGE_ALLOC,
    ROUND_LARGE,
    SMALL_SEGMENT,
    SMALL_SIZE,
    on_host,
    round_block,
)

__all__ = ["AllocationTracker", "CachingAllocatorModel", "PeakSnapshot"]

_LIFT_FRESH = torch.ops.aten.lift_fresh.default  # torch.tensor(number)


def _called_from_torch_optim() -> bool:
    """Whether the code that ran the op (past torch's private frames) is torch.optim's. Its
    torch.tensor(number) scalars live on the host: a non-capturable, non-fused group's
    `step` counters (Adam's and AdamW's made in the first step, Adagrad's in its
    constructor) and the foreach step's increment, torch.tensor(1.0, device="cpu"); the
    counters of a capturable or fused group, on the device, are torch.zeros((),
    device=p.device) (torch/optim/adam.py `_init_group`, `_multi_tensor_adam`;
    adagrad.py `__init__`)."""
    f: FrameType | None = sys._getframe(2)
    while f is not None and f.f_globals.get("__name__", "").startswith(
            ("torch._", "torch.utils.", __name__)):
        f = f.f_back
    return f is not None and f.f_globals.get("__name__", "").startswith("torch.optim.")


@dataclass
class _Block:
    offset: int
    size: int
    free: bool


@dataclass
class _Segment:
    size: int
    small: bool
    blocks: list[_Block] = field(default_factory=list)


class CachingAllocatorModel:
    """Replays malloc/free as the CUDA caching allocator would (no empty_cache, one stream).

    Rules (CUDACachingAllocator.cpp): sizes round up to 512 B; requests <= 1 MiB use the
    small pool of 2 MiB segments, others the large pool: 20 MiB segments below 10 MiB, else a
    segment of the request rounded up to 2 MiB; a free block is reused best-fit and split when
    the rest is >= 512 B (small pool) or > 1 MiB (large pool); freed neighbours merge.
    """

    def __init__(self) -> None:
        self.segments: list[_Segment] = []
        self.where: dict[int, tuple[_Segment, _Block]] = {}
        self.allocated = 0
        self.reserved = 0
        self.peak_allocated = 0
        self.peak_reserved = 0

    def malloc(self, key: int, nbytes: int) -> None:
        size = round_block(max(nbytes, 1))
        small = size <= SMALL_SIZE
        best: tuple[_Segment, _Block] | None = None
        for seg in self.segments:
            if seg.small != small:
                continue
            for b in seg.blocks:
                if b.free and b.size >= size and (best is None or b.size < best[1].size):
                    best = (seg, b)
        if best is None:
            if small:
                seg_size = SMALL_SEGMENT
            elif size < MIN_LARGE_ALLOC:
                seg_size = LARGE_SEGMENT
            else:
                seg_size = ROUND_LARGE * -(-size // ROUND_LARGE)
            seg = _Segment(seg_size, small, [_Block(0, seg_size, True)])
            self.segments.append(seg)
            self.reserved += seg_size
            best = (seg, seg.blocks[0])
        seg, b = best
        rest = b.size - size
        if rest >= (512 if small else SMALL_SIZE + 1):
            i = seg.blocks.index(b)
            seg.blocks.insert(i + 1, _Block(b.offset + size, rest, True))
            b.size = size
        b.free = False
        self.where[key] = (seg, b)
        self.allocated += b.size
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        self.peak_reserved = max(self.peak_reserved, self.reserved)

    def free(self, key: int) -> None:
        found = self.where.pop(key, None)
        if found is None:
            return
        seg, b = found
        self.allocated -= b.size
        b.free = True
        i = seg.blocks.index(b)
        if i + 1 < len(seg.blocks) and seg.blocks[i + 1].free:
            b.size += seg.blocks.pop(i + 1).size
        if i > 0 and seg.blocks[i - 1].free:
            prev = seg.blocks[i - 1]
            prev.size += b.size
            seg.blocks.pop(i)


def _is_grad_sum(func: Any, args: Any, kwargs: Any) -> bool:
    """Whether this op is autograd's sum of two same-shape gradients (see AllocationTracker)."""
    if func is not torch.ops.aten.add.Tensor or kwargs or len(args) != 2:
        return False
    a, b = args
    return (not torch.is_grad_enabled() and isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor) and a.layout == torch.strided
            and a.shape == b.shape and a.dtype == b.dtype and a.is_contiguous())


@dataclass(frozen=True)
class PeakSnapshot:
    """Bytes by category at the moment of the allocated peak, and the phase it fell in."""

    allocated: int
    phase: str
    by_category: dict[str, int]
    # owner -> category -> bytes, when the tracker was given `owners`
    by_owner: dict[str, dict[str, int]] = field(default_factory=dict)


class AllocationTracker(TorchDispatchMode):
    """Counts live storages created under it; `classify` names known storages at the peak.

    classify() returns {id(untyped storage): category} for storages whose role is known
    (parameters, gradients, optimizer state); others count as activations (allocated in the
    forward or backward) or temporaries (allocated in the optimizer step). `owners`, when
    given, returns {id(untyped storage): owner} (e.g. a module path); other storages are owned
    by the `label` set when they were allocated, else by their phase.

    `inplace_grad_sums`: autograd sums two gradients of one tensor (a table used twice, a
    tied head) in place on real tensors (`InputBuffer::accumulate`, `AccumulateGrad`) but out
    of place on a tensor subclass such as FakeTensor, which would price one extra copy. When
    set, a same-shape `aten.add.Tensor` with grad mode off (the backward) returns its first
    argument instead of a new tensor; values are never read under fake tensors.
    """

    def __init__(
        self,
        classify: Callable[[], dict[int, str]] | None = None,
        owners: Callable[[], dict[int, str]] | None = None,
    ) -> None:
        super().__init__()
        self.inplace_grad_sums = False
        self.owners = owners
        self.label = ""
        self.alloc = CachingAllocatorModel()
        self._phase = "setup"
        self.classify = classify
        self.peak: PeakSnapshot | None = None
        self.phase_peaks: dict[str, PeakSnapshot] = {}
        self._live: dict[int, tuple[int, str, str]] = {}  # id(storage) -> (bytes, phase, label)

    @property
    def phase(self) -> str:
        return self._phase

    @phase.setter
    def phase(self, name: str) -> None:
        """Enter a phase; what is live on entry counts toward it even if it allocates nothing."""
        self._phase = name
        self._note_peak()

    def _note_peak(self) -> None:
        best = self.phase_peaks.get(self._phase)
        if best is None or self.alloc.allocated > best.allocated:
            snap = self._snapshot()
            self.phase_peaks[self._phase] = snap
            if self.peak is None or snap.allocated > self.peak.allocated:
                self.peak = snap

    def _release(self, sid: int) -> None:
        self._live.pop(sid, None)
        self.alloc.free(sid)

    def register(self, t: torch.Tensor) -> None:
        """Count a tensor's storage once (also for tensors created before tracking began)."""
        if t.layout != torch.strided:
            return  # sparse tensors expose no storage; they are priced by formula
        if on_host():
            return  # host memory (`host_allocations`)
        st = t.untyped_storage()
        sid = id(st)
        if sid in self._live:
            return
        nbytes = st.nbytes()
        self._live[sid] = (nbytes, self.phase, self.label)
        self.alloc.malloc(sid, nbytes)
        weakref.finalize(st, self._release, sid)
        self._note_peak()

    def _snapshot(self) -> PeakSnapshot:
        known = self.classify() if self.classify is not None else {}
        owners = self.owners() if self.owners is not None else None
        cats: dict[str, int] = {}
        by_owner: dict[str, dict[str, int]] = {}
        for sid, (nbytes, phase, label) in self._live.items():
            cat = known.get(sid) or ("temporaries" if phase == "step" else "activations")
            cats[cat] = cats.get(cat, 0) + round_block(nbytes)
            if owners is not None:
                mine = by_owner.setdefault(owners.get(sid) or label or phase, {})
                mine[cat] = mine.get(cat, 0) + round_block(nbytes)
        return PeakSnapshot(self.alloc.allocated, self.phase, cats, by_owner)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if self.inplace_grad_sums and _is_grad_sum(func, args, kwargs):
            return args[0]  # real tensors sum in place (see `inplace_grad_sums`)
        out = func(*args, **(kwargs or {}))
        if func is _LIFT_FRESH and out.dim() == 0 and _called_from_torch_optim():
            return out  # a host scalar of torch's optimizers (`_called_from_torch_optim`)
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self.register(t)
        return out
