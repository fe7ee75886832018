"""The built-in search's guarantees hold for a search over the user's own model: it runs
through the same request, plan, engine, executor and report (issue 24). Each test here
failed on the second, thinner copy of the pipeline the user path had before."""

from __future__ import annotations

import csv
import importlib
import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

import autoembed
from autoembed.cli import main

LOOP = textwrap.dedent('''
    import torch
    from torch import nn

    class Bag(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.emb = nn.Embedding(2_000, dim)
            self.out = nn.Linear(dim, 2)
        def forward(self, ids, y):
            return nn.functional.cross_entropy(self.out(self.emb(ids).mean(1)), y)

    def build(params):
        torch.manual_seed(0)
        return Bag(params["dim"])

    def example(params):
        g = torch.Generator().manual_seed(0)
        ids = torch.randint(0, 50, (params["batch_size"], 4), generator=g)
        return ids, (ids < 25).sum(1).gt(2).long()

    def train(model, params, report):
        report(step=1, samples=8, quality=0.5 + params["lr"])

    def train_raises(model, params, report):
        raise RuntimeError("my loop is broken")

    def train_silent(model, params, report):
        return None  # never reports, returns nothing
''')

SPACE = textwrap.dedent("""
    embedding: {precision: fp32, table_optimizer: adam}
    user:
      dim: {choices: [4, 8]}
      lr: {low: 0.001, high: 0.1, log: true}
      batch_size: 8
    trials: 2
""")


@pytest.fixture
def user(tmp_path: Path, monkeypatch) -> tuple[Any, Path]:
    pkg = tmp_path / "src" / "gloop"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "loop.py").write_text(LOOP)
    (tmp_path / "space.yaml").write_text(SPACE)
    (tmp_path / "queue.yaml").write_text("- {dim: 8}\n")
    (tmp_path / "space_length.yaml").write_text(
        SPACE + "early_stop: {max_steps: 4, eval_every: 1}\n")
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    monkeypatch.chdir(tmp_path)
    sys.modules.pop("gloop.loop", None)
    return importlib.import_module("gloop.loop"), tmp_path


def search(root: Path, study: str, **kw: Any) -> Any:
    from autoembed.tracking import NullTracker

    args = {"model": "gloop.loop:build", "example": "gloop.loop:example",
            "train": "gloop.loop:train", "executor": "local", "study": study,
            "runs_dir": root / "runs", "tracker": NullTracker(), **kw}
    return autoembed.search(kw.pop("budget", "700MB"), root / "space.yaml", **args)


def cli(root: Path, *args: str) -> list[str]:
    return ["search", "--space", str(root / "space.yaml"), "--model", "gloop.loop:build",
            "--example", "gloop.loop:example", "--executor", "local", "--runs-dir",
            str(root / "runs"), "--tracking-uri", "none", *args]


def test_a_resumed_search_draws_fresh_proposals(user) -> None:
    """The resumed sampler is seeded past the trials the study holds (it proposed the same
    configs again before)."""
    _, root = user
    first = search(root, "r")
    later = search(root, "r", resume=True, trials=4)
    lrs = [r.params["user.lr"] for r in sorted(later.rows, key=lambda r: r.number)]
    assert len(lrs) == 4 and lrs[:2] == [r.params["user.lr"] for r in first.rows]
    assert not set(lrs[2:]) & set(lrs[:2])  # a continuous lr: only the same seed repeats


def test_every_trial_failing_is_exit_1_with_a_line(user, capsys) -> None:
    _, root = user
    rc = main(cli(root, "--budget", "700MB", "--train", "gloop.loop:train_raises",
                  "--study", "f"))
    err = capsys.readouterr().err
    assert rc == 1 and "no trial completed within the budget" in err
    assert "my loop is broken" in err
    # each trial's progress line and the last line quote the reason's first line, as for
    # autoembed's models; the traceback under it stays in trials.csv (it was in both)
    assert "Traceback" not in err and "\\n" not in err, err
    assert f"Trials: {root / 'runs' / 'f' / 'trials.csv'}" in err.splitlines()[-1]
    reasons = [r["reason"] for r in csv.DictReader((root / "runs" / "f" / "trials.csv").open())]
    assert reasons and all("Traceback (most recent call last)" in r for r in reasons)
    assert (root / "runs" / "f" / "trials.csv").exists()
    assert not (root / "runs" / "f" / "pareto.json").exists()


def test_nothing_fitting_is_exit_3(user, capsys) -> None:
    _, root = user
    rc = main(cli(root, "--budget", "1MB", "--train", "gloop.loop:train", "--study", "n"))
    err = capsys.readouterr().err
    # every config's device_total holds the fixed overhead (544 MiB here): nothing is tried
    assert rc == 3 and "nothing fits the budget 1MB = 1.00 MB" in err, err
    assert "the fixed overhead alone" in err and len(err.strip().splitlines()) == 1, err
    assert not (root / "runs" / "n" / "trials.csv").exists()


def test_a_trial_that_reports_no_quality_is_failed_never_on_the_front(user, capsys) -> None:
    _, root = user
    rc = main(cli(root, "--budget", "700MB", "--train", "gloop.loop:train_silent",
                  "--study", "s"))
    err = capsys.readouterr().err
    assert rc == 1 and "reported no quality" in err


def test_time_budget_and_sampler_in_python(user) -> None:
    """Options the user path raised a TypeError for are the search's options."""
    _, root = user
    res = search(root, "t", time_budget=600, sampler="random", seed=3, trials=1)
    assert res.count("complete") == 1
    stored = json.loads((root / "runs" / "t" / "pareto.json").read_text())
    assert stored["sampler"] == "random" and stored["seed"] == 3
    assert stored["workload"] == "user" and stored["pick"] == "within-noise"


def test_best_yaml_holds_what_the_pick_is_and_nothing_else(user) -> None:
    _, root = user
    res = search(root, "b")
    best = yaml.safe_load((root / "runs" / "b" / "best.yaml").read_text())
    assert set(best["config"]) == {"seed", "precision", "table_optimizer", "tables"}
    assert best["config"]["seed"] == res.best.config.seed  # what its build was seeded with
    assert best["config"]["tables"] == [{"name": "emb", "vocab_size": 2000,
                                         "dim": res.best.params["user.dim"]}]
    assert best["params"] == {"dim": res.best.params["user.dim"],
                              "lr": res.best.params["user.lr"], "batch_size": 8,
                              "embedding": {"precision": "fp32", "table_optimizer": "adam"}}
    # the budget is drawn where the memory objective is: the allocated peak, so pareto.png's
    # budget line is the budget less the fixed overhead
    assert json.loads((root / "runs" / "b" / "pareto.json").read_text())["memory_basis"] == \
        "allocated_peak"
    # and autoembed.apply takes the file
    model = autoembed.apply(importlib.import_module("gloop.loop").build(best["params"]),
                            root / "runs" / "b" / "best.yaml")
    assert model is None or model.emb.num_embeddings == 2000


# ----------------------------------------------------------------- every CLI option


def _search_options() -> dict[str, Any]:
    """`autoembed search`'s options, by parameter name, from the CLI itself."""
    import typer

    command = typer.main.get_command(autoembed.cli.app).commands["search"]  # type: ignore
    return {p.name: p for p in command.params}


# What each option becomes in a search over the user's model: checked on the plan, or
# refused in one line (the request's USER_REFUSED).
HONOURED = {
    "budget": (["--budget", "650MB"], lambda p: p.budget.bytes == 650 * 10**6),
    "space": ([], lambda p: p.space.kind == "user"),
    "trials": (["--trials", "5"], lambda p: p.trials == 5),
    "time_budget": (["--time-budget", "7"], lambda p: p.request.time_budget == 7),
    "trial_time_limit": (["--trial-time-limit", "30"],
                         lambda p: p.time_limit.seconds == 30 and p.time_limit.user),
    "objectives": (["--objectives", "quality,memory"],
                   lambda p: [o.name for o in p.objectives] == ["quality", "memory"]),
    "sampler": (["--sampler", "nsga2"], lambda p: p.sampler == "nsga2"),
    "seed": (["--seed", "9"], lambda p: p.seed == 9),
    # trials side by side on Ray (in process, --executor local, they run one at a time)
    "workers": (["--workers", "2", "--executor", "ray"], lambda p: p.workers == 2),
    "device": (["--device", "cpu"], lambda p: p.device == "cpu"),
    "study": (["--study", "named"], lambda p: p.name == "named"),
    "resume": (["--resume", "--study", "named"], lambda p: p.request.resume),
    "runs_dir": ([], lambda p: p.out_dir.parent.name == "runs"),
    "ray_address": (["--ray-address", "10.0.0.1:6379"],
                    lambda p: p.request.ray_address == "10.0.0.1:6379"),
    "trial_resources": (["--trial-resources", "node_a=1"],
                        lambda p: p.request.trial_resources == ({"node_a": 1.0},)),
    "tracking_uri": ([], lambda p: p.request.tracking_uri == "none"),
    "storage": (["--storage", "sqlite:///x.db"], lambda p: p.request.storage == "sqlite:///x.db"),
    "pick": (["--pick", "knee"], lambda p: str(p.request.pick) == "knee"),
    "early_stop": (["--no-early-stop"], lambda p: p.early_stop is False),
    "repeatable": (["--repeatable"], lambda p: p.repeatable and p.workers == 1),
    "multi_fidelity": (["--multi-fidelity", "--space", "space_length.yaml"],
                       lambda p: p.multi_fidelity and p.meta(False)["multi_fidelity"]),
    "as_json": (["--json"], lambda p: True),  # the result printed as JSON (the CLI's part)
    "model": ([], lambda p: p.workload.records["model"].spec == "gloop.loop:build"),
    "example": ([], lambda p: p.workload.records["example"].spec == "gloop.loop:example"),
    "train": (["--train", "gloop.loop:train"],
              lambda p: p.workload.records["train"].spec == "gloop.loop:train"),
    "loss": (["--loss", "gloop.loop:train"],
             lambda p: p.workload.records["loss"].spec == "gloop.loop:train"),
    "executor": ([], lambda p: p.request.executor_kind == "local"),
    "allow_changed_code": (["--allow-changed-code"], lambda p: p.request.allow_changed_code),
    "reference": (["--no-reference"], lambda p: not p.workload.reference and all(
        s.origin != "as written" for s in p.start)),
    "enqueue": (["--enqueue", "queue.yaml"], lambda p: [(s.origin, dict(s.values))
                                                         for s in p.start][1:] ==
                [("enqueued", {"user.dim": 8})]),
}
REFUSED = {"data": ["--data", "movielens"], "label": ["--label", "y"],
           "categorical": ["--categorical", "a,b"], "text_column": ["--text-column", "t"],
           "host_budget": ["--host-budget", "8GB"], "start_points": ["--start-points"]}


def test_every_search_option_is_honoured_or_refused_with_model(user, monkeypatch,
                                                               capsys) -> None:
    from autoembed.pipeline.plan import SearchPlan
    from autoembed.pipeline.request import SearchRequest

    _, root = user
    options = _search_options()
    assert set(options) == set(HONOURED) | set(REFUSED), "a new option: say what it does"
    seen: list[Any] = []

    def fake_search(budget: Any, space: Any, **kw: Any) -> Any:
        for k in ("progress", "on_recovered"):
            kw.pop(k)
        request = SearchRequest.parse(budget, space, **kw)
        seen.append(SearchPlan.build(request, {}))
        raise SystemExit(0)

    monkeypatch.setattr("autoembed.pipeline.search", fake_search)
    base = cli(root, "--budget", "700MB", "--train", "gloop.loop:train")
    for name, (args, holds) in HONOURED.items():
        seen.clear()
        with pytest.raises(SystemExit):
            main([*base, *args])
        assert seen and holds(seen[0]), name
    for name, args in REFUSED.items():
        rc = main([*base, *args])
        err = capsys.readouterr().err
        assert rc == 2 and err.count("\n") == 1, (name, err)
        assert f"--{name.replace('_', '-')} does not apply to a search over your own" in err


def test_multi_fidelity_without_a_loop_length_is_one_line(user, capsys) -> None:
    _, root = user
    rc = main([*cli(root, "--budget", "700MB", "--train", "gloop.loop:train"),
               "--multi-fidelity"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1, err
    assert "--multi-fidelity: your loop's length is unknown" in err
