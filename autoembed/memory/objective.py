"""The memory objective a search minimises: what the configs change (issue 15).

`device_total` = reserved_peak + overhead is what a budget is checked against, but as an
objective it hides the tables: the overhead (CUDA context, cuBLAS workspace, `--reserve`) is
the same for every config, and reserved_peak rounds the tensors up to allocator segments
(2 MiB for blocks up to 1 MiB, 20 MiB up to 10 MiB), so on tables of a few thousand rows every
proposal prices at the same 512 MiB + 32 MiB + one segment. The objective is therefore the
training step's `allocated_peak`: the bytes the config's own tensors (tables, gradients,
optimizer state, activations, temporaries) hold at the step's peak, byte for byte, above the
fixed context and workspace. On a GPU the measured `torch.cuda.max_memory_allocated` stands
in for it. The budget check keeps using `device_total`.
"""

from __future__ import annotations

from autoembed.memory.types import MemoryEstimate

__all__ = ["memory_objective"]


def memory_objective(est: MemoryEstimate, measured_allocated_peak: int | None = None) -> int:
    """Device bytes a config's training step holds above the fixed overhead: the measured
    allocated peak when a GPU measured one, else the estimate's `allocated_peak`."""
    if measured_allocated_peak is not None:
        return int(measured_allocated_peak)
    return int(est.allocated_peak)
