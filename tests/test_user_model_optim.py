"""`autoembed.build_optimizer(model, config)` and `autoembed.autocast` on a user's own model:
the built-in trainer's functions, grown to take any nn.Module with embedding tables."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import autoembed
from autoembed.config import EmbeddingConfig, TableConfig, optimizer_alias
from autoembed.errors import ConfigError
from autoembed.models.optim import RowWiseAdagrad

V, D = 500, 8


class TwoTables(nn.Module):
    def __init__(self, sparse: bool = False) -> None:
        super().__init__()
        self.users = nn.Embedding(V, D, sparse=sparse)
        self.items = nn.EmbeddingBag(V, D, mode="sum")
        self.head = nn.Linear(2 * D, 1)

    def forward(self, u: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
        x = torch.cat([self.users(u), self.items(i)], dim=1)
        return self.head(x).square().mean()


def _example() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randint(0, V, (16,)), torch.randint(0, V, (16, 3))


def _params(opt: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [p for g in opt.param_groups for p in g["params"]]


def test_tables_take_the_table_optimizer_the_rest_the_dense_one() -> None:
    m = TwoTables()
    opts = autoembed.build_optimizer(m, EmbeddingConfig(**optimizer_alias("rowwise_adagrad")))
    assert len(opts.tables) == 1 and isinstance(opts.table, RowWiseAdagrad)
    assert [id(p) for p in _params(opts.table)] == [id(m.users.weight), id(m.items.weight)]
    assert isinstance(opts.dense, torch.optim.Adagrad)
    assert [id(p) for p in _params(opts.dense)] == [id(m.head.weight), id(m.head.bias)]
    assert opts.dense.defaults["foreach"] is True  # the implementation CUDA picks, pinned


def test_a_config_table_named_by_module_path_sets_its_own_optimizer() -> None:
    m = TwoTables()
    cfg = EmbeddingConfig(table_optimizer="adam", tables=(
        TableConfig("items", V, dim=D, table_optimizer="sgd"),))
    opts = autoembed.build_optimizer(m, cfg)
    by_type = {type(o).__name__: [id(p) for p in _params(o)] for o in opts.tables}
    assert by_type == {"Adam": [id(m.users.weight)], "SGD": [id(m.items.weight)]}


def test_sparse_tables_need_a_sparse_optimizer_and_then_train() -> None:
    with pytest.raises(ConfigError) as info:
        autoembed.build_optimizer(TwoTables(sparse=True), EmbeddingConfig(table_optimizer="adam"))
    assert "'users'" in str(info.value) and "sparse" in str(info.value)
    torch.manual_seed(0)
    m = TwoTables(sparse=True)
    opts = autoembed.build_optimizer(m, EmbeddingConfig(**optimizer_alias("rowwise_adagrad")))
    before = m.users.weight.detach().clone()
    u, i = _example()
    m(u, i).backward()
    assert m.users.weight.grad is not None and m.users.weight.grad.is_sparse
    opts.step()
    changed = (m.users.weight != before).any(dim=1).nonzero().flatten()
    assert set(changed.tolist()) == set(u.tolist())  # only the rows looked up move


def test_a_frozen_sparse_table_takes_any_optimizer() -> None:
    """A frozen table gets no gradient, sparse=True or not (torch), so the tables' Adam
    never steps it: build_optimizer and estimate_model take it (before: refused as a sparse
    table Adam cannot step), and the trained table steps."""
    m = TwoTables()
    m.items = nn.EmbeddingBag(V, D, mode="sum", sparse=True)
    m.items.weight.requires_grad_(False)
    opts = autoembed.build_optimizer(m, EmbeddingConfig(**optimizer_alias("adam")))
    assert all(p is not m.items.weight for o in opts.all for g in o.param_groups
               for p in g["params"])
    u, i = _example()
    m(u, i).backward()
    assert m.items.weight.grad is None and m.users.weight.grad is not None
    before = m.users.weight.detach().clone()
    opts.step()
    assert not torch.equal(m.users.weight, before)
    autoembed.estimate_model(m, (u, i), optimizer="adam")


def test_build_optimizer_takes_a_config_dict_and_refuses_other_values_in_one_line() -> None:
    """A dict of config keys builds what its EmbeddingConfig builds (tables under Adagrad at
    lr 0.1, the rest under the config's default dense_optimizer, Adam); anything else is
    one ConfigError line (before: an AttributeError traceback, 'dict' object has no
    attribute 'is_resolved')."""
    m = TwoTables()
    opts = autoembed.build_optimizer(m, {"table_optimizer": "adagrad", "lr": 0.1})
    assert [type(o) for o in opts.all] == [torch.optim.Adagrad, torch.optim.Adam]
    assert opts.tables[0].param_groups[0]["lr"] == 0.1
    with pytest.raises(ConfigError, match=r"^config = int: give an EmbeddingConfig"):
        autoembed.build_optimizer(m, 3)  # type: ignore[arg-type]


def test_bf16_master_optimises_the_fp32_masters() -> None:
    from autoembed.models.device_precision import MasterWeights
    from autoembed.models.user_step import cast_floating

    m = TwoTables()
    cast_floating(m, torch.bfloat16)
    masters = MasterWeights.create(m)
    opts = autoembed.build_optimizer(m, EmbeddingConfig(precision="bf16_master"),
                                     masters=masters.masters)
    got = {id(p) for o in opts.all for p in _params(o)}
    assert got == {id(t) for t in masters.masters.values()}
    assert all(t.dtype == torch.float32 for t in masters.masters.values())


def test_bf16_master_without_masters_makes_them_and_carries_them_in_its_state() -> None:
    """Given no masters at bf16_master, build_optimizer makes fp32 ones and steps them:
    zero_grad clears the model's half gradients (the loop's backward fills those), a state
    saved and loaded restores the masters (not the bf16 weights cast up), and a state
    without masters loads them from the weights (before: no masters were made)."""
    torch.manual_seed(0)
    m = TwoTables().to(torch.bfloat16)
    cfg = EmbeddingConfig(precision="bf16_master", **optimizer_alias("adam"))
    opts = autoembed.build_optimizer(m, cfg)
    u, i = _example()
    m(u, i).float().backward()
    opts.zero_grad()
    assert all(p.grad is None for p in m.parameters())
    m(u, i).float().backward()
    opts.step()
    saved = opts.state_dict()
    masters = {n: t.clone() for n, t in saved["masters"].items()}
    assert set(masters) == {n for n, _ in m.named_parameters()}
    assert any(not torch.equal(t, t.to(torch.bfloat16).float()) for t in masters.values())
    again = autoembed.build_optimizer(m, cfg)
    again.load_state_dict(saved)
    for n, t in again.state_dict()["masters"].items():
        assert torch.equal(t, masters[n])
    again.load_state_dict({k: v for k, v in saved.items() if k != "masters"})
    for n, p in m.named_parameters():
        assert torch.equal(again.state_dict()["masters"][n], p.detach().float())


def test_autocast_is_the_trainers_on_a_user_model() -> None:
    m = TwoTables()
    u, i = _example()
    with autoembed.autocast(EmbeddingConfig(precision="amp_bf16"), "cpu"):
        h = F.linear(torch.cat([m.users(u), m.items(i)], 1), m.head.weight, m.head.bias)
    assert h.dtype == torch.bfloat16
    with autoembed.autocast(EmbeddingConfig(precision="fp32"), "cpu"):
        assert m.head(torch.ones(1, 2 * D)).dtype == torch.float32


def test_only_tables_training_still_gives_the_optimizers_type() -> None:
    """A model whose only trainable parameters are its tables (here: a frozen head) gets the
    `Optimizers` a built-in model gets (before: a bare tuple), without a dense optimizer;
    its step trains the tables, its state round-trips."""
    from autoembed.models.optim import Optimizers

    torch.manual_seed(0)
    m = TwoTables()
    m.head.requires_grad_(False)
    cfg = EmbeddingConfig(**optimizer_alias("adam"))
    opts = autoembed.build_optimizer(m, cfg)
    assert isinstance(opts, Optimizers) and opts.dense is None
    assert [type(o) for o in opts.all] == [torch.optim.Adam] == [type(o) for o in opts]
    before = m.users.weight.detach().clone()
    u, i = _example()
    m(u, i).backward()
    opts.step()
    assert not torch.equal(m.users.weight, before)
    again = autoembed.build_optimizer(m, cfg)
    again.load_state_dict(opts.state_dict())
    got, want = again.table.state[m.users.weight], opts.table.state[m.users.weight]
    assert torch.equal(got["exp_avg_sq"], want["exp_avg_sq"])


def test_warmup_steps_ramp_a_user_models_learning_rates() -> None:
    """`warmup_steps` ramps every optimizer of a user's model as the built-in trainer's:
    optimizer step k (from 0) runs at lr * min(1, (k + 1) / warmup_steps) (by hand), the
    tables at `lr`, the rest at `dense_lr` (before: the user path ignored it)."""
    m = TwoTables()
    cfg = EmbeddingConfig(lr=0.1, dense_lr=0.02, warmup_steps=4, **optimizer_alias("adam"))
    opts = autoembed.build_optimizer(m, cfg)
    u, i = _example()
    seen = []
    for _ in range(6):
        assert opts.dense is not None
        seen += [opts.table.param_groups[0]["lr"], opts.dense.param_groups[0]["lr"]]
        m(u, i).backward()
        opts.step()
        opts.zero_grad()
    ramp = [min(1.0, (k + 1) / 4) for k in range(6)]
    assert seen == pytest.approx([lr * r for r in ramp for lr in (0.1, 0.02)])
