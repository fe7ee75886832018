"""Pricing with labels (issue 42): `autoembed.Example(args=, kwargs=, targets=)` gives the
forward its inputs and the loss its targets; the one factory shape (`build()` or
`build(params)`, read from the signature) for `estimate --model` and a search."""

from __future__ import annotations

import textwrap

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import autoembed
from autoembed.errors import ConfigError
from autoembed.models.user_step import UserStep

USERS, ITEMS, DIM, BATCH = 2000, 500, 16, 64


class DotModel(nn.Module):
    """forward(users, items) -> logits: the labels are the loop's, not the model's."""

    def __init__(self) -> None:
        super().__init__()
        self.user = nn.Embedding(USERS, DIM)
        self.item = nn.Embedding(ITEMS, DIM)

    def forward(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        return (self.user(users) * self.item(items)).sum(-1)


class WorkaroundModel(DotModel):
    """The old workaround: the labels ride in the forward's **targets, unused."""

    def forward(self, users: torch.Tensor, items: torch.Tensor,  # type: ignore[override]
                **targets: torch.Tensor) -> torch.Tensor:
        del targets
        return super().forward(users, items)


def _batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return (torch.randint(0, USERS, (BATCH,), generator=g),
            torch.randint(0, ITEMS, (BATCH,), generator=g),
            torch.randint(0, 2, (BATCH,), generator=g).float())


def blocks(nbytes: int) -> int:
    """A tensor's bytes as the caching allocator holds them (512-byte blocks)."""
    return -(-nbytes // 512) * 512


def bce(output: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.binary_cross_entropy_with_logits(output, labels)


def test_example_with_targets_prices_as_the_targets_workaround() -> None:
    """The same step, priced in the new form and in the old **targets form: same bytes."""
    users, items, labels = _batch()
    new = autoembed.estimate_model(DotModel, autoembed.Example(args=(users, items),
                                                               targets=labels),
                                   loss=bce, optimizer="adam")
    old = autoembed.estimate_model(
        WorkaroundModel, {"users": users, "items": items, "clicked": labels},
        loss=lambda out, ex: bce(out, ex["clicked"]), optimizer="adam")
    assert new.allocated_peak == old.allocated_peak
    assert new.device_total == old.device_total
    tables = blocks(4 * DIM * USERS) + blocks(4 * DIM * ITEMS)
    # Adam: m and v per table (each table's `step` scalar lives on the CPU)
    assert new.parameters == tables and new.optimizer_state == 2 * tables


def test_example_kwargs_reach_the_forward_and_targets_the_loss() -> None:
    users, items, labels = _batch()
    seen: list[object] = []

    def loss(output: torch.Tensor, targets: object) -> torch.Tensor:
        seen.append(targets)
        return bce(output, targets["y"])  # type: ignore[index]

    step = UserStep.build(DotModel(), optimizer="sgd")
    before = step.model.user.weight.detach().clone()
    step.step(autoembed.Example(args=(users,), kwargs={"items": items},
                                targets={"y": labels}), loss)
    assert len(seen) == 1 and seen[0]["y"] is labels  # type: ignore[index]
    assert not torch.equal(before, step.model.user.weight)  # the step trained


def test_a_plain_tuple_with_labels_is_still_the_forwards_arguments() -> None:
    """The old forms keep their meaning: a tuple is model(*x), so labels in it reach the
    forward (one line naming the module when it does not take them)."""
    with pytest.raises(ConfigError, match="the example does not run through the model"):
        autoembed.estimate_model(DotModel, _batch(), loss=bce)


SPACE = """
embedding:
  precision: fp32
  table_optimizer: sgd
user:
  dim: {choices: [8, 32]}
  batch: {type: int, low: 16, high: 64, log: true, multiple_of: 16}
"""

MODULE = """
import torch
from torch import nn

import autoembed

SEEN = []


class Dot(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.user = nn.Embedding(1000, dim)
        self.item = nn.Embedding(300, dim)

    def forward(self, users, items):
        return (self.user(users) * self.item(items)).sum(-1)


def build(params):
    SEEN.append(dict(params))
    return Dot(params["dim"])


def example(params):
    b = params["batch"]
    return autoembed.Example(args=(torch.zeros(b, dtype=torch.long),
                                   torch.zeros(b, dtype=torch.long)), targets=torch.zeros(b))


def bce(output, labels):
    return nn.functional.binary_cross_entropy_with_logits(output, labels)
"""


def test_estimate_cli_gives_build_params_the_spaces_reference_values(tmp_path, monkeypatch
                                                                     ) -> None:
    """`estimate --model build --space FILE`: the search's `build(params)` priced with the
    space's reference values (first choice; the range's geometric middle on its grid) and
    its optimizer (SGD: no state)."""
    from autoembed.pricing.user_model_cli import estimate_for_cli

    (tmp_path / "own_dot.py").write_text(textwrap.dedent(MODULE))
    (tmp_path / "space.yaml").write_text(SPACE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    est = estimate_for_cli("own_dot.py:build", "own_dot.py:example", None, optimizer=None,
                           precision=None, budget=None, reserve=0, refused={},
                           loss="own_dot.py:bce", space=tmp_path / "space.yaml")
    import own_dot  # type: ignore[import-not-found]

    # batch: units 1..4 of 16, log grid 1, 1.26.., 1.59.., 2, ..., 4 -> its middle is 2 (32)
    assert own_dot.SEEN[-1]["dim"] == 8 and own_dot.SEEN[-1]["batch"] == 32
    assert est.parameters == blocks(4 * 8 * 1000) + blocks(4 * 8 * 300)
    assert est.optimizer_state == 0  # sgd, as the space says (not the CLI's default adam)
    with pytest.raises(ConfigError, match="takes params, as in a search; give --space"):
        estimate_for_cli("own_dot.py:build", "own_dot.py:example", None, optimizer=None,
                         precision=None, budget=None, reserve=0, refused={})


def zero_build() -> nn.Module:
    return DotModel()


def test_zero_argument_build_and_example_serve_a_search() -> None:
    """A search takes `build()` / `example()` too: called without params, recorded under
    their own names, and the exported module calls `build()`."""
    from autoembed.user.module_text import python_module
    from autoembed.user.run import UserCode

    code = UserCode.resolve(zero_build, _batch, lambda m, p, r: 0.5)
    assert isinstance(code.build({"dim": 8}), DotModel)
    assert len(code.example({})) == 3
    ref = code.records()["model"]
    assert ref.spec == f"{__name__}:zero_build" and ref.missing is None
    assert ref.takes_params is False and ref.to_dict()["takes_params"] is False
    text = python_module(ref, {}, "best.yaml", study="s", trial=0)
    assert "model = zero_build()\n" in text
    one = UserCode.resolve(one_build, _batch, zero_build).records()["model"]
    assert one.takes_params is True and "takes_params" not in one.to_dict()


def one_build(params: dict) -> nn.Module:
    del params
    return DotModel()
