"""The loop trains what was priced: a trial of the user's loop is watched for what its price
assumed and the loop decides itself.

* The optimizer: a trial was priced with the config's `table_optimizer` (a table's own, by
  module path, first), but the loop builds its own. After the first optimizer step that
  moves a table's weight (a global `torch.optim` step hook), the state that optimizer keeps
  for that weight is counted (its tensors but a step counter, which is not state) and
  compared with what the priced optimizer keeps: none (`sgd`), one value per weight
  (`momentum`, `adagrad`), two (`adam`, `adamw`, `sparse_adam`), one per row
  (`rowwise_adagrad`).
* The dense optimizer: each other trainable weight's state, after the first step that
  moves it, against the priced `dense_optimizer`'s (per weight, as above).
* Another optimizer that steps a weight later (a switch partway: SGD for a warm-up, then
  Adam) is checked at its first step of it too: refused where it keeps more state than
  priced, or adds a decay not priced (a new optimizer of the priced kind trains, and so
  does a wrapper that steps it and keeps less or the same state). Each optimizer's weights
  are walked until it has stepped them, not every step; those it gains (a new param group,
  weights added to one) join at the step they appear.
* The weight decay: whether the loop's optimizer adds it to a weight's gradient (an L2
  `weight_decay`, a gradient-sized copy in the step; AdamW's decoupled decay adds nothing),
  against the priced optimizer at `config.weight_decay`; each step, each param group's
  (a few reads): one turned on after the first step (a schedule from 0) is refused where
  the priced optimizer adds none.
* A weight frozen (`requires_grad` False) as built is priced with neither a gradient nor
  optimizer state: one the loop unfreezes and steps is refused at that step.
* The precision: at the first forward with gradients on in training mode (an evaluation
  without no_grad is not one; where the loop trains its model in eval mode, the last such
  forward before its first optimizer step), the dtype of every table and
  every other trainable weight, and the autocast in force on their device, are compared
  with the price's: a half precision's parameter dtype (pricing casts the model to it),
  else (fp32, the amp precisions) each weight's dtype as built, as pricing keeps the model
  as written (a bf16 table beside fp32 layers is priced, and trains, as such); and the
  precision's autocast (`config.precision_policy`). The autocast is read again at every
  later forward in training mode (two cheap reads): AMP switched on after a warm-up, or
  off, is judged again there. Each optimizer step then reads one weight's dtype, the
  weights in turn (walking all, ~200 of them, would cost ~30 us a step): a model cast
  (`model.to(torch.bfloat16)` after a step) is judged at the next step, a cast of some
  weights within as many steps as there are weights. At a `*_master` precision the price
  has the optimizer step an fp32 master of each weight: an optimizer step of the model's
  half weight itself (a loop with no masters, which trains the plain half precision) is
  refused, and an fp32 tensor of a weight's shape that is no weight of the model is taken
  for its master and checked as the weight is (optimizer state, decay), where the weights
  of that shape were priced under one optimizer.
* The model is called: the batch and precision are read by the model's forward hook,
  which `model.forward(x)` (or calling its parts) skips; the first step that moves a
  weight with no forward of the model seen (gradients on) is refused, telling the loop to
  call `model(x)`. (A hook on the tables instead would see the precision, not the
  model's inputs the batch is priced on, and cost a call per table per forward.)
* The batch: at every such forward in training mode (an eval pass is not one), each
  tensor the model is given against the priced example's same input (`priced_inputs`), a
  comparison of shapes (no copy, no device sync): a loop that pads each batch to its own
  longest sequence is refused at the first batch longer than priced. An
  input of two or more dims is a batch of rows whose every dim the priced bytes depend on
  (rows, a sequence length, features): one larger in any dim is more than was priced. A 1-D
  input (flat ids, offsets, lengths, single ids, per-id weights) alone says not how many
  rows it holds: those are refused only when every input's first dim is larger (flat ids
  with offsets, more ids over the priced bags, are not). Smaller (micro-batches,
  shorter sequences) is not refused.
* The gradients: a step is priced with them freed before its forward (zero_grad
  set_to_none, `models.step`; a TorchRec rank's dense part is traced so too). At the first
  training forward (gradients on) after an optimizer step, one watched weight that some
  optimizer stepped (the first seen) still holding a `.grad` means the loop keeps the last
  step's gradients through its forward (zero_grad after the forward, set_to_none=False, or
  none): refused, telling it to zero them before the forward. A flag read a forward, one
  `.grad` read a step. Gradient accumulation (several forwards and backwards, then one
  step) has no step between its forwards, and trains.

A difference ends the trial `failed` with one line naming both (raised in the loop as
`ReportError`, and remembered by the report, so a loop that swallows it still fails).

What a loop is checked against is a `Price` (`watching`): a user trial's is `model_price` of
its model and config (`watch_loop`); a sharded TorchRec rank's, its DMP's dense part and
example (`user.rank_guard`, which ends every rank together).
"""

from __future__ import annotations

import itertools
import math
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autoembed.config import EmbeddingConfig, precision_policy

if TYPE_CHECKING:
    import torch
    from torch import nn

    from autoembed.user.report import Report

__all__ = ["watch_loop", "watching", "Price", "Fixes", "model_price", "priced_state",
           "priced_inputs", "priced_dtypes", "named_leaves", "STATE_PER_WEIGHT"]

# values of optimizer state per table weight ("rowwise_adagrad": one per row instead)
STATE_PER_WEIGHT = {"sgd": 0, "momentum": 1, "adagrad": 1, "adam": 2, "adamw": 2,
                    "sparse_adam": 2}
_TABLE_ONLY = ("sparse_adam", "rowwise_adagrad")  # optimizers of embedding tables alone
_NO_L2 = ("adamw", "sparse_adam")  # priced without a decay added to the gradient
# how a forward's inputs are read: (args, kwargs) -> [{"input": name, "shape": dims}]
Inputs = Callable[[Any, Mapping[str, Any]], list[dict[str, Any]]]
_FIX = ("set the space's embedding table_optimizer to what the loop does, "
        "or build the loop's optimizer with autoembed.build_optimizer(model, params)")


def priced_state(name: str, weight: torch.Tensor) -> int:
    """Values of state the optimizer `name` keeps for the table weight `weight`."""
    if name == "rowwise_adagrad":
        return int(weight.shape[0])
    return STATE_PER_WEIGHT[name] * weight.numel()


def _kept(opt: torch.optim.Optimizer, p: torch.Tensor) -> list[torch.Tensor]:
    """The state `opt` keeps for `p`: its tensors but torch's scalar bookkeeping (the `step`
    counter, and any 0-dim tensor of a weight of one or more dims); a 0-dim weight's
    moments are 0-dim themselves, and state."""
    return [t for k, t in opt.state.get(p, {}).items()
            if hasattr(t, "dim") and k != "step" and (t.dim() > 0 or p.dim() == 0)]


def _state(opt: torch.optim.Optimizer, p: torch.Tensor) -> int:
    return sum(t.numel() for t in _kept(opt, p))


def priced_inputs(example: Any, inputs: Inputs | None = None) -> list[dict[str, Any]] | None:
    """Each tensor (of one or more dims) the forward is given from `example`, passed as
    `call_model` passes it, in order: {"input": its name (`args[0]`, `kwargs['x']`),
    "shape": its dims}, JSON as a trial's payload carries it (two or more dims: a batch of
    rows, `_over`); None for several examples (a list). `inputs`: how the forward's
    (args, kwargs) are read (`Price.inputs`; None: `_inputs`)."""
    from autoembed.example import Example

    read = inputs or _inputs
    if isinstance(example, list):
        return None
    if isinstance(example, Example):
        return read(example.args, dict(example.kwargs))
    if isinstance(example, tuple):
        return read(example, {})
    if isinstance(example, Mapping):
        return read((), dict(example))
    return read((example,), {})


def _inputs(args: Any, kwargs: Mapping[str, Any]) -> list[dict[str, Any]]:
    import torch

    return [{"input": name, "shape": [int(n) for n in t.shape]}
            for name, t in named_leaves((tuple(args), dict(kwargs)))
            if isinstance(t, torch.Tensor) and t.dim() > 0]


def named_leaves(tree: tuple[tuple[Any, ...], dict[str, Any]],
                 is_leaf: Callable[[Any], bool] | None = None) -> list[tuple[str, Any]]:
    """(args, kwargs)'s pytree leaves named by their path (`args[0]`, `kwargs['x']`), or by
    their place (`input 0`) where a node was registered without key paths; `is_leaf`: as
    pytree's (a node it takes is one leaf)."""
    from torch.utils._pytree import keystr, tree_flatten_with_path, tree_leaves

    try:
        leaves, _ = tree_flatten_with_path(tree, is_leaf=is_leaf)
    except ValueError:  # a pytree node without flatten_with_keys_fn
        return [(f"input {i}", t) for i, t in enumerate(tree_leaves(tree, is_leaf=is_leaf))]
    return [(("args", "kwargs")[path[0].idx] + keystr(path[1:]), t)  # type: ignore[attr-defined]
            for path, t in leaves]


def _names_for(count: int, weight: torch.Tensor, dense: bool = False) -> str:
    """The optimizers that keep `count` values of state for `weight` ('' when none does);
    `dense`: only those that train dense weights."""
    names = [n for n in (*STATE_PER_WEIGHT, "rowwise_adagrad")
             if not (dense and n in _TABLE_ONLY) and priced_state(n, weight) == count]
    return f" (as {' or '.join(names)} does)" if names else ""


@dataclass
class _Stepper:
    """One optimizer of the loop, as `_Watch` has seen it step."""

    opt: weakref.ref[torch.optim.Optimizer]  # weak: a replaced optimizer's state is freed
    todo: list[torch.Tensor] = field(default_factory=list)  # the model's weights it has
    # yet to step (a gradient when it steps)
    sizes: list[int] = field(default_factory=list)  # each param group's weights walked
    l2: list[bool] = field(default_factory=list)  # each group's `_adds_decay` at its last step


@dataclass(frozen=True)
class Fixes:
    """The fix each refusal names: how the loop, or the space, is brought to the price
    (a user trial's: the space's `embedding:` keys, `build_optimizer`)."""

    dense: str = ("set the space's embedding dense_optimizer to what the loop does, or build "
                  "the loop's optimizer with autoembed.build_optimizer(model, params)")
    decay: str = ("set the space's embedding weight_decay (and optimizer) to what the loop "
                  "does, or build the loop's optimizer with "
                  "autoembed.build_optimizer(model, params)")
    decay_on: str = ("set the space's embedding weight_decay to the loop's and decay from "
                     "the first step, or keep it off throughout")
    # where the loop's param groups decay some weights and not others
    mixed_decay: str = ("its param groups add a decay to some weights and not to others, and "
                        "a trial is priced with one weight_decay for all: decay every weight "
                        "alike, or decouple the decay (AdamW; the space's table_optimizer and "
                        "dense_optimizer adamw), which adds nothing to the gradient")
    precision: str = ("set the space's embedding precision to what the loop does, or train "
                      "the model in the priced one")


@dataclass(frozen=True)
class Price:
    """What a trial's loop is checked against (module docstring): each table weight's
    module path and priced optimizer, each other trainable weight's name (priced with
    `dense_optimizer`), the weights frozen as priced, the priced `weight_decay` and
    `precision`, the dtype each floating weight was priced in, how the forward's inputs
    are read (`inputs(args, kwargs)` as `_inputs` gives them; None: `_inputs`) and the fix
    each refusal names. All by id(weight)."""

    tables: Mapping[int, tuple[str, str, torch.Tensor]]  # (path, optimizer, weight)
    dense: Mapping[int, tuple[str, torch.Tensor]]  # (name, weight)
    frozen: Mapping[int, str]  # what the refusal calls it
    dense_optimizer: str
    weight_decay: float
    precision: str
    dtypes: Mapping[int, str]
    inputs: Inputs | None = None
    fixes: Fixes = Fixes()


def model_price(model: nn.Module, config: EmbeddingConfig) -> Price:
    """The price of a user trial of `model` (as built, before the loop) under `config`:
    its embedding modules' weights are tables (a table's own `table_optimizer`, by module
    path, first), every other trainable weight dense."""
    from autoembed.models.table_modules import embedding_modules

    own = {t.name: t.table_optimizer for t in config.tables if t.table_optimizer}
    tables: dict[int, tuple[str, str, torch.Tensor]] = {}
    for path, m in embedding_modules(model):
        for p in m.parameters():
            tables.setdefault(id(p), (path, own.get(path, config.table_optimizer), p))
    named = list(model.named_parameters())
    return Price(
        tables=tables,
        dense={id(p): (n, p) for n, p in named if p.requires_grad and id(p) not in tables},
        frozen={id(p): (f"table '{tables[id(p)][0]}'" if id(p) in tables
                        else f"dense parameter '{n}'") for n, p in named if not p.requires_grad},
        dense_optimizer=config.dense_optimizer, weight_decay=config.weight_decay,
        precision=config.precision, dtypes=priced_dtypes(model, config.precision))


class _Watch:
    def __init__(self, price: Price, refuse: Callable[[str], None],
                 priced: Sequence[Mapping[str, Any]] | None) -> None:
        self.price = price
        self.tables = price.tables
        self.dense = price.dense
        self.frozen = dict(price.frozen)  # a weight leaves it at its refusal
        self.refuse = refuse
        self.priced = None if priced is None else list(priced)
        self.shapes = [tuple(w["shape"]) for w in self.priced or []]
        self.precision_seen = False  # the precision checked
        self.held: str | None = None  # the last eval-mode forward's precision refusal
        self.evaluated = False  # an eval-mode forward (gradients on) seen: `held` judged
        self.device = "cpu"  # the device type the precision was judged on
        self.autocast: torch.dtype | None = None  # the autocast it was judged under
        self.batches = 0  # training forwards seen (gradients on, training mode)
        self.checked: set[int] = set()  # weights some optimizer's step was checked for
        self.steppers: dict[int, _Stepper] = {}  # by id(optimizer)
        self.probe: torch.Tensor | None = None  # a watched weight some optimizer stepped
        self.stepped = False  # an optimizer step since the last training forward
        self.judged = _judged(price)  # the weights whose dtype is judged, named
        rotation = [(w, _dtype(price.dtypes[id(w)])) for _, w in self.judged
                    if id(w) in price.dtypes]
        self.turns = itertools.cycle(rotation) if rotation else None  # a step reads the next
        self.master = precision_policy(price.precision).master
        self.masters: dict[int, int] = {}  # id(fp32 master) -> id(its weight): `_claim`
        self.unclaimed: dict[tuple[int, ...], list[int]] = {}  # shape -> weights, no master
        for key, q in [*((k, w) for k, (_, _, w) in self.tables.items()),
                       *((k, w) for k, (_, w) in self.dense.items())]:
            if self.master and key not in self.frozen:
                self.unclaimed.setdefault(tuple(q.shape), []).append(key)

    def after_step(self, opt: torch.optim.Optimizer, *_: Any) -> None:
        """The optimizer hook: check each weight the first time this optimizer steps it
        (one frozen when priced is refused); the weights it has stepped are not walked
        again. Once the precision is judged, one weight's dtype a step (`_recheck_dtypes`).
        The step is noted for the next training forward (`_check_freed`)."""
        self.stepped = True
        if not self.precision_seen and self.evaluated:  # none in training mode: the last
            self.precision_seen = True  # (a step before any forward moved nothing)
            if self.held:
                self.refuse(self.held)
        elif self.precision_seen and self.turns:
            w, want = next(self.turns)
            if w.dtype is not want:
                self._recheck_dtypes()
        stepper = self.steppers.get(id(opt))
        if stepper is None or stepper.opt() is not opt:  # new, or a dead one's id
            stepper = self.steppers[id(opt)] = _Stepper(weakref.ref(opt))
        for i, group in enumerate(opt.param_groups):  # a few groups: cheap every step
            self._walk(opt, stepper, i, group)
        if stepper.todo:
            stepper.todo = [p for p in stepper.todo if not self._stepped(opt, p)]

    def _walk(self, opt: torch.optim.Optimizer, stepper: _Stepper, i: int,
              group: Mapping[str, Any]) -> None:
        """`opt`'s group `i` at a step: the model's weights it gained since the last (a
        new group, weights added to one) join `stepper.todo`; a decay it turned on is
        checked (`_decay_turned_on`)."""
        if i == len(stepper.sizes):  # a new group: its decay as it comes
            stepper.sizes.append(0)
            stepper.l2.append(_adds_decay(group))
        params = group["params"]
        if len(params) > stepper.sizes[i]:
            stepper.todo += [p for p in params[stepper.sizes[i]:] if self._key(p) is not None]
            stepper.sizes[i] = len(params)
        if (on := _adds_decay(group)) and not stepper.l2[i]:
            self._decay_turned_on(opt, group, stepper)
        stepper.l2[i] = on

    def _stepped(self, opt: torch.optim.Optimizer, p: torch.Tensor) -> bool:
        """Check `p` if `opt` stepped it (it has a gradient): a weight frozen when priced
        is refused; the first optimizer to step a weight keeps the priced state for it, a
        later one (a switch partway, a new optimizer) no more. False: not stepped yet."""
        if p.grad is None:
            return False
        key = self.masters.get(id(p), id(p))  # an fp32 master is checked as its weight
        if not self.precision_seen and self.judged:  # a gradient, but no forward seen
            self._refuse_unseen(opt, key)
        later = key in self.checked
        self.checked.add(key)
        if self.probe is None and key not in self.frozen:  # the model's weight, not a master
            self.probe = p if key == id(p) else (
                self.tables[key][2] if key in self.tables else self.dense[key][1])
        if id(p) in self.frozen:
            self._refuse_unfrozen(opt, self.frozen.pop(id(p)), p)
        elif self.master and key == id(p):
            self._refuse_no_master(opt, p)
        elif key in self.tables:
            self._check_state(opt, p, later, key)
        elif key in self.dense:
            self._check_dense(opt, self.dense[key][0], p, later)
        return True

    def _recheck_dtypes(self) -> None:
        """A step found a weight out of the dtype it was priced in (`after_step` reads one
        a step, in turn: a cast of the whole model after a step is seen at the next step,
        one of some weights within as many steps as there are weights): the weights are
        judged (`_precision`) under the autocast of the last training forward (a step runs
        outside it)."""
        if refusal := self._precision(self.autocast):
            self.refuse(refusal)

    def _refuse_unseen(self, opt: torch.optim.Optimizer, key: int) -> None:
        """`opt` steps the weight `key` (or its fp32 master), which has a gradient, but no
        forward of the model with gradients on was seen: the loop calls `model.forward(x)`
        (or the model's parts), which runs none of the model's hooks, so neither its batch
        nor its precision can be checked."""
        what = (f"table '{self.tables[key][0]}'" if key in self.tables
                else f"dense parameter '{self.dense[key][0]}'" if key in self.dense
                else self.frozen[key])
        self.refuse(
            f"the loop's {type(opt).__name__} steps {what}, which has a gradient, but no "
            "call of the model was seen: the loop calls model.forward(x) (or the model's "
            "parts), which skips the model's hooks, so its batch and precision cannot be "
            "checked against the price; call model(x) in the training step, as the trial "
            "was priced")

    def _key(self, p: torch.Tensor) -> int | None:
        """The id of the model's weight `p` is, or stands for as its fp32 master
        (`_claim`); None: neither (a tensor of another model is not checked)."""
        if id(p) in self.tables or id(p) in self.dense or id(p) in self.frozen:
            return id(p)
        return self.masters.get(id(p)) or self._claim(p)

    def _claim(self, p: torch.Tensor) -> int | None:
        """At a *_master precision, an fp32 tensor the loop steps that is not the model's:
        the master of the first trainable weight of its shape without one, where every such
        weight was priced under one optimizer (the state priced for a weight depends on
        its shape alone, so a master of any of them is checked alike); None otherwise."""
        import torch

        if not self.master or p.dtype != torch.float32:
            return None
        free = self.unclaimed.get(tuple(p.shape), [])
        priced = {self.tables[k][1] if k in self.tables else f"dense {self.price.dense_optimizer}"
                  for k in free}
        if len(priced) != 1:
            return None
        self.masters[id(p)] = free.pop(0)
        return self.masters[id(p)]

    def _decay_turned_on(self, opt: torch.optim.Optimizer, group: Mapping[str, Any],
                         stepper: _Stepper) -> None:
        """`group` of `opt` adds a weight decay to the gradient it did not add at its last
        step (a schedule turning L2 decay on): a weight of it `opt` has stepped, priced
        without one, is refused (one yet to step is checked at its first step)."""
        waiting = {id(q) for q in stepper.todo}
        for p in group["params"]:
            key = self.masters.get(id(p), id(p))
            if id(p) in waiting or key in self.frozen:
                continue
            if key in self.tables:
                path, name, _ = self.tables[key]
                what = f"table '{path}'"
            elif key in self.dense:
                name = self.price.dense_optimizer
                what = f"dense parameter '{self.dense[key][0]}'"
            else:
                continue
            if self.price.weight_decay == 0 or name in _NO_L2:
                self.refuse(
                    f"{what}: the loop's {type(opt).__name__} turned on weight_decay "
                    f"{float(group['weight_decay']):g} after its first step, added to the "
                    "gradient (a gradient-sized copy in the step), but the trial was priced "
                    f"with '{name}' at weight_decay {self.price.weight_decay:g}; a trial is "
                    f"priced with one weight decay: {self.price.fixes.decay_on}")

    def _refuse_unfrozen(self, opt: torch.optim.Optimizer, what: str,
                         p: torch.Tensor) -> None:
        """`p` (`what`), frozen when the trial was priced, which priced neither a gradient
        nor optimizer state for it, is stepped by the loop with a gradient."""
        self.refuse(
            f"the loop trains {what} (a gradient and its {type(opt).__name__}'s "
            f"{_state(opt, p):,} values of state for its {p.numel():,} weights), frozen "
            "(requires_grad False) when the trial was priced, so neither was priced; have "
            "build(params) return it trainable if train trains it (a loop may freeze it for "
            "a while), or keep it frozen in the loop")

    def _refuse_no_master(self, opt: torch.optim.Optimizer, p: torch.Tensor) -> None:
        """At a *_master precision the price has the optimizer step an fp32 master copy of
        each weight (its gradient and state fp32 too); the loop's optimizer steps the
        model's weight `p` itself, which holds none of them: it trains the plain half
        precision."""
        what = (f"table '{self.tables[id(p)][0]}'" if id(p) in self.tables
                else f"dense parameter '{self.dense[id(p)][0]}'")
        policy = precision_policy(self.price.precision)
        plain = policy.name.removesuffix("_master")
        self.refuse(
            f"{what}: the loop's {type(opt).__name__} steps its {_name_of(p.dtype)} weights "
            f"themselves, but the trial was priced at precision '{policy.name}', whose "
            "optimizer steps an fp32 master copy of each weight (fp32 gradient and state); "
            f"set the space's embedding precision to '{plain}', what the loop trains, or build "
            "the loop's optimizer with autoembed.build_optimizer(model, params), which steps "
            "fp32 masters of the weights (or step fp32 copies in the loop: gradients cast "
            "up, values copied back)")

    def _check_decay(self, opt: torch.optim.Optimizer, p: torch.Tensor, name: str,
                     what: str, later: bool = False) -> None:
        """Whether the loop adds weight decay to `p`'s gradient (an L2 decay: a
        gradient-sized copy in the step; AdamW's decoupled decay scales the weight in place)
        as the priced optimizer `name` at `config.weight_decay` does; `later` (not the first
        optimizer to step `p`): only one that adds a decay not priced is refused."""
        group = next(g for g in opt.param_groups if any(q is p for q in g["params"]))
        wd, got = float(group.get("weight_decay") or 0.0), _adds_decay(group)
        priced = self.price.weight_decay
        if got == (priced != 0 and name not in _NO_L2) or (later and not got):
            return
        copy = " (a gradient-sized copy in the step)"
        loop = (f"adds weight_decay {wd:g} to the gradient{copy}" if got else
                "adds no weight decay to the gradient" + (f" (decoupled weight_decay {wd:g})"
                                                          if wd else ""))
        how = (" (decoupled: nothing added to the gradient)" if name in _NO_L2 and priced
               else "" if got else copy)
        fix = self.price.fixes.decay
        if len({_adds_decay(g) for g in opt.param_groups}) > 1:  # no one weight_decay is it
            fix = self.price.fixes.mixed_decay
        self.refuse(
            f"{what}: the loop's {type(opt).__name__} {loop}, but the trial was priced with "
            f"'{name}' at weight_decay {priced:g}{how}; {fix}")

    def _check_state(self, opt: torch.optim.Optimizer, p: torch.Tensor, later: bool,
                     key: int) -> None:
        """The state of table `key`'s weight `p` (or its fp32 master) against its priced
        `table_optimizer`'s (`priced_state`)."""
        path, name, _ = self.tables[key]
        got, want = _state(opt, p), priced_state(name, p)
        if later and got > want:
            self._refuse_later(opt, f"table '{path}'", "table_optimizer", name, p)
        elif not later and got != want:
            nbytes = sum(t.numel() * t.element_size() for t in _kept(opt, p))
            self.refuse(
                f"table '{path}': the loop's {type(opt).__name__} keeps {got:,} values of "
                f"state ({nbytes:,} bytes) for its {p.numel():,} weights"
                f"{_names_for(got, p)}, but the trial was priced with table_optimizer "
                f"'{name}' ({want:,}); {_FIX}")
        self._check_decay(opt, p, name, f"table '{path}'", later)

    def _check_dense(self, opt: torch.optim.Optimizer, name: str, p: torch.Tensor,
                     later: bool) -> None:
        """A dense weight's state against the priced `dense_optimizer`'s (`priced_state`)."""
        want_name = self.price.dense_optimizer
        got, want = _state(opt, p), priced_state(want_name, p)
        if later and got > want:
            self._refuse_later(opt, f"dense parameter '{name}'", "dense_optimizer", want_name, p)
        elif not later and got != want:
            self.refuse(
                f"dense parameter '{name}': the loop's {type(opt).__name__} keeps {got:,} "
                f"values of state for its {p.numel():,} weights"
                f"{_names_for(got, p, dense=True)}, but the trial was priced with "
                f"dense_optimizer '{want_name}' ({want:,}); {self.price.fixes.dense}")
        self._check_decay(opt, p, want_name, f"dense parameter '{name}'", later)

    def _refuse_later(self, opt: torch.optim.Optimizer, what: str, key: str, name: str,
                      p: torch.Tensor) -> None:
        """`opt`, stepping `p` (`what`) after another optimizer did, keeps more state for it
        than the priced `key` optimizer `name`: the loop switched optimizers partway."""
        got = _state(opt, p)
        self.refuse(
            f"{what}: the loop's {type(opt).__name__}, stepping it after another optimizer "
            f"did, keeps {got:,} values of state for its {p.numel():,} weights"
            f"{_names_for(got, p, dense=key == 'dense_optimizer')}, more than the "
            f"{key} '{name}' the trial was priced with ({priced_state(name, p):,}); a trial "
            f"is priced with one optimizer: set the space's embedding {key} to the loop's "
            "larger and train with it from the first step, or keep the first throughout")

    def before_forward(self, module: Any, args: Any, kwargs: Any) -> None:
        """The model's forward pre-hook, at a forward with gradients on: the batch of every
        one in training mode is checked, and the precision at the first in training mode.
        One in eval mode (an evaluation without no_grad) is not judged: the last before the
        first optimizer step is, where the loop trains its model in eval mode."""
        import torch

        if not torch.is_grad_enabled() or not self.judged:
            return
        if module.training and self.stepped:
            self._check_freed()
        if module.training and self.priced:
            self.batches += 1
            self._check_batch(args, kwargs)
        if self.precision_seen:
            if module.training and self._autocast_now() is not self.autocast:
                self._judge_precision()  # autocast switched since it was judged
            return
        if not module.training:
            self.held, self.evaluated = self._precision(self._read_autocast()), True
            return
        self.precision_seen = True
        self._judge_precision()

    def _check_freed(self) -> None:
        """The first training forward since an optimizer step: the stepped weight `probe`
        still holding a gradient is the last step's gradients kept through this forward,
        which the trial was priced with freed (module docstring); refused once."""
        self.stepped = False
        if self.probe is None or self.probe.grad is None:
            return
        self.probe = None
        self.refuse(
            "the loop's gradients from the last step are still allocated at the next "
            "training forward (zero_grad after the forward, or zero_grad(set_to_none=False)): "
            "the trial was priced with them freed before the forward; call opt.zero_grad() "
            "(set_to_none, torch's default) before the forward")

    def _autocast_now(self) -> torch.dtype | None:
        """The autocast dtype in force on the device the precision was judged on (None:
        autocast off): two reads, cheap enough for every training forward."""
        import torch

        on = torch.is_autocast_enabled(self.device)
        return torch.get_autocast_dtype(self.device) if on else None

    def _judge_precision(self) -> None:
        """Refuse the loop's precision where it is not the price's (`_precision`): at the
        first training forward, and again at one under another autocast than it was judged
        under (AMP switched on after a warm-up, or off), the weights' dtypes too."""
        if refusal := self._precision(self._read_autocast()):
            self.refuse(refusal)

    def _read_autocast(self) -> torch.dtype | None:
        """The autocast in force on the judged weights' device (the first's: a table's where
        there is one; `_autocast_now`), kept with the device: later training forwards, and
        steps rechecking a dtype, judge against it."""
        self.device = self.judged[0][1].device.type
        self.autocast = self._autocast_now()
        return self.autocast

    def _precision(self, autocast: torch.dtype | None) -> str | None:
        """Every table's and trainable weight's dtype (tables first) and the autocast
        `autocast` (None: off) against the price's (`Price.dtypes`, the precision's
        autocast): the refusal of the first that differs, None if none does."""
        got = None if autocast is None else _name_of(autocast)
        policy = precision_policy(self.price.precision)
        for what, w in self.judged:
            dtype, want = _name_of(w.dtype), self.price.dtypes.get(id(w))
            if want is None or (got == policy.autocast_dtype and dtype == want):
                continue
            built = "" if want == policy.param_dtype else " as built"
            return (f"the loop trains {what} in {dtype} {_autocast(got)}, but the trial was "
                    f"priced at precision '{policy.name}' ({want}{built} "
                    f"{_autocast(policy.autocast_dtype)}); {self.price.fixes.precision}")
        return None

    def _check_batch(self, args: Any, kwargs: Mapping[str, Any]) -> None:
        """A training batch against the priced example's, input by input (another count of
        inputs is not compared): a batch of rows (`priced_inputs`) larger in any dim, or of
        another rank with more elements, is refused; 1-D inputs only when every input's
        first dim is larger (flat ids with offsets, more ids over the same bags, keep the
        priced bags). Smaller, as micro-batches are, is not. Shapes alone are read (the
        inputs' names only for a refusal); after one refusal no batch is compared."""
        want = self.priced or []
        got = self._shapes(args, kwargs)
        if got == self.shapes or len(got) != len(want):  # the priced batch itself: at once
            return
        over = _over(got, self.shapes)
        if over is None:
            return
        self.priced = None  # the trial ends with this refusal
        named = (self.price.inputs or _inputs)(args, kwargs)
        self.refuse(_refusal(self.batches, named, want, over))

    def _shapes(self, args: Any, kwargs: Mapping[str, Any]) -> list[tuple[int, ...]]:
        """The shapes of the batch's inputs as the price reads them (`Price.inputs`)."""
        if self.price.inputs is None:
            return _shapes(args, kwargs)  # plain tensors: without pytree
        return [tuple(i["shape"]) for i in self.price.inputs(args, kwargs)]


def _adds_decay(group: Mapping[str, Any]) -> bool:
    """Whether an optimizer's param group adds a weight decay to the gradient (an L2
    `weight_decay`; a decoupled one, AdamW's, scales the weight in place)."""
    return bool(group.get("weight_decay")) and not group.get("decoupled_weight_decay", False)


def _shapes(args: Any, kwargs: Mapping[str, Any]) -> list[tuple[int, ...]]:
    """The shapes of the tensors of one or more dims in (args, kwargs), in `_inputs`'s
    order; plain tensors alone (no container to flatten) are read without pytree."""
    import torch

    flat = [*args, *kwargs.values()]
    if not all(type(t) is torch.Tensor for t in flat):
        from torch.utils._pytree import tree_leaves

        flat = tree_leaves((tuple(args), dict(kwargs)))
    return [t.shape for t in flat if isinstance(t, torch.Tensor) and t.dim() > 0]


def _over(got: Sequence[Sequence[int]], want: Sequence[Sequence[int]]) -> int | None:
    """Which input of shapes `got` is more than priced (`want`): the first batch of rows
    (two or more dims in either) `_larger`, else -1 when every first dim is larger (1-D
    inputs); None: none is."""
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        if (len(g) > 1 or len(w) > 1) and _larger(g, w):
            return i
    if all(g[0] > w[0] for g, w in zip(got, want, strict=True)):
        return -1
    return None


def _refusal(batch: int, got: Sequence[Mapping[str, Any]], want: Sequence[Mapping[str, Any]],
             over: int) -> str:
    """The one line refusing the loop's training batch `batch` (its training forwards
    counted from 1) whose input `over` (`_over`) is more than priced."""
    fix = ("have example(params) return the largest batch train builds (at params' batch "
           "size and longest sequence)")
    if over >= 0:
        g, w = got[over], want[over]
        return (f"the loop's training batch {batch} gives the model {g['input']} of shape "
                f"{g['shape']}, larger than the example(params) the trial was priced on "
                f"gives ({w['shape']}); {fix}")
    return (f"the loop's training batch {batch} gives the model inputs "
            f"{', '.join(g['input'] for g in got)} of first dims "
            f"{[g['shape'][0] for g in got]}, each larger than those of the "
            f"example(params) the trial was priced on ({[w['shape'][0] for w in want]}); "
            f"{fix}")


def _larger(got: Sequence[int], want: Sequence[int]) -> bool:
    """Whether a batch of rows of shape `got` holds more than one of `want`: larger in any
    dim, or (another rank) in elements."""
    if len(got) != len(want):
        return math.prod(got) > math.prod(want)
    return any(g > w for g, w in zip(got, want, strict=True))


def _name_of(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def priced_dtypes(model: nn.Module, precision: str) -> dict[int, str]:
    """The dtype each floating parameter of `model` (as built, before the loop) was priced
    in: the precision's parameter dtype where it is a half one (pricing casts the whole
    model to it: `models.user_step.UserStep.build`), else the parameter's own as built
    (fp32 and the amp precisions price the model as written, a bf16 table beside fp32
    layers included)."""
    policy = precision_policy(precision)
    return {id(p): policy.param_dtype if policy.param_dtype != "float32" else _name_of(p.dtype)
            for p in model.parameters() if p.is_floating_point()}


def _judged(price: Price) -> list[tuple[str, torch.Tensor]]:
    """The weights whose dtype the precision judges, as a refusal names them: every
    table's, then every other trainable weight's. Steps read them in this order, one a
    step (`_Watch.after_step`)."""
    return ([(f"table '{path}'", w) for path, _name, w in price.tables.values()]
            + [(f"dense parameter '{n}'", p) for n, p in price.dense.values()])


def _dtype(name: str) -> torch.dtype:
    import torch

    dtype: torch.dtype = getattr(torch, name)
    return dtype


def _autocast(dtype: str | None) -> str:
    return f"under {dtype} autocast" if dtype else "without autocast"


@contextmanager
def watch_loop(model: nn.Module, config: EmbeddingConfig, report: Report,
               priced: Sequence[Mapping[str, Any]] | None = None) -> Iterator[None]:
    """Within the block, the loop's optimizer, precision and batch are checked against
    `config` and `priced` (`priced_inputs` of the priced example; None: not checked)
    (module docstring); the hooks are gone after it."""
    with watching(model, model_price(model, config), report.refuse, priced):
        yield


@contextmanager
def watching(model: nn.Module, price: Price, refuse: Callable[[str], None],
             priced: Sequence[Mapping[str, Any]] | None = None) -> Iterator[None]:
    """Within the block, the loop's optimizer, precision and batch (`model`'s forwards) are
    checked against `price` and `priced` (`priced_inputs` of the priced example; None: not
    checked) (module docstring); each difference is `refuse(line)`d (a user trial's:
    `Report.refuse`, which raises); the hooks are gone after it."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    watch = _Watch(price, refuse, priced)
    handles = [register_optimizer_step_post_hook(watch.after_step),
               model.register_forward_pre_hook(watch.before_forward, with_kwargs=True)]
    try:
        yield
    finally:
        for h in handles:
            h.remove()
