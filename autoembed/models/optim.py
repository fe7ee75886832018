"""Optimizers: one per table optimizer (tables of kind "table", grouped by their own
`table_optimizer`, in order of first appearance), one for the dense tower (kind "dense").

Map (config name -> torch): sgd -> SGD(momentum=0); momentum -> SGD(momentum=config.momentum);
adam -> Adam(eps=config.effective_adam_eps); adamw -> AdamW; adagrad -> Adagrad;
sparse_adam -> SparseAdam; rowwise_adagrad -> `RowWiseAdagrad` (FBGEMM's row-wise Adagrad).
Dense gradients always take the foreach implementation (``foreach=True``: what CUDA picks by
default, and what the memory model prices, e.g. Adam foreach = one parameter-sized
temporary); sparse gradients take the single-tensor path (``foreach=False``), which torch's
sparse-capable optimizers need. Learning rate: `config.lr` for tables,
`config.effective_dense_lr` for the tower, ramped linearly over `config.warmup_steps`.

A user's own model (not autoembed's `EmbeddingModel`) is grouped by module instead of by
`param_specs`: its embedding tables (`models.table_modules.embedding_modules`) under their table
optimizer, every other trainable parameter under the dense one (`user_optimizers`); the
result is the same `Optimizers`, warm-up included (`dense` is None when only tables train).
At a *_master precision without `masters=` it makes fp32 masters and steps them
(`Optimizers.masters`), as the user's trial is priced.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR

from autoembed.config import (
    FP16_MIN_ADAM_EPS,
    SPARSE_GRAD_OPTIMIZERS,
    EmbeddingConfig,
    param_specs,
    precision_policy,
)
from autoembed.errors import ConfigError
from autoembed.models.table_modules import embedding_modules

if TYPE_CHECKING:
    from autoembed.models.device_precision import MasterWeights

__all__ = ["ROWWISE_ADAGRAD_EPS", "ADAGRAD_EPS", "RowWiseAdagrad", "Optimizers", "build_optimizer",
           "user_optimizers", "params_config", "make_optimizer", "state_bytes"]

# FBGEMM's default eps for EXACT_ROWWISE_ADAGRAD (fbgemm_gpu split_table_batched_embeddings).
ROWWISE_ADAGRAD_EPS = 1e-8
# torch.optim.Adagrad's default eps; it rounds to 0 in fp16 (smallest subnormal 6e-8), where
# a zero gradient on a zero state gives 0/0 = NaN, so fp16 parameters use FP16_MIN_ADAM_EPS.
ADAGRAD_EPS = 1e-10


class RowWiseAdagrad(Optimizer):
    """Row-wise Adagrad (FBGEMM ``EXACT_ROWWISE_ADAGRAD``) for 2-D table weights.

    State: one fp32 value per row, ``sum``. For every row r in the gradient (the coalesced
    rows of a sparse gradient, or every row of a dense one):

        g_r  = grad_r + weight_decay * w_r          (FBGEMM's L2 mode; rows in the gradient)
        s_r += mean(g_r ** 2)                        (over the row's D entries)
        w_r -= lr * g_r / (sqrt(s_r) + eps)

    Rows not in a sparse gradient do not change. Arithmetic is fp32 whatever the weight dtype.
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        lr: float = 0.01,
        eps: float = ROWWISE_ADAGRAD_EPS,
        weight_decay: float = 0.0,
    ) -> None:
        if lr <= 0 or eps <= 0 or weight_decay < 0:
            raise ValueError(
                f"lr={lr}, eps={eps}, weight_decay={weight_decay}: lr, eps > 0; decay >= 0"
            )
        super().__init__(params, {"lr": lr, "eps": eps, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, eps, wd = float(group["lr"]), float(group["eps"]), float(group["weight_decay"])
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.dim() != 2:
                    raise ValueError(
                        f"RowWiseAdagrad takes 2-D table weights, got shape {tuple(p.shape)}"
                    )
                state = self.state[p]
                if not state:
                    state["sum"] = torch.zeros(p.shape[0], dtype=torch.float32, device=p.device)
                total: torch.Tensor = state["sum"]
                grad = p.grad
                if grad.is_sparse:
                    grad = grad.coalesce()
                    rows = grad.indices()[0]
                    g = grad.values().to(torch.float32)
                    if wd:
                        g = g + wd * p.index_select(0, rows).to(torch.float32)
                    total.index_add_(0, rows, g.square().mean(dim=1))
                    std = total.index_select(0, rows).sqrt_().add_(eps)
                    p.index_add_(0, rows, (g / std.unsqueeze(1)).mul_(-lr).to(p.dtype))
                else:
                    g = grad.to(torch.float32)
                    if wd:
                        g = g + wd * p.to(torch.float32)
                    total.add_(g.square().mean(dim=1))
                    std = total.sqrt().add_(eps)
                    p.add_((g / std.unsqueeze(1)).mul_(-lr).to(p.dtype))
        return loss


def make_optimizer(
    name: str, params: list[torch.Tensor], config: EmbeddingConfig, *, lr: float, sparse: bool
) -> Optimizer:
    """One torch optimizer for `params` (sparse: their gradients are sparse)."""
    wd = config.weight_decay
    foreach = not sparse
    if sparse:  # torch's default (off), said explicitly: left implicit, Adagrad warns once
        torch.sparse.check_sparse_tensor_invariants.disable()
    if name in ("sgd", "momentum"):
        momentum = config.momentum if name == "momentum" else 0.0
        return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=wd, foreach=foreach)
    if name in ("adam", "adamw"):
        adam = torch.optim.Adam if name == "adam" else torch.optim.AdamW
        return adam(params, lr=lr, eps=config.effective_adam_eps, weight_decay=wd, foreach=foreach)
    if name == "adagrad":
        eps = FP16_MIN_ADAM_EPS if config.precision == "fp16" else ADAGRAD_EPS
        return torch.optim.Adagrad(params, lr=lr, eps=eps, weight_decay=wd, foreach=foreach)
    if name == "sparse_adam":
        return torch.optim.SparseAdam(params, lr=lr, eps=config.effective_adam_eps)
    if name == "rowwise_adagrad":
        return RowWiseAdagrad(params, lr=lr, weight_decay=wd)
    raise ValueError(f"unknown optimizer '{name}'")


@dataclass(frozen=True)
class Optimizers:
    """The table optimizers (one per distinct table optimizer) and the dense optimizer,
    stepped in that order, plus warm-up. `dense` is None when nothing but tables train (a
    user's model; a user's one optimizer factory is `tables[0]` and steps every parameter).
    Iterating gives every optimizer in step order (`all`).

    `masters`: the fp32 masters the optimizers step in place of the model's half weights,
    which `build_optimizer` made for a user's model at a *_master precision; `step` and
    `zero_grad` then run the built-in trainer's master steps (`models.step.TrainStep`), and
    `state_dict` carries the masters. None: the optimizers step what they were given."""

    tables: tuple[Optimizer, ...]
    dense: Optimizer | None
    schedulers: tuple[LambdaLR, ...] = ()
    masters: MasterWeights | None = None

    @property
    def table(self) -> Optimizer:
        """The table optimizer of a config whose tables share one."""
        if len(self.tables) != 1:
            raise ValueError(f"the tables have {len(self.tables)} optimizers; use .tables")
        return self.tables[0]

    def table_for(self, param: torch.Tensor) -> Optimizer:
        """The table optimizer that steps `param`."""
        for opt in self.tables:
            if any(p is param for g in opt.param_groups for p in g["params"]):
                return opt
        raise ValueError("the parameter is in no table optimizer")

    @property
    def all(self) -> tuple[Optimizer, ...]:
        return (*self.tables, *((self.dense,) if self.dense is not None else ()))

    def __iter__(self) -> Iterator[Optimizer]:
        return iter(self.all)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Every optimizer's gradients, and with `masters` the model's weights' too (the
        loop's backward fills those, not the masters')."""
        for opt in self.all:
            opt.zero_grad(set_to_none=set_to_none)
        for p in self.masters.params.values() if self.masters is not None else ():
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    def step(self) -> None:
        """Table steps, dense step, then advance the warm-up schedule; with `masters`, as
        the built-in trainer steps them: the half gradients become fp32 master gradients
        first (one weight at a time, each half one freed), and the stepped masters are
        copied back into the weights (their gradients freed) before the schedule."""
        if self.masters is not None:
            self.masters.grads_to_master()
        for opt in self.all:
            opt.step()
        if self.masters is not None:
            self.masters.copy_back()
        self.advance_schedule()

    def advance_schedule(self) -> None:
        for s in self.schedulers:
            s.step()

    def state_dict(self) -> dict[str, Any]:
        """{"table": first table optimizer, "dense", "schedulers"} (the one-optimizer layout
        of earlier checkpoints; None for one that is not there), plus "more_tables" when the
        tables have several."""
        out = {
            "table": self.tables[0].state_dict() if self.tables else None,
            "dense": self.dense.state_dict() if self.dense is not None else None,
            "schedulers": [s.state_dict() for s in self.schedulers],
        }
        if len(self.tables) > 1:
            out["more_tables"] = [o.state_dict() for o in self.tables[1:]]
        if self.masters is not None:  # the fp32 values the half weights are rounded from
            out["masters"] = dict(self.masters.items())
        return out

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """The optimizers' and schedules' states; with `masters`, the masters from
        `state["masters"]`, or from the model's weights (cast up) where the state has none
        (one saved without masters), so they never step stale values."""
        if self.masters is not None:
            _load_masters(self.masters, state.get("masters"))
        more = state.get("more_tables", [])
        firsts = [state["table"]] if self.tables else []
        for opt, sd in zip(self.tables, [*firsts, *more], strict=True):
            opt.load_state_dict(sd)
        if self.dense is not None:
            self.dense.load_state_dict(state["dense"])
        for s, sd in zip(self.schedulers, state["schedulers"], strict=True):
            s.load_state_dict(sd)


def build_optimizer(
    model: nn.Module,
    config: EmbeddingConfig | Mapping[str, Any] | str,
    *,
    masters: Mapping[str, torch.Tensor] | None = None,
) -> Optimizers:
    """Optimizers for `model`'s parameters by `param_specs`: the dense ones under
    `dense_optimizer`, each table's under its own table optimizer (one torch optimizer per
    distinct name, at `config.lr`). `config`: the forms `config.as_config` takes (a config,
    a dict of its keys, a config file's path; anything else is a ConfigError).

    masters: parameter name -> fp32 master tensor to optimise instead of the parameter
    (fp16_master / bf16_master precision; the caller steps them, as `models.step` does).
    A user's model at a *_master precision given none gets them made here
    (`MasterWeights.create`): the returned `Optimizers` steps fp32 masters and copies them
    back into the weights (`Optimizers.masters`), what its trial was priced with.

    A user's own model (not autoembed's `EmbeddingModel`): its nn.Embedding / EmbeddingBag /
    autoembed.nn tables by module path (`user_optimizers`, which also binds host_cached
    layers' caches to their optimizer, so `.step()` trains them). `config` may also be what
    a user search hands `train(model, params, report)`: `params`, or `params["embedding"]`
    (`params_config`): the optimizers its trial was priced with.
    """
    from autoembed.config import as_config
    from autoembed.models.embedding_model import EmbeddingModel

    embedding = _embedding_params(config)
    if embedding is not None and not isinstance(model, EmbeddingModel):
        config = params_config(model, embedding)
    config = as_config(config)
    if not config.is_resolved:
        config = config.resolve()
    if not isinstance(model, EmbeddingModel):
        if masters is None and precision_policy(config.precision).master:
            return _with_masters(model, config)
        return user_optimizers(model, config, masters=masters)
    specs = {s.name: s for s in param_specs(config)}
    # (optimizer, sparse gradients): robe / tt tables get dense gradients under any optimizer
    tables: dict[tuple[str, bool], list[torch.Tensor]] = {}
    dense: list[torch.Tensor] = []
    for name, p in model.named_parameters():
        if name not in specs:
            raise ValueError(f"parameter '{name}' is not in param_specs(config)")
        s, t = specs[name], masters[name] if masters is not None else p
        if s.kind == "table":
            tables.setdefault((s.optimizer, s.sparse), []).append(t)
        else:
            dense.append(t)
    if not tables:  # every model has tables
        raise ValueError("the model has no table parameters")
    return _grouped(tables, dense, config)


@torch.no_grad()
def _load_masters(masters: MasterWeights, saved: Mapping[str, torch.Tensor] | None) -> None:
    """Copy `saved` (name -> fp32 master) into `masters` in place (the optimizers' state is
    keyed by them), or the weights' values where `saved` is None."""
    for name, m in masters.items():
        m.copy_(masters.params[name] if saved is None else saved[name])


def _with_masters(model: nn.Module, config: EmbeddingConfig) -> Optimizers:
    """`user_optimizers` over fp32 masters of `model`'s trained weights, made here and
    held by the result, which steps them (`Optimizers.masters`)."""
    from dataclasses import replace

    from autoembed.models.device_precision import MasterWeights

    masters = MasterWeights.create(model)
    return replace(user_optimizers(model, config, masters=masters.masters), masters=masters)


def _embedding_params(value: Any) -> Mapping[str, Any] | None:
    """`params["embedding"]` when `value` is a user search's params or that part of them
    (its `tables` a mapping, rule -> settings); None for a config's forms."""
    if isinstance(value, Mapping) and isinstance(value.get("embedding"), Mapping):
        return value["embedding"]
    if isinstance(value, Mapping) and isinstance(value.get("tables"), Mapping):
        return value
    return None


def params_config(model: nn.Module, embedding: Mapping[str, Any]) -> EmbeddingConfig:
    """The config a user search priced the optimizers of a trial on `model` with, from
    `embedding` (its `params["embedding"]`): the config-wide keys over `model`'s tables by
    module path, each with the `table_optimizer` its rules (`tables`: pattern -> settings)
    give it, the one table key the optimizers read (`config.user`, as `user.space` prices)."""
    from autoembed.config.user import embedding_config, rule_settings

    rules = embedding.get("tables") or {}
    rows = []
    for path, m in embedding_modules(model):
        table: Any = m  # torch's and autoembed.nn's tables: num_embeddings, embedding_dim
        own = rule_settings(rules, path).get("table_optimizer")
        rows.append({"name": path, "vocab_size": int(table.num_embeddings),
                     "dim": int(table.embedding_dim), **({"table_optimizer": own} if own else {})})
    return embedding_config(embedding, rows, "params['embedding']")


def _grouped(
    tables: Mapping[tuple[str, bool], list[torch.Tensor]],
    dense: list[torch.Tensor],
    config: EmbeddingConfig,
) -> Optimizers:
    """One table optimizer per (name, sparse gradients) at `config.lr`, the dense optimizer
    at `config.effective_dense_lr` (none without dense parameters), each with the linear
    warm-up of `config.warmup_steps` (none at 0)."""
    table_opts = tuple(
        make_optimizer(name, params, config, lr=config.lr, sparse=sparse)
        for (name, sparse), params in tables.items()
    )
    dense_opt = make_optimizer(
        config.dense_optimizer, dense, config, lr=config.effective_dense_lr, sparse=False
    ) if dense else None
    opts = Optimizers(table_opts, dense_opt)
    if config.warmup_steps > 0:  # linear: factor (k + 1) / steps for the first steps, then 1
        n = config.warmup_steps
        opts = Optimizers(table_opts, dense_opt,
                          tuple(LambdaLR(o, lambda k: min(1.0, (k + 1) / n)) for o in opts))
    return opts


def user_optimizers(
    model: nn.Module, config: EmbeddingConfig, *, masters: Mapping[str, torch.Tensor] | None = None
) -> Optimizers:
    """`build_optimizer` for a user's model: the embedding tables' parameters under their
    table optimizer (a config table named by the module's path may set its own
    `table_optimizer`; else `config.table_optimizer`), one torch optimizer per distinct
    (name, sparse gradients) at `config.lr`; every other trainable parameter under
    `config.dense_optimizer` at `config.effective_dense_lr` (no dense optimizer when there is
    none); warm-up over `config.warmup_steps`. A trained `sparse=True` nn.Embedding /
    EmbeddingBag takes sparse gradients, so its optimizer must accept them (a frozen one
    takes none). A host_cached `autoembed.nn` layer is bound to its table optimizer
    (`models.host_cached_table.bind_host_cached`: the cached rows' state moves with them),
    which must be the one it was built for. `masters`: parameter name -> fp32 master to
    optimise instead (*_master precisions; refused beside a host_cached layer)."""
    from autoembed.models.host_cached_table import bind_host_cached

    if not config.is_resolved:
        config = config.resolve()
    own = {t.name: t.table_optimizer for t in config.tables if t.table_optimizer}
    kind: dict[int, tuple[str, bool]] = {}
    for path, m in embedding_modules(model):
        name, sparse = own.get(path, config.table_optimizer), bool(getattr(m, "sparse", False))
        _check_cached(path, m, name, masters is not None)
        trained = any(p.requires_grad for p in m.parameters())  # a frozen one steps nothing
        if sparse and trained and name not in SPARSE_GRAD_OPTIMIZERS:
            raise ConfigError(f"table '{path}' has sparse=True gradients, which table_optimizer "
                              f"'{name}' cannot step; use one of "
                              f"{', '.join(SPARSE_GRAD_OPTIMIZERS)} or sparse=False")
        for p in m.parameters():
            kind.setdefault(id(p), (name, sparse))
    tables: dict[tuple[str, bool], list[torch.Tensor]] = {}
    dense: list[torch.Tensor] = []
    for n, p in model.named_parameters():
        if not p.requires_grad:
            continue
        t = masters[n] if masters is not None else p
        if id(p) in kind:
            tables.setdefault(kind[id(p)], []).append(t)
        else:
            dense.append(t)
    opts = _grouped(tables, dense, config)
    bind_host_cached(model, opts.tables)  # the cached rows' state moves with them
    return opts


def _check_cached(path: str, m: nn.Module, name: str, masters: bool) -> None:
    """A host_cached layer's table optimizer is the one it was built for; no fp32 masters."""
    store = getattr(m, "store", None)
    table = getattr(store, "table", None)
    built = getattr(table, "optimizer_name", None)
    if built is None:
        return
    if name != built:
        raise ConfigError(f"table '{path}' is host_cached for table_optimizer '{built}' (its "
                          f"host state has that shape), not '{name}'; give the table "
                          f"table_optimizer '{built}' in the config")
    if masters:
        raise ConfigError(f"table '{path}' is host_cached, which keeps no fp32 master rows; "
                          "use precision fp32, fp16, bf16 or amp_*")


def state_bytes(optimizer: Optimizer) -> int:
    """Bytes of the optimizer's state tensors with dim > 0 (scalar step counters excluded)."""
    total = 0
    for st in optimizer.state.values():
        for v in st.values():
            if isinstance(v, torch.Tensor) and v.dim() > 0:
                total += v.numel() * v.element_size()
    return total
