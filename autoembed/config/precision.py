"""`PrecisionPolicy`: exactly which tensors each training precision creates. Pure Python."""

from __future__ import annotations

from dataclasses import dataclass

from autoembed.rules import OneOf

__all__ = ["PrecisionPolicy", "PRECISIONS", "PRECISION_RULE", "precision_policy"]


@dataclass(frozen=True)
class PrecisionPolicy:
    """Exactly which tensors a training precision creates.

    param_bytes: bytes per element of every parameter (tables and tower) in the model.
    master: an fp32 master copy of every parameter exists; the optimizer steps the master,
        its state is fp32 and, during the step, each parameter has an fp32 gradient.
    autocast: the forward runs under torch.autocast in `autocast_dtype` (Linear layers and
        their weight casts in half precision; embedding lookups stay fp32).
    """

    name: str
    param_dtype: str
    param_bytes: int
    master: bool
    autocast_dtype: str | None

    @property
    def state_bytes(self) -> int:
        return 4 if self.master else self.param_bytes


_POLICIES = {
    "fp32": PrecisionPolicy("fp32", "float32", 4, False, None),
    "fp16": PrecisionPolicy("fp16", "float16", 2, False, None),
    "bf16": PrecisionPolicy("bf16", "bfloat16", 2, False, None),
    "fp16_master": PrecisionPolicy("fp16_master", "float16", 2, True, None),
    "bf16_master": PrecisionPolicy("bf16_master", "bfloat16", 2, True, None),
    "amp_fp16": PrecisionPolicy("amp_fp16", "float32", 4, False, "float16"),
    "amp_bf16": PrecisionPolicy("amp_bf16", "float32", 4, False, "bfloat16"),
}

PRECISIONS = tuple(_POLICIES)
PRECISION_RULE = OneOf(PRECISIONS)


def precision_policy(precision: str) -> PrecisionPolicy:
    PRECISION_RULE.check("precision", precision)
    return _POLICIES[precision]
