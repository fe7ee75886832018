"""`autoembed estimate --model pkg.module:factory --example pkg.module:name [--loss
pkg.module:fn]`: the CLI's side of `estimate_model` (`price.price` calls `estimate_for_cli`;
the CLI prints as for a config)."""

from __future__ import annotations

import functools
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autoembed.budget import Budget
from autoembed.errors import ConfigError

__all__ = ["estimate_for_cli", "resolve_for_cli", "applied", "step_settings"]


def _example(spec: str, params: Mapping[str, Any] | None) -> Any:
    from autoembed.user.model.load import load_object

    obj = load_object(spec, "--example")
    if callable(obj) and not hasattr(obj, "shape"):
        args = _args(obj, "--example", spec, params)
        try:
            return obj(*args)
        except Exception as e:  # noqa: BLE001 - the user's function: one line
            raise ConfigError(f"--example '{spec}' raised {type(e).__name__}: {e}") from None
    return obj


def _args(fn: Any, flag: str, spec: str, params: Mapping[str, Any] | None) -> tuple[Any, ...]:
    """() for a zero-argument function, (params,) for one that takes params (the one
    factory shape of a search); ConfigError when it takes params and no --space gave them."""
    from autoembed.user.functions import takes_params

    if not takes_params(fn, required=True):
        return ()
    if params is None:
        raise ConfigError(f"{flag} '{spec}' takes params, as in a search; give --space "
                          "FILE (its reference values are passed) or a zero-argument function")
    return (params,)


def _space_params(path: Path | None) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """The params a `build(params)` receives from the space at `path` (its reference
    values, `user.space.reference_values`), and its `embedding:` optimizer and precision
    for those values (absent keys left out). (None, {}) without a space."""
    if path is None:
        return None, {}
    from autoembed.user.space import (
        embedding_value,
        load_user_space,
        params_for,
        reference_values,
    )

    space = load_user_space(path)
    values = reference_values(space)
    keys = {"optimizer": "table_optimizer", "precision": "precision"}
    found = {flag: embedding_value(space, values, key) for flag, key in keys.items()}
    return params_for(space, values), {k: v for k, v in found.items() if v is not None}


def estimate_for_cli(
    model: str | None,
    example: str | None,
    apply: Path | None,
    *,
    optimizer: str | None,
    precision: str | None,
    budget: Budget | None,
    reserve: int,
    refused: dict[str, Any],
    loss: str | None = None,
    space: Path | None = None,
) -> Any:
    """The MemoryEstimate `autoembed estimate --model ...` prints. `refused`: the built-in
    model's flags that were given (flag name -> value); any one is bad input beside --model.
    `loss` (``pkg.module:fn``): the loss of a forward that returns logits; without it such a
    forward is priced with the stand-in loss, and a line on stderr says so. `space` (a
    search's space file): a `build(params)` / `example(params)` gets its reference values,
    and its `embedding:` optimizer and precision stand where --optimizer / --precision are
    not given (the search's factories price as the search's trial 0 is priced)."""
    if model is None or example is None:
        missing = "--model" if model is None else "--example"
        raise ConfigError(f"{missing} is missing: --model pkg.module:factory and --example "
                          "pkg.module:name go together")
    given = [k for k, v in refused.items() if v is not None]
    if given:
        flag = "--" + given[0].replace("_", "-")
        raise ConfigError(f"{flag} describes the built-in model; with --model the model is "
                          "yours: drop it (only --example, --apply, --loss, --space, "
                          "--optimizer, --precision, --budget, --reserve, --device-memory, "
                          "--suggest, --world-size and --json apply)")
    _check_step_flags(optimizer, precision)  # before the model is loaded
    from autoembed.models.user_step import STANDIN_LOSS
    from autoembed.torchrec.public import estimate_model
    from autoembed.trace.traced_model import STANDIN_NOTE

    obj, ex, loss_fn, cfg = resolve_for_cli(model, example, apply, loss, space)
    opt, prec = step_settings(optimizer, precision, space)
    est = estimate_model(obj if cfg is None else applied(obj, cfg), ex, loss=loss_fn,
                         optimizer=opt, precision=prec, budget=budget, reserve=reserve)
    if any(n.startswith(STANDIN_NOTE) for n in est.notes):
        print(f"autoembed: note: {STANDIN_NOTE}, so a stand-in is priced: {STANDIN_LOSS}; "
              "give --loss pkg.module:fn to price yours", file=sys.stderr)
    return est


def _check_step_flags(optimizer: str | None, precision: str | None) -> None:
    """--optimizer and --precision as given beside --model, checked as options ("--precision
    = 'fp8': must be one of ...") against what pricing a model takes."""
    from autoembed.config.precision import PRECISION_RULE
    from autoembed.models.user_step import OPTIMIZER_NAMES
    from autoembed.rules import OneOf

    if optimizer is not None:
        OneOf(OPTIMIZER_NAMES).check_argument("--optimizer", optimizer)
    if precision is not None:
        PRECISION_RULE.check_argument("--precision", precision)


def _loss(spec: str | None) -> Any:
    """The function `--loss pkg.module:fn` names (None without one)."""
    if spec is None:
        return None
    from autoembed.user.model.load import load_object

    fn = load_object(spec, "--loss")
    if not callable(fn):
        raise ConfigError(f"--loss '{spec}' is a {type(fn).__name__}, not a function; give "
                          "pkg.module:fn, fn(output, example) -> scalar tensor")
    return fn


def step_settings(optimizer: str | None, precision: str | None,
                  space: Path | None) -> tuple[str, str]:
    """The optimizer and precision `--model` is priced with: the flags, else the space's
    `embedding:` values, else adam and fp32."""
    from_space = _space_params(space)[1]
    return (optimizer or from_space.get("optimizer", "adam"),
            precision or from_space.get("precision", "fp32"))


def resolve_for_cli(model: str, example: str, apply: Path | None, loss: str | None,
                    space: Path | None = None) -> tuple[Any, Any, Any, Any]:
    """What --model, --example, --apply and --loss name: the model or its zero-argument
    factory (a `build(params)` bound to `space`'s reference values), the example, the loss
    function (None: none given) and the --apply config (None: none given)."""
    from autoembed.config import load_config
    from autoembed.user.model.load import load_object

    params = _space_params(space)[0]
    factory = load_object(model, "--model")
    if callable(factory) and not hasattr(factory, "forward"):
        args = _args(factory, "--model", model, params)
        if args:
            factory = functools.partial(factory, *args)
    cfg = None if apply is None else load_config(apply, _dims(factory))
    return factory, _example(example, params), _loss(loss), cfg


def _dims(factory: Any) -> dict[str, int]:
    """The model's table dims (`apply.table_dims`), which an --apply file's tables without a
    dim take, as `autoembed.apply` given the file does: a factory is built on the meta
    device (nothing allocated); one that cannot be leaves them to the config's default."""
    import torch

    from autoembed.trace.traced_model import on_meta
    from autoembed.user.model.apply import table_dims

    if isinstance(factory, torch.nn.Module):
        return table_dims(factory)
    try:
        model = on_meta(factory)
    except Exception:  # noqa: BLE001 - the estimate calls it again and reports what it raises
        return {}
    return table_dims(model) if isinstance(model, torch.nn.Module) else {}


def applied(factory: Any, cfg: Any) -> Any:
    """A factory that builds the user's model and rewrites it by the config `cfg` (the
    apply that dispatches TorchRec's collections, as pricing and trials use)."""
    from autoembed.torchrec.public import apply as apply_config

    def build() -> Any:
        model = factory() if callable(factory) and not hasattr(factory, "forward") else factory
        return apply_config(model, cfg)

    return build
