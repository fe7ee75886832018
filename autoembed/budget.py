"""`Budget`: a device-memory budget parsed from a human string (8GB, 8GiB, 7500MB, 80%)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from autoembed.errors import BudgetError

__all__ = ["Budget", "parse_size", "format_bytes"]

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
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([a-z]*)\s*$", re.IGNORECASE)
_HINT = "use e.g. 8GB, 8GiB, 7.5G, 7500MB, 0.5TB or 80%"


def parse_size(text: str, what: str = "size") -> int:
    """Bytes in a size string; G/GB are 10**9, GiB is 2**30."""
    m = _SIZE.match(str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise BudgetError(f"{what} '{text}' is not a size; {_HINT}")
    value = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if value <= 0:
        raise BudgetError(f"{what} '{text}' must be greater than zero; {_HINT}")
    if not math.isfinite(value):  # '1e400GB' overflows a float
        raise BudgetError(f"{what} '{text}' is too large to be a size; {_HINT}")
    if value < 1:
        raise BudgetError(f"{what} '{text}' is less than one byte; {_HINT}")
    return int(value)


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


@dataclass(frozen=True)
class Budget:
    """A budget in bytes, and the text it came from."""

    bytes: int
    text: str

    @classmethod
    def parse(cls, text: str, device_memory: int | None = None) -> Budget:
        """Parse `text`; a percentage needs the device's memory (detected or given)."""
        s = str(text).strip()
        if s.endswith("%"):
            try:
                pct = float(s[:-1])
            except ValueError:
                raise BudgetError(f"budget '{text}' is not a percentage; {_HINT}") from None
            if not 0 < pct <= 100:
                raise BudgetError(f"budget '{text}' must be a percentage in (0, 100]")
            total = device_memory if device_memory is not None else detect_device_memory()
            if total is None:
                raise BudgetError(
                    f"budget '{text}' is a share of the GPU's memory, but no GPU is visible; "
                    "give --device-memory 24GB (say) or an absolute budget like 8GB"
                )
            if total * pct / 100 < 1:
                raise BudgetError(f"budget '{text}' is less than one byte of {total} bytes")
            return cls(int(total * pct / 100), s)
        return cls(parse_size(s, "budget"), s)


def detect_device_memory() -> int | None:
    """Total memory of CUDA device 0, or None when no GPU is visible (torch imported lazily)."""
    try:
        import torch
    except ImportError:  # pragma: no cover
        return None
    if not torch.cuda.is_available():
        return None
    return int(torch.cuda.get_device_properties(0).total_memory)
