"""Counter-based pseudo-randomness: every random quantity of the synthetic data is a pure
function of integer keys (seed, purpose, split, row, field, id ...), computed by hashing.

Nothing is drawn from a stateful generator and nothing is stored per id, so a row or an id's
planted effect can be recomputed anywhere, in any order, for vocabularies of 10^8 and more.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["U64", "hash64", "uniform", "normal", "permute"]

U64 = npt.NDArray[np.uint64]

# splitmix64 constants (Steele, Lea & Flood, "Fast splittable pseudorandom number
# generators", OOPSLA 2014; Vigna's reference implementation).
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MUL1 = np.uint64(0xBF58476D1CE4E5B9)
_MUL2 = np.uint64(0x94D049BB133111EB)
_START = np.uint64(0x243F6A8885A308D3)  # hex digits of pi: any fixed odd start works
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)
_TWO_POW_M53 = 2.0**-53
_TWO_POW_M32 = 2.0**-32


def _mix(x: U64) -> U64:
    """splitmix64 finaliser: a bijection of uint64 with full avalanche."""
    x = x + _GOLDEN
    x = (x ^ (x >> _S30)) * _MUL1
    x = (x ^ (x >> _S27)) * _MUL2
    return x ^ (x >> _S31)


def hash64(*parts: int | npt.ArrayLike) -> U64:
    """Hash non-negative integer keys (scalars or broadcastable arrays) to uint64."""
    with np.errstate(over="ignore"):
        h = np.atleast_1d(_START)
        for p in parts:
            h = _mix(h ^ np.asarray(p).astype(np.uint64))
    return h


def uniform(h: U64) -> npt.NDArray[np.float64]:
    """The top 53 bits of a hash as a float in [0, 1)."""
    return (h >> np.uint64(11)).astype(np.float64) * _TWO_POW_M53


def normal(h: U64) -> npt.NDArray[np.float64]:
    """A standard normal per hash (Box-Muller on the two 32-bit halves)."""
    u1 = ((h >> np.uint64(32)).astype(np.float64) + 0.5) * _TWO_POW_M32  # (0, 1): log is finite
    u2 = (h & np.uint64(0xFFFFFFFF)).astype(np.float64) * _TWO_POW_M32
    out: npt.NDArray[np.float64] = np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)
    return out


_FEISTEL_ROUNDS = 4  # 4 rounds of a Feistel network give a pseudo-random permutation (Luby-Rackoff)


def permute(x: npt.ArrayLike, n: int, key: int) -> npt.NDArray[np.int64]:
    """A keyed bijection of [0, n) applied to `x` (values in [0, n)), without any n-sized array.

    A balanced Feistel network permutes [0, 4^h) with 4^h >= n; values that land outside
    [0, n) are permuted again until they land inside ("cycle walking", Black & Rogaway 2002),
    which keeps the map a bijection of [0, n). Expected passes: 4^h / n < 4.
    """
    arr = np.asarray(x, dtype=np.int64)
    if n <= 1:
        return np.zeros_like(arr)
    half = max(1, ((n - 1).bit_length() + 1) // 2)
    mask = np.uint64((1 << half) - 1)
    shift = np.uint64(half)
    flat = arr.reshape(-1).astype(np.uint64)

    def feistel(v: U64) -> U64:
        left, right = v >> shift, v & mask
        for r in range(_FEISTEL_ROUNDS):
            left, right = right, left ^ (hash64(key, r, right) & mask)
        return (left << shift) | right

    y = feistel(flat)
    out = y >= np.uint64(n)
    while out.any():
        y[out] = feistel(y[out])
        out = y >= np.uint64(n)
    return y.astype(np.int64).reshape(arr.shape)
