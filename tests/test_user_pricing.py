"""Pricing a proposal on the user's own model, before anything trains."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch import nn

import autoembed
from autoembed.errors import ConfigError
from autoembed.pipeline.user_workload import UserWorkload, model_tables
from autoembed.space import parse_space
from autoembed.user.run import UserCode
from autoembed.user.space import params_for

SPACE = parse_space({"embedding": {"precision": "fp32", "table_optimizer": "adam"},
                     "user": {"dim": {"choices": [8, 512]}, "batch_size": 16}}, "s.yaml",
                    kind="user")


class Model(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(50_000, dim)
        self.head = nn.Linear(dim, 3)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.tok(ids).mean(1)).logsumexp(1).mean()


def build(params):
    return Model(params["dim"])


def example(params):
    return torch.zeros(params["batch_size"], 12, dtype=torch.long)


def block(n: int) -> int:
    return -(-n // 512) * 512


def values(dim: int) -> dict:
    return {"user.dim": dim}


def same(model, config):  # this space changes no table: the rewrite is the identity
    return None


def price_proposal(code: UserCode, space, vals: dict, apply=None):
    """The user workload's price of `vals` (the proposal's searched values)."""
    code = replace(code, apply=apply)
    return UserWorkload(space, code, code.records()).price(vals)


def test_the_price_is_estimate_model_of_the_built_model_and_the_budget_binds() -> None:
    code = UserCode(build, example, lambda m, p, r: None)
    small, large = (price_proposal(code, SPACE, values(d), apply=same) for d in (8, 512))
    for d, got in ((8, small), (512, large)):
        want = autoembed.estimate_model(lambda d=d: Model(d), example({"batch_size": 16}),
                                        optimizer="adam", precision="fp32")
        assert got.estimate.device_total == want.device_total
        assert [(t.name, t.vocab_size, t.dim) for t in got.config.tables] == [("tok", 50_000, d)]
    # 50k x 512 fp32 with Adam: weights, gradient and two moments alone are 409.6 MB, on top
    # of the 512 MiB CUDA context: over 700 MB; at dim 8 the table is 6.4 MB in all
    assert large.estimate.device_total > 512 * 2**20 + 4 * 50_000 * 512 * 4 > 700 * 10**6
    assert small.estimate.device_total < 700 * 10**6
    assert small.estimate.device_total <= 700 * 10**6 < large.estimate.device_total
    assert small.launch(0).payload["priced_inputs"][0]["shape"][0] == 16  # example's batch
    assert small.launch(0).payload["params"] == params_for(SPACE, values(8)) == {
        "dim": 8, "batch_size": 16,
        "embedding": {"precision": "fp32", "table_optimizer": "adam"}}


def test_a_build_that_moves_and_converts_its_model_is_priced_as_it_returns_it() -> None:
    """`build` returning `Model(d).to("cpu", torch.bfloat16)` (a user's `.to(device)`) is
    priced as that bf16 model, its table applied: bf16 rows by hand (before: the search's
    meta probe could not copy out of meta, and the trace could not swap a fake parameter:
    the build was refused at the first proposal)."""
    code = UserCode(lambda p: build(p).to("cpu", torch.bfloat16), example, lambda m, p, r: None)
    got = price_proposal(code, SPACE, values(8))
    table = {t.name: t for t in got.estimate.tables}["tok"]
    assert table.parameters == block(50_000 * 8 * 2)


def test_the_model_is_listed_on_the_meta_device() -> None:
    """Listing tables never allocates them: a 10^9-row table is fine."""
    with torch.device("meta"):
        big = nn.Embedding(10**9, 64)
    assert model_tables(nn.Sequential(big)) == [{"name": "0", "vocab_size": 10**9, "dim": 64}]


@pytest.mark.parametrize("bad_build, says", [
    (lambda p: 1 / 0, "model: <lambda>(params) raised ZeroDivisionError: division by zero"),
    (lambda p: "not a model", "returned str, not an nn.Module"),
    (lambda p: nn.Linear(2, 2), "has no nn.Embedding or nn.EmbeddingBag modules"),
])
def test_user_code_failing_at_pricing_is_one_line(bad_build, says) -> None:
    code = UserCode(bad_build, example, lambda m, p, r: None)
    with pytest.raises(ConfigError) as e:
        price_proposal(code, SPACE, values(8), apply=same)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_an_example_that_raises_is_one_line() -> None:
    def bad_example(params):
        raise KeyError("seq_len")
    code = UserCode(build, bad_example, lambda m, p, r: None)
    with pytest.raises(ConfigError, match=r"example: .*bad_example\(params\) raised KeyError"):
        price_proposal(code, SPACE, values(8), apply=same)


def test_hashing_the_table_prices_the_rewritten_layout() -> None:
    space = parse_space({"embedding": {"tables": {"tok": {"compression": "hash",
                                                          "hash_buckets": 0.01}}},
                         "user": {"dim": {"choices": [512]}, "batch_size": 16}}, "s.yaml",
                        kind="user")
    code = UserCode(build, example, lambda m, p, r: None)
    full = price_proposal(code, SPACE, values(512), apply=same).estimate
    hashed = price_proposal(code, space, {"user.dim": 512}).estimate
    # 1% of the rows: the table's four fp32 copies shrink by 0.99 x 409.6 MB
    assert full.device_total - hashed.device_total >= 0.99 * 4 * 50_000 * 512 * 4 - 2**21


class TwoTables(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.user = nn.Embedding(4000, 16)
        self.item = nn.Embedding(2000, 16)
        self.head = nn.Linear(16, 256)

    def forward(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        return self.head(self.user(users) * self.item(items)).logsumexp(1).mean()


def _two_tables_price(embedding: dict) -> int:
    space = parse_space({"embedding": embedding, "user": {"batch_size": {"choices": [8]}}},
                        "s.yaml", kind="user")
    code = UserCode(lambda p: TwoTables(), lambda p: (torch.zeros(8, dtype=torch.long),) * 2,
                    lambda m, p, r: None)
    return int(price_proposal(code, space, {"user.batch_size": 8}).estimate.optimizer_state)


def test_a_tables_own_optimizer_and_the_dense_optimizer_are_priced() -> None:
    """The proposal is priced with what `build_optimizer(model, config)` makes (the guard
    holds the loop to it): the user table's own Adam (two fp32 moments per weight) and the
    dense Adam were priced as the space-wide SGD (no state)."""
    sgd = {"precision": "fp32", "table_optimizer": "sgd"}
    assert _two_tables_price(sgd) == 0  # SGD keeps no state: the alias prices the head SGD too
    own = _two_tables_price({**sgd, "tables": {"user": {"table_optimizer": "adam"}}})
    moments = 2 * block(4000 * 16 * 4)
    assert own == moments  # Adam's step counter: a host tensor, not priced
    dense = _two_tables_price({**sgd, "dense_optimizer": "adam"})
    head = 2 * (block(256 * 16 * 4) + block(256 * 4))
    assert dense == head
