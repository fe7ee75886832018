"""Every command checks its options and files before it works, and a failed command leaves
nothing that blocks its corrected rerun: a bad value's one line names only options the
command has; a key given twice in a YAML file is refused with its line."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import typer

from autoembed.cli import app, main
from autoembed.errors import ConfigError


def _options(command: str) -> set[str]:
    """The --options `autoembed COMMAND` has, from the CLI itself."""
    cmd = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    return {o for p in cmd.params for o in (*p.opts, *p.secondary_opts) if o.startswith("--")}


@pytest.mark.parametrize("argv", [
    ["search", "--budget", "80%"],
    ["estimate", "--budget", "80%", "--vocab", "1000", "--dim", "8"],
])
def test_a_percentage_without_a_gpu_names_only_options_the_command_has(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a visible GPU makes 80% a valid budget")
    rc = main([*argv, *(["--runs-dir", str(tmp_path)] if argv[0] == "search" else [])])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "no GPU is visible" in err, err
    named = set(re.findall(r"--[a-z][a-z-]*", err))
    assert named <= _options(argv[0]), (named, err)
    assert ("--device-memory" in named) == ("--device-memory" in _options(argv[0]))
    assert not any(tmp_path.iterdir())  # refused before anything was made


@pytest.mark.parametrize(("option", "value"), [("--budget", "8XB"),
                                               ("--host-budget", "80%")])
def test_a_bad_size_is_refused_before_torch_loads(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        option: str, value: str) -> None:
    """A size is text: its refusal waits on no import of torch (~3 CPU s; `--device auto`
    reads CUDA through it). With torch unimportable here, the line is still the size's."""
    import sys

    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    budget = ["--budget", "8GB"] if option != "--budget" else []
    rc = main(["search", *budget, option, value, "--runs-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2 and err == f"autoembed: error: {option} '{value}' is not a size; " + (
        "use e.g. 8GB, 8GiB, 7.5G, 7500MB, 0.5TB or 80%\n" if option == "--budget"
        else "use e.g. 8GB, 8GiB, 7.5G, 7500MB or 0.5TB\n"), err
    assert not any(tmp_path.iterdir())


# ----------------------------------------------------------------- YAML keys given twice


def test_a_key_given_twice_in_a_space_file_is_refused_with_its_lines(tmp_path: Path) -> None:
    from autoembed.space import load_space

    space = tmp_path / "space.yaml"
    space.write_text("params:\n"                    # line 1
                     "  dim: {choices: [4, 8]}\n"   # line 2
                     "  lr: {low: 0.001, high: 0.1}\n"
                     "  dim: {choices: [16]}\n")    # line 4: dim again
    with pytest.raises(ConfigError) as e:
        load_space(space)
    msg = str(e.value)
    assert "space.yaml" in msg and "line 4: key 'dim' is given twice" in msg, msg
    assert "first on line 2" in msg and "\n" not in msg


@pytest.mark.parametrize("text, line, key", [
    ("dim: 8\nbatch_size: 32\ndim: 16\n", 3, "dim"),
    ('{"dim": 8, "tables": [{"name": "a", "vocab_size": 10, "name": "b"}]}', 1, "name"),
])
def test_a_key_given_twice_in_a_config_file_is_refused(tmp_path: Path, text: str, line: int,
                                                         key: str) -> None:
    from autoembed.config import load_config

    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=rf"line {line}: key '{key}' is given twice"):
        load_config(path)


def test_a_yaml_merge_may_still_be_overridden() -> None:
    """`<<: *anchor` then a key of the anchor is YAML's override, not a key given twice."""
    from autoembed.config import safe_load_yaml

    got = safe_load_yaml("base: &b {dim: 8, lr: 0.1}\nx:\n  <<: *b\n  dim: 16\n", "f")
    assert got["x"] == {"dim": 16, "lr": 0.1}


# ----------------------------------------------------------------- the private Ray


def _descendants(pid: int) -> set[int]:
    """`pid` and every process below it (from /proc)."""
    parent: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except (OSError, ValueError):
            continue
        parent[int(d.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, todo = {pid}, [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p and c not in found]
        found.update(kids)
        todo.extend(kids)
    return found


def _listening(pids: set[int]) -> list[tuple[str, int]]:
    """(address, pid) of every TCP socket the processes `pids` listen on (/proc/net)."""
    import ipaddress

    owner: dict[str, int] = {}
    for pid in pids:
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    owner[target[8:-1]] = pid
        except OSError:
            continue
    out = []
    for table in ("tcp", "tcp6"):
        for row in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            cols = row.split()
            if cols[3] != "0A" or cols[9] not in owner:  # 0A: LISTEN
                continue
            raw = bytes.fromhex(cols[1].split(":")[0])
            words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
            ip = ipaddress.ip_address(words)
            mapped = getattr(ip, "ipv4_mapped", None)  # ::ffff:127.0.0.1 is 127.0.0.1
            out.append((str(mapped or ip), owner[cols[9]]))
    return out


def test_a_private_ray_listens_on_the_loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """GCS, raylet, the driver and a worker: each listened on `*:port` (every interface)."""
    import ray

    from autoembed.pipeline.ray_tune import ray_session

    monkeypatch.setenv("RAY_worker_niceness", "0")
    from ray._private.node import Node

    start = Node.__init__
    with ray_session(None, 1, None):
        worker = ray.get(ray.remote(lambda: os.getpid()).remote())
        pids = _descendants(os.getpid())
        listening = _listening(pids)
        scripts = {_script(pid) for pid in pids}
    assert worker in pids and {pid for _, pid in listening} >= {os.getpid(), worker}
    assert len({pid for _, pid in listening}) >= 4, listening  # gcs, raylet, driver, worker
    assert all(ip == "127.0.0.1" for ip, _ in listening), listening
    # and without the helpers a one-node Ray never uses (ray_tune._without_idle_helpers):
    # Ray's default start adds all three, a Python process each
    assert not scripts & {"monitor.py", "log_monitor.py", "dashboard.py"}, scripts
    assert Node.__init__ is start  # Ray's own start again for any later ray.init


def _script(pid: int) -> str:
    """The file name of the script a Python process runs ('' when none, or it is gone)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return ""
    return next((Path(a.decode()).name for a in argv if a.endswith(b".py")), "")


def test_a_cluster_is_joined_as_ray_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    """--ray-address: no loopback address, and Ray's multi-node setting left as it was."""
    from ray._private import ray_constants

    import autoembed.pipeline.ray_tune as ray_tune

    seen: list[tuple[dict[str, object], bool]] = []

    class FakeRay:
        def is_initialized(self) -> bool:
            return False

        def init(self, **kw: object) -> None:
            seen.append((kw, ray_constants.ENABLE_RAY_CLUSTER))

    monkeypatch.setattr(ray_tune, "ray", FakeRay())
    monkeypatch.setattr(ray_tune, "_probe", lambda address: None)
    monkeypatch.setattr(ray_tune.ray_session, "local_session", lambda self: (None, None))
    cluster = ray_constants.ENABLE_RAY_CLUSTER
    ray_tune.ray_session("10.0.0.5:6379", 2, None).__enter__()
    ray_tune.ray_session(None, 2, None).__enter__()
    (joined, joined_mode), (private, private_mode) = seen
    assert "_node_ip_address" not in joined and joined_mode == cluster
    assert private["_node_ip_address"] == "127.0.0.1" and private_mode is False
    assert ray_constants.ENABLE_RAY_CLUSTER == cluster  # restored after the start


def test_a_named_gpu_is_the_only_one_a_private_ray_sees_and_refused_where_it_cannot_be(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`search --device cuda:1` became plain "cuda": Ray could place trials on GPU 0. A
    private Ray now starts with CUDA_VISIBLE_DEVICES naming GPU 1 only (as this process
    numbers it: the second entry of its own CUDA_VISIBLE_DEVICES), and where that cannot
    hold (a cluster, in process) the index is refused. Two GPUs faked; no CUDA."""
    import torch

    import autoembed.pipeline.ray_tune as ray_tune
    from autoembed.pipeline.plan import SearchPlan
    from autoembed.pipeline.request import SearchRequest, visible_id

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    r = SearchRequest.parse("8GB", "tiny", device="cuda:1")
    assert (r.device, r.gpu) == ("cuda", 1)
    assert SearchRequest.parse("8GB", "tiny", device="cuda").gpu is None
    totals = {0: 80 * 2**30, 1: 24 * 2**30}  # a share is of the named GPU's memory
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda i: type("Props", (), {"total_memory": totals[i]})())
    assert SearchRequest.parse("50%", "tiny", device="cuda:1").budget.bytes == 12 * 2**30
    assert (visible_id(1), visible_id(1, "4,6"), visible_id(0, "GPU-a1")) == ("1", "6", "GPU-a1")
    for extra, fix in (({"ray_address": "10.0.0.5:6379"}, "--device cuda"),
                       ({"executor": "local"}, "CUDA_VISIBLE_DEVICES=1 and give --device cuda")):
        with pytest.raises(ConfigError, match="--device cuda:1 with") as e:
            SearchRequest.parse("8GB", "tiny", device="cuda:1", **extra)
        assert fix in str(e.value) and "\n" not in str(e.value)
    plan = SearchPlan.build(SearchRequest.parse("8GB", "tiny", device="cuda:1"), {})
    assert (plan.gpus, plan.workers) == (1, 1)  # what the private Ray is started with

    seen: list[str | None] = []

    class FakeRay:
        def is_initialized(self) -> bool:
            return False

        def init(self, **kw: object) -> None:
            seen.append(os.environ.get("CUDA_VISIBLE_DEVICES"))

    monkeypatch.setattr(ray_tune, "ray", FakeRay())
    monkeypatch.setattr(ray_tune.ray_session, "local_session", lambda self: (None, None))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")
    ray_tune.ray_session(None, 2, 1, gpu=visible_id(1)).__enter__()
    ray_tune.ray_session(None, 2, 2).__enter__()
    assert seen == ["6", "4,6"] and os.environ["CUDA_VISIBLE_DEVICES"] == "4,6"
    monkeypatch.setattr(FakeRay, "is_initialized", lambda self: True)  # a notebook's Ray
    with pytest.raises(ConfigError, match="Ray is already running"):
        ray_tune.ray_session(None, 2, 1, gpu="6").__enter__()
    ray_tune.ray_session(None, 2, 2).__enter__()  # used as it is


def test_workers_above_the_gpus_the_trials_see_are_refused_and_a_resumed_count_cut(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`--device cuda:1 --workers 2`: the one GPU ran one trial at a time while the study and
    MLflow recorded 2 workers and each trial got half the CPUs. More workers than the GPUs
    a private Ray gives the trials (one for cuda:N, CUDA's count for cuda) are refused in one
    line before any work; a resumed study's count is cut to them. Two GPUs faked; no CUDA."""
    import torch

    from autoembed.pipeline.plan import SearchPlan
    from autoembed.pipeline.request import SearchRequest

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)

    def plan(stored: dict[str, object] | None = None, **kw: object) -> SearchPlan:
        return SearchPlan.build(SearchRequest.parse("8GB", "tiny", **kw), stored or {})

    for device, workers, fix in (("cuda:1", 2, "use --workers 1, or --device cuda"),
                                 ("cuda", 3, "use --workers 2")):
        with pytest.raises(ConfigError, match=f"^--workers {workers} runs") as e:
            plan(device=device, workers=workers)
        assert str(e.value).endswith(fix) or f"{fix} (" in str(e.value)
        assert "\n" not in str(e.value)
    assert plan(device="cuda", workers=2).workers == 2  # one trial on each GPU
    resumed = plan({"workers": 2}, device="cuda:1")  # stored by a search on both GPUs
    cpus = os.cpu_count() or 1
    assert (resumed.workers, resumed.cpus_per_trial) == (1, cpus)
    assert resumed.meta()["workers"] == 1 and resumed.tracker_params()["workers"] == "1"
    # a cluster's GPUs are its nodes': not checked here
    assert plan(device="cuda", workers=4, ray_address="10.0.0.5:6379").workers == 4


def test_workers_above_the_gpus_over_a_torchrec_world_size_are_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A TorchRec space's trial on --device cuda runs world_size ranks, each on its own GPU:
    `--workers 3` at world_size 2 on 4 GPUs ran 6 ranks' worth of trials on 4 GPUs, the
    third queued while recorded side by side (before: a sharded space was not bounded at
    all); refused in one line before the workload is built, the fix 4 // 2 = 2 (3 GPUs:
    1); 2 runs, and is the default; planned for cpu, its ranks hold no GPU: not bounded.
    GPUs faked; no CUDA."""
    import torch

    import autoembed.pipeline.plan as plan_module
    from autoembed.pipeline.plan import SearchPlan
    from autoembed.pipeline.request import SearchRequest
    from autoembed.space import parse_space

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)

    class Built(Exception):
        """The workers check passed: the workload was being built."""

    def workload_for(*a: object) -> None:
        raise Built
    monkeypatch.setattr(plan_module, "workload_for", workload_for)

    def request(workers: int | None, **topology: object) -> SearchRequest:
        space = parse_space({"topology": topology, "user": {"lr": {"choices": [0.1, 0.2]}}},
                            "s.yaml", kind="user")
        return SearchRequest.parse("8GB", space, device="cuda", workers=workers,
                                   model=str, example=str, train=str)

    for gpus, workers, fix in ((4, 3, "use --workers 2"), (3, 2, "use --workers 1")):
        monkeypatch.setattr(torch.cuda, "device_count", lambda n=gpus: n)
        with pytest.raises(ConfigError) as e:
            SearchPlan.build(request(workers, world_size=2), {})
        assert str(e.value) == (
            f"--workers {workers} runs {workers} trials at once, each on 2 GPUs (the space's "
            f"topology.world_size 2: a rank on each), and this machine has {gpus}: {fix}")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    with pytest.raises(Built):
        SearchPlan.build(request(2, world_size=2), {})
    with pytest.raises(Built):
        SearchPlan.build(request(3, world_size=2, compute_device="cpu"), {})
    assert plan_module._workers(request(None, world_size=2), {}, False, 4, 2) == 2


# ----------------------------------------------------------------- a user search's --loss

LOGITS_LOOP = '''
import torch
from torch import nn


class Bag(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.emb = nn.Embedding(500, dim)
        self.out = nn.Linear(dim, 2)

    def forward(self, ids, y):
        return self.out(self.emb(ids).mean(1))  # logits: --loss prices the step


def build(params):
    torch.manual_seed(0)
    return Bag(params["dim"])


def example(params):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 50, (params["batch_size"], 4), generator=g)
    return ids, (ids < 25).sum(1).gt(2).long()


def loss(output, example):
    return nn.functional.cross_entropy(output, example[1])


def wrong_loss(output, example):
    return output.sum(dim=2)  # a dimension the logits do not have


def train(model, params, report):
    report(step=1, samples=8, quality=0.5 + params["lr"])
'''


def test_a_bad_loss_leaves_no_study_that_blocks_the_corrected_rerun(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    argv = _loss_search(tmp_path, monkeypatch, 1)
    rc = main([*argv, "--loss", "lossloop.loop:wrong_loss"])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("autoembed:")]
    assert rc == 2 and len(lines) == 1 and "the loss or backward raised" in lines[0], err
    assert not (tmp_path / "runs" / "s").exists()  # nothing made: no study, no folder
    assert main([*argv, "--loss", "lossloop.loop:loss"]) == 0, capsys.readouterr().err
    assert (tmp_path / "runs" / "s" / "pareto.json").exists()


def _loss_search(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, trials: int) -> list[str]:
    """argv of a fast user search (in process, no MLflow) over LOGITS_LOOP."""
    from _user_code import install_loop

    install_loop(tmp_path, "lossloop", LOGITS_LOOP, monkeypatch)
    (tmp_path / "space.yaml").write_text(
        "embedding: {precision: fp32, table_optimizer: adam}\n"
        "user:\n  dim: {choices: [4, 8]}\n  lr: {choices: [0.01, 0.1]}\n  batch_size: 8\n"
        f"trials: {trials}\n")
    return ["search", "--budget", "1GB", "--space", "space.yaml", "--model",
            "lossloop.loop:build", "--example", "lossloop.loop:example", "--train",
            "lossloop.loop:train", "--executor", "local", "--study", "s", "--runs-dir",
            "runs", "--tracking-uri", "none"]


def test_a_pick_of_a_trial_that_never_ran_keeps_the_searchs_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """--pick trial:999: the search's files are written (with the default pick) and the
    command ends with one line and exit 2 (it used to write nothing at all)."""
    import json

    argv = _loss_search(tmp_path, monkeypatch, 2)
    rc = main([*argv, "--loss", "lossloop.loop:loss", "--pick", "trial:999"])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("autoembed:")]
    assert rc == 2 and len(lines) == 1 and "--pick trial:999" in lines[0], err
    out = tmp_path / "runs" / "s"
    assert {"pareto.json", "trials.csv", "best.yaml"} <= {p.name for p in out.iterdir()}
    pareto = json.loads((out / "pareto.json").read_text())
    assert pareto["pick"] == "within-noise" and f"trial {pareto['best']}" in lines[0]
    # the picked trial is one of those the line lists as complete
    assert str(pareto["best"]) in lines[0].split("those that are: ")[1]


def test_a_failed_python_export_writes_no_file_that_blocks_its_rerun(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """`export --format python` of a TorchRec model's study whose module does not import
    here: one line, and no pick.yaml left behind (it was written first, and the corrected
    command was then refused because it existed)."""
    import sys

    import autoembed.export as export
    from autoembed.pipeline.sharded_workload import TOPOLOGY_KEY

    argv = _loss_search(tmp_path, monkeypatch, 1)
    assert main([*argv, "--loss", "lossloop.loop:loss"]) == 0, capsys.readouterr().err
    capsys.readouterr()
    real = export._user_study

    def torchrec_study(*a: object) -> object:  # the study as a TorchRec model's stores it
        space, refs, meta = real(*a)
        return space, refs, {**meta, TOPOLOGY_KEY: {"world_size": 2}}

    monkeypatch.setattr(export, "_user_study", torchrec_study)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if "src" not in Path(p).parts])
    for name in [m for m in sys.modules if m.startswith("lossloop")]:
        monkeypatch.delitem(sys.modules, name)
    pick = tmp_path / "pick.py"
    rc = main(["export", "--study", "s", "--runs-dir", "runs", "--format", "python",
               "--out", str(pick)])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "does not import" in err, err
    assert not pick.exists() and not pick.with_suffix(".yaml").exists()
    monkeypatch.setattr(export, "_user_study", real)
    assert main(["export", "--study", "s", "--runs-dir", "runs", "--out",
                 str(pick.with_suffix(".yaml"))]) == 0, capsys.readouterr().err


def test_a_resume_under_another_budget_names_the_studys_budget_not_dropping_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--budget is required, so "drop the option" was no fix: the line gives the study's."""
    import optuna

    from autoembed.pipeline.records import ATTR
    from autoembed.pipeline.study import open_storage

    study = optuna.create_study(storage=open_storage(tmp_path), study_name="s",
                                directions=["maximize"])
    study.set_user_attr(ATTR, {"budget_bytes": 8 * 10**9, "budget": "8GB"})
    rc = main(["search", "--budget", "4GB", "--space", "tiny", "--study", "s", "--resume",
               "--runs-dir", str(tmp_path), "--tracking-uri", "none"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1, err
    assert "give --budget 8GB or start a new --study" in err and "drop" not in err, err


def test_a_resume_under_another_space_names_the_space_not_the_data(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--resume --space tiny` of a default-space study blamed --data, not given."""
    import optuna

    from autoembed.pipeline.records import ATTR
    from autoembed.pipeline.study import open_storage

    study = optuna.create_study(storage=open_storage(tmp_path), study_name="s",
                                directions=["maximize"])
    study.set_user_attr(ATTR, {"budget_bytes": 10**9, "budget": "1GB", "space_text": "x: 1",
                               "data": {"name": "synthetic-ctr"}})
    rc = main(["search", "--budget", "1GB", "--space", "tiny", "--study", "s", "--resume",
               "--runs-dir", str(tmp_path), "--tracking-uri", "none"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1, err
    assert err.startswith("autoembed: error: --space tiny differs from what study"), err


@pytest.mark.parametrize(("argv", "said"), [
    (["--tables", "t.yaml"], "--tables plans TorchRec's ranks: give --world-size N"),
    (["--plan-device", "cpu"], "--plan-device plans TorchRec's ranks: give --world-size N"),
    (["--dense-layers", "64,abc"], "--dense-layers '64,abc' must be a comma list of integers, "
                                   "e.g. 256,64"),
])
def test_an_estimate_option_that_would_do_nothing_or_is_bad_says_so(
        argv: list[str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    """--tables and --plan-device without --world-size were ignored (exit 0); a bad
    --dense-layers was shown a vocabulary as its example (1000000,5000)."""
    assert main(["estimate", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and said in err, err
