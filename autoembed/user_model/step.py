"""One training step of a user's own model: the step `estimate_model` traces on fake tensors
and the step a user (or the priced-right test) runs on real ones. Same code both ways.

`UserStep.build(model, precision=..., optimizer=...)` prepares precision (half parameters,
fp32 masters, autocast, GradScaler: `autoembed.config.precision_policy`) and the optimizer;
`UserStep.step(example, loss)` runs: zero_grad, floating inputs cast to a half model's dtype,
forward (under autocast for amp_*), the loss,
backward, masters' gradients, optimizer step, masters copied back.

Optimizer names: `autoembed.build_optimizer(model, config)` with the name's config
(`config.optimizer_alias`), the built-in trainer's function grown to take a user model
(`user_optimizers`): embedding weights (nn.Embedding / nn.EmbeddingBag / autoembed.nn tables)
take the named optimizer, everything else a second optimizer of the same name, or Adagrad
beside `rowwise_adagrad` (the built-in models' pairing). A factory
``params -> Optimizer`` gets every trainable parameter (the fp32 masters under *_master).
Either way the implementation is pinned:
``foreach=True`` wherever the optimizer left it to torch and did not ask for ``fused`` (what
CUDA picks by default; CPU would pick the single-tensor loop).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch._subclasses.fake_tensor import is_fake
from torch.optim import Optimizer
from torch.utils._pytree import tree_map

from autoembed.config import PRECISIONS, EmbeddingConfig, PrecisionPolicy, precision_policy
from autoembed.errors import ConfigError

__all__ = [
    "EMBEDDING_TYPES",
    "OPTIMIZER_NAMES",
    "UserStep",
    "call_model",
    "cast_floating",
    "embedding_modules",
    "pin_foreach",
    "resolve_loss",
    "user_optimizers",
]

OPTIMIZER_NAMES = ("sgd", "momentum", "adam", "adamw", "adagrad", "rowwise_adagrad")

OptimizerSpec = str | Callable[[list[torch.Tensor]], Optimizer]
LossFn = Callable[[Any, Any], torch.Tensor]


def _embedding_types() -> tuple[type[nn.Module], ...]:
    from autoembed import nn as ae_nn

    return (nn.Embedding, nn.EmbeddingBag, ae_nn.Embedding, ae_nn.EmbeddingBag)


EMBEDDING_TYPES = _embedding_types()


def embedding_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """(module path, module) of every embedding table in `model`, in module order."""
    return [(n, m) for n, m in model.named_modules() if isinstance(m, EMBEDDING_TYPES)]


def call_model(model: nn.Module, example: Any) -> Any:
    """tensor -> model(x); tuple -> model(*x); dict -> model(**x); anything else -> model(x)."""
    if isinstance(example, tuple):
        return model(*example)
    if isinstance(example, Mapping):
        return model(**example)
    return model(example)


def resolve_loss(output: Any, example: Any, loss: LossFn | None) -> torch.Tensor:
    """The output when it is a scalar tensor; else its `.loss` (or ['loss']); else
    `loss(output, example)`."""
    if isinstance(output, torch.Tensor) and output.dim() == 0:
        return output
    got = getattr(output, "loss", None)
    if got is None and isinstance(output, Mapping):
        got = output.get("loss")
    if isinstance(got, torch.Tensor) and got.dim() == 0:
        return got
    if loss is None:
        shape = tuple(output.shape) if isinstance(output, torch.Tensor) else type(output).__name__
        raise ConfigError(
            f"the model's output ({shape}) is not a scalar loss and has no .loss; pass "
            "loss=fn(output, example) (CLI: return the loss from forward)"
        )
    value = loss(output, example)
    if not isinstance(value, torch.Tensor) or value.dim() != 0:
        raise ConfigError(f"loss(output, example) returned {type(value).__name__} "
                          f"{tuple(getattr(value, 'shape', ()))}, not a scalar tensor")
    return value


def pin_foreach(opt: Optimizer) -> Optimizer:
    """Pin the implementation CUDA picks (foreach) where the optimizer left it to torch."""
    if "foreach" not in opt.defaults:
        return opt  # e.g. RowWiseAdagrad: one implementation
    for group in [opt.defaults, *opt.param_groups]:
        if group.get("foreach") is None and not group.get("fused"):
            group["foreach"] = True
    return opt


def user_optimizers(
    model: nn.Module, config: EmbeddingConfig, *, masters: Mapping[str, torch.Tensor] | None = None
) -> Any:  # models.optim.Optimizers; a tuple of table optimizers when nothing else trains
    """`autoembed.build_optimizer` for a user's model: the embedding tables' parameters under
    their table optimizer (a config table named by the module's path may set its own
    `table_optimizer`; else `config.table_optimizer`), one torch optimizer per distinct
    (name, sparse gradients) at `config.lr`; every other trainable parameter under
    `config.dense_optimizer` at `config.effective_dense_lr`. A `sparse=True` nn.Embedding /
    EmbeddingBag takes sparse gradients, so its optimizer must accept them. A host_cached
    `autoembed.nn` layer is bound to its table optimizer (`models.host_cache.
    bind_host_cached`: the cached rows' state moves with them), which must be the one it was
    built for. `masters`: parameter name -> fp32 master to optimise instead (*_master
    precisions; refused beside a host_cached layer)."""
    from autoembed.config import SPARSE_GRAD_OPTIMIZERS
    from autoembed.models.host_cache import bind_host_cached
    from autoembed.models.optim import Optimizers, make_optimizer

    if not config.is_resolved:
        config = config.resolve()
    own = {t.name: t.table_optimizer for t in config.tables if t.table_optimizer}
    kind: dict[int, tuple[str, bool]] = {}
    for path, m in embedding_modules(model):
        name, sparse = own.get(path, config.table_optimizer), bool(getattr(m, "sparse", False))
        _check_cached(path, m, name, masters is not None)
        if sparse and name not in SPARSE_GRAD_OPTIMIZERS:
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
    table_opts = tuple(make_optimizer(name, ps, config, lr=config.lr, sparse=sp)
                       for (name, sp), ps in tables.items())
    bind_host_cached(model, table_opts)  # the cached rows' state moves with them
    if not dense:  # e.g. only the tables train: no dense optimizer to make
        return table_opts
    dense_opt = make_optimizer(config.dense_optimizer, dense, config,
                               lr=config.effective_dense_lr, sparse=False)
    return Optimizers(table_opts, dense_opt)


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


def _named_optimizer(
    name: str, model: nn.Module, masters: Mapping[str, torch.Tensor] | None, precision: str
) -> tuple[Optimizer, ...]:
    """The optimizers `autoembed.build_optimizer` makes for an optimizer name (the table
    optimizer; its dense partner by `config.optimizer_alias`)."""
    from autoembed.config import optimizer_alias

    if name not in OPTIMIZER_NAMES:
        raise ConfigError(f"optimizer '{name}' is not known; use one of "
                          f"{', '.join(OPTIMIZER_NAMES)} or a factory params -> Optimizer")
    alias: dict[str, Any] = dict(optimizer_alias(name))
    cfg = EmbeddingConfig(precision=precision if precision in PRECISIONS else "fp32", **alias)
    got = user_optimizers(model, cfg, masters=masters)
    return got if isinstance(got, tuple) else got.all


@torch.no_grad()
def cast_floating(model: nn.Module, dtype: torch.dtype) -> None:
    """Floating parameters and buffers to `dtype` in place, shared ones staying shared
    (`Module.to` would do it, but cannot swap fake parameters)."""
    done: dict[int, torch.Tensor] = {}
    for m in model.modules():
        for store in (m._parameters, m._buffers):
            for name, t in store.items():
                if t is None or not t.is_floating_point():
                    continue
                if id(t) not in done:
                    new = t.detach().to(dtype)
                    done[id(t)] = (nn.Parameter(new, t.requires_grad)
                                   if isinstance(t, nn.Parameter) else new)
                store[name] = done[id(t)]  # type: ignore[assignment]
    from autoembed.models.host_cache import host_cached_tables

    for _, table in host_cached_tables(model):  # host rows and cached state follow
        table.follow(lambda t: t.to(dtype) if t.is_floating_point() else t)


@dataclass
class UserStep:
    """A user's model with its optimizer and precision machinery, ready to step."""

    model: nn.Module
    optimizers: tuple[Optimizer, ...]
    policy: PrecisionPolicy
    masters: Any = None  # autoembed.models.MasterWeights under *_master
    scaler: torch.amp.GradScaler | None = None
    config: EmbeddingConfig = EmbeddingConfig()  # its precision: autocast and the scaler

    @classmethod
    def build(
        cls, model: nn.Module, *, precision: str = "fp32", optimizer: OptimizerSpec = "adam"
    ) -> UserStep:
        """Cast `model` in place to the precision's parameter dtype; masters, optimizer, scaler."""
        from autoembed.models.precision import MasterWeights, make_scaler

        policy = precision_policy(precision)
        if policy.param_dtype != "float32":
            cast_floating(model, getattr(torch, policy.param_dtype))
        masters = MasterWeights.create(model) if policy.master else None
        if isinstance(optimizer, str):
            opts = _named_optimizer(optimizer, model, masters.masters if masters else None,
                                    precision)
        else:
            named = dict(model.named_parameters())
            target = masters.masters if masters is not None else named
            table_ids = {id(p) for _, m in embedding_modules(model) for p in m.parameters()}
            tables = [target[n] for n, p in named.items()
                      if p.requires_grad and id(p) in table_ids]
            dense = [target[n] for n, p in named.items()
                     if p.requires_grad and id(p) not in table_ids]
            try:
                opt = optimizer([*tables, *dense])
            except Exception as e:  # noqa: BLE001 - the user's factory: report, one line
                raise ConfigError(f"optimizer factory {_name(optimizer)} raised "
                                  f"{type(e).__name__}: {e}") from None
            if not isinstance(opt, Optimizer):
                raise ConfigError(f"optimizer factory {_name(optimizer)} returned "
                                  f"{type(opt).__name__}, not a torch.optim.Optimizer")
            opts = (pin_foreach(opt),)
            from autoembed.models.host_cache import bind_host_cached

            bind_host_cached(model, opts)
        config = EmbeddingConfig(precision=precision)
        return cls(model, opts, policy, masters, make_scaler(config, _device(model)), config)

    def cast_inputs(self, example: Any) -> Any:
        """Floating-point inputs in the parameters' dtype (fp16/bf16 models take half
        inputs, as a user casts them); ids and masks unchanged."""
        if self.policy.param_dtype == "float32":
            return example
        dtype = getattr(torch, self.policy.param_dtype)

        def cast(x: Any) -> Any:
            if isinstance(x, torch.Tensor) and x.is_floating_point():
                return x.to(dtype)
            return x

        return tree_map(cast, example)

    def autocast(self) -> contextlib.AbstractContextManager[None]:
        """`autoembed.autocast` (the built-in trainer's) on the parameters' device."""
        from autoembed.models.precision import autocast

        return autocast(self.config, _device(self.model))

    def step(self, example: Any, loss: LossFn | None = None) -> torch.Tensor:
        """One optimizer step on `example`; the loss (detached)."""
        self.model.train()
        self.model.zero_grad(set_to_none=True)
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=True)
        example = self.cast_inputs(example)
        with self.autocast():
            value = resolve_loss(call_model(self.model, example), example, loss)
        if self.scaler is not None:
            self.scaler.scale(value).backward()
        else:
            value.backward()
        if self.masters is not None:
            self.masters.grads_to_master()
        fake = any(is_fake(p) for p in self.model.parameters())
        for opt in self.optimizers:
            if self.scaler is None:
                opt.step()
            elif fake:
                self.scaler.unscale_(opt)  # the inf check reads a value: step anyway
                opt.step()
            else:
                self.scaler.step(opt)
        if self.scaler is not None:
            self.scaler.update()
        if self.masters is not None:
            self.masters.copy_back()
        return value.detach()


def _device(model: nn.Module) -> torch.device:
    return next((p.device for p in model.parameters()), torch.device("cpu"))


def _name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)
