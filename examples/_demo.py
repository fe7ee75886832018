"""What `python -m examples.<name>` shows: estimate -> apply -> training in a plain loop."""

from __future__ import annotations

from types import ModuleType

import torch

import autoembed
from autoembed.config import EmbeddingConfig, TableConfig


def demo(mod: ModuleType, steps: int = 20) -> None:
    est = autoembed.estimate_model(mod.full_model, mod.full_example(), budget=8 * 10**9)
    print(f"full size: allocated peak {est.allocated_peak / 1e9:.2f} GB, device total "
          f"{est.device_total / 1e9:.2f} GB, fits 8 GB: {est.fits}")
    size = mod.SIZES["twin"]
    model = mod.build_model(**size)  # (a large model: build on meta, then materialize)
    first = autoembed.tables(model)[0]
    cfg = EmbeddingConfig(dim=first.dim or 16, tables=(TableConfig(
        first.name, first.vocab_size, compression="hash",
        hash_buckets=max(1, first.vocab_size // 4)),))
    autoembed.apply(model, cfg)
    print(f"'{first.name}' hashed into {first.vocab_size // 4} rows")
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    example = mod.make_example(**size)
    args = example if isinstance(example, dict) else None
    for step in range(steps):
        opt.zero_grad()
        out = model(**args) if args is not None else (
            model(*example) if isinstance(example, tuple) else model(example))
        loss = out.loss if hasattr(out, "loss") else out
        loss.backward()
        opt.step()
        if step in (0, steps - 1):
            print(f"step {step}: loss {loss.item():.3f}")
