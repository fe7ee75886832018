"""The traced estimate of a user's own model: `trace.traced.trace_step` of its `UserStep`.

The model (a module, turned into a fake copy; or a factory, called under FakeTensorMode so a
100M-row table costs nothing, or on the meta device where it converts its module's dtype;
parameters it leaves on the meta device become fake CPU ones),
its precision machinery and optimizer are built, and the traced steps (forward, loss,
backward, optimizer step) run on a fake copy of the example. What is about the user's model
lives here: how it is built and called, the one-line errors that name the module that
raised, the stand-in loss for a forward that returns logits, and the breakdown by module
path, table and host_cached layer.

What the trace follows is torch's CPU code path for each op (see `CPU_VS_CUDA`); the
optimizer implementation is pinned to CUDA's (foreach).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import replace
from typing import Any, cast

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_map

from autoembed.errors import ConfigError, first_line
from autoembed.memory.analytic import sparse_gradient
from autoembed.memory.types import (
    CATEGORIES,
    CacheTable,
    MemoryEstimate,
    ModuleMemory,
    TableMemory,
    host_allocations,
    round_block,
    traced_figures,
)
from autoembed.models.host_cached_table import host_cached_tables
from autoembed.models.step import TrainStep
from autoembed.models.table_modules import embedding_modules
from autoembed.models.user_step import (
    STANDIN_LOSS,
    LossFn,
    OptimizerSpec,
    UserStep,
    resolve_loss,
    standin_loss,
)
from autoembed.trace.traced import SparseTerms, StepPeak, Trace, step_peak, trace_step

__all__ = ["model_estimate", "on_meta", "shapes_only", "CPU_VS_CUDA", "STANDIN_NOTE",
           "ModelSpec"]

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

# how the note on a step priced with the stand-in loss (`STANDIN_LOSS`) begins
STANDIN_NOTE = "the model's forward returns no loss and none was given"

# owners of what no module owns (the phase it was allocated in) -> the name shown
_STEP_OWNERS = {"setup": "(example inputs)", "zero_grad": "(zero_grad)", "forward": "(forward)",
                "backward": "(loss and backward)", "step": "(optimizer step)",
                "(optimizer)": "(optimizer)"}

# torch optimizer class -> the name whose sparse-step temporaries `analytic` prices
_SPARSE_NAMES = {"RowWiseAdagrad": "rowwise_adagrad", "Adagrad": "adagrad", "SGD": "sgd",
                 "SparseAdam": "sparse_adam"}

ModelSpec = nn.Module | Callable[[], nn.Module]


def model_estimate(
    model: ModelSpec, example: Any, *, loss: LossFn | None, optimizer: OptimizerSpec,
    precision: str, reserve: int, context_bytes: int,
) -> MemoryEstimate:
    """The traced `MemoryEstimate` of two training steps of `model` on one `example`; with
    no `loss` and a forward that returns a floating tensor, the stand-in loss is priced
    (`STANDIN_LOSS`, said in a note)."""
    standin = _StandIn()

    def run(step: TrainStep, micros: Sequence[Any]) -> None:
        try:
            _run_step(cast(UserStep, step), micros[0], loss or standin)
        finally:
            standin.held = None  # held through the step, not into the next one

    trace = trace_step(lambda: _user_step(model, optimizer, precision),
                       lambda: [_fake_example(example)], run)
    sparse = _sparse_terms(trace)
    peak = step_peak(trace, sparse, reserve=reserve, context_bytes=context_bytes)
    return _figures(trace, sparse, peak, standin.used)


class _StandIn:
    """The stand-in loss (`STANDIN_LOSS`) where the output is a floating tensor: `standin_loss`
    of an fp32 copy of it, which `held` keeps until `_run_step` ends (`used` records that it
    ran); any other output is the one-line error of a model whose output is no loss."""

    used = False
    held: torch.Tensor | None = None

    def __call__(self, output: Any, example: Any) -> torch.Tensor:
        if not (isinstance(output, torch.Tensor) and output.is_floating_point()):
            return resolve_loss(output, example, None)  # raises: not a loss, none given
        self.used = True
        self.held = output.to(torch.float32, copy=True)
        return standin_loss(self.held, example)


def _user_step(model: ModelSpec, optimizer: OptimizerSpec, precision: str) -> UserStep:
    built = _build(model)
    if not embedding_modules(built):
        raise ConfigError(
            f"model {type(built).__name__} has no nn.Embedding or nn.EmbeddingBag; "
            "autoembed prices and rewrites embedding tables; add one or price a model "
            "that has them")
    return UserStep.build(built, precision=precision, optimizer=optimizer)


def _fake_module(model: nn.Module) -> nn.Module:
    """A copy of `model` whose parameters, buffers and tensor attributes
    (`_attribute_tensors`) are new (fake) CPU tensors of the same shapes, dtypes and sharing
    (meta ones included); call under FakeTensorMode."""
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
    for t in _attribute_tensors(model):
        fake(t)
    return copy.deepcopy(model, memo)


def _attribute_tensors(model: nn.Module) -> list[torch.Tensor]:
    """The tensors each module holds in plain attributes (neither parameter nor buffer, a
    list or dict of them included): a module built with real ones is priced as its factory
    builds them, as fake tensors (deepcopy would copy them as real tensors, which the trace's
    FakeTensorMode refuses)."""
    from torch.utils._pytree import tree_leaves

    return [t for m in model.modules() for k, v in vars(m).items()
            if k not in ("_parameters", "_buffers", "_modules")
            for t in tree_leaves(v) if isinstance(t, torch.Tensor)]


def _cached(model: nn.Module) -> list[tuple[str, Any]]:
    """(layer path, HostCachedTable) of each host_cached `autoembed.nn` layer (its table is
    the layer's ``store.table``)."""
    return [(name.removesuffix(".store.table"), t) for name, t in host_cached_tables(model)]


def _build(model: ModelSpec) -> nn.Module:
    """The model with fake CPU tensors: a module copied, a factory's module as built (a
    copy where it holds real or meta tensors)."""
    if isinstance(model, nn.Module):
        return _fake_module(model)
    try:
        built = _call_factory(model)
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - the user's factory: report it, one line
        raise ConfigError(f"model factory {_qual(model)} raised {type(e).__name__}: "
                          f"{first_line(e)}") from None
    if not isinstance(built, nn.Module):
        raise ConfigError(f"model factory {_qual(model)} returned {type(built).__name__}, not an "
                          "nn.Module")
    from torch._subclasses.fake_tensor import is_fake

    tensors = [*built.parameters(), *built.buffers()]
    if any(not is_fake(t) or t.device.type != "cpu" for t in tensors):
        return _fake_module(built)  # real tensors, or a factory that built on meta
    return built


# what Module._apply raises for a fake parameter (.to(...), .half(), .cpu()): torch swaps
# fake parameters, and FakeTensorMode keeps a weak reference to each, which forbids the swap
_NO_SWAP = "_apply(): Couldn't swap"


def _call_factory(factory: Callable[[], nn.Module]) -> Any:
    """`factory()` under the trace's FakeTensorMode; a factory that converts its module
    (`.to(torch.bfloat16)`, `.half()`, `.to(device)`), which fake parameters cannot take,
    is called again on the meta device outside the trace's modes (nothing allocated,
    nothing traced), its conversions keeping their dtype and the meta device (`_OnMeta`);
    `_build` copies its meta tensors as fake CPU ones of the same dtypes."""
    try:
        return factory()
    except RuntimeError as e:
        if not str(e).startswith(_NO_SWAP):
            raise
    from torch.utils._python_dispatch import _disable_current_modes

    with _disable_current_modes():
        return on_meta(factory)


def on_meta(factory: Callable[[], Any]) -> Any:
    """`factory()` on the meta device (nothing allocated), its device moves (`.to(device)`,
    `.cpu()`, `.cuda()`) kept on meta and its dtype conversions done (`_OnMeta`): the model
    it builds, as shapes and dtypes (`shapes_only` is True meanwhile)."""
    token = _SHAPES_ONLY.set(True)
    try:
        with torch.device("meta"), _OnMeta():
            return factory()
    finally:
        _SHAPES_ONLY.reset(token)


_SHAPES_ONLY: ContextVar[bool] = ContextVar("autoembed_shapes_only", default=False)


def shapes_only() -> bool:
    """Whether a model is being built by `on_meta`, for its shapes and dtypes alone (a
    priced factory's second call): `autoembed.apply` then draws and fits nothing, as on
    fake tensors, where a model the user built on meta is drawn from its init."""
    return _SHAPES_ONLY.get()


class _OnMeta(TorchFunctionMode):
    """A meta tensor moved to a device (`.to(device)`, `.cpu()`, `.cuda()`) stays on meta;
    a dtype it is converted to is kept."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        moves = (torch.Tensor.to, torch.Tensor.cpu, torch.Tensor.cuda)
        if func not in moves or not (isinstance(args[0], torch.Tensor) and args[0].is_meta):
            return func(*args, **kwargs)
        if func is not torch.Tensor.to:
            return args[0]
        dtype = _to_dtype(args[1:], kwargs)
        return args[0] if dtype is None else args[0].to(dtype)


def _to_dtype(args: Any, kwargs: Any) -> torch.dtype | None:
    """The dtype a `Tensor.to(*args, **kwargs)` converts to (None: it keeps its own)."""
    got = kwargs.get("dtype") or next((a for a in args if isinstance(a, torch.dtype)), None)
    if got is None and args and isinstance(args[0], torch.Tensor):  # .to(other)
        return args[0].dtype
    return got


def _fake_example(example: Any) -> Any:
    """The example with every tensor replaced by a CPU tensor of its shape and dtype (call
    under FakeTensorMode: values are never read)."""
    def fake(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return torch.zeros(x.shape, dtype=x.dtype, device="cpu")
        return x

    return tree_map(fake, example)


def _run_step(step: UserStep, example: Any, loss: LossFn) -> None:
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
        at = stack[-1] if stack else ""
        where = f"module '{at or '(root)'}' ({type(step.model.get_submodule(at)).__name__})" \
            if stack else "the loss or backward"
        raise ConfigError(_why_not(e, where, example)) from None
    finally:
        for h in handles:
            h.remove()


# what a trace on fake tensors cannot run: an op whose output depends on the values
_SCALAR_OP = "aten._local_scalar_dense.default"  # .item(), int(), bool(), .tolist()


def _why_not(e: Exception, where: str, example: Any) -> str:
    """The one line of a forward that raised on the traced (fake) example: an op whose output
    depends on the example's values, which fake tensors do not have, is named as such; a
    dict example whose keys the forward does not take says how a dict is passed."""
    from torch._subclasses.fake_tensor import (
        DataDependentOutputException,
        DynamicOutputShapeException,
    )

    if isinstance(e, (DataDependentOutputException, DynamicOutputShapeException)):
        op = str(e.func)
        what = ("reads a tensor's value (.item(), int(), bool(), .tolist() or an `if` on a "
                "tensor)" if op == _SCALAR_OP else f"calls {op}, whose output's shape "
                "depends on the values (a boolean mask, nonzero, unique, ...)")
        return (f"the model's step cannot be priced: {where} {what}, and the step is traced on "
                "fake tensors, which have shapes but no values; give the forward fixed shapes "
                "(multiply by a mask rather than index with it; pass counts and offsets as "
                "inputs computed outside the forward)")
    msg = (f"the example does not run through the model: {where} raised "
           f"{type(e).__name__}: {first_line(e)}")
    at_call = isinstance(e, TypeError) and where.startswith("module '(root)'")
    if at_call and isinstance(example, dict) and any(
            s in str(e) for s in ("unexpected keyword", "required positional")):
        msg += ("; a dict example is passed as model(**example): for a forward that takes "
                "the dict as one argument, give (example,)")
    return msg


def _qual(fn: Any) -> str:
    mod = getattr(fn, "__module__", None)
    name = getattr(fn, "__qualname__", None) or repr(fn)
    return f"{mod}.{name}" if mod else name


def _nbytes(t: torch.Tensor | None) -> int:
    if t is None or t.layout != torch.strided:
        return 0
    return round_block(t.untyped_storage().nbytes())


def _sparse_terms(trace: Trace) -> SparseTerms:
    """What the trace cannot see of sparse=True tables (a fake sparse gradient's row count is
    data-dependent), priced as the built-in models' are (`analytic.sparse_gradient`: one row
    per id of the traced example)."""
    step = trace.step
    master = step.masters is not None
    opt_of = {id(p): type(o).__name__ for o in step.optimizers.all
              for g in o.param_groups for p in g["params"]}
    masters = step.masters.masters if step.masters is not None else {}
    names = {id(p): n for n, p in step.model.named_parameters()}
    per: dict[str, int] = {}
    g_all = step_all = 0
    temps = [0]
    for path, m in embedding_modules(step.model):
        w = next(iter(m.parameters()))  # weight; a host_cached layer's cache_weight
        if not getattr(m, "sparse", False) or not w.requires_grad:  # frozen: no gradient
            continue
        key = id(masters[names[id(w)]]) if master else id(w)
        sg = sparse_gradient(trace.lookups.get(path, 0), int(w.shape[1]), int(w.shape[0]),
                             _SPARSE_NAMES.get(opt_of.get(key, ""), "sgd"),
                             step.config.precision)
        temps.append(sum(sg.temporaries))
        per[path] = sg.step
        g_all, step_all = g_all + sg.backward, step_all + sg.step
    return SparseTerms(g_all, step_all, max(temps), per)


def _figures(trace: Trace, sparse: SparseTerms, peak: StepPeak, standin: bool) -> MemoryEstimate:
    step = trace.step
    tables = tuple(replace(t, gradients=sparse.per_table[t.name])
                   if t.name in sparse.per_table else t for t in _tables(step))
    notes = ["categories and modules are the bytes live at the peak", CPU_VS_CUDA]
    cache = _cache_tables(step, trace.lookups)
    if cache:
        notes.append("host_cached tables: traced as their device part (a cache_rows-row table, "
                     "its optimizer state and 3 int64 per slot); host_bytes (the full table, "
                     "its state and 2 int64 per row) beside the device figures; miss rates "
                     "assume uniform rows")
    if sparse.per_table:
        notes.append("sparse=True tables: their sparse gradients (one row per id of the "
                     "example) and sparse-step temporaries are priced by formula, as the "
                     "built-in models' (a fake sparse gradient's rows are data-dependent); "
                     "the module breakdown leaves them out")
    if standin:
        notes.append(f"{STANDIN_NOTE}, so a stand-in is priced: {STANDIN_LOSS}; give "
                     "loss=fn(output, example) (CLI: --loss pkg.module:fn) to price yours")
    return traced_figures(
        peak, serving_bytes=sum(_nbytes(p) for p in step.model.parameters()), tables=tables,
        notes=tuple(notes), modules=_modules(peak, {t.name for t in tables}),
        host_bytes=sum(c.host_bytes for c in cache), cache=cache)


def _tables(step: TrainStep) -> tuple[TableMemory, ...]:
    """Each embedding table's own tensors (after the traced steps: steady state)."""
    masters = step.masters.masters if step.masters is not None else {}
    names = {id(p): n for n, p in step.model.named_parameters()}
    state: dict[int, int] = {}
    for opt in step.optimizers.all:
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
            if w.requires_grad:  # a frozen table has no gradient
                grads += _nbytes(w) * (4 // w.element_size() if master is not None else 1)
            opt_state += state.get(id(master if master is not None else w), 0)
        out.append(TableMemory(
            name=path, rows=int(cast(Any, m).num_embeddings), dim=int(cast(Any, m).embedding_dim),
            parameters=params,
            gradients=grads, optimizer_state=opt_state, serving_bytes=serving))
    return tuple(out)


def _modules(peak: StepPeak, tables: set[str]) -> tuple[ModuleMemory, ...]:
    out = []
    for who, cats in sorted(peak.snapshot.by_owner.items(), key=lambda kv: -sum(kv[1].values())):
        kind = "table" if who in tables else ("step" if who in _STEP_OWNERS else "module")
        who = _STEP_OWNERS.get(who, who)
        out.append(ModuleMemory(who, kind, *(cats.get(c, 0) for c in CATEGORIES)))
    return tuple(out)


def _cache_tables(step: TrainStep, lookups: dict[str, int]) -> tuple[CacheTable, ...]:
    """Each host_cached layer's pricing (`memory.types.CacheTable`): host bytes counted from
    its host tensors, misses per step from its ids per step at a uniform miss rate."""
    from autoembed.memory.cache_model import device_bookkeeping, miss_rate

    out = []
    for path, t in _cached(step.model):
        m = miss_rate(t.rows, t.cache_rows, t.policy, 0.0)
        misses = lookups.get(path, 0) * m
        out.append(CacheTable(path, t.rows, t.cache_rows, int(t.host_weight.shape[1]),
                              t.row_bytes(), t.host_bytes(), device_bookkeeping(t.cache_rows),
                              0.0, m, misses, math.ceil(2 * misses * t.row_bytes())))
    return tuple(out)
