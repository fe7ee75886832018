"""The one training step: autoembed's own models and a user's model run the same class.

`TrainStep` holds a model, its `Optimizers` (table and dense, warm-up), GradScaler
(amp_fp16) and fp32 masters (*_master) on one device; `TrainStep.run(micros, micro_loss)`
runs one optimizer step over the micro-batches:

1. zero_grad(set_to_none=True) on the model (and the masters);
2. per micro-batch: `micro_loss(micro)` (the seam: forward, under autocast for amp_*, and
   the loss; it returns the loss and what the loop holds until the step is done), the loss
   divided by the number of micro-batches when there are several, backward (of the scaled
   loss for amp_fp16); sparse gradients accumulate by concatenation;
3. *_master: half gradients -> fp32 master gradients, one parameter at a time;
4. table optimizer step, then dense optimizer step (through the scaler for amp_fp16);
5. *_master: masters copied back into the half parameters; then the warm-up schedule.

`Trainer` (`make_trainer(config, device)`) is the seam for autoembed's `EmbeddingModel` on
`Batch`es (the last micro-batch's logits held through the step, as `memory.analytic` prices
them); `models.user_step.UserStep` for a user's module, holding nothing. Gradient
checkpointing (`config.checkpointing`) recomputes the dense tower and the naive lookup + mean
block (docs/contracts.md#checkpointing-after-mean-pooling). Under FakeTensorMode (the traced
estimator) everything is fake and `Trainer.step` returns NaN.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch._subclasses.fake_tensor import is_fake

from autoembed.batch import Batch
from autoembed.config import EmbeddingConfig, precision_policy
from autoembed.models.device_precision import MasterWeights, autocast, check_supported, make_scaler
from autoembed.models.embedding_model import EmbeddingModel, as_device, build_model, loss_fn
from autoembed.models.optim import Optimizers, build_optimizer

__all__ = ["TrainStep", "Trainer", "make_trainer"]

# the seam: one micro-batch -> (its loss, what the loop holds until the step is done)
MicroLoss = Callable[[Any], tuple[torch.Tensor, Any]]


@dataclass(kw_only=True)
class TrainStep:
    """A model with its optimizers and precision machinery on one device, ready to step."""

    model: nn.Module
    optimizers: Optimizers
    config: EmbeddingConfig  # its precision: autocast and the scaler
    device: torch.device
    scaler: torch.amp.GradScaler | None = None
    masters: MasterWeights | None = None

    @property
    def fake(self) -> bool:
        return any(is_fake(p) for p in self.model.parameters())

    def autocast(self) -> contextlib.AbstractContextManager[None]:
        """torch.autocast for amp_* precisions on the step's device, else a no-op."""
        return autocast(self.config, self.device)

    def run(self, micros: Sequence[Any], micro_loss: MicroLoss) -> torch.Tensor:
        """One optimizer step over `micros` (steps 1-5 of the module docstring); the mean
        loss, detached."""
        n = len(micros)
        self.model.train()
        self.model.zero_grad(set_to_none=True)
        self.optimizers.zero_grad(set_to_none=True)
        total = held = None
        for micro in micros:  # the previous micro-batch's loss and held stay till replaced
            loss, held = micro_loss(micro)
            if n > 1:
                loss = loss / n
            if self.scaler is not None:
                self.scaler.scale(loss).backward()
            else:
                loss.backward()
            total = loss.detach() if total is None else total + loss.detach()
        if total is None:
            raise ValueError("a step needs at least one micro-batch")
        self._step_optimizers()
        del held
        return total

    def _step_optimizers(self) -> None:
        if self.masters is not None:
            self.masters.grads_to_master()
        opts = self.optimizers.all
        if self.scaler is None:
            for opt in opts:
                opt.step()
        else:
            fake = self.fake
            for opt in opts:
                if fake:  # the inf check reads a value (host sync): step anyway
                    self.scaler.unscale_(opt)
                    opt.step()
                else:
                    self.scaler.step(opt)
            self.scaler.update()
        if self.masters is not None:
            self.masters.copy_back()
        self.optimizers.advance_schedule()


@dataclass(kw_only=True)
class Trainer(TrainStep):
    """The step of autoembed's own model for one config: `Batch`es, `loss_fn(config)`."""

    model: EmbeddingModel
    loss: nn.Module

    def step(self, batches: Sequence[Batch]) -> float:
        """One optimizer step over `config.grad_accum_steps` micro-batches; the mean loss."""
        n = self.config.grad_accum_steps
        if len(batches) != n:
            raise ValueError(
                f"step got {len(batches)} micro-batches; config.grad_accum_steps is {n}"
            )
        total = self.run(batches, self._batch_loss)
        return math.nan if self.fake else float(total)

    def _batch_loss(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """The seam: the model on one `Batch` (under autocast), its loss in fp32; the logits
        are held until the step is done."""
        batch = batch.to(self.device)
        with self.autocast():
            logits = self.model(batch)
        return self.loss(logits.float(), batch.labels), logits

    @torch.no_grad()
    def predict(self, batch: Batch) -> torch.Tensor:
        """Logits (fp32) in eval mode, without gradients."""
        was_training = self.model.training
        self.model.eval()
        try:
            with self.autocast():
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
        from autoembed.models.host_cached_table import host_cached_tables

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
