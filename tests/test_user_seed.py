"""A user trial is seeded: its build draws the same initial weights in every run of it and
in the exported module, whatever the build seeds itself (here: nothing)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
import torch

import autoembed
from autoembed.pipeline.user_workload import UserWorkload
from autoembed.space import parse_space
from autoembed.user.functions import record_function
from autoembed.user.module_text import python_module
from autoembed.user.report import Report
from autoembed.user.run import UserCode, run_user_trial
from autoembed.user.space import params_for, user_record

SOURCE = '''
import torch
from torch import nn


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(30, 4)
        self.head = nn.Linear(4, 1)

    def forward(self, ids):
        return self.head(self.emb(ids)).mean()


def build(params):  # no seed of its own
    return Tiny()


def example(params):
    return torch.zeros(2, 3, dtype=torch.long)


SEEN = []


def train(model, params, report):
    SEEN.append({k: v.detach().clone() for k, v in model.state_dict().items()})
    return 0.5
'''

SPACE = parse_space({"embedding": {"precision": "fp32"},
                     "user": {"lr": {"choices": [0.1, 0.2]}}}, "s.yaml", kind="user")


@pytest.fixture
def user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    (tmp_path / "seedless_user.py").write_text(SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("seedless_user", None)
    mod = importlib.import_module("seedless_user")
    code = UserCode.resolve(mod.build, mod.example, mod.train)
    return mod, code, UserWorkload(SPACE, code, code.records(), seed=7)


def _trial(code: UserCode, work: UserWorkload, lr: float) -> tuple[dict, object]:
    """The initial weights `train` was handed in a trial of lr `lr`, and its priced config."""
    config = work.price({"user.lr": lr}).config
    params = params_for(SPACE, {"user.lr": lr})
    mod = sys.modules["seedless_user"]
    torch.rand(5)  # whatever ran before the trial drew
    result = run_user_trial(code, params, config, Report())
    assert result.status == "complete", result.error
    return mod.SEEN.pop(), config


def _equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_one_trial_builds_the_same_weights_and_two_trials_differ(user) -> None:
    mod, code, work = user
    first, config = _trial(code, work, 0.1)
    again, _ = _trial(code, work, 0.1)
    other, _ = _trial(code, work, 0.2)
    assert _equal(first, again)
    assert not _equal(first, other)
    torch.manual_seed(config.seed)  # torch run directly: the build from the trial's seed
    direct = autoembed.apply(mod.build({}), config)
    assert _equal(first, {k: v.detach() for k, v in direct.state_dict().items()})


def test_the_exported_module_builds_the_trials_initial_weights(user, tmp_path: Path) -> None:
    mod, code, work = user
    weights, config = _trial(code, work, 0.2)
    record = user_record(SPACE, config, {"user.lr": 0.2})
    assert record["config"]["seed"] == config.seed  # best.yaml's and export's record
    autoembed.save_config(config, tmp_path / "best.yaml")
    out = tmp_path / "best_model.py"
    out.write_text(python_module(record_function(mod.build, "model"), record["params"],
                                 "best.yaml", study="s", trial=1,
                                 seed=record["config"]["seed"]))
    spec = importlib.util.spec_from_file_location("seeded_export", out)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.rand(5)
    rebuilt = module.build_model()
    assert _equal(weights, {k: v.detach() for k, v in rebuilt.state_dict().items()})
