"""`estimate_model`: price a user's whole training step by tracing it on fake tensors.

The model (a module, turned into a fake copy; or a factory, called under FakeTensorMode so a
100M-row table costs nothing), its precision machinery and optimizer are built, and two
`UserStep.step`s (forward, loss, backward, optimizer step) run under `AllocationTracker`,
which replays each allocation and free through the CUDA caching-allocator model. The first
step creates the optimizer state; the second is steady state.

What the trace follows is torch's CPU code path for each op (see `CPU_VS_CUDA`); the
optimizer implementation is pinned to CUDA's (foreach).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import replace
from typing import Any, cast

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.optim.optimizer import register_optimizer_step_pre_hook
from torch.utils._pytree import tree_map

from autoembed.budget import Budget, BudgetLike
from autoembed.errors import ConfigError
from autoembed.memory.tracker import AllocationTracker, PeakSnapshot
from autoembed.memory.types import (
    CATEGORIES,
    CUBLAS_WORKSPACE_BYTES,
    CUDA_CONTEXT_BYTES,
    MemoryEstimate,
    ModuleMemory,
    TableMemory,
    round_block,
    traced_figures,
)
from autoembed.user_model.step import (
    LossFn,
    OptimizerSpec,
    UserStep,
    embedding_modules,
)

__all__ = ["estimate_model", "CPU_VS_CUDA"]

TRACED_STEPS = 2
# Where a trace on CPU follows other kernels than CUDA would (the figures are CPU's).
CPU_VS_CUDA = (
    "traced on CPU code paths: CPU autocast's lists of ops cast to half and kept in fp32 "
    "differ from CUDA's (CUDA runs layer_norm, softmax and log_softmax in fp32, CPU in bf16), "
    "and scaled_dot_product_attention picks CPU's math or flash kernel, not CUDA's "
    "flash/mem-efficient one (different saved tensors); transformers treats fake tensors as "
    "tracing (it may build an all-ones attention mask a real step skips); on a GPU the "
    "figure is not yet checked against max_memory_allocated (benchmarks/gpu_validate.py "
    "--examples does)"
)

# owners of what no module owns (the phase it was allocated in) -> the name shown
_STEP_OWNERS = {"setup": "(example inputs)", "zero_grad": "(zero_grad)", "forward": "(forward)",
                "backward": "(loss and backward)", "step": "(optimizer step)",
                "(optimizer)": "(optimizer)"}

ModelSpec = nn.Module | Callable[[], nn.Module]


def estimate_model(
    model: ModelSpec,
    example: Any,
    *,
    loss: LossFn | None = None,
    optimizer: OptimizerSpec = "adam",
    precision: str = "fp32",
    budget: BudgetLike | None = None,
    reserve: int = 0,
    context_bytes: int = CUDA_CONTEXT_BYTES,
) -> MemoryEstimate:
    """Price two training steps of `model` on `example` (contract figures, `modules`
    breakdown). `example`: a tensor -> model(x), a tuple -> model(*x), a dict -> model(**x);
    a list is several examples, and the largest price is returned. Tensors only give shapes
    and dtypes. `budget` (what `Budget.of` takes: bytes, "8GB", "80%") fills in `fits`."""
    limit = None if budget is None else Budget.of(budget)  # bad input before the trace
    if isinstance(example, list):
        if not example:
            raise ConfigError("example = []: give at least one example input")
        ests = [estimate_model(model, x, loss=loss, optimizer=optimizer, precision=precision,
                               budget=limit, reserve=reserve, context_bytes=context_bytes)
                for x in example]
        return max(ests, key=lambda e: e.device_total)
    if not isinstance(model, nn.Module) and not callable(model):
        raise ConfigError(f"model = {type(model).__name__}: give an nn.Module or a zero-argument "
                          "factory that returns one")
    tracker, step, peaks, lookups = _trace(model, example, loss, optimizer, precision)
    return _estimate(tracker, step, peaks, lookups, reserve, context_bytes).with_budget(limit)


def _fake_module(model: nn.Module) -> nn.Module:
    """A copy of `model` whose parameters and buffers are new (fake) tensors of the same
    shapes, dtypes and sharing; call under FakeTensorMode."""
    from autoembed.memory.tracker import host_allocations

    memo: dict[int, Any] = {}

    def fake(t: torch.Tensor) -> None:
        if id(t) not in memo:
            new = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cpu")
            memo[id(t)] = (nn.Parameter(new, t.requires_grad) if isinstance(t, nn.Parameter)
                           else new)

    for t in [*model.parameters(), *model.buffers()]:
        fake(t)
    for _, table in _cached(model):  # tensors outside parameters and buffers
        for t in [*table.cache_state.values(), *table.device_bookkeeping().values()]:
            fake(t)
        with host_allocations():  # host memory: not in the device figures
            for t in table.host_tensors().values():
                fake(t)
    return copy.deepcopy(model, memo)


def _cached(model: nn.Module) -> list[tuple[str, Any]]:
    """(layer path, HostCachedTable) of each host_cached `autoembed.nn` layer (its table is
    the layer's ``store.table``)."""
    from autoembed.models.host_cache import host_cached_tables

    return [(name.removesuffix(".store.table"), t) for name, t in host_cached_tables(model)]


def _build(model: ModelSpec) -> nn.Module:
    if isinstance(model, nn.Module):
        return _fake_module(model)
    try:
        built = model()
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - the user's factory: report it, one line
        raise ConfigError(f"model factory {_qual(model)} raised {type(e).__name__}: "
                          f"{_first_line(e)}") from None
    if not isinstance(built, nn.Module):
        raise ConfigError(f"model factory {_qual(model)} returned {type(built).__name__}, not an "
                          "nn.Module")
    return _fake_module(built) if any(not _is_fake(p) for p in built.parameters()) else built


def _is_fake(t: torch.Tensor) -> bool:
    from torch._subclasses.fake_tensor import is_fake

    return is_fake(t)


def _fake_example(example: Any) -> Any:
    """The example with every tensor replaced by a CPU tensor of its shape and dtype (call
    under FakeTensorMode: values are never read)."""
    def fake(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return torch.zeros(x.shape, dtype=x.dtype, device="cpu")
        return x

    return tree_map(fake, example)


def _owner_of(model: nn.Module) -> dict[int, str]:
    """id(parameter) -> owner: its table's path, else its top-level module's name."""
    tables = {id(p): path for path, m in embedding_modules(model) for p in m.parameters()}
    owners: dict[int, str] = {}
    for name, p in model.named_parameters():
        owners.setdefault(id(p), tables.get(id(p)) or (name.split(".")[0] if "." in name
                                                      else "(root)"))
    return owners


def _classifiers(step: UserStep) -> tuple[Callable[[], dict[int, str]],
                                           Callable[[], dict[int, str]]]:
    model = step.model
    owner = _owner_of(model)
    names = {id(p): n for n, p in model.named_parameters()}

    def tensors() -> list[tuple[torch.Tensor | None, str, str]]:
        out: list[tuple[torch.Tensor | None, str, str]] = []
        masters = step.masters.masters if step.masters is not None else {}
        by_id: dict[int, str] = {}
        for p in model.parameters():
            who = owner[id(p)]
            out += [(p, "parameters", who), (p.grad, "gradients", who)]
            m = masters.get(names[id(p)])
            if m is not None:
                out += [(m, "parameters", who), (m.grad, "gradients", who)]
                by_id[id(m)] = who
            by_id[id(p)] = who
        for opt in step.optimizers:
            for key, st in opt.state.items():
                for v in st.values():
                    out.append((v, "optimizer_state", by_id.get(id(key), "(optimizer)")))
        return out

    def sid(t: Any) -> int | None:
        if isinstance(t, torch.Tensor) and t.layout == torch.strided:
            return id(t.untyped_storage())
        return None

    def classify() -> dict[int, str]:
        return {k: c for t, c, _ in tensors() if (k := sid(t)) is not None}

    def owners() -> dict[int, str]:
        return {k: w for t, _, w in tensors() if (k := sid(t)) is not None}

    return classify, owners


def _trace(
    model: ModelSpec, example: Any, loss: LossFn | None, optimizer: OptimizerSpec, precision: str
) -> tuple[AllocationTracker, UserStep, dict[str, PeakSnapshot], dict[str, int]]:
    holder: dict[str, Any] = {}

    def classify() -> dict[int, str]:
        return holder["c"][0]() if "c" in holder else {}

    def owners() -> dict[int, str]:
        return holder["c"][1]() if "c" in holder else {}

    tracker = AllocationTracker(classify, owners)
    tracker.inplace_grad_sums = True
    lookups: dict[str, int] = {}  # sparse table -> ids over the traced steps
    with FakeTensorMode(allow_non_fake_inputs=False), tracker:
        built = _build(model)
        if not embedding_modules(built):
            raise ConfigError(
                f"model {type(built).__name__} has no nn.Embedding or nn.EmbeddingBag; "
                "autoembed prices and rewrites embedding tables; add one or price a model "
                "that has them")
        step = UserStep.build(built, precision=precision, optimizer=optimizer)
        holder["c"] = _classifiers(step)
        fake_x = _fake_example(example)
        handles = _phase_hooks(built, tracker) + _lookup_hooks(built, lookups)
        try:
            for _ in range(TRACED_STEPS):
                tracker.phase = "zero_grad"
                _run_step(step, fake_x, loss)
        finally:
            for h in handles:
                h.remove()
    per_step = {k: -(-n // TRACED_STEPS) for k, n in lookups.items()}
    return tracker, step, dict(tracker.phase_peaks), per_step


def _lookup_hooks(model: nn.Module, lookups: dict[str, int]) -> list[Any]:
    """Count each sparse=True table's ids (its sparse gradient holds one row per id)."""
    def count(path: str) -> Callable[..., None]:
        def hook(_m: nn.Module, args: tuple[Any, ...]) -> None:
            lookups[path] = lookups.get(path, 0) + args[0].numel()
        return hook

    return [m.register_forward_pre_hook(count(path)) for path, m in embedding_modules(model)
            if getattr(m, "sparse", False)]


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


def _run_step(step: UserStep, example: Any, loss: LossFn | None) -> None:
    """One step; an exception from the forward names the innermost module that raised."""
    stack: list[str] = []

    def leave(*_: Any) -> None:  # a forward hook's return value would replace the output
        if stack:
            stack.pop()

    handles = []
    for name, m in step.model.named_modules():
        handles.append(m.register_forward_pre_hook(lambda *_, n=name: stack.append(n)))
        handles.append(m.register_forward_hook(leave))
    try:
        step.step(example, loss)
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - the user's forward rejected the example
        where = f"module '{stack[-1] or '(root)'}' ({_type_at(step.model, stack[-1])})" \
            if stack else "the loss or backward"
        raise ConfigError(f"the example does not run through the model: {where} raised "
                          f"{type(e).__name__}: {_first_line(e)}") from None
    finally:
        for h in handles:
            h.remove()


def _type_at(model: nn.Module, path: str) -> str:
    return type(model.get_submodule(path)).__name__ if path else type(model).__name__


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _qual(fn: Any) -> str:
    mod = getattr(fn, "__module__", None)
    name = getattr(fn, "__qualname__", None) or repr(fn)
    return f"{mod}.{name}" if mod else name


def _nbytes(t: torch.Tensor | None) -> int:
    if t is None or t.layout != torch.strided:
        return 0
    return round_block(t.untyped_storage().nbytes())


def _tables(step: UserStep) -> tuple[TableMemory, ...]:
    """Each embedding table's own tensors (after the traced steps: steady state)."""
    masters = step.masters.masters if step.masters is not None else {}
    names = {id(p): n for n, p in step.model.named_parameters()}
    state: dict[int, int] = {}
    for opt in step.optimizers:
        for key, st in opt.state.items():
            state[id(key)] = sum(_nbytes(v) for v in st.values() if isinstance(v, torch.Tensor)
                                 and v.dim() > 0)
    out = []
    for path, m in embedding_modules(step.model):
        params = grads = opt_state = serving = 0
        for w in m.parameters():
            master = masters.get(names.get(id(w), ""))
            serving += _nbytes(w)
            params += _nbytes(w) + _nbytes(master)
            grads += _nbytes(w) * (4 // w.element_size() if master is not None else 1)
            opt_state += state.get(id(master if master is not None else w), 0)
        out.append(TableMemory(
            name=path, rows=int(cast(Any, m).num_embeddings), dim=int(cast(Any, m).embedding_dim),
            parameters=params,
            gradients=grads, optimizer_state=opt_state, serving_bytes=serving))
    return tuple(out)


def _modules(peak: PeakSnapshot, tables: set[str]) -> tuple[ModuleMemory, ...]:
    out = []
    for who, cats in sorted(peak.by_owner.items(), key=lambda kv: -sum(kv[1].values())):
        kind = "table" if who in tables else ("step" if who in _STEP_OWNERS else "module")
        who = _STEP_OWNERS.get(who, who)
        out.append(ModuleMemory(who, kind, *(cats.get(c, 0) for c in CATEGORIES)))
    return tuple(out)


# torch optimizer class -> the name whose sparse-step temporaries `analytic` prices
_SPARSE_NAMES = {"RowWiseAdagrad": "rowwise_adagrad", "Adagrad": "adagrad", "SGD": "sgd",
                 "SparseAdam": "sparse_adam"}


def _sparse_terms(step: UserStep, lookups: dict[str, int]) -> tuple[dict[str, int], int, int, int]:
    """What the trace cannot see of sparse=True tables (a fake sparse gradient's row count is
    data-dependent), priced as the built-in models' are (`memory.analytic`: one row per id):
    (table -> gradient bytes, gradients live from the backward to the step, the same in the
    step (fp32 under *_master), the largest sparse step's temporaries)."""
    from autoembed.memory.analytic import INDEX_BYTES, SPARSE_TEMPORARIES

    master = step.masters is not None
    pb, sb = step.policy.param_bytes, step.policy.state_bytes
    grad_b = 4 if master else pb
    opt_of = {id(p): type(o).__name__ for o in step.optimizers
              for g in o.param_groups for p in g["params"]}
    masters = step.masters.masters if master else {}
    names = {id(p): n for n, p in step.model.named_parameters()}
    per: dict[str, int] = {}
    g_all = mg_all = 0
    temps = [0]
    for path, m in embedding_modules(step.model):
        if not getattr(m, "sparse", False):
            continue
        w = next(iter(m.parameters()))  # weight; a host_cached layer's cache_weight
        n, dim, rows = lookups.get(path, 0), int(w.shape[1]), int(w.shape[0])
        g = round_block(n * dim * pb) + round_block(n * INDEX_BYTES)
        mg = round_block(n * dim * 4) + round_block(n * INDEX_BYTES) if master else g
        uniq = min(rows, n)
        key = id(masters[names[id(w)]]) if master else id(w)
        extra = SPARSE_TEMPORARIES.get(_SPARSE_NAMES.get(opt_of.get(key, ""), "sgd"), 0)
        coalesced = round_block(uniq * dim * grad_b) + round_block(uniq * INDEX_BYTES)
        temps.append(coalesced + extra * round_block(uniq * dim * sb))
        per[path] = mg if master else g
        g_all, mg_all = g_all + g, mg_all + mg
    return per, g_all, mg_all, max(temps)


def _with_sparse(steps: list[PeakSnapshot], sg: int, sg_step: int,
                 s_tmp: int) -> tuple[int, str, dict[str, int], PeakSnapshot]:
    """The peak phase once sparse gradients (backward to step) and the sparse step's
    temporaries (step) are added to the phases they are live in."""
    best: tuple[int, str, dict[str, int], PeakSnapshot] | None = None
    for snap in steps:
        cats = dict(snap.by_category)
        extra_g = sg_step if snap.phase == "step" else (sg if snap.phase == "backward" else 0)
        extra_t = s_tmp if snap.phase == "step" else 0
        cats["gradients"] = cats.get("gradients", 0) + extra_g
        cats["temporaries"] = cats.get("temporaries", 0) + extra_t
        got = (snap.allocated + extra_g + extra_t, snap.phase, cats, snap)
        if best is None or got[0] > best[0]:
            best = got
    assert best is not None
    return best


def _estimate(
    tracker: AllocationTracker, step: UserStep, peaks: dict[str, PeakSnapshot],
    lookups: dict[str, int], reserve: int, context_bytes: int,
) -> MemoryEstimate:
    if reserve < 0:
        raise ConfigError(f"reserve = {reserve}: must be >= 0 bytes")
    # building the model (and apply's replaced tables) is not the step: build on meta
    steps = [s for phase, s in peaks.items() if phase != "setup"] or list(peaks.values())
    per_sparse, sg, sg_step, s_tmp = _sparse_terms(step, lookups)
    allocated, phase, cats, peak = _with_sparse(steps, sg, sg_step, s_tmp)
    tables = tuple(replace(t, gradients=per_sparse[t.name]) if t.name in per_sparse else t
                   for t in _tables(step))
    overhead = context_bytes + CUBLAS_WORKSPACE_BYTES + reserve
    reserved = max(allocated, tracker.alloc.peak_reserved + round_block(sg_step)
                   + round_block(s_tmp))
    serving = sum(_nbytes(p) for p in step.model.parameters())
    notes = ["categories and modules are the bytes live at the peak", CPU_VS_CUDA]
    cache = _cache_tables(step, lookups)
    if cache:
        notes.append("host_cached tables: traced as their device part (a cache_rows-row table, "
                     "its optimizer state and 3 int64 per slot); host_bytes (the full table, "
                     "its state and 2 int64 per row) beside the device figures; miss rates "
                     "assume uniform rows")
    if per_sparse:
        notes.append("sparse=True tables: their sparse gradients (one row per id of the "
                     "example) and sparse-step temporaries are priced by formula, as the "
                     "built-in models' (a fake sparse gradient's rows are data-dependent); "
                     "the module breakdown leaves them out")
    return traced_figures(
        cats,
        allocated_peak=allocated,
        reserved_peak=reserved,
        overhead=overhead,
        serving_bytes=serving,
        tables=tables,
        peak_phase=phase,
        notes=tuple(notes),
        modules=_modules(peak, {t.name for t in tables}),
        host_bytes=sum(c.host_bytes for c in cache),
        cache=cache,
    )


def _cache_tables(step: UserStep, lookups: dict[str, int]) -> tuple[Any, ...]:
    """Each host_cached layer's pricing (`memory.types.CacheTable`): host bytes counted from
    its host tensors, misses per step from its ids per step at a uniform miss rate."""
    import math

    from autoembed.memory.cache_model import device_bookkeeping, miss_rate
    from autoembed.memory.types import CacheTable

    out = []
    for path, t in _cached(step.model):
        m = miss_rate(t.rows, t.cache_rows, t.policy, 0.0)
        misses = lookups.get(path, 0) * m
        out.append(CacheTable(path, t.rows, t.cache_rows, int(t.host_weight.shape[1]),
                              t.row_bytes(), t.host_bytes(), device_bookkeeping(t.cache_rows),
                              0.0, m, misses, math.ceil(2 * misses * t.row_bytes())))
    return tuple(out)
