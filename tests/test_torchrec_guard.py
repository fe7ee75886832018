"""A sharded TorchRec trial's loop trains what was priced (`user.rank_guard`): a rank whose
loop trains its dense part with another optimizer, under autocast, or on a batch larger than
the priced example ends `failed` in one line, on every rank; the same loop as priced trains.
One rank of DMP over gloo in this process (world size 1) for the checks, two spawned ranks
for the ending on every rank. Skips without TorchRec."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from autoembed.torchrec.lib import available
from autoembed.torchrec.settings import INSTALL

pytestmark = pytest.mark.skipif(not available(), reason=f"TorchRec is not installed ({INSTALL})")

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))
# table t fused (sgd in the backward); u data_parallel: replicated, trained by the dense
# optimizer, priced with its state
TABLES = [{"name": "ebc.t", "optimizer": "sgd"},
          {"name": "ebc.u", "sharding_type": "data_parallel"}]
U_WEIGHTS = 20 * 4  # table u: 20 rows of dim 4


@pytest.fixture(scope="module")
def dmp() -> Iterator[Any]:
    """`_torchrec_code.small_build` under DMP as a rank builds it (`sharded_runner.worker`),
    in a world-size-1 gloo group of this process."""
    import _torchrec_code as user
    import torch
    import torch.distributed as dist
    from torchrec.distributed import DistributedModelParallel

    from autoembed.pipeline.sharded_runner import _free_port
    from autoembed.torchrec.model import apply
    from autoembed.torchrec.planner import plan_model, sharders
    from autoembed.torchrec.settings import RankTopology

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0,
                            world_size=1)
    try:
        model = apply(user.small_build({}), TABLES, lr=0.01, compute_device="cpu")
        topo = RankTopology(world_size=1, batch_size=4, compute_device="cpu")
        plan, _ = plan_model(model, topo, TABLES, dist.GroupMember.WORLD)
        yield DistributedModelParallel(model, device=torch.device("cpu"), plan=plan,
                                       sharders=sharders())
    finally:
        dist.destroy_process_group()


def _priced(samples: int = 4) -> Any:
    """What a sharded trial's payload carries of its example (`Sharded.price`)."""
    import _torchrec_code as user

    from autoembed.user.guard import priced_inputs
    from autoembed.user.rank_guard import jagged_inputs

    return priced_inputs(user.small_example({"batch_size": samples}), jagged_inputs)


def _loop(dmp: Any, params: dict[str, Any], priced: Any = None,
          dense_optimizer: str = "adagrad") -> dict[str, Any]:
    """The rank's run of `small_train` (`sharded_runner._user_loop`) on the payload's
    `dense_optimizer` and `priced_inputs`."""
    import _torchrec_code as user

    from autoembed.pipeline.sharded_runner import _user_loop

    dmp.zero_grad(set_to_none=True)
    payload = {"dense_optimizer": dense_optimizer, "priced_inputs": priced}
    return _user_loop(user.small_train, dmp, {"steps": 2, **params}, payload, None)


def _failed(got: dict[str, Any], *says: str) -> None:
    assert got["status"] == "failed", got
    assert "\n" not in got["message"] and all(s in got["message"] for s in says), got["message"]


def test_a_rank_training_adam_where_adagrad_was_priced_fails_in_one_line(dmp: Any) -> None:
    """The dense part (and the data_parallel table u with it) priced with Adagrad's one value
    per weight; the loop's Adam keeps two (before: trained, its peak reported as priced).
    Refused at the report after its first step, or where it neither reports nor steps
    again, when train returns."""
    for params in ({"optimizer": "Adam"}, {"optimizer": "Adam", "steps": 1, "reports": False}):
        _failed(_loop(dmp, params),
                "rank 0: dense parameter 'ebc.embedding_bags.u.weight': the loop's Adam keeps "
                f"{2 * U_WEIGHTS} values of state for its {U_WEIGHTS} weights",
                f"dense_optimizer 'adagrad' ({U_WEIGHTS}); set the space's embedding "
                "dense_optimizer to what the loop does")
    assert _loop(dmp, {"optimizer": "Adagrad"})["status"] == "complete"
    assert _loop(dmp, {"optimizer": "Adam"}, dense_optimizer="adam")["status"] == "complete"


def test_a_rank_training_under_autocast_fails_in_one_line(dmp: Any) -> None:
    """The dense part is priced in fp32 as built, no autocast (before: a bf16-autocast loop
    trained)."""
    _failed(_loop(dmp, {"autocast": True}),
            "rank 0: the loop trains dense parameter 'ebc.embedding_bags.u.weight' in float32 "
            "under bfloat16 autocast, but the trial was priced at precision 'fp32' (float32 "
            "without autocast); a TorchRec trial prices its dense part as built")
    assert _loop(dmp, {"autocast": False})["status"] == "complete"


def test_a_rank_loop_zeroing_after_its_forward_fails_in_one_line(dmp: Any) -> None:
    """The dense part is traced with its gradients freed before the forward (`estimate_model`):
    a loop zeroing them after its forward holds the last step's through it, refused at its
    second forward (before: trained); zeroed before the forward, it trains."""
    got = _loop(dmp, {"zero_after": True, "steps": 3})
    _failed(got, "rank 0: the loop's gradients from the last step are still allocated at "
            "the next training forward", "call opt.zero_grad() (set_to_none, torch's "
            "default) before the forward")
    assert [e["step"] for e in got["curve"]] == [1]
    assert _loop(dmp, {"steps": 3})["status"] == "complete"


def _dense(dmp: Any) -> list[Any]:
    """The weights the rank's price holds dense: those no fused optimizer owns."""
    return [p for p in dmp.parameters()
            if p.requires_grad and not hasattr(p, "_in_backward_optimizers")]


def _forward_train(model: Any, params: dict[str, Any], report: Any) -> float:
    """One Adagrad step on a loss from `model.forward(batch)`, which runs none of the
    DMP's hooks (neither the guard's nor the agreement's)."""
    import _torchrec_code as user
    import torch

    opt = torch.optim.Adagrad(_dense(model), lr=0.01)
    model.forward(user.small_batch(4)).backward()
    opt.step()
    return 0.5


def _cast_train(model: Any, params: dict[str, Any], report: Any) -> float:
    """One Adagrad step as priced; then the dense part cast to bf16 (as `model.to` casts,
    restored after) and one more step (no gradients: nothing moves)."""
    import _torchrec_code as user
    import torch

    dense = _dense(model)
    opt = torch.optim.Adagrad(dense, lr=0.01)
    model(user.small_batch(4)).backward()
    opt.step()
    built = [p.data for p in dense]
    try:
        for p in dense:
            p.data = p.data.to(torch.bfloat16)
        opt.zero_grad(set_to_none=True)
        opt.step()
    finally:
        for p, data in zip(dense, built, strict=True):
            p.data = data
    return 0.5


def test_a_rank_loop_calling_the_dmps_forward_fails_in_one_line(dmp: Any) -> None:
    """`dmp.forward(batch)` skips the DMP's hooks, so the batch and precision go unread:
    the step after it is refused (`user.guard`'s unseen-forward check, which a rank's price
    has dense weights alone for; before: trained unchecked)."""
    from autoembed.pipeline.sharded_runner import _user_loop

    dmp.zero_grad(set_to_none=True)
    _failed(_user_loop(_forward_train, dmp, {}, {"dense_optimizer": "adagrad"}, None),
            "rank 0: the loop's Adagrad steps dense parameter 'ebc.embedding_bags.u.weight', "
            "which has a gradient, but no call of the model was seen", "call model(x)")


def test_a_rank_loop_casting_its_dense_part_after_a_step_fails_in_one_line(dmp: Any) -> None:
    """The dense part priced in fp32 as built: a cast to bf16 after the first step is read
    at the next (the guard's one weight's dtype a step; before: only the first training
    forward's dtypes were judged)."""
    import torch

    from autoembed.pipeline.sharded_runner import _user_loop

    dmp.zero_grad(set_to_none=True)
    _failed(_user_loop(_cast_train, dmp, {}, {"dense_optimizer": "adagrad"}, None),
            "rank 0: the loop trains dense parameter 'ebc.embedding_bags.u.weight' in "
            "bfloat16 without autocast, but the trial was priced at precision 'fp32' "
            "(float32 without autocast); a TorchRec trial prices its dense part as built")
    assert all(p.dtype == torch.float32 for p in _dense(dmp))  # restored for the others


@pytest.mark.parametrize(("params", "says"), [
    ({"ids": 2}, "gives the model args[0].sparse_features (samples, ids) of shape "
                 f"[4, {2 * 2 * 4}], larger than the example(params) the trial was priced on "
                 f"gives ([4, {2 * 4}])"),
    ({"batch_size": 8}, "gives the model args[0].dense_features of shape [8, 3], larger than "
                        "the example(params) the trial was priced on gives ([4, 3])"),
])
def test_a_rank_training_a_batch_larger_than_priced_fails_in_one_line(
        dmp: Any, params: dict[str, Any], says: str) -> None:
    """Priced on 4 samples of one id per feature (2 features): twice the ids per sample
    (the same samples, the same dense features) or twice the samples is refused at the
    first such batch (before: trained); fewer samples, or the priced batch, train."""
    _failed(_loop(dmp, params, _priced()), "rank 0: the loop's training batch 1 " + says,
            "have example(params) return the largest batch train builds")
    assert _loop(dmp, {"batch_size": 2}, _priced())["status"] == "complete"
    assert _loop(dmp, {}, _priced())["status"] == "complete"


def test_a_searchs_trial_payload_holds_each_rank_to_its_example(dmp: Any) -> None:
    """A TorchRec search's priced proposal carries the example's inputs and the dense
    optimizer to every rank (`_rank_payload`): the rank's loop on twice the ids per sample
    fails (before: the payload carried no example, nothing was checked); on the priced
    batch it trains."""
    import _torchrec_code as user

    from autoembed.pipeline.sharded_runner import _user_loop, worker
    from autoembed.pipeline.sharded_workload import Sharded, _rank_payload
    from autoembed.pipeline.user_workload import UserWorkload
    from autoembed.space import parse_space
    from autoembed.user.run import UserCode

    space = parse_space({"topology": {"world_size": 1, "compute_device": "cpu"},
                         "embedding": {"dense_optimizer": "adagrad",
                                       "tables": {"ebc.t": {"optimizer": {
                                           "choices": ["sgd"]}}}},
                         "user": {"batch_size": 4, "steps": 2, "ids": 2}}, "s.yaml",
                        kind="user")
    code = UserCode.resolve("_torchrec_code:small_build", "_torchrec_code:small_example",
                            "_torchrec_code:small_train")
    work = UserWorkload(space, code, code.records(),
                        sharded=Sharded.of(space, 10**9, "cpu", code.records()), seed=0)
    values = {"embedding.tables.ebc.t.optimizer": "sgd"}
    ranks = _rank_payload(work.price(values).launch(0).payload, code.records())
    assert ranks["dense_optimizer"] == "adagrad" and ranks["priced_inputs"] == _priced()
    _failed(worker(0, ranks), "rank 0: the loop's training batch 1 gives the model "
            "args[0].sparse_features (samples, ids) of shape [4, 16]")
    dmp.zero_grad(set_to_none=True)
    ok = _user_loop(user.small_train, dmp, {**ranks["params"], "ids": 1}, ranks, None)
    assert ok["status"] == "complete", ok


def test_the_ranks_agree_before_forwards_1_2_4_to_64_then_every_64th() -> None:
    """The schedule of agreements before forwards (`rank_guard.agrees_before`): before,
    every forward with gradients on paid one all-reduce."""
    from autoembed.user.rank_guard import agrees_before

    want = {1, 2, 4, 8, 16, 32, *range(64, 1001, 64)}
    assert {n for n in range(1, 1001) if agrees_before(n)} == want


def _growing_train(model: Any, params: dict[str, Any], report: Any) -> float:
    """`params["steps"]` Adagrad steps, none reported, each step's number appended to
    `params["record"]` before its forward; twice the priced samples from step
    `params["grow_at"]` on."""
    import _torchrec_code as user
    import torch

    opt = torch.optim.Adagrad(_dense(model), lr=0.01)
    for step in range(1, params["steps"] + 1):
        params["record"].append(step)
        model(user.small_batch(8 if step >= params["grow_at"] else 4, seed=step)).backward()
        opt.step()
        opt.zero_grad()
    return 0.5


@pytest.mark.parametrize(("grow_at", "agreed_at"), [(3, 4), (5, 8)])
def test_a_refusal_at_a_later_forward_ends_the_loop_at_the_next_agreement(
        dmp: Any, grow_at: int, agreed_at: int) -> None:
    """A batch over the priced one at forward 3 (5) of a loop that never reports is noted
    there and ends the loop before forward 4 (8), the next agreed before (before: before
    the same forward, each forward paying one all-reduce)."""
    from autoembed.pipeline.sharded_runner import _user_loop

    dmp.zero_grad(set_to_none=True)
    params: dict[str, Any] = {"steps": 10, "grow_at": grow_at, "record": []}
    got = _user_loop(_growing_train, dmp, params,
                     {"dense_optimizer": "adagrad", "priced_inputs": _priced()}, None)
    _failed(got, f"rank 0: the loop's training batch {grow_at} gives the model "
            "args[0].dense_features of shape [8, 3]")
    assert params["record"] == list(range(1, agreed_at + 1))


@pytest.mark.slow
def test_a_refusal_on_one_rank_ends_the_trial_on_every_rank() -> None:
    """Two spawned ranks; rank 1 alone trains on twice the priced samples from its second
    batch. Both ranks end `failed` with rank 1's line at that batch (before: both trained
    to the end); neither waits for the other (a hang would be the payload's time limit)."""
    from autoembed.pipeline.sharded_runner import run_sharded

    got = run_sharded({
        "build": "_torchrec_code:small_build", "train": "_torchrec_code:small_train",
        "path": str(TESTS), "tables": TABLES, "dense_optimizer": "adagrad",
        "params": {"batch_size": 4, "steps": 4, "grow_at": 2, "grow_rank": 1},
        "priced_inputs": _priced(), "timeout_s": 240,
        "topology": {"world_size": 2, "batch_size": 4, "compute_device": "cpu"}})
    line = ("rank 1: the loop's training batch 2 gives the model args[0].dense_features of "
            "shape [8, 3], larger than the example(params) the trial was priced on gives "
            "([4, 3])")
    assert [(r["rank"], r["status"]) for r in got] == [(0, "failed"), (1, "failed")], got
    assert all(r["message"].startswith(line) for r in got), got
    assert [len(r["curve"]) for r in got] == [1, 1]  # each rank's report of batch 1
