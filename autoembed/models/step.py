"""The one training step, shared by the trial runner and the traced memory estimator.

`make_trainer(config, device)` builds model, optimizers, GradScaler (amp_fp16) and fp32
masters (*_master); `Trainer.step(batches)` runs one optimizer step over
`config.grad_accum_steps` micro-batches:

1. zero_grad(set_to_none=True) on the model (and the masters);
2. per micro-batch: forward (under autocast for amp_*), loss / grad_accum_steps, backward
   (of the scaled loss for amp_fp16); sparse gradients accumulate by concatenation;
3. *_master: half gradients -> fp32 master gradients, one parameter at a time;
4. table optimizer step, then dense optimizer step (through the scaler for amp_fp16);
5. *_master: masters copied back into the half parameters; then the warm-up schedule.

Gradient checkpointing (`config.checkpointing`) recomputes the dense tower and the naive
[B, S, D] lookup + mean block (`torch.utils.checkpoint`, use_reentrant=False). An embedding
lookup followed by mean pooling saves only the indices for backward, so checkpointing pays
off only over the tower and materialised intermediates (REFERENCES.md).

Fake tensors (`torch._subclasses.fake_tensor.FakeTensorMode`): `make_trainer` and `step`
run with every parameter, batch and state fake, so the traced memory estimator sees one
real step without allocating tables. See `fake_caveats` for what a fake step measures
differently; `step` returns NaN there (a fake loss has no value).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch._subclasses.fake_tensor import is_fake

from autoembed.batch import Batch
from autoembed.config import EmbeddingConfig, precision_policy
from autoembed.models.model import EmbeddingModel, as_device, build_model, loss_fn
from autoembed.models.optim import Optimizers, build_optimizer
from autoembed.models.precision import (
    MasterWeights,
    autocast,
    check_supported,
    make_scaler,
)

__all__ = ["Trainer", "make_trainer", "supports_fake", "fake_caveats"]


def fake_caveats(config: EmbeddingConfig) -> tuple[str, ...]:
    """How a step under FakeTensorMode differs from a real one for `config` (empty: none)."""
    notes = []
    if config.sparse_tables:
        notes.append(
            "sparse table gradients have a data-dependent row count, so fake ones hold 0 rows: "
            "price them by formula (one row per lookup, B*S*(D*b + 8) bytes per micro-batch)"
        )
        if config.task == "ctr":
            notes.append(
                "ctr bags with sparse gradients select their real lookups (a data-dependent "
                "size) only on real tensors; fake tensors look up every position of the "
                "padded [B, L] ids (same dense shapes)"
            )
    if config.precision == "amp_fp16":
        notes.append(
            "amp_fp16: the GradScaler's inf check reads a value (host sync), so under fake "
            "tensors both optimizers step unconditionally after unscale_ (same tensors)"
        )
    return tuple(notes)


def supports_fake(config: EmbeddingConfig) -> bool:
    """Whether `make_trainer(config)` + `step` run under FakeTensorMode. True for every
    config today (the test suite runs each compression, optimizer and precision fake);
    read `fake_caveats(config)` for what the fake step cannot see."""
    del config
    return True


@dataclass
class Trainer:
    """Model, optimizers and precision machinery for one config on one device."""

    config: EmbeddingConfig
    model: EmbeddingModel
    optimizers: Optimizers
    device: torch.device
    loss: nn.Module
    scaler: torch.amp.GradScaler | None = None
    masters: MasterWeights | None = None

    @property
    def fake(self) -> bool:
        return any(is_fake(p) for p in self.model.parameters())

    def step(self, batches: Sequence[Batch]) -> float:
        """One optimizer step over `config.grad_accum_steps` micro-batches; the mean loss."""
        n = self.config.grad_accum_steps
        if len(batches) != n:
            raise ValueError(
                f"step got {len(batches)} micro-batches; config.grad_accum_steps is {n}"
            )
        self.model.train()
        self.model.zero_grad(set_to_none=True)
        self.optimizers.zero_grad(set_to_none=True)
        total = None
        for batch in batches:
            batch = batch.to(self.device)
            with autocast(self.config, self.device):
                logits = self.model(batch)
            loss = self.loss(logits.float(), batch.labels) / n
            if self.scaler is not None:
                self.scaler.scale(loss).backward()
            else:
                loss.backward()
            total = loss.detach() if total is None else total + loss.detach()
        if self.masters is not None:
            self.masters.grads_to_master()
        if self.scaler is None:
            for opt in self.optimizers.all:
                opt.step()
        elif self.fake:
            for opt in self.optimizers.all:
                self.scaler.unscale_(opt)
                opt.step()
            self.scaler.update()
        else:
            for opt in self.optimizers.all:
                self.scaler.step(opt)
            self.scaler.update()
        if self.masters is not None:
            self.masters.copy_back()
        self.optimizers.advance_schedule()
        assert total is not None
        return math.nan if self.fake else float(total)

    @torch.no_grad()
    def predict(self, batch: Batch) -> torch.Tensor:
        """Logits (fp32) in eval mode, without gradients."""
        was_training = self.model.training
        self.model.eval()
        try:
            with autocast(self.config, self.device):
                logits = self.model(batch.to(self.device))
            return logits.float()
        finally:
            self.model.train(was_training)


def make_trainer(
    config: EmbeddingConfig, device: torch.device | str = "cpu", *, check_device: bool = True
) -> Trainer:
    """Build everything `Trainer.step` needs. `check_device=False` skips `check_supported`
    (for tracing a config for a device one does not have)."""
    if not config.is_resolved:
        config = config.resolve()
    dev = as_device(device)
    if check_device:
        check_supported(config, dev)
    model = build_model(config, dev)
    masters = MasterWeights.create(model) if precision_policy(config.precision).master else None
    optimizers = build_optimizer(model, config, masters=masters.masters if masters else None)
    if config.placement == "host_cached":
        from autoembed.models.host_cache import host_cached_tables

        for _, table in host_cached_tables(model):  # the state moves with the cached rows
            table.bind_optimizer(optimizers.table_for(table.cache_weight))
    return Trainer(
        config=config,
        model=model,
        optimizers=optimizers,
        device=dev,
        loss=loss_fn(config),
        scaler=make_scaler(config, dev),
        masters=masters,
    )
