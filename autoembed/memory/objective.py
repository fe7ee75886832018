"""The memory objective a search minimises: what the configs change (why it is the training
step's `allocated_peak` and not the budget's `device_total`: docs/searching.md, "The memory
objective"). On a GPU the measured `torch.cuda.max_memory_allocated` stands in for it.

A study records the basis it was started with (`MEMORY_BASIS`, study settings key
`memory_basis`); a study stored before there was a choice has none and keeps `LEGACY_BASIS`
(device_total, or the measured reserved peak + overhead), so that its old and new trials
compare on one scale when it is resumed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autoembed.rules import OneOf

__all__ = ["memory_value", "MEMORY_BASES", "MEMORY_BASIS",
           "LEGACY_BASIS", "check_basis", "memory_note", "judged", "judged_text"]

MEMORY_BASES = ("allocated_peak", "device_total")
MEMORY_BASIS = "allocated_peak"  # a new study's
LEGACY_BASIS = "device_total"  # a study stored without one


def check_basis(basis: str) -> str:
    """`basis` when it is one of MEMORY_BASES; ConfigError otherwise."""
    OneOf(MEMORY_BASES).check_argument("memory_basis", basis)
    return basis


def memory_value(
    estimate: Mapping[str, Any], basis: str = MEMORY_BASIS, *,
    measured_allocated: int | None = None, measured_reserved: int | None = None,
) -> float:
    """A trial's `memory` objective from its stored estimate (`MemoryEstimate.to_dict()`)
    on `basis`: allocated_peak (the measured allocated peak when given), or device_total
    (the measured reserved peak + the estimate's overhead when given)."""
    if check_basis(basis) == "allocated_peak":
        if measured_allocated is not None:
            return float(measured_allocated)
        return float(int(estimate.get("allocated_peak", 0)))
    if measured_reserved is not None:
        return float(measured_reserved + int(estimate.get("overhead", 0)))
    return float(int(estimate.get("device_total", 0)))


def memory_note(basis: str | None) -> str:
    """The one line that says which memory is the objective and which is judged."""
    what = ("the allocated peak" if (basis or MEMORY_BASIS) == "allocated_peak"
            else "the device total")
    return (f"memory = {what}, the objective; device total = reserved peak + fixed overhead "
            "(CUDA context, cuBLAS workspace), what the budget judges")


def judged(estimate: Mapping[str, Any], budget_bytes: int | None, budget: str | None = None,
           basis: str | None = None) -> dict[str, Any]:
    """A trial's memory as best.yaml's `source.memory` holds it: the objective's basis, the
    allocated peak, the device total the budget judged and its share of the budget."""
    total = int(estimate.get("device_total", 0))
    out: dict[str, Any] = {"objective": basis or MEMORY_BASIS,
                           "allocated_peak": int(estimate.get("allocated_peak", 0)),
                           "device_total": total}
    if budget_bytes:
        out.update(budget=budget or str(budget_bytes), budget_bytes=int(budget_bytes),
                   budget_share=round(total / budget_bytes, 4))
    return out


def judged_text(device_total: int, budget_bytes: int | None) -> str:
    """`device total 897.58 MB (89.8% of the budget)`: the bytes the budget judges."""
    from autoembed.budget import format_bytes

    short = format_bytes(device_total).split(" (")[0]  # decimal units only: a cell's width
    share = f" ({100 * device_total / budget_bytes:.1f}% of the budget)" if budget_bytes else ""
    return f"device total {short}{share}"
