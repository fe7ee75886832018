"""`autoembed estimate --model pkg.module:factory --example pkg.module:name [--loss
pkg.module:fn]`: the CLI's side of `estimate_model` (`price.price` calls `estimate_for_cli`;
the CLI prints as for a config)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from autoembed.budget import Budget
from autoembed.errors import ConfigError

__all__ = ["estimate_for_cli", "resolve_for_cli", "applied"]


def _example(spec: str) -> Any:
    from autoembed.user_model.load import load_object

    obj = load_object(spec, "--example")
    if callable(obj) and not hasattr(obj, "shape"):
        try:
            return obj()
        except Exception as e:  # noqa: BLE001 - the user's function: one line
            raise ConfigError(f"--example '{spec}' raised {type(e).__name__}: {e}") from None
    return obj


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
) -> Any:
    """The MemoryEstimate `autoembed estimate --model ...` prints. `refused`: the built-in
    model's flags that were given (flag name -> value); any one is bad input beside --model.
    `loss` (``pkg.module:fn``): the loss of a forward that returns logits; without it such a
    forward is priced with the stand-in loss, and a line on stderr says so."""
    if model is None or example is None:
        missing = "--model" if model is None else "--example"
        raise ConfigError(f"{missing} is missing: --model pkg.module:factory and --example "
                          "pkg.module:name go together")
    given = [k for k, v in refused.items() if v is not None]
    if given:
        flag = "--" + given[0].replace("_", "-")
        raise ConfigError(f"{flag} describes the built-in model; with --model the model is "
                          "yours: drop it (only --optimizer, --precision, --loss, --budget, "
                          "--reserve, --device-memory and --json apply)")
    from autoembed.memory.traced_model import STANDIN_NOTE
    from autoembed.models.user_step import STANDIN_LOSS
    from autoembed.user_model import estimate_model

    obj, ex, loss_fn, cfg = resolve_for_cli(model, example, apply, loss)
    est = estimate_model(obj if cfg is None else applied(obj, cfg), ex, loss=loss_fn,
                         optimizer=optimizer or "adam", precision=precision or "fp32",
                         budget=budget, reserve=reserve)
    if any(n.startswith(STANDIN_NOTE) for n in est.notes):
        print(f"autoembed: note: {STANDIN_NOTE}, so a stand-in is priced: {STANDIN_LOSS}; "
              "give --loss pkg.module:fn to price yours", file=sys.stderr)
    return est


def resolve_for_cli(model: str, example: str, apply: Path | None,
                    loss: str | None) -> tuple[Any, Any, Any, Any]:
    """What --model, --example, --apply and --loss name: the model or its zero-argument
    factory, the example, the loss function (None: none given) and the --apply config
    (None: none given)."""
    from autoembed.config import load_config
    from autoembed.user_model.load import load_object

    obj = load_object(model, "--model")
    cfg = None if apply is None else load_config(apply)
    return obj, _example(example), _loss(loss), cfg


def _loss(spec: str | None) -> Any:
    """The function `--loss pkg.module:fn` names (None without one)."""
    if spec is None:
        return None
    from autoembed.user_model.load import load_object

    fn = load_object(spec, "--loss")
    if not callable(fn):
        raise ConfigError(f"--loss '{spec}' is a {type(fn).__name__}, not a function; give "
                          "pkg.module:fn, fn(output, example) -> scalar tensor")
    return fn


def applied(factory: Any, cfg: Any) -> Any:
    """A factory that builds the user's model and rewrites it by the config `cfg`."""
    from autoembed.user_model.apply import apply as apply_config

    def build() -> Any:
        model = factory() if callable(factory) and not hasattr(factory, "forward") else factory
        return apply_config(model, cfg)

    return build
