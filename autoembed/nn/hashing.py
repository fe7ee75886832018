"""Id -> row maps for compressed tables: the hashing trick and quotient-remainder.

Hash (Weinberger et al., 2009): an id's bucket is the (id + 1)-th output of a splitmix64
generator seeded with `seed` (Steele, Lea and Flood, 2014; the constants are splitmix64's):

    z = seed + (id + 1) * 0x9E3779B97F4A7C15            (mod 2**64)
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9            (mod 2**64, logical shifts)
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB
    z =  z ^ (z >> 31)
    bucket = (z mod 2**63) mod buckets

It is written in torch int64 arithmetic, which wraps modulo 2**64 on every backend, with the
logical right shifts emulated by an arithmetic shift and a mask; so it runs on any device and
under fake tensors, and the same (id, seed, buckets) gives the same bucket in every process
(tested against a pure-Python reference). Dropping the top bit before the modulo biases a
bucket by at most buckets / 2**63.

Collisions: ids that land in the same bucket share one row (and its gradient); n distinct ids
fill about buckets * (1 - exp(-n / buckets)) buckets. A table whose vocabulary fits
(V <= buckets) is not hashed at all: the map is the identity and there are no collisions.

Quotient-remainder (Shi et al., 2019): id -> (id // m, id % m) indexes a ceil(V/m)-row and an
m-row table; every id in [0, V) gets a distinct (q, r) pair, so no two ids share both rows.
"""

from __future__ import annotations

import torch

__all__ = ["hash_ids", "hash_id_reference", "qr_indices", "seed_int64", "SPLITMIX64_GAMMA"]

_MASK64 = (1 << 64) - 1
_MASK63 = (1 << 63) - 1
# splitmix64 increment and finaliser multipliers (Steele et al., OOPSLA 2014; Vigna's C code).
SPLITMIX64_GAMMA = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB


def _signed(u: int) -> int:
    """A uint64 value as the int64 with the same bits (torch has no uint64 arithmetic)."""
    u &= _MASK64
    return u - (1 << 64) if u >> 63 else u


def _srl(x: torch.Tensor, s: int) -> torch.Tensor:
    """Logical right shift of int64 bits: arithmetic shift, then clear the sign-extended bits."""
    return (x >> s) & ((1 << (64 - s)) - 1)


def seed_int64(seed: int) -> int:
    """What the hash reads of a seed: its low 64 bits, as an int64 (seeds equal mod 2**64
    hash alike)."""
    return _signed(seed)


def hash_ids(ids: torch.Tensor, buckets: int, seed: int = 0) -> torch.Tensor:
    """Bucket in [0, buckets) of every non-negative int64 id (see the module docstring)."""
    if buckets < 1:
        raise ValueError(f"buckets = {buckets}: must be >= 1")
    z = ids.to(torch.int64) * _signed(SPLITMIX64_GAMMA) + _signed(seed + SPLITMIX64_GAMMA)
    z = (z ^ _srl(z, 30)) * _signed(_MIX1)
    z = (z ^ _srl(z, 27)) * _signed(_MIX2)
    z = z ^ _srl(z, 31)
    return torch.remainder(z & _MASK63, buckets)


def hash_id_reference(i: int, buckets: int, seed: int = 0) -> int:
    """Pure-Python splitmix64 bucket of one id: the specification `hash_ids` is tested against."""
    z = (seed + (i + 1) * SPLITMIX64_GAMMA) & _MASK64
    z = ((z ^ (z >> 30)) * _MIX1) & _MASK64
    z = ((z ^ (z >> 27)) * _MIX2) & _MASK64
    z ^= z >> 31
    return (z & _MASK63) % buckets


def qr_indices(ids: torch.Tensor, m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(quotient, remainder) rows of non-negative ids for a QR table with `m` collisions."""
    return torch.div(ids, m, rounding_mode="floor"), torch.remainder(ids, m)
