"""A discretised continuous power law over ranks [0, V): Zipf-like ids without V-sized arrays.

A rank is floor(X) - 1 where X has density proportional to x^-s on [1, V + 1), so

    P(rank < k) = F(k + 1),   F(x) = expm1((1 - s) ln x) / expm1((1 - s) ln(V + 1))
    p_k = P(rank = k) = F(k + 2) - F(k + 1)

(F(x) = ln x / ln(V + 1) when s = 1; s = 0 is uniform, p_k = 1 / V). Sampling is the inverse
of F applied to a uniform, so any V (10^8 and more) costs nothing but the draws. For large k,
p_k ~ k^-s: the Zipf law with exponent s.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

__all__ = ["zipf_ranks", "zipf_cdf", "zipf_probability", "zipf_frequency"]

FloatArray = npt.NDArray[np.float64]

_LOG_FORM = 1e-12  # |1 - s| below this: use the s = 1 (logarithmic) form
_EXACT_MAX = 1 << 20  # sum p_k^2 term by term up to this many ranks
_HEAD = 1 << 16  # beyond _EXACT_MAX: exact over this head, integral over the tail
_CHUNK = 1 << 18


def zipf_cdf(x: npt.ArrayLike, vocab_size: int, exponent: float) -> FloatArray:
    """F(x) = P(X < x) for x in [1, V + 1]."""
    xs = np.asarray(x, dtype=np.float64)
    a = 1.0 - exponent
    top = math.log(vocab_size + 1)
    if abs(a) < _LOG_FORM:
        return np.log(xs) / top
    out: FloatArray = np.expm1(a * np.log(xs)) / math.expm1(a * top)
    return out


def zipf_ranks(u: npt.ArrayLike, vocab_size: int, exponent: float) -> npt.NDArray[np.int64]:
    """Ranks in [0, V) for uniforms u in [0, 1): the inverse of `zipf_cdf`, floored."""
    us = np.asarray(u, dtype=np.float64)
    a = 1.0 - exponent
    top = math.log(vocab_size + 1)
    if abs(a) < _LOG_FORM:
        x = np.exp(us * top)
    else:
        x = np.exp(np.log1p(us * math.expm1(a * top)) / a)
    ranks = np.floor(x).astype(np.int64) - 1
    return np.clip(ranks, 0, vocab_size - 1)


def zipf_probability(k: npt.ArrayLike, vocab_size: int, exponent: float) -> FloatArray:
    """p_k = P(rank = k)."""
    ks = np.asarray(k, dtype=np.float64)
    return zipf_cdf(ks + 2.0, vocab_size, exponent) - zipf_cdf(ks + 1.0, vocab_size, exponent)


def zipf_frequency(vocab_size: int, exponent: float) -> float:
    """sum_k p_k^2: the share of lookups that go to the average row (TableConfig.frequency).

    Exact for V <= 2^20; beyond, exact over the first 2^16 ranks plus the tail as an integral
    of the density squared (midpoint rule; relative error of the tail below 1e-9).
    """
    v = vocab_size
    head = v if v <= _EXACT_MAX else _HEAD
    total = 0.0
    for start in range(0, head, _CHUNK):
        p = zipf_probability(np.arange(start, min(head, start + _CHUNK)), v, exponent)
        total += float(np.dot(p, p))
    if head < v:
        # density f(x) = x^-s / D, D = integral_1^{V+1} x^-s dx; p_k ~ f(k + 1.5)
        a = 1.0 - exponent
        top = math.log(v + 1)
        d = top if abs(a) < _LOG_FORM else math.expm1(a * top) / a
        lo, hi = math.log(head + 1), top
        b = 1.0 - 2.0 * exponent  # integral of x^-2s = x^b / b
        tail = hi - lo if abs(b) < _LOG_FORM else (math.exp(b * hi) - math.exp(b * lo)) / b
        total += tail / (d * d)
    return min(1.0, total)
