"""The memory objective sees the tables where device_total does not."""

from __future__ import annotations

from dataclasses import replace

from autoembed.config import EmbeddingConfig, TableConfig
from autoembed.memory.objective import memory_value
from autoembed.memory.types import CUBLAS_WORKSPACE_BYTES, CUDA_CONTEXT_BYTES, MemoryEstimate
from autoembed.trace import estimate


def memory_objective(est: MemoryEstimate, measured_allocated_peak: int | None = None) -> float:
    """A new study's memory objective of `est`, as a trial's stored estimate gives it."""
    return memory_value(est.to_dict(), measured_allocated=measured_allocated_peak)


def _user_csv(rows: int, dim: int = 16) -> EmbeddingConfig:
    # the user CSV: two id columns of a few thousand values and a small one
    return EmbeddingConfig(tables=(TableConfig("a", rows), TableConfig("b", 2500),
                                   TableConfig("c", 12)), dim=dim)


def test_small_tables_differ_in_the_objective_not_in_device_total() -> None:
    small, larger = estimate(_user_csv(3000)), estimate(_user_csv(3008))
    # both priced at context + workspace + two 2 MiB segments: the issue's ~0.57 GB. Every
    # block is under 1 MiB, so a 2 MiB segment closes holding more than 2 MiB less the
    # largest block (types.reserved_bound); the largest is table a's weight (3000 x 16 x 4 =
    # 192_000 B), and the step's blocks counted once, over 2 MiB - 192_000 = 1_905_152 B,
    # need a second: a's and b's weight, gradient, 2 Adam moments and 1 Adam temporary
    # (5 x (192_000 + 160_256)) are 1_761_280 B, and the 64-wide layer's backward transient
    # (2 x [256, 64] + [256, 48] fp32 = 180_224 B) alone passes it.
    fixed = CUDA_CONTEXT_BYTES + CUBLAS_WORKSPACE_BYTES
    assert small.device_total == larger.device_total == fixed + 2 * 2 * 2**20
    # 8 more rows x 16 dims x 4 B = 512 B more in each of the weight, its dense gradient and
    # Adam's two moments (each a whole 512 B allocator block): at least 2048 B more at the peak
    grown = memory_objective(larger) - memory_objective(small)
    assert grown >= 4 * 512 and grown % 512 == 0
    assert memory_objective(small) < small.device_total - fixed
    wide = estimate(_user_csv(3000, dim=144))
    assert memory_objective(wide) > memory_objective(small)


def test_overhead_and_reserve_do_not_move_it_and_a_measurement_wins() -> None:
    cfg = _user_csv(3000)
    plain = estimate(cfg)
    reserved = estimate(cfg, reserve=10**9)
    assert reserved.device_total == plain.device_total + 10**9
    assert memory_objective(reserved) == memory_objective(plain)
    hand = replace(plain, allocated_peak=123_456, reserved_peak=2 * 2**20)
    assert memory_objective(hand) == 123_456
    assert memory_objective(hand, measured_allocated_peak=99_000) == 99_000
