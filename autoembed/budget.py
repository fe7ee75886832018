"""`Budget`: a memory budget in bytes, parsed once (`Budget.of`: bytes, 8GB, 8GiB, 7500MB,
80%); `MemoryBudget`: the device and host budgets as one pair."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from autoembed.errors import BudgetError

__all__ = ["Budget", "BudgetLike", "MemoryBudget", "parse_size", "format_bytes",
           "with_device_memory", "below_overhead", "BUDGET_HELP"]

# Decimal (SI) and binary (IEC) multipliers, bytes per unit.
_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "k": 10**3,
    "m": 10**6,
    "g": 10**9,
    "t": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_SIZE = re.compile(r"^\s*([+-]?[0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([a-z]*)\s*$", re.IGNORECASE)
_SIZE_HINT = "use e.g. 8GB, 8GiB, 7.5G, 7500MB or 0.5TB"
_HINT = "use e.g. 8GB, 8GiB, 7.5G, 7500MB, 0.5TB or 80%"  # a budget may be a share
# --budget's help, every command's: the forms the refusal's hint names
BUDGET_HELP = f"Device memory budget: {_HINT.removeprefix('use e.g. ')}."


def parse_size(text: str, what: str = "size", hint: str = _SIZE_HINT) -> int:
    """Bytes in a size string; G/GB are 10**9, GiB is 2**30. A bad one is refused with
    `hint`, the fix: by default sizes only, as a share (80%) is not a size."""
    m = _SIZE.match(str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise _bad(what, text, "is not a size", hint)
    value = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if value <= 0:
        raise _bad(what, text, "must be greater than zero", hint)
    if not math.isfinite(value):  # '1e400GB' overflows a float
        raise _bad(what, text, "is too large to be a size", hint)
    if value < 1:
        raise _bad(what, text, "is less than one byte", hint)
    return int(value)


def _bad(what: str, value: object, problem: str, fix: str = _HINT) -> BudgetError:
    """The one message for a bad size or budget: WHAT 'VALUE' PROBLEM; FIX."""
    return BudgetError(f"{what} '{value}' {problem}; {fix}")


def format_bytes(n: int | float) -> str:
    """Both decimal and binary units, e.g. '8.00 GB (7.45 GiB)', so no one is surprised."""
    n = float(n)
    if abs(n) < 1000:
        return f"{int(n)} B"
    for unit, dec, binu, bin_ in (
        ("EB", 1e18, "EiB", 2**60),  # absurd sizes (a 2**63-row table) stay readable
        ("PB", 1e15, "PiB", 2**50),
        ("TB", 1e12, "TiB", 2**40),
        ("GB", 1e9, "GiB", 2**30),
        ("MB", 1e6, "MiB", 2**20),
        ("kB", 1e3, "KiB", 2**10),
    ):
        if abs(n) >= dec:
            return f"{n / dec:.2f} {unit} ({n / bin_:.2f} {binu})"
    return f"{int(n)} B"  # pragma: no cover


def below_overhead(budget: Budget, overhead: int, parts: str, least: int, of: str) -> str:
    """The one wording of a budget under the fixed overhead (made of `parts`) that every
    config's device total holds: no cheaper config can fit, so the fix is the budget, to at
    least `least` bytes (what `of` needs)."""
    return (f"the budget {budget.text} = {format_bytes(budget.bytes)} is below the fixed "
            f"overhead every config needs ({parts}), {format_bytes(overhead)}; raise --budget "
            f"to at least {format_bytes(least)}, what {of} needs")


@dataclass(frozen=True)
class Budget:
    """A budget in bytes, and the text it came from."""

    bytes: int
    text: str

    @classmethod
    def of(cls, value: BudgetLike, device_memory: int | None = None, *,
           what: str = "budget", share: bool = True,
           memory_option: str | None = None) -> Budget:
        """The one budget parser: a Budget as is, bytes as an int (>= 1), or a string: a size
        ("8GB", "8GiB", "7.5G", "7500MB") or, with `share`, a percentage of the device's
        memory ("80%": `device_memory`, else the visible GPU's). Bad input is a BudgetError
        (exit 2) naming `what` and the fix; `memory_option`: how the caller gives the
        device's memory (the CLI's --device-memory), named as a fix for a percentage
        without a GPU only where the command has it (None: it has none)."""
        if isinstance(value, Budget):
            return value
        hint = _HINT if share else _SIZE_HINT
        if isinstance(value, int) and not isinstance(value, bool):
            if value < 1:
                raise _bad(what, value, "must be at least one byte", hint)
            return cls(value, str(value))
        if isinstance(value, bool) or not isinstance(value, (str, float)):
            raise _bad(what, value, "is not a size", hint)
        s = str(value).strip()
        if share and s.endswith("%"):
            return cls(_share(what, s, device_memory, memory_option), s)
        return cls(parse_size(s, what, hint), s)

    @classmethod
    def for_host(cls, value: BudgetLike) -> Budget:
        """A host-memory budget: `Budget.of` without the percentage (of the GPU's memory)."""
        return cls.of(value, what="--host-budget", share=False)

    @classmethod
    def parse(cls, text: str, device_memory: int | None = None) -> Budget:
        """`Budget.of` (the older name)."""
        return cls.of(text, device_memory)

    def admits(self, need: int) -> bool:
        """The one "does it fit": `need` bytes are within the budget (equal fits)."""
        return need <= self.bytes

    def overshoot(self, need: int) -> float:
        """(need - budget) / budget: > 0 over the budget, <= 0 the slack."""
        return (need - self.bytes) / self.bytes


BudgetLike = Budget | int | str  # what `Budget.of` takes (a float reads as its text)


def with_device_memory(budget: str | None, device_memory: str | None) -> Budget | None:
    """`--budget` of a command that has `--device-memory` (the memory a percentage is of),
    both parsed; None without a budget."""
    dev_mem = parse_size(device_memory, "--device-memory") if device_memory else None
    if budget is None:
        return None
    return Budget.of(budget, dev_mem, what="--budget", memory_option="--device-memory")


def _share(what: str, text: str, device_memory: int | None,
           memory_option: str | None) -> int:
    """Bytes of a percentage `text` ("80%") of the device's memory."""
    try:
        pct = float(text[:-1])
    except ValueError:
        raise _bad(what, text, "is not a percentage") from None
    if not 0 < pct <= 100:
        raise _bad(what, text, "must be a percentage in (0, 100]")
    total = device_memory if device_memory is not None else detect_device_memory()
    if total is None:
        fix = f"give {memory_option} 24GB (say) or" if memory_option else "give"
        raise _bad(what, text, "is a share of the GPU's memory, but no GPU is visible",
                   f"{fix} an absolute budget like 8GB")
    if total * pct / 100 < 1:
        raise _bad(what, text, f"is less than one byte of {total} bytes")
    return int(total * pct / 100)


@dataclass(frozen=True)
class MemoryBudget:
    """What a training step may use: the device budget and the host one (host_cached
    tables' full copies; None: not limited). One typed pair from a search's --budget and
    --host-budget to its feasibility rules."""

    device: Budget
    host: Budget | None = None

    @classmethod
    def of(cls, device: BudgetLike, host: BudgetLike | None = None, *,
           device_memory: int | None = None) -> MemoryBudget:
        """Both sides parsed: `Budget.of` and `Budget.for_host`."""
        return cls(Budget.of(device, device_memory, what="--budget"),
                   None if host is None else Budget.for_host(host))


def detect_device_memory(index: int = 0) -> int | None:
    """Total memory of CUDA device `index`, or None when no GPU is visible (torch imported
    lazily)."""
    try:
        import torch
    except ImportError:  # pragma: no cover
        return None
    if not torch.cuda.is_available():
        return None
    return int(torch.cuda.get_device_properties(index).total_memory)
