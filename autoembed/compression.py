"""Rules of the compressions beyond hashing: ROBE, tensor-train and hot/cold (each method's
tensors, math and refusals: docs/compression.md).

Pure Python (no torch, no YAML; of autoembed only `errors`): the memory model prices these
shapes and the layers in `autoembed.models` build exactly them, so the two agree by
construction. Every function takes plain integers; a table's settings are passed in.
A TT row i = (i1, i2, i3) (i = i1 * v2 * v3 + i2 * v3 + i3) is G0[i1] . G1[i2] . G2[i3],
flattened to D in (k1, k2, k3) order; a ROBE row is the first D values of its blocks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from autoembed.errors import ConfigError
from autoembed.rules import Integer, Interval

__all__ = ["METHODS", "MethodRules", "METHOD_RULES", "HOT_ID_BYTES", "robe_blocks", "robe_shapes",
           "tt_rows", "tt_dims", "tt_shapes", "tt_init_std", "hot_count", "cold_rows",
           "hot_cold_shapes", "hot_cold_state_bytes", "hot_share_at_scale", "param_bytes",
           "check_robe", "check_tt", "check_hot_cold", "check_method", "takes_optimizer"]

METHODS = ("robe", "tt", "hot_cold")
HOT_ID_BYTES = 8  # one int64 per hot id in the sorted hot-id array


@dataclass(frozen=True)
class MethodRules:
    """What a method can be combined with.

    optimizers: table optimizers it takes. dense_gradients: its table tensors get dense
    gradients whatever the optimizer's sparse rule (price them as dense). serving: the serving
    formats it takes (int8/int4 pack 2-D rows; a method without rows to pack serves as
    trained). why_optimizer / why_serving: the reason given when one is refused.
    """

    name: str
    optimizers: tuple[str, ...]
    dense_gradients: bool
    serving: tuple[str, ...]
    why_optimizer: str = ""
    why_serving: str = ""


_DENSE_OPTIMIZERS = ("sgd", "momentum", "adam", "adamw", "adagrad")
_ALL_OPTIMIZERS = (*_DENSE_OPTIMIZERS, "rowwise_adagrad", "sparse_adam")

METHOD_RULES: dict[str, MethodRules] = {
    # rowwise_adagrad / sparse_adam need row-indexed sparse gradients: the array has no rows
    # (state per block would be state per overlapping window, i.e. per value: dense adagrad).
    # int8/int4 rows would straddle the arbitrary block offsets.
    "robe": MethodRules(
        "robe", _DENSE_OPTIMIZERS, True, ("none",),
        "robe's array gets dense gradients (blocks overlap: no rows for row-wise state)",
        "robe's array has no rows to quantize (blocks start at any offset)",
    ),
    # cores are read in full by every lookup: dense gradients; quantizing cores multiplies
    # three quantization errors into every row (not a row format the serving path packs).
    "tt": MethodRules(
        "tt", _DENSE_OPTIMIZERS, True, ("none",),
        "tt cores get dense gradients (every lookup reads whole cores)",
        "tt cores are not rows to quantize (three errors multiply into every row)",
    ),
    # a plain row table (hot rows, then cold buckets): everything a plain table takes
    "hot_cold": MethodRules("hot_cold", _ALL_OPTIMIZERS, False, ("none", "int8", "int4")),
}


# ------------------------------------------------------------------------------------ ROBE
def robe_blocks(dim: int, block: int) -> int:
    """Blocks of `block` values a row of `dim` reads: ceil(dim / block)."""
    return -(-dim // block)


def robe_shapes(size: int) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """The shared array: ("weight", (M,))."""
    return (("weight", (size,)),)


def check_robe(size: int, block: int) -> None:
    if size < 1:
        raise ConfigError(f"config key 'robe_size' = {size}: the array needs at least 1 value")
    if block < 1:
        raise ConfigError(f"config key 'robe_block' = {block}: a block holds >= 1 value")
    if block > size:
        raise ConfigError(
            f"config key 'robe_block' = {block}: a block longer than the array ({size} values) "
            "reads values twice; use robe_block <= robe_size"
        )


# ------------------------------------------------------------------------------ tensor-train
def _icbrt_ceil(n: int) -> int:
    """Smallest integer c with c**3 >= n (n >= 1), exactly."""
    c = max(1, round(n ** (1.0 / 3.0)))
    while c**3 < n:
        c += 1
    while c > 1 and (c - 1) ** 3 >= n:
        c -= 1
    return c


def tt_rows(vocab: int) -> tuple[int, int, int]:
    """Row factors (v1, v2, v3) with v1 * v2 * v3 >= vocab, near-cubic: v1 = v2 = ceil(cbrt V),
    v3 = ceil(V / (v1 * v2)). The padding (at most v1 * v2 - 1 rows) is never looked up."""
    v = _icbrt_ceil(vocab)
    return v, v, -(-vocab // (v * v))


def tt_dims(dim: int) -> tuple[int, int, int]:
    """Dim factors (d1, d2, d3), d1 <= d2 <= d3, d1 * d2 * d3 = dim exactly, the most balanced
    (smallest d3, then smallest d3 - d1): 16 -> (2, 2, 4), 64 -> (4, 4, 4), 13 -> (1, 1, 13)."""
    best: tuple[int, int, int] | None = None
    for a in range(1, _icbrt_ceil(dim) + 1):
        if dim % a:
            continue
        rest = dim // a
        for b in range(a, math.isqrt(rest) + 1):
            if rest % b:
                continue
            c = rest // b
            key = (c, c - a)
            if best is None or key < (best[2], best[2] - best[0]):
                best = (a, b, c)
    assert best is not None  # (1, 1, dim) always qualifies
    return best


def tt_shapes(vocab: int, dim: int, rank: int) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """The three cores: core0 [v1, d1 r], core1 [v2, r d2 r], core2 [v3, r d3]."""
    v1, v2, v3 = tt_rows(vocab)
    d1, d2, d3 = tt_dims(dim)
    return (
        ("core0", (v1, d1 * rank)),
        ("core1", (v2, rank * d2 * rank)),
        ("core2", (v3, rank * d3)),
    )


def tt_init_std(dim: int, rank: int) -> float:
    """Core entry std so a reconstructed entry (a sum of r**2 products of three) has
    std 1/sqrt(dim), like a plain table's rows: sigma**6 * r**2 = 1/dim."""
    return float((1.0 / (dim * rank * rank)) ** (1.0 / 6.0))


# The bounds of tt_rank and hot_share, declared once: the config's field metadata reads these.
TT_RANK_RULE = Integer(1)
HOT_SHARE_RULE = Interval(0.0, 1.0, open_low=True)


def check_tt(rank: int) -> None:
    TT_RANK_RULE.check("tt_rank", rank)


# --------------------------------------------------------------------------------- hot/cold
def hot_count(vocab: int, share: float) -> int:
    """Hot ids of a table: ceil(share * vocab), at least 1, at most vocab."""
    return max(1, min(vocab, math.ceil(share * vocab - 1e-9)))


def cold_rows(vocab: int, share: float, buckets: int) -> int:
    """Cold buckets: min(buckets, ids left after the hot ones) (0 when every id is hot)."""
    return min(buckets, vocab - hot_count(vocab, share))


def hot_cold_shapes(
    vocab: int, dim: int, share: float, buckets: int
) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """One weight [hot + cold, dim]."""
    return (("weight", (hot_count(vocab, share) + cold_rows(vocab, share, buckets), dim)),)


def hot_cold_state_bytes(vocab: int, share: float) -> int:
    """Bytes of the sorted hot-id array (a buffer, not trained): 8 B per hot id."""
    return HOT_ID_BYTES * hot_count(vocab, share)


def hot_share_at_scale(share: float, vocab: int, scaled_vocab: int, exponent: float) -> float:
    """The hot share of a `scaled_vocab`-id table whose hot set covers the same share of
    lookups as `share` of a `vocab`-id table's does, both Zipf over ranks with `exponent`
    (`autoembed.zipf`: the top k ranks take F_V(k + 1) of the lookups). Under Zipf the
    top 1% of 40M ids take far more lookups (95% at exponent 1.2) than the top 1% of 40k
    (79%): a stand-in that kept the share of rows would shrink the hot set's role."""
    from autoembed.zipf import zipf_cdf, zipf_ranks  # numpy; rules stay import-light

    cover = float(zipf_cdf(hot_count(vocab, share) + 1, vocab, exponent))
    k = max(1, int(zipf_ranks(min(cover, 1.0 - 1e-16), scaled_vocab, exponent)))
    while k < scaled_vocab and float(zipf_cdf(k + 1, scaled_vocab, exponent)) < cover - 1e-12:
        k += 1  # the least k covering as much (the inverse floors)
    while k > 1 and float(zipf_cdf(k, scaled_vocab, exponent)) >= cover - 1e-12:
        k -= 1
    return min(1.0, k / scaled_vocab)


def check_hot_cold(share: float, buckets: int) -> None:
    HOT_SHARE_RULE.check("hot_share", share)
    if buckets < 1:
        raise ConfigError(
            f"config key 'hash_buckets' = {buckets}: hot_cold hashes cold ids into >= 1 bucket"
        )


# ------------------------------------------------------------------------------------ shared
def param_bytes(shapes: tuple[tuple[str, tuple[int, ...]], ...], element_bytes: int) -> int:
    """Bytes of the listed tensors at `element_bytes` each (before allocator rounding)."""
    return sum(math.prod(shape) for _, shape in shapes) * element_bytes


def takes_optimizer(compression: str, optimizer: str) -> bool:
    """Whether a table under `compression` (any, robe/tt/hot_cold or not) can take `optimizer`."""
    rules = METHOD_RULES.get(compression)
    return rules is None or optimizer in rules.optimizers


def check_method(method: str, optimizer: str, serving: str) -> None:
    """Refuse a table optimizer or serving format the method cannot take."""
    rules = METHOD_RULES[method]
    if optimizer not in rules.optimizers:
        raise ConfigError(
            f"config key 'table_optimizer' = {optimizer!r}: {rules.why_optimizer}; use one of "
            f"{', '.join(rules.optimizers)} with compression {method}"
        )
    if serving not in rules.serving:
        raise ConfigError(
            f"config key 'serving' = {serving!r}: {rules.why_serving}; use serving "
            f"{' or '.join(rules.serving)} with compression {method}"
        )
