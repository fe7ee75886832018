"""Traced memory model: one real training step on fake tensors, for a config or any model.

The step (`models.step.TrainStep`: a config's `Trainer`, or a user's `UserStep`), its
optimizers, fp32 masters and micro-batches are built under FakeTensorMode (no table is
allocated: a 100M-row table traces in about a second), and `TRACED_STEPS` steps run under
`AllocationTracker`, which replays every allocation and free through a model of the CUDA
caching allocator. Phase hooks mark forward, backward and the optimizer step; every storage
is classed (parameters, gradients, optimizer state; else activations, or temporaries in the
step) and owned (its table's module path, else its top-level module). Code paths follow
CUDA's defaults because the optimizers are built with the implementation CUDA selects
(foreach). What a fake step cannot see is added by formula: sparse gradients (their row
count is data-dependent) and the sparse optimizer step's temporaries
(`analytic.sparse_gradient`).

`trace_step` is the one tracer and `step_peak` the one reading of its trace. A config is
traced here (`traced_estimate`: its `Trainer` on fake batches, plus what only a config
knows: serving bytes, per-table rows, sparse lookups per table, host_cached placement); a
user's model in `trace.traced_model` (`autoembed.estimate_model`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.optim.optimizer import register_optimizer_step_pre_hook

from autoembed.batch import Batch
from autoembed.config import EmbeddingConfig, param_specs
from autoembed.errors import ConfigError
from autoembed.memory.analytic import analytic_estimate, sparse_terms
from autoembed.memory.types import (
    CUDA_CONTEXT_BYTES,
    MemoryEstimate,
    overhead_bytes,
    round_block,
    traced_figures,
)
from autoembed.models.step import TrainStep
from autoembed.models.table_modules import embedding_modules
from autoembed.trace.tracker import AllocationTracker, PeakSnapshot

__all__ = ["TRACED_STEPS", "Trace", "SparseTerms", "StepPeak", "trace_step", "step_peak",
           "traced_estimate", "fake_batch"]

TRACED_STEPS = 2  # the first step creates optimizer state; the second is steady state
# Torch sizes a tensor's storage in signed 64-bit bytes (c10 `computeStorageNbytes` raises
# "Storage size calculation overflowed" past 2**63 - 1), fake tensors included. A config
# whose largest tensor could pass that (sized at 8 bytes an element, the widest dtype a step
# uses, or whose activations could) is priced analytically instead.
TENSOR_LIMIT_BYTES = 2**63 - 1
WIDEST_ELEMENT_BYTES = 8  # int64 ids, fp64 never: 8 bytes is an upper bound per element


@dataclass
class Trace:
    """What `trace_step` saw: the tracker (phase peaks, the allocator's reserved peak), the
    step after its traced steps (steady state), and each sparse=True embedding module's ids
    per step (module path -> ids)."""

    tracker: AllocationTracker
    step: TrainStep
    lookups: dict[str, int]

    @property
    def phases(self) -> list[PeakSnapshot]:
        """Each phase's peak; building the step ("setup") is not the step and is left out."""
        peaks = self.tracker.phase_peaks
        return [s for p, s in peaks.items() if p != "setup"] or list(peaks.values())


def trace_step(
    build: Callable[[], TrainStep],
    micros: Callable[[], Sequence[Any]],
    run: Callable[[TrainStep, Sequence[Any]], object],
) -> Trace:
    """`build()` a step and `micros()` its fake micro-batches under FakeTensorMode, then
    `run(step, micros)` `TRACED_STEPS` times under an `AllocationTracker`."""
    roles: list[_Roles] = []
    tracker = AllocationTracker(lambda: roles[0].classes() if roles else {},
                                lambda: roles[0].owners() if roles else {})
    tracker.inplace_grad_sums = True
    lookups: dict[str, int] = {}
    with FakeTensorMode(allow_non_fake_inputs=False), tracker:
        step = build()
        roles.append(_Roles(step))
        batch = micros()
        handles = _phase_hooks(step.model, tracker) + _lookup_hooks(step.model, lookups)
        try:
            for _ in range(TRACED_STEPS):
                tracker.phase = "zero_grad"
                run(step, batch)
        finally:
            for h in handles:
                h.remove()
    return Trace(tracker, step, {k: -(-n // TRACED_STEPS) for k, n in lookups.items()})


class _Roles:
    """Each live storage's category (parameters, gradients, optimizer state) and owner (its
    table's module path, else its top-level module's name) among the step's tensors."""

    def __init__(self, step: TrainStep) -> None:
        self.step = step
        model = step.model
        tables = {id(p): path for path, m in embedding_modules(model) for p in m.parameters()}
        self.owner: dict[int, str] = {}
        for name, p in model.named_parameters():
            top = name.split(".")[0] if "." in name else "(root)"
            self.owner.setdefault(id(p), tables.get(id(p)) or top)
        self.names = {id(p): n for n, p in model.named_parameters()}

    def _tensors(self) -> list[tuple[Any, str, str]]:
        out: list[tuple[Any, str, str]] = []
        masters = self.step.masters.masters if self.step.masters is not None else {}
        by_id: dict[int, str] = {}
        for p in self.step.model.parameters():
            who = self.owner[id(p)]
            out += [(p, "parameters", who), (p.grad, "gradients", who)]
            m = masters.get(self.names[id(p)])
            if m is not None:
                out += [(m, "parameters", who), (m.grad, "gradients", who)]
                by_id[id(m)] = who
            by_id[id(p)] = who
        for opt in self.step.optimizers.all:
            for key, st in opt.state.items():
                for v in st.values():
                    out.append((v, "optimizer_state", by_id.get(id(key), "(optimizer)")))
        return out

    def classes(self) -> dict[int, str]:
        return {k: c for t, c, _ in self._tensors() if (k := _storage_id(t)) is not None}

    def owners(self) -> dict[int, str]:
        return {k: w for t, _, w in self._tensors() if (k := _storage_id(t)) is not None}


def _storage_id(t: Any) -> int | None:
    if isinstance(t, torch.Tensor) and t.layout == torch.strided:
        return id(t.untyped_storage())
    return None


def _phase_hooks(model: nn.Module, tracker: AllocationTracker) -> list[Any]:
    """Phases (forward, backward, step) and labels: the top-level module running."""
    def to_phase(name: str) -> Callable[..., None]:
        def hook(*_: Any, **__: Any) -> None:
            tracker.phase = name
        return hook

    def label(name: str) -> Callable[..., None]:
        def hook(*_: Any, **__: Any) -> None:
            tracker.label = name
        return hook

    handles = [model.register_forward_pre_hook(to_phase("forward")),
               model.register_forward_hook(to_phase("backward")),
               register_optimizer_step_pre_hook(to_phase("step"))]
    for name, child in model.named_children():
        handles.append(child.register_forward_pre_hook(label(name)))
        handles.append(child.register_forward_hook(label("")))
    return handles


def _lookup_hooks(model: nn.Module, lookups: dict[str, int]) -> list[Any]:
    """Count each sparse=True embedding module's ids (its sparse gradient: a row per id)."""
    def count(path: str) -> Callable[..., None]:
        def hook(_m: nn.Module, args: tuple[Any, ...]) -> None:
            lookups[path] = lookups.get(path, 0) + args[0].numel()
        return hook

    return [m.register_forward_pre_hook(count(path)) for path, m in embedding_modules(model)
            if getattr(m, "sparse", False)]


@dataclass(frozen=True)
class SparseTerms:
    """What a trace cannot see of sparse gradients, in bytes: the gradients live from the
    backward to the step, the same in the step (fp32 under *_master), the largest sparse
    step's temporaries; `per_table`: each table's step gradient bytes (by module path)."""

    gradients: int = 0
    step_gradients: int = 0
    temporaries: int = 0
    per_table: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class StepPeak:
    """The traced step's figures: the peak phase's bytes (sparse terms added where they
    live) by category, its snapshot, the reserved peak and the fixed overhead."""

    allocated: int
    phase: str
    categories: dict[str, int]
    snapshot: PeakSnapshot
    reserved: int
    overhead: int


def step_peak(trace: Trace, sparse: SparseTerms, *, reserve: int, context_bytes: int) -> StepPeak:
    """The peak phase once sparse gradients (backward to step) and the sparse step's
    temporaries (step) are added to the phases they are live in."""
    best: tuple[int, str, dict[str, int], PeakSnapshot] | None = None
    for snap in trace.phases:
        cats = dict(snap.by_category)
        extra_g = {"step": sparse.step_gradients, "backward": sparse.gradients}.get(snap.phase, 0)
        extra_t = sparse.temporaries if snap.phase == "step" else 0
        cats["gradients"] = cats.get("gradients", 0) + extra_g
        cats["temporaries"] = cats.get("temporaries", 0) + extra_t
        got = (snap.allocated + extra_g + extra_t, snap.phase, cats, snap)
        if best is None or got[0] > best[0]:
            best = got
    assert best is not None
    allocated, phase, cats, snap = best
    reserved = max(allocated, trace.tracker.alloc.peak_reserved
                   + round_block(sparse.step_gradients) + round_block(sparse.temporaries))
    return StepPeak(allocated, phase, cats, snap, reserved, overhead_bytes(reserve, context_bytes))


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


def trace_config(config: EmbeddingConfig) -> Trace:
    """`trace_step` of the config's `Trainer` (built for CPU, unchecked: a config is traced
    for a device one need not have) on `config.grad_accum_steps` fake batches."""
    from autoembed.models.step import Trainer, make_trainer

    def run(step: TrainStep, batches: Sequence[Any]) -> object:
        assert isinstance(step, Trainer)
        return step.step(batches)

    return trace_step(lambda: make_trainer(config, "cpu", check_device=False),
                      lambda: [fake_batch(config) for _ in range(config.grad_accum_steps)], run)


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
        trace = trace_config(config)
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
    peak = step_peak(trace, SparseTerms(*sparse_terms(config)), reserve=reserve,
                     context_bytes=context_bytes)
    return traced_figures(peak, serving_bytes=ana.serving_bytes, tables=ana.tables,
                          notes=("categories are the bytes live at the peak",))


def _traced_host_cached(
    config: EmbeddingConfig, *, reserve: int, context_bytes: int
) -> MemoryEstimate:
    """A host_cached config's device side is an ordinary table of `cache_rows` rows with its
    optimizer state, plus the cache's slot bookkeeping: trace that table (the data-dependent
    slot remap cannot run on fake tensors), add the bookkeeping by formula, and take the host
    bytes and miss rates from the cache model."""
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
