"""How `autoembed.nn` layers start: the moments a table's rows start with, and the draws
that give a compressed table's composed rows those moments.

A layer's rows start with a mean and a standard deviation per table (one figure each, over
every entry of every row but the padding row): torch's nn.Embedding default (0, 1) unless
the layer is given `init` (a (mean, std) pair, or a torch init function whose table's
moments it takes, `table_moments`), or `autoembed.apply` measures the table it replaces.
Each storage draws its parameters so that its composed rows (hash bucket, QR product or
sum, mixed-dim projection, TT product, ROBE window, hot/cold row) have them; the draws of
the products are here: `mean_one_factors` (QR mult, TT of rank 1 with a mean),
`draw_projected` (mixed_dim), `draw_tt` (tensor train).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch._subclasses.fake_tensor import is_fake

from autoembed.errors import ConfigError

__all__ = ["DEFAULT", "table_moments", "init_moments", "call_init", "mean_one_factors",
           "draw_projected", "draw_tt"]

DEFAULT = (0.0, 1.0)  # torch's nn.Embedding / nn.EmbeddingBag: N(0, 1) rows
# the spread of a product's mean-one factors (their variance, at a mean of zero): QR mult's
# remainder rows start at 1 +- 0.5, so ids sharing a quotient row start apart
FACTOR_SPREAD = 0.25
_CHUNK = 1 << 20  # entries read at a time when measuring a table


@torch.no_grad()
def table_moments(weight: torch.Tensor, padding_idx: int | None = None) -> tuple[float, float]:
    """(mean, std) of `weight`'s [V, D] entries, the padding row left out (population std;
    two passes in float64, chunked). The mean is 0 where it is within three standard
    errors of zero: the noise of a zero-mean draw, not a mean of the table's."""
    w = weight.detach()
    keep = torch.ones(w.shape[0], dtype=torch.bool, device=w.device)
    if padding_idx is not None:
        keep[padding_idx] = False
    rows = keep.nonzero().squeeze(1)
    n = rows.numel() * w.shape[1]
    if n == 0:
        return DEFAULT
    step = max(1, _CHUNK // max(1, w.shape[1]))
    parts = [w[rows[i:i + step]].to(torch.float64) for i in range(0, rows.numel(), step)]
    mean = sum(float(p.sum()) for p in parts) / n
    std = math.sqrt(sum(float(((p - mean) ** 2).sum()) for p in parts) / n)
    if abs(mean) * math.sqrt(n) <= 3.0 * std:
        mean = 0.0
    return mean, std


def init_moments(init: Any, num: int, dim: int, padding_idx: int | None) -> tuple[float, float]:
    """The (mean, std) a layer's `init` asks for: None torch's (0, 1); a (mean, std) pair as
    given (std >= 0, both finite); a torch init function (``nn.init.xavier_uniform_``) the
    moments of the [num, dim] table it draws (on a CPU scratch table, freed after; under
    fake tensors, a priced trace, torch's)."""
    if init is None:
        return DEFAULT
    if callable(init):
        scratch = torch.empty(num, dim, device="cpu")
        if is_fake(scratch):  # a priced trace: nothing is drawn, so nothing to measure
            return DEFAULT
        call_init(init, scratch)
        return table_moments(scratch, padding_idx)
    try:
        mean, std = (float(v) for v in init)
    except (TypeError, ValueError):
        raise ConfigError(f"init = {init!r}: give a torch init function (such as "
                          "torch.nn.init.xavier_uniform_) or a (mean, std) pair") from None
    if not (math.isfinite(mean) and math.isfinite(std)) or std < 0:
        raise ConfigError(f"init = ({mean}, {std}): the mean and std must be finite and the "
                          "std >= 0")
    return mean, std


@torch.no_grad()
def call_init(init: Callable[[torch.Tensor], Any], weight: torch.Tensor) -> None:
    """Apply a torch init function to a table's own weight, in place, without a gradient."""
    init(weight)


def mean_one_factors(mean: float, std: float, factors: int) -> tuple[float, float]:
    """(s, tau): a product of a first factor N(mean, s^2) and `factors` - 1 independent
    factors N(1, tau^2) has that mean and variance std^2. The factors' spread is
    FACTOR_SPREAD at mean 0, less as |mean| grows against std (a table of one value: 0)."""
    total = std * std + mean * mean
    if total == 0.0:
        return 0.0, 0.0
    rho = 1.0 + FACTOR_SPREAD * std * std / total  # E[factor^2]^(factors - 1)
    tau = math.sqrt(rho ** (1.0 / (factors - 1)) - 1.0)
    return math.sqrt(max(total / rho - mean * mean, 0.0)), tau


@torch.no_grad()
def draw_projected(small: torch.Tensor, proj: torch.Tensor, mean: float, std: float) -> None:
    """Draw small [V, d] and proj [D, d] so rows ``small @ proj.T`` have entries of `mean`
    and `std`: proj's rows are random unit vectors, small's entries N(0, std^2); a mean
    takes proj's column 0 (ones) and small's column 0 (the mean) when d > 1."""
    d = small.shape[1]
    lead = 1 if mean != 0.0 else 0
    p = torch.randn(proj.shape, dtype=torch.float32, device=proj.device)
    if lead and d == 1:
        proj.fill_(1.0)
        small.normal_(mean, std)
        return
    p[:, lead:] /= p[:, lead:].norm(dim=1, keepdim=True).clamp(min=1e-12)
    if lead:
        p[:, 0] = 1.0
        small[:, 0] = mean
    proj.copy_(p)
    small[:, lead:].normal_(0.0, std)


@torch.no_grad()
def draw_tt(cores: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
            dims: tuple[int, int, int], rank: int, mean: float, std: float) -> None:
    """Draw TT cores (core0 [v1, d1 r], core1 [v2, r d2 r], core2 [v3, r d3]) so that a
    row's entries (sums of r^2 products of three) have `mean` and `std`. Zero mean: cores
    N(0, c^2) with c^6 r^2 = 1, core0's times std. A mean, rank > 1: rank 0 carries it (every core's
    rank-0 entries the cube root of the mean, core1 block-diagonal), ranks 1.. the spread.
    A mean, rank 1: `mean_one_factors`. The std scales core0 alone: a std of 0 zeroes its
    random part, and the other cores still pass gradients to it."""
    d1, d2, d3 = dims
    c0, c1, c2 = (cores[0].view(-1, d1, rank), cores[1].view(-1, rank, d2, rank),
                  cores[2].view(-1, rank, d3))
    if mean != 0.0 and rank == 1:
        s, tau = mean_one_factors(mean, std, 3)
        c0.normal_(mean, s)
        c1.normal_(1.0, tau)
        c2.normal_(1.0, tau)
        return
    lead = 1 if mean != 0.0 else 0
    r = rank - lead  # the ranks that carry the spread
    unit = (1.0 / (r * r)) ** (1.0 / 6.0)
    for c in (c0, c1, c2):
        c.zero_()
    c0[..., lead:].normal_(0.0, unit * std)
    c1[:, lead:, :, lead:].normal_(0.0, unit)
    c2[:, lead:, :].normal_(0.0, unit)
    if lead:
        a = math.copysign(abs(mean) ** (1.0 / 3.0), mean)
        c0[..., 0] = a
        c1[:, 0, :, 0] = a
        c2[:, 0, :] = a
