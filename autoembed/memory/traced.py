"""Traced memory model: one real training step of the built model on fake tensors.

The model, its optimizers, fp32 masters and a batch are built under FakeTensorMode (no
table is allocated: a 100M-row table traces in about a second), and two steps of the shared
`Trainer.step` run under `AllocationTracker`, which replays every allocation and free
through a model of the CUDA caching allocator. Code paths follow CUDA's defaults because
the optimizers are built with the implementation CUDA selects (foreach). What a fake step
cannot see is added by formula: sparse gradients (their row count is data-dependent) and
the sparse optimizer step's temporaries (`analytic.sparse_terms`).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.optim.optimizer import register_optimizer_step_pre_hook

from autoembed.batch import Batch
from autoembed.config import EmbeddingConfig, param_specs
from autoembed.errors import ConfigError
from autoembed.memory.analytic import analytic_estimate, sparse_terms
from autoembed.memory.tracker import AllocationTracker, PeakSnapshot
from autoembed.memory.types import (
    CUBLAS_WORKSPACE_BYTES,
    CUDA_CONTEXT_BYTES,
    MemoryEstimate,
    round_block,
    traced_figures,
)

__all__ = ["traced_estimate", "fake_batch"]

TRACED_STEPS = 2  # the first step creates optimizer state; the second is steady state
# Torch sizes a tensor's storage in signed 64-bit bytes (c10 `computeStorageNbytes` raises
# "Storage size calculation overflowed" past 2**63 - 1), fake tensors included. A config
# whose largest tensor could pass that (sized at 8 bytes an element, the widest dtype a step
# uses, or whose activations could) is priced analytically instead.
TENSOR_LIMIT_BYTES = 2**63 - 1
WIDEST_ELEMENT_BYTES = 8  # int64 ids, fp64 never: 8 bytes is an upper bound per element


def _traceable(config: EmbeddingConfig, activations: int) -> bool:
    largest = max(s.numel for s in param_specs(config)) * WIDEST_ELEMENT_BYTES
    return largest <= TENSOR_LIMIT_BYTES and activations <= TENSOR_LIMIT_BYTES


def fake_batch(config: EmbeddingConfig) -> Batch:
    """A batch of the config's shape (call under FakeTensorMode: values are never read)."""
    b = config.batch_size
    feats: dict[str, torch.Tensor] = {}
    for t in config.tables:
        if config.task == "text":
            feats[t.name] = torch.randint(1, max(2, t.vocab_size), (b, config.seq_len))
        else:
            width = max(1, math.ceil(t.pooling_factor))
            feats[t.name] = torch.randint(0, t.vocab_size, (b, width))
    if config.task == "text":
        labels = torch.randint(0, config.num_classes, (b,))
    else:
        labels = torch.randint(0, 2, (b,)).float()
    return Batch(feats, labels)


def _classifier(trainer: Any) -> dict[int, str]:
    known: dict[int, str] = {}

    def mark(t: Any, cat: str) -> None:
        if isinstance(t, torch.Tensor) and t.layout == torch.strided:
            known[id(t.untyped_storage())] = cat

    for p in trainer.model.parameters():
        mark(p, "parameters")
        mark(p.grad, "gradients")
    if trainer.masters is not None:
        for _, m in trainer.masters.items():
            mark(m, "parameters")
            mark(m.grad, "gradients")
    for opt in trainer.optimizers.all:
        for st in opt.state.values():
            for v in st.values():
                mark(v, "optimizer_state")
    return known


def _trace(config: EmbeddingConfig) -> tuple[AllocationTracker, dict[str, PeakSnapshot]]:
    from autoembed.models import make_trainer

    holder: dict[str, Any] = {}
    tracker = AllocationTracker(lambda: _classifier(holder["t"]) if "t" in holder else {})
    with FakeTensorMode(allow_non_fake_inputs=False), tracker:
        trainer = make_trainer(config, "cpu", check_device=False)
        holder["t"] = trainer
        batches = [fake_batch(config) for _ in range(config.grad_accum_steps)]

        def to_phase(name: str) -> Any:
            def hook(*_: Any, **__: Any) -> None:
                tracker.phase = name

            return hook

        handles = [
            trainer.model.register_forward_pre_hook(to_phase("forward")),
            trainer.model.register_forward_hook(to_phase("backward")),
            register_optimizer_step_pre_hook(to_phase("step")),
        ]
        try:
            for _ in range(TRACED_STEPS):
                tracker.phase = "zero_grad"
                trainer.step(batches)
        finally:
            for h in handles:
                h.remove()
    return tracker, dict(tracker.phase_peaks)


def traced_estimate(
    config: EmbeddingConfig,
    *,
    gpus: int = 1,
    sharding: str = "table",
    reserve: int = 0,
    context_bytes: int = CUDA_CONTEXT_BYTES,
) -> MemoryEstimate:
    """Price `config` by tracing two fake training steps (one GPU)."""
    if gpus != 1:
        raise ConfigError(
            f"gpus = {gpus}: the traced estimate prices one GPU; use --method analytic "
            "for sharded tables"
        )
    config = config.resolve()
    ana = analytic_estimate(config, reserve=reserve, context_bytes=context_bytes)
    impossible = replace(ana, notes=(*ana.notes, (
        "traced estimate impossible: a tensor of this step would pass the 2**63 bytes "
        "a torch tensor can have; priced analytically"),))
    if not _traceable(config, ana.activations):
        return impossible
    if config.placement == "host_cached":
        return _traced_host_cached(config, reserve=reserve, context_bytes=context_bytes)
    from torch._subclasses.fake_tensor import DynamicOutputShapeException

    try:
        tracker, peaks = _trace(config)
    except DynamicOutputShapeException as e:
        # e.g. nn.Embedding's sparse backward drops padding ids with a boolean mask, whose
        # size fake tensors cannot know: the data decide it, as for every sparse gradient
        return replace(ana, notes=(*ana.notes, (
            f"traced estimate impossible: this step has a data-dependent shape ({e}); "
            "priced analytically"),))
    except (RuntimeError, TypeError, OverflowError) as e:
        # a size the check above did not foresee: torch's own overflow errors say "overflow"
        if "overflow" not in str(e).lower():
            raise
        return impossible
    sg, sg_step, s_tmp = sparse_terms(config)
    # Sparse gradients live from the backward through the step; their step temporaries live
    # only in the step. Add them to the phase peaks they belong to and take the largest.
    candidates: list[tuple[int, str, dict[str, int]]] = []
    for phase, snap in peaks.items():
        cats = dict(snap.by_category)
        extra_g = sg_step if phase == "step" else (sg if phase == "backward" else 0)
        extra_t = s_tmp if phase == "step" else 0
        cats["gradients"] = cats.get("gradients", 0) + extra_g
        cats["temporaries"] = cats.get("temporaries", 0) + extra_t
        candidates.append((snap.allocated + extra_g + extra_t, phase, cats))
    peak, phase, cats = max(candidates, key=lambda c: c[0])
    reserved = max(peak, tracker.alloc.peak_reserved + round_block(sg_step) + round_block(s_tmp))
    overhead = context_bytes + CUBLAS_WORKSPACE_BYTES + reserve
    return traced_figures(
        cats,
        allocated_peak=peak,
        reserved_peak=reserved,
        overhead=overhead,
        serving_bytes=ana.serving_bytes,
        tables=ana.tables,
        peak_phase=phase,
        notes=("categories are the bytes live at the peak",),
    )


def _traced_host_cached(
    config: EmbeddingConfig, *, reserve: int, context_bytes: int
) -> MemoryEstimate:
    """A host_cached config's device side is an ordinary table of `cache_rows` rows with its
    optimizer state, plus the cache's slot bookkeeping: trace that table (the data-dependent
    slot remap cannot run on fake tensors), add the bookkeeping by formula, and take the host
    bytes and miss rates from the cache model."""
    from dataclasses import replace

    from autoembed.config import cache_rows
    from autoembed.memory.analytic import with_host_cache
    from autoembed.memory.cache_model import device_bookkeeping
    from autoembed.memory.types import reserved_for

    tables = tuple(
        replace(t, vocab_size=cache_rows(config, t), frequency=None) for t in config.tables
    )
    device_part = replace(
        config, placement="device", compression="none", hash_buckets=None, dynamic_rows=0,
        tables=tables,
    )
    est = traced_estimate(device_part, reserve=reserve, context_bytes=context_bytes)
    blocks = [device_bookkeeping(t.vocab_size) // 3 for t in tables for _ in range(3)]
    bk = sum(blocks)
    reserved = est.reserved_peak + reserved_for(blocks)
    est = replace(
        est,
        allocated_peak=est.allocated_peak + bk,
        reserved_peak=reserved,
        device_total=reserved + est.overhead,
        serving_bytes=analytic_estimate(config).serving_bytes,
        notes=(
            *est.notes,
            "host_cached: traced as its device part (a cache_rows-row table and its optimizer "
            "state); cache bookkeeping (3 int64 per slot) added by formula",
        ),
    )
    return with_host_cache(est, config)
