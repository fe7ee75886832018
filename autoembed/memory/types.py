"""Memory figures (docs/contracts.md#memory-figures) and the CUDA caching allocator's rounding
rules."""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from autoembed.budget import Budget, BudgetLike

__all__ = ["BYTE_FIGURES", "MemoryEstimate", "TableMemory", "GpuShare", "CacheTable",
           "ModuleMemory", "round_block", "CATEGORIES", "traced_figures", "reserved_for",
           "reserved_bound", "CUDA_CONTEXT_BYTES", "CUBLAS_WORKSPACE_BYTES", "overhead_bytes",
           "host_allocations", "on_host"]

# c10/cuda/CUDACachingAllocator.cpp: every block is a multiple of kMinBlockSize = 512 B.
MIN_BLOCK = 512
# Requests <= kSmallSize (1 MiB) come from kSmallBuffer (2 MiB) segments.
SMALL_SIZE = 1 << 20
SMALL_SEGMENT = 2 << 20
# Requests < kMinLargeAlloc (10 MiB) come from kLargeBuffer (20 MiB) segments.
MIN_LARGE_ALLOC = 10 << 20
LARGE_SEGMENT = 20 << 20
# Larger requests are rounded up to kRoundLarge (2 MiB).
ROUND_LARGE = 2 << 20
# CUDA context + kernels loaded by torch, outside both allocator figures. Driver- and
# GPU-dependent: 300-600 MB on A100/H100 class GPUs with CUDA 12 (docs/contracts.md#cuda-context);
# the default takes the high end so that `fits` errs on the safe side. Override with
# --context-bytes.
CUDA_CONTEXT_BYTES = 512 * 2**20
# cuBLAS workspace on Hopper: torch's default CUBLAS_WORKSPACE_CONFIG is 32 MiB per handle
# (aten/src/ATen/cuda/CublasHandlePool.cpp, getChosenWorkspaceSize).
CUBLAS_WORKSPACE_BYTES = 32 * 2**20


# The integer byte figures of a MemoryEstimate, in the order reports show them.
BYTE_FIGURES = (
    "parameters",
    "gradients",
    "optimizer_state",
    "activations",
    "temporaries",
    "allocated_peak",
    "reserved_peak",
    "overhead",
    "device_total",
    "serving_bytes",
)


# The categories a step's live bytes fall in (MemoryEstimate's first five figures).
CATEGORIES = ("parameters", "gradients", "optimizer_state", "activations", "temporaries")


def round_block(nbytes: int) -> int:
    """Bytes the caching allocator hands out for a request (max_memory_allocated counts these)."""
    if nbytes <= 0:
        return 0
    return MIN_BLOCK * -(-math.ceil(nbytes) // MIN_BLOCK)  # integer ceil: exact past 2**53


def reserved_for(blocks: Iterable[int]) -> int:
    """Segment bytes (max_memory_reserved) for a set of blocks live at once.

    Small blocks pack into 2 MiB segments, mid-size ones into 20 MiB segments, large ones get
    their own segment rounded to 2 MiB. A lower bound: fragmentation from earlier frees can
    only add to it (the traced estimator replays the real sequence).
    """
    small = mid = large = 0
    for b in blocks:
        b = round_block(b)
        if b <= SMALL_SIZE:
            small += b
        elif b < MIN_LARGE_ALLOC:
            mid += b
        else:
            large += ROUND_LARGE * -(-b // ROUND_LARGE)
    return (
        SMALL_SEGMENT * -(-small // SMALL_SEGMENT)
        + LARGE_SEGMENT * -(-mid // LARGE_SEGMENT)
        + large
    )


def reserved_bound(blocks: Iterable[int]) -> int:
    """Segment bytes that hold `blocks` if each is allocated once, in any order, and kept.

    Rules (CUDACachingAllocator.cpp, trace/tracker.py): a block never spans segments; a
    segment is added only when no free block fits the request; blocks <= 1 MiB (small) take
    2 MiB segments, mid-size ones (< 10 MiB) 20 MiB segments, large ones (>= 10 MiB) a
    segment of their own rounded up to 2 MiB, or any free large-pool block that fits.
    In a pool whose blocks are never freed each segment has one free block, its end, so a
    segment closes only when its end is below the request that opens the next one: with m
    the largest small (mid) block, all but the last hold more than s - m bytes (s = 2 MiB,
    20 MiB), so n bytes need at most floor(n / (s - m)) + 1 segments. A large block may
    land in a 20 MiB segment's end instead of its own segment (at most one per segment: it
    leaves under 10 MiB): x bytes of them there save their own segments (>= x) and may add
    20 MiB segments, at most 20 MiB x floor((r + x) / (20 MiB - m)) with r the mid bytes
    past the last full (20 MiB - m); the net, maximal where a segment is just opened, is at
    most K x m + r with K = floor((r + X) / (20 MiB - m)), X the large blocks under 20 MiB.
    """
    small: list[int] = []
    mid: list[int] = []
    roaming = 0  # large blocks that fit a 20 MiB segment
    total = 0
    for b in map(round_block, blocks):
        if b >= MIN_LARGE_ALLOC:
            total += ROUND_LARGE * -(-b // ROUND_LARGE)
            roaming += b if b < LARGE_SEGMENT else 0
        elif b > SMALL_SIZE:
            mid.append(b)
        elif b:
            small.append(b)
    if small:
        total += SMALL_SEGMENT * (sum(small) // (SMALL_SEGMENT - max(small)) + 1)
    if mid:
        m = max(mid)
        full, rest = divmod(sum(mid), LARGE_SEGMENT - m)
        displaced = (rest + roaming) // (LARGE_SEGMENT - m)
        total += LARGE_SEGMENT * (full + 1) + (displaced * m + rest if displaced else 0)
    return total


@dataclass(frozen=True)
class TableMemory:
    """Bytes for one embedding table (all its tensors under the chosen compression)."""

    name: str
    rows: int
    dim: int
    parameters: int
    gradients: int
    optimizer_state: int
    serving_bytes: int


@dataclass(frozen=True)
class ModuleMemory:
    """Bytes one part of a user's model holds at the peak (`estimate_model`): `kind` "table"
    (an embedding module, by its path), "module" (a top-level module's other parameters and
    the activations its forward saved) or "step" (what no module owns: the loss, the
    backward's and the optimizer step's own tensors)."""

    name: str
    kind: str
    parameters: int
    gradients: int
    optimizer_state: int
    activations: int
    temporaries: int


@dataclass(frozen=True)
class CacheTable:
    """One host_cached table's pricing (`memory/cache_model.py`): rows on the host, rows in
    the device cache, bytes one row moves with (weight + optimizer state), host bytes, device
    bookkeeping bytes, the Zipf exponent used, the expected miss rate per lookup, misses and
    bytes moved (both ways) per training step."""

    name: str
    rows: int
    cache_rows: int
    dim: int
    row_bytes: int
    host_bytes: int
    device_bookkeeping: int
    zipf_exponent: float
    miss_rate: float
    misses_per_step: float
    transfer_bytes_per_step: int


@dataclass(frozen=True)
class GpuShare:
    """What one GPU holds under sharding: its tables' bytes plus the replicated rest."""

    gpu: int
    tables: tuple[str, ...]
    allocated_peak: int
    device_total: int


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes by category for one training step, and the figures docs/contracts.md names.

    Each category is its own high-water mark; `allocated_peak` is the concurrent peak (what
    torch.cuda.max_memory_allocated would read), `reserved_peak` the allocator segments,
    `device_total` = reserved_peak + overhead, which a budget is checked against.
    """

    method: str
    parameters: int
    gradients: int
    optimizer_state: int
    activations: int
    temporaries: int
    allocated_peak: int
    reserved_peak: int
    overhead: int
    device_total: int
    serving_bytes: int
    tables: tuple[TableMemory, ...]
    peak_phase: str = ""
    budget: int | None = None
    gpus: int = 1
    sharding: str = "table"
    per_gpu: tuple[GpuShare, ...] = field(default_factory=tuple)
    notes: tuple[str, ...] = field(default_factory=tuple)
    # placement host_cached: host memory, beside the contract's device figures
    host_bytes: int = 0
    cache: tuple[CacheTable, ...] = field(default_factory=tuple)
    host_budget: int | None = None
    # estimate_model: the breakdown by module path (tables, top-level modules, the step)
    modules: tuple[ModuleMemory, ...] = field(default_factory=tuple)

    @property
    def fits(self) -> bool | None:
        """device_total within the budget (None: no budget given)."""
        return _admits(self.budget, self.device_total)

    @property
    def host_fits(self) -> bool | None:
        """host_bytes within the host budget (None: no host budget given)."""
        return _admits(self.host_budget, self.host_bytes)

    def with_budget(self, budget: BudgetLike | None) -> MemoryEstimate:
        """This estimate judged against `budget` (what `Budget.of` takes; None: none)."""
        from dataclasses import replace

        return replace(self, budget=None if budget is None else Budget.of(budget).bytes)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)  # nested dataclasses as dicts; their tuples as lists below
        d.update({k: list(d[k]) for k in ("tables", "per_gpu", "notes", "cache", "modules")})
        d.update(fits=self.fits, host_fits=self.host_fits)
        return d


_HOST = threading.local()


@contextlib.contextmanager
def host_allocations() -> Iterator[None]:
    """Tensors created in this context live in host memory, not on the device (a host-cached
    table's full copy): the traced estimate's `AllocationTracker` does not count them."""
    before = on_host()
    _HOST.on = True
    try:
        yield
    finally:
        _HOST.on = before


def on_host() -> bool:
    """Whether this thread is inside `host_allocations`."""
    return bool(getattr(_HOST, "on", False))


def overhead_bytes(reserve: int, context_bytes: int = CUDA_CONTEXT_BYTES) -> int:
    """The fixed overhead beside the allocator's bytes: the CUDA context, cuBLAS' workspace
    and the `reserve` for the rest of the user's process."""
    return context_bytes + CUBLAS_WORKSPACE_BYTES + reserve


def traced_figures(peak: Any, **rest: Any) -> MemoryEstimate:
    """A traced MemoryEstimate from a traced step's `peak` (`trace.traced.StepPeak`: the
    bytes by category live at it, 0 where absent; its allocated and reserved bytes, phase
    and the fixed overhead); device_total = reserved + overhead; `rest`: the other fields."""
    figures: dict[str, Any] = {c: peak.categories.get(c, 0) for c in CATEGORIES}
    return MemoryEstimate(method="traced", **figures, allocated_peak=peak.allocated,
                          reserved_peak=peak.reserved, overhead=peak.overhead,
                          device_total=peak.reserved + peak.overhead, peak_phase=peak.phase,
                          **rest)


def _admits(budget: int | None, need: int) -> bool | None:
    """`Budget.admits` for a budget stored as bytes (None: no budget, no verdict)."""
    return None if budget is None else Budget(budget, str(budget)).admits(need)
