"""Price one proposal on the user's own model before anything trains.

`build(params)` on the meta device lists the model's embedding modules (no table is
allocated), the space turns the proposal into the embedding config for those modules, and
`estimate_model` traces two training steps of `apply(build(params), config)` on fake tensors
with `example(params)`. The estimate is judged against the budget by the search's
feasibility rules, like a built-in proposal's.

The user's code failing here is bad input known before the proposal trains: a ConfigError
naming the function, the exception and the proposal's values.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autoembed.config import EmbeddingConfig
from autoembed.errors import ConfigError
from autoembed.user.run import UserCode, built_module
from autoembed.user.space import UserSpace

if TYPE_CHECKING:
    from torch import nn

    from autoembed.memory import MemoryEstimate

__all__ = ["Priced", "price_proposal", "model_tables", "call_user"]

Apply = Callable[["nn.Module", EmbeddingConfig], Any]


@dataclass(frozen=True)
class Priced:
    """A proposal priced: what its functions receive, the embedding config applied to the
    model, and the estimate of its training step."""

    params: Mapping[str, Any]
    config: EmbeddingConfig
    estimate: MemoryEstimate


def call_user(fn: Callable[..., Any], role: str, *args: Any) -> Any:
    """`fn(*args)`, a raise of the user's code turned into one ConfigError line."""
    try:
        return fn(*args)
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - the user's code: any error is bad input here
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        name = getattr(fn, "__qualname__", repr(fn))
        raise ConfigError(f"{role}: {name}(params) raised {type(e).__name__}: {first}") from None


def model_tables(model: nn.Module) -> list[dict[str, Any]]:
    """The config's table entries for the model's embedding modules (name = module path)."""
    from torch import nn

    out = []
    for path, m in model.named_modules():
        if isinstance(m, (nn.Embedding, nn.EmbeddingBag)):
            out.append({"name": path, "vocab_size": int(m.num_embeddings),
                        "dim": int(m.embedding_dim)})
    if not out:
        raise ConfigError(f"model: {type(model).__name__} has no nn.Embedding or "
                          "nn.EmbeddingBag modules; autoembed searches embedding tables")
    return out


def price_proposal(code: UserCode, space: UserSpace, values: Mapping[str, Any],
                   budget: int | None = None, *, reserve: int = 0,
                   apply: Apply | None = None) -> Priced:
    """Price the proposal `values` (qualified name -> value) on the user's model."""
    import torch

    import autoembed

    apply_fn = apply or autoembed.apply
    params = space.params_for(values)
    with torch.device("meta"):
        probe = built_module(call_user(code.build, "model", params))
    config = space.config_for(values, model_tables(probe))
    example = call_user(code.example, "example", params)

    def model() -> nn.Module:
        built = built_module(code.build(params))
        out = apply_fn(built, config)
        return built if out is None else built_module(out)

    est = autoembed.estimate_model(
        model, example, optimizer=config.table_optimizer, precision=config.precision,
        budget=budget, reserve=reserve)
    return Priced(params, config, est)
