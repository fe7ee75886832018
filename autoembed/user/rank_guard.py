"""A sharded TorchRec trial's loop trains what was priced: each rank's `train(dmp, params,
report)` is watched by `user.guard` (`watching`) against what `torchrec.estimate_sharded`
priced the rank with (`dmp_price`), and a refusal on any rank ends the trial on every rank
at once (`RankRefusals`).

What a rank is checked for, on the `DistributedModelParallel` the loop is given:

* The dense optimizer: every trainable weight no fused optimizer owns (no
  `_in_backward_optimizers`: the dense part, and the `data_parallel` tables DDP replicates,
  whose state is priced with it too, `sharded.DENSE_STATE`) against the payload's
  `dense_optimizer`, as a user trial's dense weights are: the state kept per weight, a
  switch partway, a weight frozen as built that the loop steps.
* Not the fused tables: FBGEMM's optimizer runs inside the backward (no `torch.optim` step
  to hook, no `.grad`), built by `torchrec.model.apply` from the trial's table settings
  before the loop, and their shards' state is priced by those settings, which the loop does
  not choose; a torch optimizer the loop hands them never steps them (no gradient).
* The weight decay: none (a TorchRec space's `embedding:` has no `weight_decay`; the dense
  part is priced with the optimizer named, at 0): an L2 decay added to the gradient is
  refused, AdamW's decoupled one is not.
* The precision: `torchrec.sharded.DENSE_PRECISION` (fp32), each dense weight in its dtype
  as built, no autocast (`estimate_unsharded` traces the dense part so; a table's
  `data_type` is its own setting): a dense part cast, or trained under autocast, is refused
  (the dtypes read at the first training forward, then one weight a step, so a cast after
  a step is too).
* The gradients: the dense part is traced (`estimate_model`) with them freed before the
  forward, so a loop holding the last step's through its next forward (zero_grad after
  it) is refused, as a user trial's is (`user.guard`).
* The call: the forwards are read by the DMP's forward hooks, which `dmp.forward(batch)`
  skips (no batch read, no agreement before it); a step that moves a dense weight with no
  call of the DMP seen is refused (call `dmp(batch)`).
* The batch: every training forward's inputs against the priced example's
  (`jagged_inputs`): tensors as `user.guard` compares them, and each KeyedJaggedTensor
  (a torchrec `Batch`'s `sparse_features` too) as (samples, ids), its stride and its values'
  length, on both of which the rank's sparse transients are priced: larger in either is
  refused. The ids are compared in all, not per feature (that needs a sync each batch).

Every rank together: a refusal is noted where it arises (`RankRefusals.note`), not raised
there, since the other ranks would wait for that rank in their next collective (DMP's input
all-to-all, DDP's all-reduce) for ever. Every rank calls `RankRefusals.agree` at the same
points: in the stop channel at each report, when `train` returns, and before its forwards
with gradients on number 1, 2, 4, ..., 64, then every 64th (`agrees_before`; DMP's forward
is a collective, so every rank counts the same forwards). An agreement is one integer
all-reduced over gloo (CPU, no device sync): ~1 ms (0.6-1.4) between 2 processes on a busy
2-core machine. A forward's share, counted in the trial's throughput, is ~20 us (13-26)
over the first 1,024 forwards, ~8-15 us over 8,192 (1/64 of an agreement), 0.4 us where
none is due (before: an agreement every forward, ~1 ms). A refusal noted at forward n is
agreed at the next report, or before forward 2n at the latest and at most 64 forwards on
(the loop trains on until then, the refused batch included); where any rank refused, every
rank's report refuses the lowest refusing rank's line ("rank R: ..."), raised in each loop
at the same point, and every rank ends `failed` with it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from autoembed.user.guard import Fixes, Price, named_leaves, priced_dtypes, watching

if TYPE_CHECKING:
    from torch import nn

    from autoembed.user.report import Report

__all__ = ["dmp_price", "jagged_inputs", "RankRefusals", "watch_rank", "agreement_group",
           "agrees_before", "AGREE_EVERY"]

AGREE_EVERY = 64  # forwards between agreements, once past the first (module docstring)

_AS_PRICED = ("a TorchRec trial prices its dense part as built, without autocast (its space "
              "has no precision; a table's data_type is its own setting): train it so")
_NO_DECAY = ("a TorchRec trial prices its dense part without weight decay (its space has no "
             "weight_decay): drop the loop's, or decouple it (AdamW)")
SHARDED_FIXES = Fixes(
    dense="set the space's embedding dense_optimizer to what the loop does, or train the "
          "dense part with the priced one",
    decay=_NO_DECAY, decay_on=_NO_DECAY, mixed_decay=_NO_DECAY, precision=_AS_PRICED)


def dmp_price(dmp: nn.Module, dense_optimizer: str) -> Price:
    """A rank's price (module docstring): no table weights watched; every weight no fused
    optimizer owns is dense, priced with `dense_optimizer`, no weight decay, `DENSE_PRECISION`
    in its dtype as built; the batch read by `jagged_inputs`."""
    from autoembed.torchrec.sharded import DENSE_PRECISION

    named = [(n, p) for n, p in dmp.named_parameters()
             if not hasattr(p, "_in_backward_optimizers")]
    return Price(
        tables={}, dense={id(p): (n, p) for n, p in named if p.requires_grad},
        frozen={id(p): f"dense parameter '{n}'" for n, p in named if not p.requires_grad},
        dense_optimizer=dense_optimizer, weight_decay=0.0, precision=DENSE_PRECISION,
        dtypes=priced_dtypes(dmp, DENSE_PRECISION),  # each as built, as a user model's
        inputs=jagged_inputs, fixes=SHARDED_FIXES)


def jagged_inputs(args: Any, kwargs: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The forward's inputs as a rank's price reads them, named by path: each tensor of one
    or more dims, its shape; each KeyedJaggedTensor "NAME (samples, ids)", [its stride, its
    values' length] (two dims: larger in either is more than priced); a torchrec `Batch`
    by its fields. Shapes alone: no copy, no sync."""
    import torch
    from torchrec.datasets.utils import Batch
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    out: list[dict[str, Any]] = []
    for name, x in named_leaves((tuple(args), dict(kwargs)),
                                lambda x: isinstance(x, (KeyedJaggedTensor, Batch))):
        parts = ([(f"{name}.{f.name}", getattr(x, f.name)) for f in dataclasses.fields(x)]
                 if isinstance(x, Batch) else [(name, x)])
        for part, t in parts:
            if isinstance(t, KeyedJaggedTensor):
                out.append({"input": f"{part} (samples, ids)",
                            "shape": [int(t.stride()), int(t.values().numel())]})
            elif isinstance(t, torch.Tensor) and t.dim() > 0:
                out.append({"input": part, "shape": [int(n) for n in t.shape]})
    return out


class RankRefusals:
    """This rank's first refusal (`note`), ended on every rank together (`agree`: module
    docstring) through `report`; `group`: the gloo group the ranks agree over (None: the
    default group, which must then be gloo)."""

    def __init__(self, report: Report, group: Any = None) -> None:
        self.report = report
        self.group = group
        self.line: str | None = None
        self.forwards = 0  # forwards with gradients on, as every rank counts them

    def note(self, line: str) -> None:
        """What the guard calls for a refusal: kept (the first) until the ranks agree."""
        if self.line is None:
            self.line = line

    def agree(self) -> None:
        """A collective (every rank calls it at the same point): where any rank noted a
        refusal, every rank's report refuses the lowest such rank's line (raises
        ReportError); otherwise nothing."""
        import torch
        import torch.distributed as dist

        flag = torch.tensor([0 if self.line is None else 1])
        dist.all_reduce(flag, group=self.group)
        if not int(flag.item()):
            return
        lines: list[Any] = [None] * dist.get_world_size(self.group)
        mine = None if self.line is None else f"rank {dist.get_rank()}: {self.line}"
        dist.all_gather_object(lines, mine, group=self.group)
        self.line = None  # the report keeps it (`Report.ending`)
        self.report.refuse(next(line for line in lines if line))

    def before_forward(self, module: Any, args: Any) -> None:
        """The DMP's forward pre-hook (after the guard's): count the forwards with
        gradients on, which every rank runs as many of, and agree before those
        `agrees_before` names."""
        import torch

        del module, args
        if torch.is_grad_enabled():
            self.forwards += 1
            if agrees_before(self.forwards):
                self.agree()


def agrees_before(forward: int) -> bool:
    """Whether the ranks agree before their forward number `forward` with gradients on
    (from 1): 1, 2, 4, ..., `AGREE_EVERY`, then every `AGREE_EVERY`th."""
    return forward % AGREE_EVERY == 0 or (forward < AGREE_EVERY and forward & (forward - 1) == 0)


def agreement_group() -> Any:
    """The group the ranks agree over: the default one on gloo, else a new gloo group (a
    collective: every rank calls it); one integer on the CPU, no device sync."""
    import torch.distributed as dist

    return None if dist.get_backend() == "gloo" else dist.new_group(backend="gloo")


@contextmanager
def watch_rank(dmp: nn.Module, dense_optimizer: str, refusals: RankRefusals,
               priced: Sequence[Mapping[str, Any]] | None = None) -> Iterator[None]:
    """Within the block, the rank's loop on `dmp` is checked against `dmp_price` and
    `priced` (the priced example's `jagged_inputs`; None: the batch not checked); its
    refusals go to `refusals`, agreed before the forwards `agrees_before` names. The hooks
    are gone after it."""
    with watching(dmp, dmp_price(dmp, dense_optimizer), refusals.note, priced):
        handle = dmp.register_forward_pre_hook(refusals.before_forward)
        try:
            yield
        finally:
            handle.remove()
