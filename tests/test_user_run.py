"""One trial of the user's loop: the user's faults become the trial's status, never a crash."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from autoembed.config import EmbeddingConfig
from autoembed.user.report import Report
from autoembed.user.run import UserCode, run_user_trial

CONFIG = EmbeddingConfig()


class Bag(nn.Module):
    def __init__(self, vocab: int, dim: int) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.out = nn.Linear(dim, 2)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.out(self.emb(ids).mean(1))


def build(params):
    torch.manual_seed(0)
    return Bag(20, params["dim"])


def example(params):
    return torch.zeros(params["batch_size"], 4, dtype=torch.long)


def data(n: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 20, (n, 4), generator=g)
    return ids, (ids < 10).sum(1).gt(2).long()  # label: mostly low ids


def accuracy(model, ids, y) -> float:
    with torch.no_grad():
        return float((model(ids).argmax(1) == y).float().mean())


def train(model, params, report):
    ids, y = data(512, 0)
    vids, vy = data(256, 1)
    opt = torch.optim.Adam(model.parameters(), lr=params["lr"])
    bs = params["batch_size"]
    for step in range(1, params["steps"] + 1):
        i = (step * bs) % len(ids)
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(ids[i:i + bs]), y[i:i + bs])
        loss.backward()
        opt.step()
        if step % 20 == 0:
            with report.evaluating():
                q = accuracy(model, vids, vy)
            report(step=step, samples=step * bs, quality=q, loss=loss.item())
    return {"quality": accuracy(model, vids, vy)}


def raises(model, params, report):
    report(step=1, samples=8, quality=0.5)
    return helper_that_fails(params)


def helper_that_fails(params):
    raise ValueError(f"bad batch for dim {params['dim']}")


def nan_loop(model, params, report):
    report(step=1, samples=8, quality=0.5)
    report(step=2, samples=16, quality=math.nan)


def typo_loop(model, params, report):
    report(step=1, samples=8, quality=0.5, los=1.0)


def swallowing_loop(model, params, report):
    for step in range(1, 10):
        try:
            report(step=step, samples=8 * step, quality=0.1 * step)
        except Exception:  # noqa: BLE001 - a loop that catches everything
            continue
    return 0.99


def keep(model, config):  # CONFIG rewrites no table
    return None


PARAMS = {"dim": 8, "lr": 0.05, "batch_size": 32, "steps": 100}


def run(fn, channel=None, metrics=("loss",), **kw):
    code = UserCode(build, example, fn, apply=keep)
    return run_user_trial(code, PARAMS, CONFIG,
                          Report(metrics=metrics, channel=channel), **kw)


def test_a_complete_trial_learns_and_is_measured() -> None:
    r = run(train, target=0.7)
    assert r.status == "complete", r.error
    assert [e.step for e in r.curve] == [20, 40, 60, 80, 100]
    assert r.samples == 100 * 32 and r.steps == 100
    # the returned quality is the objective; a fresh model is near chance (0.5)
    fresh = accuracy(build(PARAMS), *data(256, 1))
    assert r.valid_quality is not None and r.valid_quality > max(0.75, fresh + 0.15)
    assert r.throughput is not None and r.throughput > 0
    assert r.steps_to_target is not None and r.steps_to_target % 20 == 0
    assert r.eval_seconds > 0 and r.train_seconds > r.eval_seconds
    assert r.metrics["loss"] > 0  # the last report's metrics are kept


def test_train_raising_is_failed_with_the_users_traceback() -> None:
    r = run(raises)
    assert r.status == "failed"
    assert r.error is not None
    first, *rest = r.error.splitlines()
    assert first == "ValueError: bad batch for dim 8"
    text = "\n".join(rest)
    assert "in raises" in text and "in helper_that_fails" in text
    assert "return helper_that_fails(params)" in text
    assert "run_user_trial" not in text  # autoembed's own frame is left out


def test_nan_quality_is_diverged() -> None:
    r = run(nan_loop)
    assert r.status == "diverged" and "quality=nan" in r.error
    assert r.valid_quality == 0.5 and len(r.curve) == 1


def test_unknown_metric_is_failed_naming_it() -> None:
    r = run(typo_loop)
    assert r.status == "failed"
    assert "unknown metric 'los'" in r.error and "loss" in r.error


def test_stop_channel_prunes_the_trial_at_the_decision() -> None:
    r = run(train, channel=lambda ev: ev.step < 60)
    assert r.status == "pruned"
    assert [e.step for e in r.curve] == [20, 40, 60]
    assert r.valid_quality == r.curve[-1].quality


def test_a_loop_that_swallows_the_stop_is_still_pruned() -> None:
    r = run(swallowing_loop, channel=lambda ev: ev.step < 3)
    assert r.status == "pruned" and len(r.curve) == 3


def test_build_returning_no_module_fails_the_trial() -> None:
    code = UserCode(lambda p: {"not": "a model"}, example, train)
    r = run_user_trial(code, PARAMS, CONFIG, Report())
    assert r.status == "failed" and "returned dict, not an nn.Module" in r.error


def test_no_quality_at_all_is_a_failed_trial_that_says_so() -> None:
    """A train that never reports and returns None gives the search nothing to rank: failed
    (it was `complete`, on the front and the pick, before)."""
    r = run(lambda m, p, rep: None)
    assert r.status == "failed" and r.valid_quality is None and r.curve == ()
    assert "reported no quality" in (r.error or "") and "\n" not in (r.error or "")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_cuda_peak_is_measured() -> None:
    r = run(train, device="cuda")
    assert r.measured_allocated_peak is not None
