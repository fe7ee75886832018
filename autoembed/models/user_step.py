"""The one training step (`models.step.TrainStep`) on a user's own model: the step
`estimate_model` traces on fake tensors and the step a user runs on real ones.

`UserStep.build(model, precision=..., optimizer=...)` prepares precision (half parameters,
fp32 masters, autocast, GradScaler: `autoembed.config.precision_policy`) and the optimizers;
`UserStep.step(example, loss)` is `TrainStep.run` on one micro-batch: floating inputs cast to
a half model's dtype, the model called on the example (`call_model`, under autocast for
amp_*), and its loss (`resolve_loss`).

An optimizer name builds what `autoembed.build_optimizer` does for its config
(`config.optimizer_alias`): the tables under that optimizer, the rest under its dense
partner; an `EmbeddingConfig` what it builds for that config (a table's own
`table_optimizer` by module path, `dense_optimizer`). A factory ``params -> Optimizer``
gets every trainable parameter (the fp32 masters under *_master). Either way
``foreach=True`` is pinned where the optimizer left it to torch and did not ask for
``fused`` (what CUDA picks; CPU would pick the single-tensor loop).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.optim import Optimizer
from torch.utils._pytree import register_pytree_node, tree_map

from autoembed.config import (
    PRECISIONS,
    EmbeddingConfig,
    PrecisionPolicy,
    optimizer_alias,
    precision_policy,
)
from autoembed.errors import ConfigError
from autoembed.example import Example
from autoembed.models.device_precision import MasterWeights, make_scaler
from autoembed.models.host_cached_table import bind_host_cached, host_cached_tables
from autoembed.models.optim import Optimizers, user_optimizers
from autoembed.models.step import TrainStep
from autoembed.models.table_modules import embedding_modules

__all__ = ["OPTIMIZER_NAMES", "STANDIN_LOSS", "UserStep", "call_model", "cast_floating",
           "pin_foreach", "resolve_loss", "standin_loss"]

OPTIMIZER_NAMES = ("sgd", "momentum", "adam", "adamw", "adagrad", "rowwise_adagrad")

OptimizerSpec = str | EmbeddingConfig | Callable[[list[torch.Tensor]], Optimizer]
LossFn = Callable[[Any, Any], torch.Tensor]

STANDIN_LOSS = ("cross-entropy over the output's last dimension in fp32: an fp32 copy of the "
                "output held through the backward and the optimizer step (as a loop that keeps "
                "its logits holds them), its log-softmax and their gradients")


register_pytree_node(  # tree_map reaches an Example's tensors (fake copies, casts)
    Example, lambda e: ([e.args, dict(e.kwargs), e.targets], None),
    lambda children, _: Example(*children),
    serialized_type_name="autoembed.Example")


def call_model(model: nn.Module, example: Any) -> Any:
    """Example -> model(*args, **kwargs); tensor -> model(x); tuple -> model(*x); dict ->
    model(**x); anything else -> model(x)."""
    if isinstance(example, Example):
        return model(*example.args, **example.kwargs)
    if isinstance(example, tuple):
        return model(*example)
    if isinstance(example, Mapping):
        return model(**example)
    return model(example)


def standin_loss(output: torch.Tensor, example: Any) -> torch.Tensor:
    """Cross-entropy over the last dimension of `output` in fp32, against class 0: the loss
    priced for a forward that returns logits when no loss is given (`STANDIN_LOSS`)."""
    del example
    logits = output.float()
    flat = logits.reshape(-1, logits.shape[-1]) if logits.dim() > 0 else logits.reshape(1, 1)
    target = torch.zeros(flat.shape[0], dtype=torch.long, device=flat.device)
    return F.cross_entropy(flat, target)


def resolve_loss(output: Any, example: Any, loss: LossFn | None) -> torch.Tensor:
    """The output when it is a scalar tensor; else its `.loss` (or ['loss']); else the
    first element of a tuple or list when that is a scalar tensor (TorchRec's `DLRMTrain`,
    Hugging Face's `return_dict=False`); else `loss(output, example)` (an `Example`'s
    `targets` in place of the example); a `loss` given is used before a tuple's first element."""
    if isinstance(output, torch.Tensor) and output.dim() == 0:
        return output
    got = getattr(output, "loss", None)
    if got is None and isinstance(output, Mapping):
        got = output.get("loss")
    if got is None and loss is None and isinstance(output, (tuple, list)) and output:
        got = output[0]
    if isinstance(got, torch.Tensor) and got.dim() == 0:
        return got
    if loss is None:
        shape = tuple(output.shape) if isinstance(output, torch.Tensor) else type(output).__name__
        raise ConfigError(
            f"the model's output ({shape}) is not a scalar loss and has no .loss; pass "
            "loss=fn(output, example) (CLI: --loss pkg.module:fn)"
        )
    value = loss(output, example.targets if isinstance(example, Example) else example)
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
    for _, table in host_cached_tables(model):  # host rows and cached state follow
        table.follow(lambda t: t.to(dtype) if t.is_floating_point() else t)


def _named_optimizer(
    name: str, model: nn.Module, masters: Mapping[str, torch.Tensor] | None, precision: str
) -> Optimizers:
    """The optimizers `autoembed.build_optimizer` makes for an optimizer name (the table
    optimizer; its dense partner by `config.optimizer_alias`)."""
    if name not in OPTIMIZER_NAMES:
        raise ConfigError(f"optimizer '{name}' is not known; use one of "
                          f"{', '.join(OPTIMIZER_NAMES)} or a factory params -> Optimizer")
    alias: dict[str, Any] = dict(optimizer_alias(name))
    cfg = EmbeddingConfig(precision=precision if precision in PRECISIONS else "fp32", **alias)
    return user_optimizers(model, cfg, masters=masters)


def _factory_optimizer(
    factory: Callable[[list[torch.Tensor]], Optimizer], model: nn.Module,
    masters: Mapping[str, torch.Tensor] | None,
) -> Optimizers:
    """The user's factory's one optimizer over every trainable parameter (tables first),
    as `Optimizers` whose `tables[0]` it is."""
    named = dict(model.named_parameters())
    target = masters if masters is not None else named
    table_ids = {id(p) for _, m in embedding_modules(model) for p in m.parameters()}
    tables = [target[n] for n, p in named.items() if p.requires_grad and id(p) in table_ids]
    dense = [target[n] for n, p in named.items() if p.requires_grad and id(p) not in table_ids]
    try:
        opt = factory([*tables, *dense])
    except Exception as e:  # noqa: BLE001 - the user's factory: report, one line
        raise ConfigError(f"optimizer factory {_name(factory)} raised "
                          f"{type(e).__name__}: {e}") from None
    if not isinstance(opt, Optimizer):
        raise ConfigError(f"optimizer factory {_name(factory)} returned "
                          f"{type(opt).__name__}, not a torch.optim.Optimizer")
    given = {id(t) for t in [*tables, *dense]}
    foreign = [p for g in opt.param_groups for p in g["params"] if id(p) not in given]
    if foreign:  # another model's weights: the priced model's would keep no state
        raise ConfigError(f"optimizer factory {_name(factory)} returned an optimizer over "
                          f"{len(foreign)} tensor(s) it was not given (the first of shape "
                          f"{tuple(foreign[0].shape)}), so the priced model's weights would "
                          "keep no optimizer state; build it from the params it is called "
                          "with (param groups of them are fine), not model.parameters()")
    opts = Optimizers((pin_foreach(opt),), None)
    bind_host_cached(model, opts.all)
    return opts


@dataclass(kw_only=True)
class UserStep(TrainStep):
    """A user's model with its optimizers and precision machinery, ready to step."""

    policy: PrecisionPolicy

    @classmethod
    def build(
        cls, model: nn.Module, *, precision: str = "fp32", optimizer: OptimizerSpec = "adam"
    ) -> UserStep:
        """Cast `model` in place to the precision's parameter dtype; masters, optimizer, scaler."""
        policy = precision_policy(precision)
        config = EmbeddingConfig(precision=precision)
        if policy.param_dtype != "float32":
            cast_floating(model, getattr(torch, policy.param_dtype))
        masters = MasterWeights.create(model) if policy.master else None
        target = masters.masters if masters is not None else None
        if isinstance(optimizer, str):
            opts = _named_optimizer(optimizer, model, target, precision)
        elif isinstance(optimizer, EmbeddingConfig):  # what build_optimizer(model, it) makes
            opts = user_optimizers(model, optimizer, masters=target)
        else:
            opts = _factory_optimizer(optimizer, model, target)
        device = _device(model)
        return cls(model=model, optimizers=opts, config=config, device=device,
                   scaler=make_scaler(config, device), masters=masters, policy=policy)

    def cast_inputs(self, example: Any) -> Any:
        """Floating-point inputs in the parameters' dtype (fp16/bf16 models take half
        inputs, as a user casts them); ids and masks unchanged."""
        if self.policy.param_dtype == "float32":
            return example
        dtype = getattr(torch, self.policy.param_dtype)
        return tree_map(lambda x: x.to(dtype) if isinstance(x, torch.Tensor)
                        and x.is_floating_point() else x, example)

    def step(self, example: Any, loss: LossFn | None = None) -> torch.Tensor:
        """One optimizer step on `example` (its floating inputs cast first and held through
        the step); the loss (detached)."""
        def micro_loss(x: Any) -> tuple[torch.Tensor, None]:
            with self.autocast():
                return resolve_loss(call_model(self.model, x), x, loss), None

        return self.run([self.cast_inputs(example)], micro_loss)


def _device(model: nn.Module) -> torch.device:
    return next((p.device for p in model.parameters()), torch.device("cpu"))


def _name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)
