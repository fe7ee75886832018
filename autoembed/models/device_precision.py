"""Training precision on a device: what runs, autocast, loss scaling and fp32 master weights.

The policies (`autoembed.config.precision_policy`) and the tensors each creates:
docs/memory_model.md. Under fp16_master / bf16_master the optimizers step the fp32 masters:
after backward each half gradient becomes an fp32 master gradient one parameter at a time
and is freed at once, so the peak holds the fp32 gradients, not both; after the step the
masters are copied back and their gradients freed. amp_fp16 scales the loss
(``GradScaler``); no other policy does.

`check_supported` refuses (UnsupportedError) what the device cannot run; nothing falls back
silently. On CPU with torch 2.13 every policy runs: fp16/bf16 Linear and embedding kernels,
and CPU autocast in both fp16 and bf16 with ``torch.amp.GradScaler("cpu")``. One exception:
CPU has no fp16 sparse addition, so sparse fp16 table gradients cannot accumulate over
micro-batches there (fp16 / fp16_master with a sparse table optimizer and
grad_accum_steps > 1 is refused).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch._subclasses.fake_tensor import unset_fake_temporarily

from autoembed.config import EmbeddingConfig, precision_policy
from autoembed.errors import UnsupportedError, first_line
from autoembed.models.embedding_model import as_device, torch_dtype

__all__ = ["check_supported", "autocast", "make_scaler", "MasterWeights"]


@functools.cache
def _probe(device: str, dtype_name: str, autocast_dtype: str | None) -> str | None:
    """Run a tiny embedding + Linear forward/backward like the model's; None if it works,
    else why not. Real tensors even inside a FakeTensorMode."""
    dev = torch.device(device)
    dtype = torch_dtype(dtype_name)
    try:
        with unset_fake_temporarily():
            w = torch.randn(8, 4, device=dev, dtype=dtype, requires_grad=True)
            lin = nn.Linear(4, 2, device=dev, dtype=dtype)
            ids = torch.tensor([[1, 2], [3, 0]], device=dev)
            ctx = (
                torch.autocast(dev.type, dtype=torch_dtype(autocast_dtype))
                if autocast_dtype
                else contextlib.nullcontext()
            )
            with ctx:
                out = lin(F.embedding_bag(ids, w, mode="mean"))
            want = torch_dtype(autocast_dtype) if autocast_dtype else dtype
            if out.dtype != want:
                return f"the forward ran in {out.dtype}, not {want} (autocast does not cast here)"
            out.float().sum().backward()
    except (RuntimeError, NotImplementedError, TypeError, AssertionError) as e:
        return first_line(e)
    return None


@functools.cache
def _probe_sparse_sum(device: str, dtype_name: str) -> str | None:
    """Whether two sparse gradients of this dtype add up on `device` (gradient accumulation);
    None if so, else why not. CPU torch 2.13 has no fp16 sparse add ("cadd_sparse")."""
    dev = torch.device(device)
    try:
        with unset_fake_temporarily():
            g = torch.sparse_coo_tensor(
                torch.tensor([[0, 1]], device=dev),
                torch.ones(2, 2, device=dev, dtype=torch_dtype(dtype_name)),
                (3, 2),
            )
            (g + g).coalesce()
    except (RuntimeError, NotImplementedError) as e:
        return first_line(e)
    return None


def check_supported(config: EmbeddingConfig, device: torch.device | str) -> None:
    """Raise UnsupportedError when `device` cannot train `config.precision` as specified."""
    dev = as_device(device)
    policy = precision_policy(config.precision)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise UnsupportedError(f"device '{dev}': CUDA is not available here; use device cpu")
        half = {policy.param_dtype, policy.autocast_dtype}
        if "bfloat16" in half and not torch.cuda.is_bf16_supported(including_emulation=False):
            raise UnsupportedError(
                f"precision '{config.precision}': this GPU has no native bfloat16; "
                "use fp16_master, amp_fp16 or fp32"
            )
    if dev.type == "cpu" and policy.autocast_dtype and not torch.amp.is_autocast_available("cpu"):
        raise UnsupportedError(f"precision '{config.precision}': this torch has no CPU autocast")
    why = _probe(str(dev), policy.param_dtype, policy.autocast_dtype)
    if why is not None:
        raise UnsupportedError(
            f"precision '{config.precision}' does not run on device '{dev}': {why}; "
            "choose another precision or device"
        )
    if config.sparse_tables and config.grad_accum_steps > 1:
        why = _probe_sparse_sum(str(dev), policy.param_dtype)
        if why is not None:
            raise UnsupportedError(
                f"grad_accum_steps = {config.grad_accum_steps} with sparse {policy.param_dtype} "
                f"table gradients ('{config.table_optimizer}') does not run on device '{dev}': "
                f"{why}; use grad_accum_steps 1, a dense table optimizer (adam, adamw, momentum) "
                "or another precision"
            )


def autocast(
    config: EmbeddingConfig, device: torch.device | str
) -> contextlib.AbstractContextManager[None]:
    """torch.autocast for amp_* precisions, else a no-op context."""
    dtype = precision_policy(config.precision).autocast_dtype
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=torch_dtype(dtype))


def make_scaler(config: EmbeddingConfig, device: torch.device | str) -> torch.amp.GradScaler | None:
    """GradScaler for amp_fp16 (fp16 gradients underflow without it); None otherwise."""
    if config.precision != "amp_fp16":
        return None
    return torch.amp.GradScaler(torch.device(device).type)


@dataclass(frozen=True)
class MasterWeights:
    """fp32 masters of a half-precision model's trained parameters, by parameter name (a
    frozen one, which no optimizer steps, has none)."""

    params: dict[str, nn.Parameter]
    masters: dict[str, torch.Tensor]

    @classmethod
    def create(cls, model: nn.Module) -> MasterWeights:
        params = {n: p for n, p in model.named_parameters() if p.requires_grad}
        masters = {n: p.detach().to(torch.float32, copy=True) for n, p in params.items()}
        return cls(params, masters)

    def grads_to_master(self) -> None:
        """fp32 master grad from each half grad, freeing the half grad at once."""
        for name, p in self.params.items():
            m = self.masters[name]
            g = p.grad
            m.grad = None if g is None else g.to(torch.float32)
            p.grad = None

    @torch.no_grad()
    def copy_back(self) -> None:
        """Write the stepped masters into the half parameters; free the master grads."""
        for name, p in self.params.items():
            m = self.masters[name]
            p.copy_(m)
            m.grad = None

    def items(self) -> Iterator[tuple[str, torch.Tensor]]:
        return iter(self.masters.items())
