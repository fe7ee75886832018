"""TorchRec models as user models: tables, apply, the unsharded and per-rank estimates, the
sharded runner against real DMP (2 processes over gloo), export, the CLI. Skips without
TorchRec (`AUTOEMBED_TORCHREC=1 bash scripts/setup.sh`, which scripts/test.sh runs)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from autoembed.errors import ConfigError
from autoembed.torchrec.lib import available
from autoembed.torchrec.settings import INSTALL, RankTopology

pytestmark = pytest.mark.skipif(not available(), reason=f"TorchRec is not installed ({INSTALL})")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
COLL = "model.sparse_arch.embedding_bag_collection"


def _ebc(tables: list[tuple[str, int, int]], device: str = "cpu") -> Any:
    from torchrec import EmbeddingBagCollection
    from torchrec.modules.embedding_configs import EmbeddingBagConfig

    return EmbeddingBagCollection(tables=[
        EmbeddingBagConfig(name=n, num_embeddings=r, embedding_dim=d, feature_names=[f"f_{n}"])
        for n, r, d in tables], device=torch.device(device))


def _kjt(keys: list[str], ids: list[list[int]]) -> Any:
    """One id per sample: ids[k][b] is feature k's id of sample b."""
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    return KeyedJaggedTensor.from_lengths_sync(
        keys=keys, values=torch.tensor([i for row in ids for i in row]),
        lengths=torch.ones(sum(len(r) for r in ids), dtype=torch.int64))


class Holder(torch.nn.Module):
    def __init__(self, ebc: Any) -> None:
        super().__init__()
        self.sparse = torch.nn.Module()
        self.sparse.ebc = ebc
        self.head = torch.nn.Linear(12, 1)

    def forward(self, kjt: Any) -> torch.Tensor:
        return self.head(self.sparse.ebc(kjt).values()).square().mean()


def test_tables_are_named_module_path_then_table() -> None:
    import autoembed

    model = Holder(_ebc([("a", 100, 8), ("b", 50, 4)]))
    got = [(t.name, t.vocab_size, t.dim) for t in autoembed.tables(model)]
    assert got == [("sparse.ebc.a", 100, 8), ("sparse.ebc.b", 50, 4)]
    with pytest.raises(ConfigError, match="has no nn.Embedding or nn.EmbeddingBag, and no "
                       "TorchRec EmbeddingBagCollection or EmbeddingCollection"):
        autoembed.tables(torch.nn.Linear(2, 2))


def test_fewer_rows_hash_ids_modulo_the_rows_before_the_collection() -> None:
    import autoembed
    from autoembed.torchrec.model import HashedIds

    torch.manual_seed(0)
    model = Holder(_ebc([("a", 100, 8), ("b", 50, 4)]))
    autoembed.apply(model, [{"name": "sparse.ebc.a", "num_embeddings": 7}])
    assert isinstance(model.sparse.ebc, HashedIds)
    inner = model.sparse.ebc.collection
    assert inner.embedding_bags["a"].weight.shape == (7, 8)
    # the reference: TorchRec's own EBC over the same weights, fed ids % 7 by hand
    ref = _ebc([("a", 7, 8), ("b", 50, 4)])
    ref.load_state_dict(inner.state_dict())
    ids = [[3, 64, 99, 6], [1, 2, 49, 0]]
    got = model.sparse.ebc(_kjt(["f_a", "f_b"], ids)).values()
    want = ref(_kjt(["f_a", "f_b"], [[i % 7 for i in ids[0]], ids[1]])).values()
    assert torch.equal(got, want)
    assert autoembed.tables(model)[0].name == "sparse.ebc.a"  # names survive the wrapper


def test_apply_sets_dim_dtype_and_each_tables_fused_optimizer() -> None:
    from torchrec.optim import RowWiseAdagrad

    import autoembed

    model = Holder(_ebc([("a", 100, 8), ("b", 50, 4)], device="meta"))
    autoembed.apply(model, [{"name": "sparse.ebc.b", "embedding_dim": 6, "data_type": "fp16",
                             "optimizer": "rowwise_adagrad"}])
    w = model.sparse.ebc.embedding_bags["b"].weight
    assert (tuple(w.shape), w.dtype, w.device.type) == ((50, 6), torch.float16, "meta")
    assert w._optimizer_classes == [RowWiseAdagrad]
    with pytest.raises(ConfigError) as e:
        autoembed.apply(model, [{"name": "sparse.ebc.a", "optimizer": "adam"}])
    assert "not supported by FBGEMM's CPU table kernel" in str(e.value)
    with pytest.raises(ConfigError, match=r"no such table \(did you mean 'sparse.ebc.a'"):
        autoembed.apply(model, [{"name": "sparse.ebc.aa", "optimizer": "sgd"}])


def test_an_unsharded_collection_is_priced_by_the_trace() -> None:
    import autoembed
    from autoembed.memory.types import round_block

    ebc = _ebc([("a", 1000, 8), ("b", 300, 4)])
    example = _kjt(["f_a", "f_b"], [[1, 2, 3], [4, 5, 6]])
    est = autoembed.estimate_model(ebc, example, loss=lambda out, _: out.values().sum(),
                                   optimizer="sgd")
    # by hand: the two fp32 tables, each rounded to the allocator's 512 B blocks
    assert est.parameters == round_block(1000 * 8 * 4) + round_block(300 * 4 * 4)
    assert est.optimizer_state == 0
    assert [(t.name, t.rows, t.dim) for t in est.tables] == [("a", 1000, 8), ("b", 300, 4)]


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM is Linux's")
def test_unsharded_dlrm_within_3_percent_of_a_real_cpu_step() -> None:
    from autoembed.torchrec.unsharded import estimate_unsharded
    from benchmarks.measure_cpu import measure_cpu_peak
    from examples import torchrec_dlrm as ex

    size = ex.SIZES["test"]
    est = estimate_unsharded(lambda: ex.build_model(**size), ex.make_example(**size),
                             loss=ex.loss, optimizer="adagrad")
    measured = measure_cpu_peak("examples.torchrec_dlrm", size, ex.SIZES["twin"],
                                optimizer="adagrad", path=str(ROOT))
    assert abs(est.allocated_peak - measured) <= 0.03 * measured, (est.allocated_peak, measured)


def test_shard_bytes_follow_fbgemms_state_by_hand() -> None:
    from autoembed.torchrec.sharded import shard_bytes

    rows, cols = 1000, 16
    assert shard_bytes(rows, cols, "fp32", "sgd") == (64000, 0)
    assert shard_bytes(rows, cols, "fp32", "adagrad") == (64000, 64000)
    assert shard_bytes(rows, cols, "fp16", "rowwise_adagrad") == (32000, 4000)
    assert shard_bytes(rows, cols, "fp16", "adam") == (32000, 128000)
    assert shard_bytes(rows, cols, "fp32", "partial_rowwise_adam") == (64000, 64000 + 4000)


def _small_dlrm_settings(opt: str, sharding: str = "table_wise") -> list[dict[str, Any]]:
    from examples.torchrec_dlrm import KEYS

    return [{"name": f"{COLL}.t_{k}", "optimizer": opt, "sharding_type": sharding}
            for k in KEYS]


def test_each_rank_is_priced_from_torchrecs_plan() -> None:
    from autoembed.torchrec.sharded import estimate_sharded, shard_bytes
    from examples import torchrec_dlrm as ex

    params = {"scale": 0.01, "batch_size": 64}
    topo = RankTopology(world_size=2, batch_size=64, compute_device="cpu")
    est = estimate_sharded(lambda: ex.build(params), ex.example(params), topo,
                           _small_dlrm_settings("adagrad"), loss=ex.loss)
    rows = dict(zip(ex.KEYS, ex.cardinalities(0.01), strict=True))
    for r in est.ranks:
        mine = [t for t in est.plan if t.shards[0].rank == r.rank]
        assert all(t.sharding_type == "table_wise" and len(t.shards) == 1 for t in mine)
        by_hand = sum(rows[t.features[0]] * 16 * 4 * 2 for t in mine)  # weight + Adagrad
        assert r.persistent == by_hand
        assert sum(shard_bytes(rows[t.features[0]], 16, "fp32", "adagrad")[1]
                   for t in mine) == r.optimizer_state
        assert r.torchrec_ddr >= r.persistent  # its estimate reads the optimizer, plus I/O
        step = r.allocated_peak - r.persistent  # the dense peak, or the sparse part's
        assert r.dense_peak <= step <= r.dense_peak + r.sparse_transient


def test_a_plan_over_a_rank_names_the_rank_and_by_how_much() -> None:
    from autoembed.torchrec.sharded import estimate_sharded
    from examples import torchrec_dlrm as ex

    params = {"scale": 0.01, "batch_size": 64}
    est = estimate_sharded(lambda: ex.build(params), ex.example(params),
                           RankTopology(world_size=2, batch_size=64, compute_device="cuda",
                                        hbm=575 * 2**20),
                           _small_dlrm_settings("adam", "table_wise"), loss=ex.loss)
    with pytest.raises(ConfigError) as e:
        est.check_fits()
    over = est.ranks[0].device_total - 575 * 2**20
    assert f"does not fit rank 0: it needs {est.ranks[0].device_total} B" in str(e.value)
    assert f"{over} B more" in str(e.value)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM is Linux's")
def test_two_ranks_of_real_dmp_match_the_estimate() -> None:
    """benchmarks/gpu_torchrec.py's path on a CPU plan (its --cpu-smoke), checked: each rank's
    FBGEMM weights and state equal the priced bytes exactly; its step peak within
    max(3%, 32 MB) of the measured one (benchmarks/torchrec_dmp_cpu.py: the 1 GB cases)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_torchrec

    rows = gpu_torchrec.run_case((2, 16, "rowwise_adagrad", "table_wise", "fused", None),
                                 scale=0.05, batch=1024, device="cpu")
    assert [r[1] for r in rows] == [0, 1]
    for _, _, _, priced, measured, _, priced_tables, real_tables in rows:
        assert priced_tables == real_tables
        assert abs(priced - measured) <= max(0.03 * measured, 32 * 10**6)


@pytest.mark.slow
def test_killing_the_driver_leaves_no_rank_behind(tmp_path: Path) -> None:
    driver = tmp_path / "driver.py"
    driver.write_text(
        "import sys\nsys.path[:0] = [sys.argv[1], sys.argv[1] + '/tests']\n"
        "from autoembed.pipeline.sharded_runner import run_sharded\n"
        "if __name__ == '__main__':\n"
        "    run_sharded({'build': '_torchrec_code:slow_build', 'example': 'x:y',\n"
        "                 'params': {'sleep': 120}, 'topology': {'world_size': 2,\n"
        "                 'batch_size': 8, 'compute_device': 'cpu'}, 'timeout_s': 300})\n")
    p = subprocess.Popen([sys.executable, str(driver), str(ROOT)])
    try:
        ranks: list[int] = []
        for _ in range(300):
            time.sleep(0.1)
            ranks = _children(p.pid)
            if len(ranks) >= 2:
                break
        assert len(ranks) >= 2, "the ranks did not start"
        time.sleep(1.0)
    finally:
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
    deadline = time.time() + 20
    while time.time() < deadline and any(_alive(r) for r in ranks):
        time.sleep(0.2)
    assert not [r for r in ranks if _alive(r)]


def _children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out.append(int(d.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow
def test_the_exported_file_builds_and_plans_the_pick(tmp_path: Path) -> None:
    from autoembed.torchrec.export_code import export_torchrec
    from examples import torchrec_dlrm as ex

    params = {"scale": 0.001, "batch_size": 64}
    tables = [{"name": f"{COLL}.t_cat_2", "num_embeddings": 5000, "optimizer": "adagrad",
               "sharding_type": "column_wise", "data_type": "fp16"},
              {"name": f"{COLL}.t_cat_3", "optimizer": "sgd", "sharding_type": "table_wise"}]
    path = export_torchrec(lambda: ex.build(params), tables,
                           RankTopology(world_size=2, batch_size=64, compute_device="cpu"),
                           tmp_path / "pick.py")
    code = (f"import sys; sys.path[:0] = [{str(tmp_path)!r}, {str(ROOT)!r}]\n"
            "import pick, torch\n"
            "from examples import torchrec_dlrm as ex\n"
            "m = pick.rewrite(ex.build({'scale': 0.001, 'batch_size': 64}))\n"
            "w = m.model.sparse_arch.embedding_bag_collection.collection.embedding_bags\n"
            "print(tuple(w['t_cat_2'].weight.shape), w['t_cat_2'].weight.dtype,\n"
            "      w['t_cat_2'].weight._optimizer_classes[0].__name__)\n"
            "p = pick.plan(m).plan['model.sparse_arch.embedding_bag_collection.collection']\n"
            "print(p['t_cat_2'].sharding_type, p['t_cat_3'].sharding_type)\n"
            # and it trains: one rank of DMP over gloo on its own plan, two steps
            "import torch.distributed as dist\n"
            "from torchrec.distributed import DistributedModelParallel\n"
            f"dist.init_process_group('gloo', init_method='file://{tmp_path}/pg', rank=0,\n"
            "                        world_size=1)\n"
            "dmp = DistributedModelParallel(m, device=torch.device('cpu'),\n"
            "                               plan=pick.plan(m, world_size=1),\n"
            "                               sharders=pick.sharders())\n"
            "b = ex.example({'scale': 0.001, 'batch_size': 64})\n"
            "losses = []\n"
            "for _ in range(2):\n"
            "    loss = dmp(b)[0]\n"
            "    loss.backward()\n"
            "    losses.append(float(loss))\n"
            "print(losses[1] < losses[0])\n"
            # and it runs as a script (its __main__ prints the plan), in the same process:
            # a second one would import torch and TorchRec again (~8 CPU s)
            "import runpy\n"
            "print('as a script:')\n"
            f"runpy.run_path({str(path)!r}, run_name='__main__')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.split("\n")
    assert lines[:4] == ["(5000, 16) torch.float16 Adagrad", "column_wise table_wise", "True",
                         "as a script:"], r.stdout[-2000:]
    assert "column_wise" in "\n".join(lines[4:]), r.stdout[-2000:]


def test_cli_prints_every_rank_beside_torchrecs_figure(monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from autoembed.cli import app

    monkeypatch.chdir(ROOT)
    spec = tmp_path / "tables.yaml"
    spec.write_text("tables:\n" + "".join(
        f"  - {{name: {COLL}.t_cat_{i}, optimizer: rowwise_adagrad}}\n" for i in range(26)))
    args = ["estimate", "--model", "examples.torchrec_dlrm:model", "--example",
            "examples.torchrec_dlrm:batch", "--world-size", "2", "--tables", str(spec)]
    r = CliRunner().invoke(app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.output.strip().splitlines()[-1])
    assert [x["rank"] for x in got["ranks"]] == [0, 1]
    assert all(x["torchrec_hbm"] > 0 and x["optimizer_state"] > 0 for x in got["ranks"])
    r = CliRunner().invoke(app, [*args, "--budget", "1GB"])
    assert r.exit_code == 3 and "does not fit rank" in r.output, r.output


def test_the_cli_prices_a_torchrec_model_as_estimate_model_does(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`autoembed estimate --model` and `autoembed.estimate_model` are one entry point: the
    same figure for TorchRec's DLRM at Criteo's sizes (its KJTs made traceable, not a
    FakeTensor error), with its (loss, ...) output's loss priced without --loss, and no
    torch.fx notice on the terminal."""
    import autoembed
    import examples.torchrec_dlrm as dlrm
    from autoembed.cli import main

    monkeypatch.chdir(ROOT)
    args = ["estimate", "--model", "examples.torchrec_dlrm:model", "--example",
            "examples.torchrec_dlrm:batch", "--optimizer", "adagrad", "--json"]
    assert main(args) == 0
    out, err = capsys.readouterr()
    cli = json.loads(out)
    assert "is_fx_tracing" not in err
    api = autoembed.estimate_model(dlrm.model, dlrm.batch(), optimizer="adagrad",
                                   loss=dlrm.loss)
    assert cli["device_total"] == api.device_total
    # by hand: 26 fp32 tables of dim 16 at Criteo's cardinalities, in 512-byte blocks
    assert sorted(t["parameters"] for t in cli["tables"]) == sorted(
        -(-n * 16 * 4 // 512) * 512 for n in dlrm.CRITEO_CARDINALITIES)
    assert main([*args, "--loss", "examples.torchrec_dlrm:loss"]) == 0
    assert json.loads(capsys.readouterr().out)["device_total"] == api.device_total


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("AUTOEMBED_TORCHREC_RAY") != "1",
                    reason="a Ray Train trial takes 1-5 min on 2 busy cores, past the TorchRec "
                    "tests' 3-minute share of the suite; AUTOEMBED_TORCHREC_RAY=1 runs it")
def test_a_sharded_trial_runs_on_ray_train_workers_without_a_whole_cpu() -> None:
    """2 ranks on a 1-CPU Ray: the workers hold half a CPU each, the caller none; the user's
    loop stops on every rank when the channel says so; every rank's result comes back, its
    FBGEMM tables as priced."""
    import ray

    from autoembed.pipeline.sharded_runner import MEASURE_ENV
    from autoembed.pipeline.torchrec_trial import ray_sharded
    from autoembed.torchrec.sharded import estimate_sharded
    from examples import torchrec_dlrm as ex

    params = {"scale": 0.001, "batch_size": 64, "steps": 40}
    tables = _small_dlrm_settings("sgd")
    topo = {"world_size": 2, "batch_size": 64, "compute_device": "cpu"}
    est = estimate_sharded(lambda: ex.build(params), ex.example(params), RankTopology(**topo),
                           tables, loss=ex.loss)
    seen: list[Any] = []
    ray.init(address="local", num_cpus=1, include_dashboard=False,
             runtime_env={"env_vars": {**MEASURE_ENV, "PYTHONPATH": str(ROOT)}})
    try:
        got = ray_sharded({"build": "examples.torchrec_dlrm:build",
                           "train": "examples.torchrec_dlrm:train", "path": str(ROOT),
                           "params": params, "tables": tables, "topology": topo},
                          lambda ev: seen.append(ev) is not None, cpus_per_worker=0.5)
    finally:
        ray.shutdown()
    assert [(r["rank"], r["status"]) for r in got] == [(0, "pruned"), (1, "pruned")]
    assert [ev.step for ev in seen] == [20]
    assert [r["table_bytes"] for r in got] == [r.persistent for r in est.ranks]


@pytest.mark.parametrize(("setting", "says"), [
    ({"sharding_type": "row_wise"}, "sharding_type 'row_wise' needs CUDA"),
    ({"compute_kernel": "fused_uvm_caching", "cache_load_factor": 0.2},
     "fused_uvm_caching needs CUDA (UVM)"),
])
def test_a_cpu_plan_refuses_what_needs_cuda_in_one_line(setting: dict, says: str) -> None:
    from autoembed.torchrec.planner import plan_model

    model = Holder(_ebc([("a", 100, 8), ("b", 50, 4)], device="meta"))
    with pytest.raises(ConfigError) as e:
        plan_model(model, RankTopology(world_size=2, batch_size=8, compute_device="cpu"),
                   [{"name": "sparse.ebc.a", **setting}])
    assert says in str(e.value) and "\n" not in str(e.value)


@pytest.mark.slow
def test_the_users_loop_runs_sharded_and_stops_on_every_rank_when_told() -> None:
    from autoembed.pipeline.sharded_runner import run_sharded

    seen = []

    def channel(ev: Any) -> bool:
        seen.append(ev)
        return False  # stop at the first evaluation

    got = run_sharded({
        "build": "examples.torchrec_dlrm:build", "train": "examples.torchrec_dlrm:train",
        "path": str(ROOT), "params": {"scale": 0.001, "batch_size": 64, "steps": 40},
        "tables": _small_dlrm_settings("rowwise_adagrad"),
        "topology": {"world_size": 2, "batch_size": 64, "compute_device": "cpu"}}, channel)
    assert [(r["rank"], r["status"]) for r in got] == [(0, "pruned"), (1, "pruned")], got
    assert [len(r["curve"]) for r in got] == [1, 1] and got[0]["curve"][0]["step"] == 20
    assert len(seen) == 1 and seen[0].step == 20 and 0.0 <= seen[0].quality <= 1.0
    assert all(r["step_peak"] > r["persistent_bytes"] for r in got)
