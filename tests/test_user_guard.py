"""The loop trains what was priced (issue 42): a user loop whose optimizer keeps other state
for a table than the trial's priced `table_optimizer`, or whose precision is not the priced
one, is refused in one line naming both, never priced as the space says."""

from __future__ import annotations

import textwrap

import pytest
import torch
from _user_code import BAG_MODEL, install_loop
from torch import nn

from autoembed.config import EmbeddingConfig, TableConfig, optimizer_alias
from autoembed.models.optim import RowWiseAdagrad
from autoembed.user.report import Report
from autoembed.user.run import UserCode, run_user_trial

VOCAB, DIM = 20, 8


class Bag(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, DIM)
        self.out = nn.Linear(DIM, 2)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.out(self.emb(ids).mean(1))


def loop(make_opt, autocast: bool = False, swallow: bool = False):
    """A training loop with the optimizer `make_opt(model)` (and bf16 autocast)."""
    def train(model, params, report):
        opt = make_opt(model)
        ids = torch.randint(0, VOCAB, (16, 4), generator=torch.Generator().manual_seed(0))
        y = (ids < 10).sum(1).gt(2).long()
        for step in range(1, 4):
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                loss = nn.functional.cross_entropy(model(ids).float(), y)
            loss.backward()
            try:
                opt.step()
            except Exception:  # noqa: BLE001 - a loop that catches everything
                if not swallow:
                    raise
            report(step=step, samples=16 * step, quality=0.5, loss=loss.item())
        return 0.5
    return train


def run(config: EmbeddingConfig, train, priced=None):
    """The guard on the model as `build` makes it (nothing applied: the config names its
    table and optimizer; `priced`: the priced example's inputs, `priced_inputs`)."""
    return run_user_trial(UserCode(lambda p: Bag(), lambda p: None, train), {}, config,
                          Report(), as_written=True, priced_inputs=priced)


def ids_of(*shape: int) -> list[dict]:
    """`priced_inputs` of an example of one id tensor of `shape`, written out."""
    return [{"input": "args[0]", "shape": list(shape)}]


def adam(model):
    return torch.optim.Adam(model.parameters(), lr=0.01)


def test_sgd_priced_adam_in_the_loop_fails_naming_both() -> None:
    """The state check counts values, not their dtype: its advice names the table_optimizer
    alone (the precision has its own check and line)."""
    r = run(EmbeddingConfig(table_optimizer="sgd"), loop(adam))
    assert r.status == "failed"
    # Adam's state for the 20 x 8 table, by hand: exp_avg and exp_avg_sq, 2 x 160 fp32
    assert r.error == (
        "table 'emb': the loop's Adam keeps 320 values of state (1,280 bytes) for its 160 "
        "weights (as adam or adamw or sparse_adam does), but the trial was priced with "
        "table_optimizer 'sgd' (0); set the space's embedding table_optimizer to what the "
        "loop does, or build the loop's optimizer with autoembed.build_optimizer(model, "
        "params)")


def test_a_loop_that_swallows_the_refusal_still_fails() -> None:
    r = run(EmbeddingConfig(table_optimizer="sgd"), loop(adam, swallow=True))
    assert r.status == "failed" and "priced with table_optimizer 'sgd'" in r.error


@pytest.mark.parametrize(("priced", "make_opt"), [
    ("sgd", lambda m: torch.optim.SGD(m.parameters(), lr=0.1)),
    ("momentum", lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)),
    ("adam", lambda m: torch.optim.AdamW(m.parameters(), lr=0.01)),  # the same state
    ("adagrad", lambda m: torch.optim.Adagrad(m.parameters(), lr=0.1)),
    ("rowwise_adagrad", lambda m: RowWiseAdagrad([m.emb.weight], lr=0.1)),
])
def test_the_loops_optimizer_as_priced_trains(priced: str, make_opt) -> None:
    r = run(EmbeddingConfig(**optimizer_alias(priced)), loop(make_opt))  # as a space prices
    assert r.status == "complete", r.error


def tables_sgd_dense_adam(model):
    class Both:  # the tables under SGD, as priced; the rest under Adam
        def __init__(self) -> None:
            self.opts = (torch.optim.SGD(model.emb.parameters(), lr=0.1),
                         torch.optim.Adam(model.out.parameters(), lr=0.01))

        def zero_grad(self) -> None:
            for o in self.opts:
                o.zero_grad()

        def step(self) -> None:
            for o in self.opts:
                o.step()
    return Both()


def test_a_dense_optimizer_other_than_priced_fails_naming_both() -> None:
    """The dense weights' state is priced too (2 x 16 values for out.weight under Adam)."""
    r = run(EmbeddingConfig(**optimizer_alias("sgd")), loop(tables_sgd_dense_adam))
    assert r.status == "failed"
    assert r.error.startswith(
        "dense parameter 'out.weight': the loop's Adam keeps 32 values of state for its 16 "
        "weights (as adam or adamw does), but the trial was priced with dense_optimizer "
        "'sgd' (0); set the space's embedding dense_optimizer to what the loop does")
    ok = run(EmbeddingConfig(table_optimizer="sgd", dense_optimizer="adam"),
             loop(tables_sgd_dense_adam))
    assert ok.status == "complete", ok.error


def test_a_tables_own_optimizer_is_the_one_compared() -> None:
    own = EmbeddingConfig(table_optimizer="adam", tables=(
        TableConfig("emb", VOCAB, dim=DIM, table_optimizer="rowwise_adagrad"),))
    r = run(own, loop(adam))
    assert r.status == "failed" and "priced with table_optimizer 'rowwise_adagrad' (20)" \
        in r.error  # one value per row


def test_precision_other_than_priced_fails_naming_both() -> None:
    r = run(EmbeddingConfig(precision="fp32"), loop(adam, autocast=True))
    assert r.status == "failed"
    assert r.error.startswith("the loop trains table 'emb' in float32 under bfloat16 autocast, "
                              "but the trial was priced at precision 'fp32' (float32 "
                              "without autocast)")
    amp = run(EmbeddingConfig(precision="amp_bf16"), loop(adam, autocast=True))
    assert amp.status == "complete", amp.error
    plain = run(EmbeddingConfig(precision="amp_bf16"), loop(adam))
    assert plain.status == "failed" and "without autocast, but" in plain.error


def half_loop(masters: bool, optimizer=torch.optim.Adam, forward: bool = False):
    """`optimizer` on the model cast to bf16: stepping its bf16 weights themselves, or
    (`masters`) fp32 copies of them, their gradients cast up and the stepped values copied
    back; `forward`: calling `model.forward(ids)`, not `model(ids)`."""
    def train(model, params, report):
        model.to(torch.bfloat16)
        weights = list(model.parameters())
        fp32 = [w.detach().float().requires_grad_() for w in weights]
        opt = optimizer(fp32 if masters else weights, lr=0.01)
        ids = torch.randint(0, VOCAB, (16, 4), generator=torch.Generator().manual_seed(0))
        out = (model.forward if forward else model)(ids)
        loss = nn.functional.cross_entropy(out.float(), ids[:, 0] % 2)
        loss.backward()
        if masters:
            for w, m in zip(weights, fp32, strict=True):
                m.grad = w.grad.float()
        opt.step()
        if masters:
            with torch.no_grad():
                for w, m in zip(weights, fp32, strict=True):
                    w.copy_(m)
        return 0.5
    return train


def test_master_precision_refuses_a_loop_that_steps_its_half_weights() -> None:
    """Priced at bf16_master (fp32 masters stepped, fp32 Adam state), a loop that steps its
    bf16 weights themselves (bf16 state, no masters) is refused (before: it trained,
    priced with masters it never held); one that keeps fp32 masters trains, and so does
    the same loop priced at plain bf16."""
    def adam_at(precision: str) -> EmbeddingConfig:
        return EmbeddingConfig(precision=precision, table_optimizer="adam")

    r = run(adam_at("bf16_master"), half_loop(masters=False))
    assert r.status == "failed"
    assert r.error == (
        "table 'emb': the loop's Adam steps its bfloat16 weights themselves, but the trial "
        "was priced at precision 'bf16_master', whose optimizer steps an fp32 master copy "
        "of each weight (fp32 gradient and state); set the space's embedding precision to "
        "'bf16', what the loop trains, or build the loop's optimizer with "
        "autoembed.build_optimizer(model, params), which steps fp32 masters of the weights "
        "(or step fp32 copies in the loop: gradients cast up, values copied back)")
    for precision, masters in (("bf16_master", True), ("bf16", False)):
        ok = run(adam_at(precision), half_loop(masters))
        assert ok.status == "complete", (precision, ok.error)


def test_master_precision_checks_the_state_a_loops_fp32_masters_keep() -> None:
    """A loop that keeps fp32 masters of its bf16 weights and steps them with SGD, priced
    with Adam at bf16_master, is refused at its first step as the weights' own optimizer is
    (before: the masters were no weight of the model and nothing was checked)."""
    r = run(EmbeddingConfig(precision="bf16_master", table_optimizer="adam"),
            half_loop(masters=True, optimizer=torch.optim.SGD))
    assert r.status == "failed"
    # by hand: SGD keeps nothing for the 20 x 8 table; Adam two values a weight, 2 x 160
    assert r.error.startswith(
        "table 'emb': the loop's SGD keeps 0 values of state (0 bytes) for its 160 weights "
        "(as sgd does), but the trial was priced with table_optimizer 'adam' (320)"), r.error


def test_fp32_masters_stepped_with_no_call_of_the_model_are_refused_naming_the_weight() -> None:
    """A loop stepping fp32 masters after `model.forward(ids)` (no forward hook seen) is
    refused as a loop stepping the weights is, naming the master's weight (before, with
    the unseen check read by the master's own id: a KeyError)."""
    r = run(EmbeddingConfig(precision="bf16_master", table_optimizer="adam"),
            half_loop(masters=True, forward=True))
    assert r.status == "failed"
    assert r.error.startswith(
        "the loop's Adam steps table 'emb', which has a gradient, but no call of the model "
        "was seen"), r.error


def evaluated_first(autocast: bool, train_mode: bool = True):
    """`loop(adam, autocast)` after an evaluation in eval mode with gradients on (no
    no_grad) and without autocast; `train_mode` False: the loop trains in eval mode too."""
    def train(model, params, report):
        model.eval()
        model(torch.zeros(4, 4, dtype=torch.long)).sum()
        model.train(train_mode)
        return loop(adam, autocast=autocast)(model, params, report)
    return train


def test_the_precision_is_the_training_forwards_not_an_evaluations() -> None:
    """An evaluation before training, gradients on and without autocast, is not how the
    loop trains: under the priced amp_bf16's autocast it trains (before: refused as
    'without autocast'); at fp32, training under bf16 autocast is refused (before: trained,
    the evaluation compared); a loop training in eval mode is judged at its first step."""
    amp = EmbeddingConfig(precision="amp_bf16", table_optimizer="adam")
    ok = run(amp, evaluated_first(autocast=True))
    assert ok.status == "complete", ok.error
    says = ("the loop trains table 'emb' in float32 under bfloat16 autocast, but the trial "
            "was priced at precision 'fp32' (float32 without autocast)")
    fp32 = EmbeddingConfig(table_optimizer="adam")
    for train_mode in (True, False):
        r = run(fp32, evaluated_first(autocast=True, train_mode=train_mode))
        assert r.status == "failed" and r.error.startswith(says), (train_mode, r.error)
    ok = run(amp, evaluated_first(autocast=True, train_mode=False))
    assert ok.status == "complete", ok.error


@pytest.mark.parametrize(("priced", "decay", "make_opt", "says"), [
    ("sgd", 0.0, lambda m: torch.optim.SGD(m.parameters(), lr=0.1, weight_decay=1e-4),
     "table 'emb': the loop's SGD adds weight_decay 0.0001 to the gradient (a gradient-sized "
     "copy in the step), but the trial was priced with 'sgd' at weight_decay 0; set the "
     "space's embedding weight_decay"),
    ("sgd", 1e-4, lambda m: torch.optim.SGD(m.parameters(), lr=0.1),
     "table 'emb': the loop's SGD adds no weight decay to the gradient, but the trial was "
     "priced with 'sgd' at weight_decay 0.0001 (a gradient-sized copy in the step)"),
    ("sgd", 1e-4, lambda m: torch.optim.SGD(m.parameters(), lr=0.1, weight_decay=1e-4), None),
    ("adamw", 0.0, lambda m: torch.optim.AdamW(m.parameters(), lr=0.01), None),  # wd 0.01
])
def test_a_weight_decay_other_than_priced_fails_naming_both(priced, decay, make_opt,
                                                            says) -> None:
    """SGD's weight decay is added to the gradient, a copy the size of the weights in its
    step (torch's foreach SGD: `grads = _foreach_add(grads, params, alpha=wd)`): a loop that
    decays otherwise than priced is refused (before: trained, the copy priced or not as it
    happened); AdamW's decoupled decay adds nothing to the gradient, priced either way."""
    r = run(EmbeddingConfig(weight_decay=decay, **optimizer_alias(priced)), loop(make_opt))
    if says is None:
        assert r.status == "complete", r.error
    else:
        assert r.status == "failed" and r.error.startswith(says), r.error


def grouped(table_decay: float, dense_decay: float, optimizer=torch.optim.Adam):
    """`optimizer` with the table in one param group and the linear layer in another."""
    def make(model):
        return optimizer([{"params": model.emb.parameters(), "weight_decay": table_decay},
                          {"params": model.out.parameters(), "weight_decay": dense_decay}],
                         lr=0.01)
    return make


def test_param_groups_decaying_some_weights_are_told_what_can_be_priced() -> None:
    """A loop that decays its dense weights but not the table (two param groups) can match
    no one space weight_decay: its refusal says so and names what trains, a decoupled
    decay (before: it advised setting the space's weight_decay to the loop's, which
    refuses the other group); AdamW with those groups, priced adamw, trains."""
    r = run(EmbeddingConfig(weight_decay=0.01, table_optimizer="adam"), loop(grouped(0, 0.01)))
    assert r.status == "failed"
    assert r.error == (
        "table 'emb': the loop's Adam adds no weight decay to the gradient, but the trial was "
        "priced with 'adam' at weight_decay 0.01 (a gradient-sized copy in the step); its "
        "param groups add a decay to some weights and not to others, and a trial is priced "
        "with one weight_decay for all: decay every weight alike, or decouple the decay "
        "(AdamW; the space's table_optimizer and dense_optimizer adamw), which adds nothing "
        "to the gradient")
    adamw = EmbeddingConfig(weight_decay=0.01, **optimizer_alias("adamw"))
    ok = run(adamw, loop(grouped(0, 0.01, torch.optim.AdamW)))
    assert ok.status == "complete", ok.error


def test_a_loop_batch_larger_than_the_priced_example_fails_naming_both() -> None:
    """The loop trains batches of 16 x 4 ids (`loop`); a trial priced on 8 x 4 is refused
    (twice the activations priced), one priced on 16 x 4, or 32 x 4 (the loop's smaller, as
    micro-batches are), trains; a bigger eval pass first is no training batch."""
    r = run(EmbeddingConfig(table_optimizer="adam"), loop(adam), priced=ids_of(8, 4))
    assert r.status == "failed"
    assert r.error.startswith("the loop's training batch 1 gives the model args[0] of "
                              "shape [16, 4], larger than the example(params) the trial was "
                              "priced on gives ([8, 4]); have example(params) return")
    for priced in (ids_of(16, 4), ids_of(32, 4), None):
        ok = run(EmbeddingConfig(table_optimizer="adam"), loop(adam), priced=priced)
        assert ok.status == "complete", ok.error

    def eval_first(model, params, report):  # a bigger eval pass, gradients on, is no batch
        model.eval()
        model(torch.zeros(64, 9, dtype=torch.long))
        model.train()
        return loop(adam)(model, params, report)

    ok = run(EmbeddingConfig(table_optimizer="adam"), eval_first, priced=ids_of(16, 4))
    assert ok.status == "complete", ok.error


def test_a_longer_sequence_than_priced_fails_and_a_shorter_one_trains() -> None:
    """Activations scale with every dim of a batch of rows: priced on 16 rows of 2 ids, the
    loop's 16 x 4 (same rows, twice the sequence) is refused (before: only first dims were
    compared, and trained); priced on 16 x 8, the loop's shorter 16 x 4 trains."""
    r = run(EmbeddingConfig(table_optimizer="adam"), loop(adam), priced=ids_of(16, 2))
    assert r.status == "failed" and r.error.startswith(
        "the loop's training batch 1 gives the model args[0] of shape [16, 4], larger "
        "than the example(params) the trial was priced on gives ([16, 2])"), r.error
    ok = run(EmbeddingConfig(table_optimizer="adam"), loop(adam), priced=ids_of(16, 8))
    assert ok.status == "complete", ok.error


def step_on(model, opt, ids: torch.Tensor, step: int, report) -> None:
    """One training step on the batch `ids` of 16 rows (class 0), reported."""
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(ids), torch.zeros(16, dtype=torch.long))
    loss.backward()
    opt.step()
    report(step=step, samples=16 * step, quality=0.5)


def padded(lengths):
    """A loop that pads each batch of 16 sequences to its own longest (`pad_sequence`): its
    batch `i` is 16 x `lengths[i - 1]`; one report per step."""
    def train(model, params, report):
        opt, g = adam(model), torch.Generator().manual_seed(0)
        for step, longest in enumerate(lengths, 1):
            sizes = [*torch.randint(1, longest + 1, (15,), generator=g).tolist(), longest]
            ids = nn.utils.rnn.pad_sequence(
                [torch.randint(1, VOCAB, (n,), generator=g) for n in sizes], batch_first=True)
            step_on(model, opt, ids, step, report)
        return 0.5
    return train


def test_every_training_batch_is_compared_not_the_first_alone() -> None:
    """Priced on 16 x 4, a loop padding each batch to its own longest trains batches of
    16 x 4, 16 x 3, 16 x 6: refused at batch 3 (before: only the first batch was compared,
    and the longer ones trained over the priced bytes), the two steps reported before it
    kept; batches of 4, 2, 4, 1 (none longer) train."""
    config = EmbeddingConfig(table_optimizer="adam")
    r = run(config, padded([4, 3, 6]), priced=ids_of(16, 4))
    assert r.status == "failed" and r.error == (
        "the loop's training batch 3 gives the model args[0] of shape [16, 6], larger than "
        "the example(params) the trial was priced on gives ([16, 4]); have example(params) "
        "return the largest batch train builds (at params' batch size and longest sequence)")
    assert [p.step for p in r.curve] == [1, 2]
    ok = run(config, padded([4, 2, 4, 1]), priced=ids_of(16, 4))
    assert ok.status == "complete", ok.error
    assert [p.step for p in ok.curve] == [1, 2, 3, 4]


class FrozenHead(Bag):
    """Bag whose `out` is frozen as built (a pretrained head, say)."""

    def __init__(self) -> None:
        super().__init__()
        self.out.requires_grad_(False)


def unfreezing(what: str, at: int):
    """Adam over every weight; the loop unfreezes `what` (a submodule) before step `at`."""
    def train(model, params, report):
        opt, ids = adam(model), torch.randint(0, VOCAB, (16, 4))
        for step in range(1, 4):
            if step == at:
                getattr(model, what).requires_grad_(True)
            step_on(model, opt, ids, step, report)
        return 0.5
    return train


def test_a_weight_frozen_when_priced_that_the_loop_unfreezes_fails() -> None:
    """Pricing gives a frozen weight neither a gradient nor optimizer state: a loop that
    unfreezes the frozen head at step 2 (gradual unfreezing) is refused at that step (before:
    trained, a dense weight frozen at the start never checked), and so is a frozen table
    unfrozen (before: its state matched the table_optimizer's, priced at none); built
    trainable and frozen by the loop a while, the head trains."""
    config = EmbeddingConfig(table_optimizer="adam", dense_optimizer="adam")
    r = run_user_trial(UserCode(lambda p: FrozenHead(), lambda p: None, unfreezing("out", 2)),
                       {}, config, Report(), as_written=True)
    assert r.status == "failed" and r.error.startswith(
        f"the loop trains dense parameter 'out.weight' (a gradient and its Adam's "
        f"{2 * 2 * DIM} values of state for its {2 * DIM} weights), frozen (requires_grad "
        "False) when the trial was priced, so neither was priced; have build(params) return "
        "it trainable"), r.error
    assert [p.step for p in r.curve] == [1]

    def frozen_table():
        m = Bag()
        m.emb.requires_grad_(False)
        return m

    r = run_user_trial(UserCode(lambda p: frozen_table(), lambda p: None,
                                unfreezing("emb", 3)), {}, config, Report(), as_written=True)
    assert r.status == "failed" and r.error.startswith(
        f"the loop trains table 'emb' (a gradient and its Adam's {2 * VOCAB * DIM} values"), \
        r.error

    def freeze_first(model, params, report):
        model.out.requires_grad_(False)
        return unfreezing("out", 2)(model, params, report)

    ok = run_user_trial(UserCode(lambda p: Bag(), lambda p: None, freeze_first), {}, config,
                        Report(), as_written=True)
    assert ok.status == "complete", ok.error


class Scaled(Bag):
    """Bag with a learnable 0-dim temperature."""

    def __init__(self) -> None:
        super().__init__()
        self.temp = nn.Parameter(torch.tensor(1.0))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return super().forward(ids) * self.temp


def test_a_scalar_weights_adam_moments_are_state() -> None:
    """torch's Adam keeps two 0-dim moments for a 0-dim weight (and a step counter, not
    state): priced as adam (2 values), it trains (before: the moments, 0-dim, were taken
    for counters and the loop refused as keeping none)."""
    temp = nn.Parameter(torch.tensor(1.0))
    opt = torch.optim.Adam([temp])
    temp.grad = torch.tensor(1.0)
    opt.step()
    assert sorted(opt.state[temp]) == ["exp_avg", "exp_avg_sq", "step"]  # torch, directly
    r = run_user_trial(UserCode(lambda p: Scaled(), lambda p: None, loop(adam)), {},
                       EmbeddingConfig(table_optimizer="adam", dense_optimizer="adam"),
                       Report(), as_written=True)
    assert r.status == "complete", r.error


class FlatBag(nn.Module):
    """DLRM style: flat ids with one offset per bag, and a dense row per bag."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.EmbeddingBag(VOCAB, DIM, mode="sum")
        self.out = nn.Linear(DIM + 3, 1)

    def forward(self, ids, offsets, x):
        return self.out(torch.cat([self.emb(ids, offsets), x], 1)).squeeze(1)


def flat_batch(ids: int, bags: int):
    g = torch.Generator().manual_seed(0)
    return (torch.randint(0, VOCAB, (ids,), generator=g), torch.arange(bags) * (ids // bags),
            torch.randn(bags, 3, generator=g))


def test_flat_ids_over_the_priced_bags_train_and_more_bags_fail() -> None:
    """A flat-id model's first input is the batch's id count, not its bags: priced on 40
    ids in 8 bags (and 8 dense rows), a batch of 64 ids in the same 8 bags trains; 160 ids
    in 16 bags is refused, and so are 24 ids in 16 bags (fewer ids, but the dense rows and
    the bags' activations doubled: before, trained, as not every first dim was larger)."""
    from autoembed.user.guard import priced_inputs

    priced = priced_inputs(flat_batch(40, 8))

    def train_on(ids: int, bags: int):
        def train(model, params, report):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            opt.zero_grad()
            loss = model(*flat_batch(ids, bags)).pow(2).mean()
            loss.backward()
            opt.step()
            return 0.5
        return train

    def trial(ids: int, bags: int):
        return run_user_trial(UserCode(lambda p: FlatBag(), lambda p: None, train_on(ids, bags)),
                              {}, EmbeddingConfig(table_optimizer="sgd", dense_optimizer="sgd"),
                              Report(), as_written=True, priced_inputs=priced)

    ok = trial(64, 8)
    assert ok.status == "complete", ok.error
    for ids in (24, 160):  # fewer ids over more bags first
        r = trial(ids, 16)
        assert r.status == "failed" and r.error.startswith(
            "the loop's training batch 1 gives the model args[2] of shape [16, 3], larger "
            "than the example(params) the trial was priced on gives ([8, 3])"), r.error


class FlatOnly(nn.Module):
    """Flat ids with one offset per bag, nothing else."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.EmbeddingBag(VOCAB, DIM, mode="sum")

    def forward(self, ids, offsets):
        return self.emb(ids, offsets).sum(1)


def test_flat_ids_and_offsets_alone_fail_when_every_first_dim_is_larger() -> None:
    """1-D integer inputs alone: their rows are not known, so only a batch larger in every
    first dim (80 ids in 16 bags over the priced 40 in 8) is refused, naming the inputs."""
    from autoembed.user.guard import priced_inputs

    priced = priced_inputs(flat_batch(40, 8)[:2])

    def trial(ids: int, bags: int):
        def train(model, params, report):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            model(*flat_batch(ids, bags)[:2]).pow(2).mean().backward()
            opt.step()
            return 0.5
        return run_user_trial(UserCode(lambda p: FlatOnly(), lambda p: None, train), {},
                              EmbeddingConfig(table_optimizer="sgd"), Report(),
                              as_written=True, priced_inputs=priced)

    for ids, bags in ((80, 8), (32, 16)):
        ok = trial(ids, bags)
        assert ok.status == "complete", ok.error
    r = trial(80, 16)
    assert r.status == "failed" and r.error == (
        "the loop's training batch 1 gives the model inputs args[0], args[1] of first "
        "dims [80, 16], each larger than those of the example(params) the trial was priced "
        "on ([40, 8]); have example(params) return the largest batch train builds (at "
        "params' batch size and longest sequence)")


def test_a_batchs_shapes_are_read_in_the_priced_inputs_order() -> None:
    """Each step's shapes (plain tensors read without pytree) in the order of torch's
    `tree_leaves`, which `priced_inputs` names them in: kwargs as given, not sorted."""
    from torch.utils._pytree import tree_leaves

    from autoembed.user.guard import _shapes

    args, kwargs = (torch.zeros(2, 1),), {"b": torch.zeros(3, 1), "a": torch.zeros(4)}
    for kw in (kwargs, {**kwargs, "b": [kwargs["b"]]}):  # plain tensors; a list, flattened
        assert _shapes(args, kw) == [t.shape for t in tree_leaves((args, kw))] \
            == [(2, 1), (3, 1), (4,)]


def test_priced_inputs_are_the_tensors_the_forward_is_given() -> None:
    from autoembed import Example
    from autoembed.user.guard import priced_inputs

    u, x, y = torch.zeros(4, dtype=torch.long), torch.zeros(4, 3), torch.zeros(4)
    assert priced_inputs(Example(args=(u,), kwargs={"x": x[:2]}, targets=y)) == [
        {"input": "args[0]", "shape": [4]},
        {"input": "kwargs['x']", "shape": [2, 3]}]
    # a 0-dim input has no rows; a 1-D float (per-id weights beside flat ids) is not rows
    assert priced_inputs((u, torch.tensor(1.0), y)) == [
        {"input": "args[0]", "shape": [4]},
        {"input": "args[2]", "shape": [4]}]
    assert priced_inputs({"ids": u}) == [{"input": "kwargs['ids']", "shape": [4]}]
    assert priced_inputs([x, x]) is None  # several examples: not compared


class Pair:
    """A user's batch type, a pytree node registered without key paths."""

    def __init__(self, ids: torch.Tensor, x: torch.Tensor) -> None:
        self.ids, self.x = ids, x


def test_a_pytree_node_without_key_paths_is_named_by_place() -> None:
    """torch's key-path flatten refuses a node registered without `flatten_with_keys_fn`
    (checked here directly); its tensors are still compared, named by their place."""
    from torch.utils import _pytree

    from autoembed.user.guard import priced_inputs

    _pytree.register_pytree_node(Pair, lambda p: ([p.ids, p.x], None),
                                 lambda c, _: Pair(*c))
    try:
        pair = Pair(torch.zeros(4, dtype=torch.long), torch.zeros(4, 3))
        with pytest.raises(ValueError):
            _pytree.tree_flatten_with_path(pair)
        assert priced_inputs(pair) == [{"input": "input 0", "shape": [4]},
                                       {"input": "input 1", "shape": [4, 3]}]
    finally:
        _pytree._deregister_pytree_node(Pair)


ADAM_LOOP = BAG_MODEL + textwrap.dedent('''
    def example(params):
        return torch.zeros(8, 4, dtype=torch.long), torch.zeros(8, dtype=torch.long)

    def train(model, params, report):
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        ids, y = example(params)
        for step in range(1, 3):
            opt.zero_grad()
            loss = model(ids, y)
            loss.backward(); opt.step()
            report(step=step, samples=8 * step, quality=0.5)
''')


def test_a_search_with_sgd_in_the_space_refuses_an_adam_loop(tmp_path, monkeypatch) -> None:
    import autoembed
    from autoembed.tracking import NullTracker

    mod = install_loop(tmp_path, "guarded", ADAM_LOOP, monkeypatch)
    (tmp_path / "space.yaml").write_text(
        "embedding: {precision: fp32, table_optimizer: sgd}\n"
        "user: {dim: {choices: [8]}}\ntrials: 1\n")
    from autoembed.pipeline.search_report import SearchFailedError

    with pytest.raises(SearchFailedError) as e:  # exit 1: no trial completed
        autoembed.search("700MB", tmp_path / "space.yaml", model=mod.build,
                         example=mod.example, train=mod.train, executor="local", study="g",
                         runs_dir=tmp_path / "runs", tracker=NullTracker())
    said = str(e.value)
    assert "table 'emb': the loop's Adam keeps 16,000 values of state (64,000 bytes)" in said
    assert "priced with table_optimizer 'sgd' (0)" in said


def test_the_advice_followed_literally_passes_the_guard() -> None:
    """`train` builds its optimizer with `autoembed.build_optimizer(model, params)`, params as
    the trial hands them (`params["embedding"]["tables"]`: rule -> settings): the table is
    stepped by the rule's row-wise Adagrad, the rest by Adam, as priced."""
    import autoembed
    from autoembed.pipeline.user_workload import model_tables
    from autoembed.space import parse_space
    from autoembed.user.space import config_for, params_for

    space = parse_space({"embedding": {"precision": "fp32", "table_optimizer": "adam",
                                       "tables": {"e*": {"table_optimizer": {
                                           "choices": ["adagrad", "rowwise_adagrad"]}}}}},
                        "s.yaml", kind="user")
    values = {"embedding.tables.e*.table_optimizer": "rowwise_adagrad"}
    params = params_for(space, values)
    config = config_for(space, values, model_tables(Bag()))  # what the trial was priced with
    built: list = []

    def make_opt(model):
        built.append(autoembed.build_optimizer(model, params))
        return built[-1]

    r = run_user_trial(UserCode(lambda p: Bag(), lambda p: None, loop(make_opt),
                                apply=lambda m, c: None), params, config, Report())
    assert r.status == "complete", r.error
    state = {id(p): sum(t.numel() for t in o.state[p].values() if t.dim() > 0)
             for o in built[0] for p in o.state}
    table = built[0].table.param_groups[0]["params"][0]
    assert state[id(table)] == VOCAB  # row-wise Adagrad: one value per row
    assert isinstance(built[0].dense, torch.optim.Adam)


class Mixed(nn.Module):
    """Two tables and a layer in the dtypes `dtypes` (a, b, out)."""

    def __init__(self, dtypes=(torch.bfloat16, torch.float32, torch.float32),
                 rows: int = VOCAB) -> None:
        super().__init__()
        self.a = nn.Embedding(rows, DIM).to(dtypes[0])
        self.b = nn.Embedding(rows, DIM).to(dtypes[1])
        self.out = nn.Linear(DIM, 2).to(dtypes[2])

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.out((self.a(ids).float() + self.b(ids).float()).mean(1).to(
            self.out.weight.dtype)).float()


def run_mixed(precision: str, dtypes, cast=None):
    """The guard on `Mixed(dtypes)` priced at `precision`, its loop (Adam) casting the model
    with `cast` first (None: trained as built)."""
    def make_opt(model):
        if cast is not None:
            model.to(cast)
        return adam(model)

    config = EmbeddingConfig(precision=precision, table_optimizer="adam",
                             dense_optimizer="adam")
    return run_user_trial(UserCode(lambda p: Mixed(dtypes), lambda p: None, loop(make_opt)),
                          {}, config, Report(), as_written=True)


def test_a_mixed_dtype_model_is_priced_and_trained_as_written() -> None:
    """At fp32 the price keeps each weight's dtype as built (here the bf16 table `a` at 2
    bytes a value, by hand), and the guard accepts a loop that trains exactly that, whichever
    table comes first (before: the first table's dtype alone was read, against float32)."""
    import autoembed

    bf, f32 = torch.bfloat16, torch.float32
    est = autoembed.estimate_model(Mixed(rows=1000), torch.zeros(16, 4, dtype=torch.long),
                                   optimizer="adam", precision="fp32")
    held = {m.name: m.parameters for m in est.modules}
    block = 512  # the CUDA caching allocator's rounding, which the trace applies
    assert held["a"] == -(-1000 * DIM * 2 // block) * block  # bf16: 2 bytes a value
    assert held["b"] == -(-1000 * DIM * 4 // block) * block
    for dtypes in ((bf, f32, f32), (f32, bf, f32)):
        r = run_mixed("fp32", dtypes)
        assert r.status == "complete", r.error


def test_every_weight_not_in_its_priced_dtype_is_refused() -> None:
    """The second table cast to fp32 by the loop (priced bf16 as built), and fp32 dense
    weights under bf16 (priced cast to bf16), are refused naming the weight (before: only
    the first table was read, and it matched)."""
    bf, f32 = torch.bfloat16, torch.float32
    r = run_mixed("fp32", (f32, bf, f32), cast=f32)
    assert r.status == "failed"
    assert r.error.startswith("the loop trains table 'b' in float32 without autocast, but the "
                              "trial was priced at precision 'fp32' (bfloat16 as built "
                              "without autocast)"), r.error
    dense = run_mixed("bf16", (bf, bf, f32))
    assert dense.status == "failed"
    assert dense.error.startswith("the loop trains dense parameter 'out.weight' in float32 "
                                  "without autocast, but the trial was priced at precision "
                                  "'bf16' (bfloat16 without autocast)"), dense.error
    ok = run_mixed("bf16", (bf, bf, f32), cast=bf)
    assert ok.status == "complete", ok.error


def test_the_advice_passes_the_guard_in_the_model_as_written_trial_too() -> None:
    """Trial 0 applies no table rule to the model, but a rule's `table_optimizer` trains it:
    the params train is handed name row-wise Adagrad for `emb`, and so does its price."""
    import autoembed
    from autoembed.pipeline.user_workload import model_tables
    from autoembed.space import parse_space
    from autoembed.user.space import as_written_config, as_written_values, params_for

    space = parse_space({"embedding": {"precision": "fp32", "table_optimizer": "adam",
                                       "tables": {"emb": {"table_optimizer": "rowwise_adagrad"}}},
                         "user": {"lr": {"choices": [0.1, 0.2]}}}, "s.yaml", kind="user")
    values = as_written_values(space)
    params = params_for(space, values)
    config = as_written_config(space, values, model_tables(Bag()))
    train = loop(lambda model: autoembed.build_optimizer(model, params))
    r = run_user_trial(UserCode(lambda p: Bag(), lambda p: None, train), params, config,
                       Report(), as_written=True)
    assert r.status == "complete", r.error


class WeightedBag(nn.Module):
    """Flat ids with per-id weights (EmbeddingBag's per_sample_weights) and one offset per
    bag."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.EmbeddingBag(VOCAB, DIM, mode="sum")

    def forward(self, ids, offsets, weights):
        return self.emb(ids, offsets, per_sample_weights=weights).sum(1)


def test_per_id_weights_follow_the_ids_not_the_bags() -> None:
    """Per-id float weights are as many as the flat ids: priced on 40 ids in 8 bags, 64 ids
    (and 64 weights) in the same 8 bags train, as unweighted flat ids do."""
    from autoembed.user.guard import priced_inputs

    def batch(ids: int, bags: int):
        i, o, _ = flat_batch(ids, bags)
        return i, o, torch.rand(ids)

    def train(model, params, report):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        model(*batch(64, 8)).pow(2).mean().backward()
        opt.step()
        return 0.5

    r = run_user_trial(UserCode(lambda p: WeightedBag(), lambda p: None, train), {},
                       EmbeddingConfig(table_optimizer="sgd"), Report(), as_written=True,
                       priced_inputs=priced_inputs(batch(40, 8)))
    assert r.status == "complete", r.error


def switching(first, then, at: int = 3):
    """A loop stepping with `first(model)` before step `at`, with `then(model)` from it (a
    warm-up optimizer, then another; each built once)."""
    def train(model, params, report):
        opts, ids = (first(model), then(model)), torch.randint(0, VOCAB, (16, 4))
        for step in range(1, 5):
            step_on(model, opts[step >= at], ids, step, report)
        return 0.5
    return train


def sgd(model):
    return torch.optim.SGD(model.parameters(), lr=0.1)


class Delegating(torch.optim.Optimizer):
    """A wrapper that steps an inner optimizer and keeps no state of its own (as torch's
    ZeroRedundancyOptimizer's outer does); its own step fires torch's step hooks too."""

    def __init__(self, inner: torch.optim.Optimizer) -> None:
        self.inner = inner
        super().__init__([p for g in inner.param_groups for p in g["params"]], {})

    def step(self, closure=None) -> None:
        self.inner.step()


def test_an_optimizer_switched_partway_is_checked_when_it_first_steps() -> None:
    """SGD for two steps, then Adam, priced as sgd: Adam's 2 x 160 values for the table
    trained unpriced (before: a weight's state was checked at its first step alone); it is
    refused at step 3, the two steps before it kept. A new SGD at step 3, a wrapper keeping
    no state of its own over the priced Adam, and one optimizer throughout train."""
    config = EmbeddingConfig(**optimizer_alias("sgd"))
    r = run(config, switching(sgd, adam))
    assert r.status == "failed" and r.error == (
        f"table 'emb': the loop's Adam, stepping it after another optimizer did, keeps "
        f"{2 * VOCAB * DIM} values of state for its {VOCAB * DIM} weights (as adam or adamw "
        "or sparse_adam does), more than the table_optimizer 'sgd' the trial was priced with "
        "(0); a trial is priced with one optimizer: set the space's embedding table_optimizer "
        "to the loop's larger and train with it from the first step, or keep the first "
        "throughout"), r.error
    assert [p.step for p in r.curve] == [1, 2]
    for make in (switching(sgd, sgd), loop(sgd)):
        ok = run(config, make)
        assert ok.status == "complete", ok.error
    for make in (switching(adam, lambda m: Delegating(adam(m))), loop(adam)):
        ok = run(EmbeddingConfig(**optimizer_alias("adam")), make)
        assert ok.status == "complete", ok.error


def amp_from(at: int, evaluate: bool = False):
    """Adam, under bf16 autocast from step `at` (fp32 before it: a warm-up); `evaluate`: an
    eval-mode pass without autocast or no_grad after each step."""
    def train(model, params, report):
        opt, ids = adam(model), torch.randint(0, VOCAB, (16, 4))
        for step in range(1, 5):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=step >= at):
                step_on(model, opt, ids, step, report)
            if evaluate:
                model.eval()
                model(ids)
                model.train()
        return 0.5
    return train


def test_autocast_switched_on_after_a_warm_up_is_refused_at_that_forward() -> None:
    """Priced at fp32, a loop that turns bf16 autocast on at step 3 is refused there, the two
    steps before it kept (before: the precision was read at the first training forward
    alone, and AMP trained unpriced); under autocast from the first step, an fp32 evaluation
    in eval mode between steps, priced at amp_bf16, trains; the warm-up is refused there."""
    fp32 = run(EmbeddingConfig(table_optimizer="adam"), amp_from(3))
    assert fp32.status == "failed" and fp32.error == (
        "the loop trains table 'emb' in float32 under bfloat16 autocast, but the trial was "
        "priced at precision 'fp32' (float32 without autocast); set the space's embedding "
        "precision to what the loop does, or train the model in the priced one"), fp32.error
    assert [p.step for p in fp32.curve] == [1, 2]
    amp = EmbeddingConfig(table_optimizer="adam", precision="amp_bf16")
    ok = run(amp, amp_from(1, evaluate=True))
    assert ok.status == "complete", ok.error
    warm = run(amp, amp_from(3))
    assert warm.status == "failed" and "float32 without autocast, but" in warm.error
    assert warm.curve == ()


def decaying(make_opt, schedule):
    """A loop stepping `make_opt(model)` whose groups' weight_decay is `schedule[i]` at
    step i + 1 (set in param_groups before the step, as a decay schedule does)."""
    def train(model, params, report):
        opt, ids = make_opt(model), torch.randint(0, VOCAB, (16, 4))
        for step, wd in enumerate(schedule, 1):
            for group in opt.param_groups:
                group["weight_decay"] = wd
            step_on(model, opt, ids, step, report)
        return 0.5
    return train


def test_a_weight_decay_turned_on_partway_is_refused_at_that_step() -> None:
    """SGD priced at weight_decay 0, a schedule turning L2 decay on at step 3 adds a
    gradient-sized copy to each step from there: refused at that step, the two before it
    kept (before: the decay was read at a weight's first step alone); a schedule that
    changes the priced decay's value, or ends it, and AdamW's decoupled decay turned on
    (nothing added to the gradient) train."""
    r = run(EmbeddingConfig(**optimizer_alias("sgd")), decaying(sgd, [0, 0, 1e-4, 1e-4]))
    assert r.status == "failed" and r.error == (
        "table 'emb': the loop's SGD turned on weight_decay 0.0001 after its first step, "
        "added to the gradient (a gradient-sized copy in the step), but the trial was priced "
        "with 'sgd' at weight_decay 0; a trial is priced with one weight decay: set the "
        "space's embedding weight_decay to the loop's and decay from the first step, or "
        "keep it off throughout"), r.error
    assert [p.step for p in r.curve] == [1, 2]
    decayed = EmbeddingConfig(weight_decay=1e-4, **optimizer_alias("sgd"))
    for schedule in ([1e-4, 2e-4, 3e-4, 4e-4], [1e-4, 1e-4, 0, 0]):
        ok = run(decayed, decaying(sgd, schedule))
        assert ok.status == "complete", ok.error
    adamw = lambda m: torch.optim.AdamW(m.parameters(), lr=0.01)  # noqa: E731
    ok = run(EmbeddingConfig(**optimizer_alias("adamw")), decaying(adamw, [0, 0, 0.05, 0.05]))
    assert ok.status == "complete", ok.error


@pytest.mark.parametrize("how", ["add_param_group", "extend"])
def test_weights_an_optimizer_gains_are_checked_at_their_first_step(how: str) -> None:
    """Adam over the table alone; at step 2 the loop unfreezes the head frozen when priced
    and hands it to the optimizer, in a new group or in the group it has: refused at that
    step (each optimizer's weights are walked once, the ones it gains too)."""
    def train(model, params, report):
        opt, ids = adam(model.emb), torch.randint(0, VOCAB, (16, 4))
        for step in range(1, 4):
            if step == 2:
                model.out.requires_grad_(True)
                if how == "extend":
                    opt.param_groups[0]["params"].extend(model.out.parameters())
                else:
                    opt.add_param_group({"params": list(model.out.parameters())})
            step_on(model, opt, ids, step, report)
        return 0.5

    r = run_user_trial(UserCode(lambda p: FrozenHead(), lambda p: None, train), {},
                       EmbeddingConfig(table_optimizer="adam", dense_optimizer="adam"),
                       Report(), as_written=True)
    assert r.status == "failed" and r.error.startswith(
        "the loop trains dense parameter 'out.weight' (a gradient and its Adam's "
        f"{2 * 2 * DIM} values of state"), r.error
    assert [p.step for p in r.curve] == [1]


def stepped_first(cast: torch.dtype):
    """`loop(adam)` on the model cast to `cast`, after an optimizer step before any forward
    (no gradient yet: it moves nothing)."""
    def train(model, params, report):
        model.to(cast)
        opt = adam(model)
        opt.step()
        return loop(lambda m: opt)(model, params, report)
    return train


def test_a_step_before_any_forward_does_not_stand_for_the_training_forward() -> None:
    """A step that moves nothing before the first forward took the place of the loop's
    first training forward, and the precision was never read: a model cast to bf16 trained
    on an fp32 price (before: complete); it is refused at the first training forward, and
    the same loop in fp32 trains."""
    r = run(EmbeddingConfig(table_optimizer="adam"), stepped_first(torch.bfloat16))
    assert r.status == "failed" and r.error.startswith(
        "the loop trains table 'emb' in bfloat16 without autocast, but the trial was priced "
        "at precision 'fp32' (float32 without autocast)"), r.error
    assert r.curve == ()
    ok = run(EmbeddingConfig(table_optimizer="adam"), stepped_first(torch.float32))
    assert ok.status == "complete", ok.error


def calling(forward: bool, rows: int = 16, autocast: bool = False):
    """Adam over batches of `rows` x 4 ids (under bf16 autocast), its training step calling
    `model.forward(ids)` (`forward`) or `model(ids)`."""
    def train(model, params, report):
        opt, ids = adam(model), torch.randint(0, VOCAB, (rows, 4))
        call = model.forward if forward else model
        for step in range(1, 4):
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                out = call(ids).float()
            loss = nn.functional.cross_entropy(out, torch.zeros(rows, dtype=torch.long))
            loss.backward()
            opt.step()
            report(step=step, samples=rows * step, quality=0.5)
        return 0.5
    return train


def test_a_loop_calling_model_forward_is_refused_and_model_x_trains() -> None:
    """`model.forward(x)` runs none of the model's hooks, so the batch and precision were
    never checked (before: a loop training on batches 4x the priced one under autocast, on
    an fp32 price, trained complete); the first step that moves a weight with no call of
    the model seen is refused, nothing reported; the same loop calling `model(x)` on the
    priced batch trains, and on the larger one is refused for its batch."""
    config = EmbeddingConfig(table_optimizer="adam")
    says = ("the loop's Adam steps table 'emb', which has a gradient, but no call of the "
            "model was seen: the loop calls model.forward(x) (or the model's parts), which "
            "skips the model's hooks, so its batch and precision cannot be checked against "
            "the price; call model(x) in the training step, as the trial was priced")
    for rows, autocast in ((16, False), (64, True)):
        r = run(config, calling(True, rows, autocast), priced=ids_of(16, 4))
        assert r.status == "failed" and r.error == says, r.error
        assert r.curve == ()
    ok = run(config, calling(False), priced=ids_of(16, 4))
    assert ok.status == "complete", ok.error
    big = run(config, calling(False, rows=64), priced=ids_of(16, 4))
    assert big.status == "failed" and "training batch 1" in big.error, big.error


def casting(cast, at: int = 2, part: str = "", autocast: bool = False):
    """SGD for 6 steps (under bf16 autocast), the loop casting the model (or its submodule
    `part`) with `cast` before step `at` (a model cast to bf16 after a warm-up)."""
    def train(model, params, report):
        opt, ids = sgd(model), torch.randint(0, VOCAB, (16, 4))
        for step in range(1, 7):
            if step == at:
                (getattr(model, part) if part else model).to(cast)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                step_on(model, opt, ids, step, report)
        return 0.5
    return train


def test_weights_cast_after_the_first_step_are_refused() -> None:
    """Priced fp32 with SGD (no state to break), a loop casting the model to bf16 before
    step 2 trained it in bf16 unnoticed (before: the dtypes were read at the first training
    forward alone); a step reads one weight's dtype in turn: refused at step 2, step 1 kept.
    A cast of one table of `Mixed` (1 of its 4 weights) is seen within 4 steps; under the priced
    amp_bf16's autocast the line names the autocast of the forward, not the step's (off);
    a cast to the priced dtype trains."""
    sgd_ = optimizer_alias("sgd")
    r = run(EmbeddingConfig(**sgd_), casting(torch.bfloat16))
    assert r.status == "failed" and r.error == (
        "the loop trains table 'emb' in bfloat16 without autocast, but the trial was priced "
        "at precision 'fp32' (float32 without autocast); set the space's embedding precision "
        "to what the loop does, or train the model in the priced one"), r.error
    assert [p.step for p in r.curve] == [1]
    one = run_user_trial(UserCode(lambda p: Mixed((torch.float32,) * 3), lambda p: None,
                                  casting(torch.bfloat16, part="b")),
                         {}, EmbeddingConfig(**sgd_), Report(), as_written=True)
    assert one.status == "failed" and one.error.startswith(
        "the loop trains table 'b' in bfloat16 without autocast, but the trial was priced "
        "at precision 'fp32' (float32 without autocast)"), one.error
    assert 1 <= len(one.curve) <= 4  # one of 4 weights a step from step 2: seen by step 5
    amp = run(EmbeddingConfig(precision="amp_bf16", **sgd_),
              casting(torch.bfloat16, autocast=True))
    assert amp.status == "failed" and amp.error.startswith(
        "the loop trains table 'emb' in bfloat16 under bfloat16 autocast, but the trial was "
        "priced at precision 'amp_bf16' (float32 under bfloat16 autocast)"), amp.error
    ok = run(EmbeddingConfig(**sgd_), casting(torch.float32))
    assert ok.status == "complete", ok.error


def zeroing(order: str):
    """Three SGD steps on one batch: `order` "after" zeroes after the forward (forward,
    zero_grad, backward, step), "kept" before it with set_to_none=False, "before" before it
    (torch's default), "accumulate" before the first of two forwards and backwards a step."""
    def train(model, params, report):
        opt, ids = torch.optim.SGD(model.parameters(), lr=0.1), torch.randint(0, VOCAB, (16, 4))
        for step in range(1, 4):
            if order in ("before", "accumulate", "kept"):
                opt.zero_grad(set_to_none=order != "kept")
            for _ in range(2 if order == "accumulate" else 1):
                loss = model(ids).pow(2).mean()
                if order == "after":
                    opt.zero_grad()
                loss.backward()
            opt.step()
            report(step=step, samples=16 * step, quality=0.5)
        return 0.5
    return train


@pytest.mark.parametrize("order", ["after", "kept"])
def test_a_loop_holding_the_last_steps_gradients_through_its_forward_fails(order: str) -> None:
    """A trial is priced with its gradients freed before the forward: a loop zeroing them
    after the forward, or keeping them allocated (set_to_none=False), holds every trainable
    weight's gradient (here 20 x 8 + 8 x 2 + 2 fp32 values, by hand) through its forward,
    beyond the price; refused at its second forward, the first after a step (before:
    trained). Three steps, refused at the second: one report."""
    r = run(EmbeddingConfig(**optimizer_alias("sgd")), zeroing(order))
    assert r.status == "failed"
    assert r.error == (
        "the loop's gradients from the last step are still allocated at the next training "
        "forward (zero_grad after the forward, or zero_grad(set_to_none=False)): the trial "
        "was priced with them freed before the forward; call opt.zero_grad() (set_to_none, "
        "torch's default) before the forward")
    assert [e.step for e in r.curve] == [1]


@pytest.mark.parametrize("order", ["before", "accumulate"])
def test_gradients_zeroed_before_the_forward_and_accumulated_ones_train(order: str) -> None:
    """Zeroed before the forward, as priced; accumulated over two forwards with no step
    between them (gradient accumulation), not a step's gradients kept."""
    r = run(EmbeddingConfig(**optimizer_alias("sgd")), zeroing(order))
    assert r.status == "complete", r.error
    assert [e.step for e in r.curve] == [1, 2, 3]


def test_the_documented_loop_at_bf16_master_trains_fp32_masters_as_priced() -> None:
    """The loop as docs/own_loop.md writes it (the model cast to the priced bf16,
    `build_optimizer(model, params)`, zero_grad, backward, step), priced at bf16_master: it
    trains (before: refused, build_optimizer stepped the bf16 weights themselves) and holds
    what was priced: Adam's state fp32 on fp32 masters of the trained weights, the weights
    bf16 and each its master rounded down, the masters stepped as torch's Adam steps fp32
    copies of the weights by hand."""
    import autoembed

    embedding = {"precision": "bf16_master", "table_optimizer": "adam", "lr": 0.01}
    ids = torch.randint(0, VOCAB, (16, 4), generator=torch.Generator().manual_seed(0))
    held = {}

    def train(model, params, report):
        model.to(torch.bfloat16)
        opt = autoembed.build_optimizer(model, params)
        for step in range(1, 4):
            loss = nn.functional.cross_entropy(model(ids).float(), ids[:, 0] % 2)
            opt.zero_grad()
            loss.backward()
            opt.step()
            report(step=step, samples=16 * step, quality=0.5)
        held.update(model=model, opt=opt)
        return 0.5

    torch.manual_seed(1)
    reference = Bag().to(torch.bfloat16)  # the same steps written out
    fp32 = [w.detach().float().requires_grad_() for w in reference.parameters()]
    by_hand = torch.optim.Adam(fp32, lr=0.01, eps=1e-8, foreach=True)
    for _ in range(3):
        reference.zero_grad()
        nn.functional.cross_entropy(reference(ids).float(), ids[:, 0] % 2).backward()
        for w, m in zip(reference.parameters(), fp32, strict=True):
            m.grad = w.grad.float()
        by_hand.step()
        with torch.no_grad():
            for w, m in zip(reference.parameters(), fp32, strict=True):
                w.copy_(m)

    def build(params):
        torch.manual_seed(1)
        return Bag()

    r = run_user_trial(UserCode(build, lambda p: None, train), {"embedding": embedding},
                       EmbeddingConfig(**embedding), Report(), as_written=True,
                       priced_inputs=ids_of(16, 4))
    assert r.status == "complete", r.error
    model, opt = held["model"], held["opt"]
    masters = [p for o in opt for g in o.param_groups for p in g["params"]]
    state = [t for o in opt for s in o.state.values() for k, t in s.items() if k != "step"]
    numel = VOCAB * DIM + DIM * 2 + 2  # 178 trained weights
    assert {t.dtype for t in [*masters, *state]} == {torch.float32}
    assert sum(t.numel() for t in masters) == numel
    assert sum(t.numel() for t in state) == 2 * numel  # Adam: exp_avg, exp_avg_sq
    for w, m, want in zip(model.parameters(), masters, fp32, strict=True):
        assert w.dtype == torch.bfloat16 and torch.equal(w, m.to(torch.bfloat16))
        torch.testing.assert_close(m, want.detach(), rtol=0, atol=1e-6)
