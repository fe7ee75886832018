"""What `python -m examples.<name>` shows: estimate -> apply -> training in a plain loop."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch

import autoembed
from autoembed.config import EmbeddingConfig, config_from_dict

BIG_SHARE = 10  # `compressed_config` compresses tables of at least 1/10 the largest's rows


def compressed_config(model: torch.nn.Module) -> dict[str, Any]:
    """The config (plain data, as a YAML file holds it) that the examples, the priced-right
    test and the accuracy benchmark apply: every table with at least 1/BIG_SHARE of the
    largest table's rows compressed, an nn.Embedding hashed into a quarter of its rows, an
    nn.EmbeddingBag by quotient-remainder (4 collisions, mult); the others keep their module."""
    found = autoembed.tables(model)
    big = max(t.vocab_size for t in found)
    out = []
    for t in found:
        if t.vocab_size * BIG_SHARE < big:
            continue
        bag = isinstance(model.get_submodule(t.name), torch.nn.EmbeddingBag)
        comp: dict[str, Any] = ({"compression": "qr", "qr_collisions": 4} if bag else
                                {"compression": "hash", "hash_buckets": t.vocab_size // 4})
        out.append({"name": t.name, "vocab_size": t.vocab_size, "dim": t.dim, **comp})
    return {"tables": out}


def build_applied(build: Callable[[], torch.nn.Module]) -> torch.nn.Module:
    """`build()` rewritten by `autoembed.apply` with its `compressed_config` (a factory for
    `estimate_model`: `functools.partial(build_applied, build)`)."""
    model = build()
    return autoembed.apply(model, config_from_dict(compressed_config(model)))


def demo(mod: ModuleType, steps: int = 20) -> None:
    loss_fn = getattr(mod, "loss", None)  # a forward that returns logits: the loop's loss
    est = autoembed.estimate_model(mod.full_model, mod.full_example(), loss=loss_fn,
                                   budget=8 * 10**9)
    print(f"full size: allocated peak {est.allocated_peak / 1e9:.2f} GB, device total "
          f"{est.device_total / 1e9:.2f} GB, fits 8 GB: {est.fits}")
    size = mod.SIZES["twin"]
    model = mod.build_model(**size)  # (a large model: build on meta, then materialize)
    cfg: EmbeddingConfig = config_from_dict(compressed_config(model))
    autoembed.apply(model, cfg)
    for t in cfg.tables:
        print(f"'{t.name}' ({t.vocab_size} rows) compressed: {t.compression}")
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    example = mod.make_example(**size)
    if not isinstance(example, autoembed.Example):  # a tuple, a dict or one tensor: the
        example = autoembed.Example(  # forward's arguments, and the loss gets all of it
            args=example if isinstance(example, tuple) else () if isinstance(example, dict)
            else (example,), kwargs=example if isinstance(example, dict) else {},
            targets=example)
    for step in range(steps):
        opt.zero_grad()
        out = model(*example.args, **example.kwargs)
        loss = out.loss if hasattr(out, "loss") else (
            loss_fn(out, example.targets) if loss_fn is not None else out)
        loss.backward()
        opt.step()
        if step in (0, steps - 1):
            print(f"step {step}: loss {loss.item():.3f}")
