"""The sampler kinds the product left out (benchmarks/samplers.py): the cost model recovers
a cost law written here, cost-aware TPE moves its proposals to cheap configs when quality
does not depend on them, a start-point prior pulls TPE's proposals; a search takes the kinds
only inside `experiment_kinds()`, and refuses them elsewhere with one line."""

from __future__ import annotations

import json
import math
import random
import statistics
from pathlib import Path

import numpy as np
import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution

from autoembed.pipeline.records import ATTR
from benchmarks.samplers import CostModel, experiment_kinds, make_sampler

TINY = str(Path(__file__).resolve().parents[1] / "search_spaces" / "tiny.yaml")


def test_cost_model_recovers_a_log_linear_law() -> None:
    space = {"lr": FloatDistribution(1e-4, 1e-1, log=True),
             "dim": FloatDistribution(8, 256),
             "kind": CategoricalDistribution(["dot", "mlp"])}
    rng = random.Random(0)

    def seconds(lr: float, dim: float, kind: int) -> float:  # the law: lr plays no part
        return math.exp(0.01 * dim + (1.0 if kind == 1 else 0.0))

    obs = []
    for _ in range(60):
        v = {"lr": 10 ** rng.uniform(-4, -1), "dim": rng.uniform(8, 256),
             "kind": float(rng.randint(0, 1))}
        obs.append((v, seconds(v["lr"], v["dim"], int(v["kind"]))))
    model = CostModel(space, obs)
    new = {"lr": np.array([1e-3, 1e-2]), "dim": np.array([20.0, 200.0]),
           "kind": np.array([0.0, 1.0])}
    want = np.log([seconds(1e-3, 20, 0), seconds(1e-2, 200, 1)])
    assert model.log_seconds(new) == pytest.approx(want, abs=0.1)


def _mean_x(kind: str, seed: int) -> float:
    """Mean x proposed after the start-up, quality flat in x, seconds growing as e^(4x)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(directions=["maximize", "minimize"],
                                sampler=make_sampler(kind, seed))
    noise = random.Random(seed)
    xs = []
    for n in range(40):
        t = study.ask({"x": FloatDistribution(0.0, 1.0), "y": FloatDistribution(0.0, 1.0)})
        x = float(t.params["x"])
        t.set_user_attr(ATTR, {"metrics": {"wall_seconds": math.exp(4 * x)}})
        study.tell(t, [noise.random(), float(t.params["y"])])
        if n >= 10:
            xs.append(x)
    return statistics.fmean(xs)


def test_cost_aware_tpe_prefers_cheap_proposals() -> None:
    for seed in (0, 1):
        plain, cost = _mean_x("tpe", seed), _mean_x("tpe-cost", seed)
        assert cost < plain - 0.1, (seed, plain, cost)


def _distance_to(point: float, kind: str, seed: int, prior: list[dict[str, float]]) -> float:
    """Mean |x - point| of the model's proposals, quality flat in x (noise only)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(directions=["maximize", "minimize"],
                                sampler=make_sampler(kind, seed, prior=prior))
    noise = random.Random(seed)
    gaps = []
    for n in range(30):
        t = study.ask({"x": FloatDistribution(0.0, 1.0), "y": FloatDistribution(0.0, 1.0)})
        study.tell(t, [noise.random(), noise.random()])
        if n >= 8:  # after the random start-up
            gaps.append(abs(float(t.params["x"]) - point))
    return statistics.fmean(gaps)


def test_a_start_point_prior_pulls_the_proposals() -> None:
    """piBO: with x = 0.9 as the prior and nothing to learn, proposals sit nearer 0.9 than
    TPE's own (the pull fades as BETA / n)."""
    for seed in (0, 1):
        plain = _distance_to(0.9, "tpe", seed, [])
        prior = _distance_to(0.9, "tpe", seed, [{"x": 0.9}])
        assert prior < 0.75 * plain, (seed, plain, prior)


def test_a_search_takes_an_experiment_kind_only_inside_the_block(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Inside `experiment_kinds()` a search runs `tpe-cost` (the product alone has no maker
    for it); after the block, `--sampler tpe-cost` and a resume of that study are each one
    line, exit 2, saying where the kind went and which to use."""
    from autoembed.cli import main
    from autoembed.pipeline import search
    from autoembed.pipeline.study import SAMPLERS
    from autoembed.tracking import NullTracker

    runs = tmp_path / "runs"
    with experiment_kinds():
        res = search("800MB", TINY, trials=1, sampler="tpe-cost", study="x", runs_dir=runs,
                     executor="local", tracker=NullTracker())
    assert json.loads(res.files["pareto.json"].read_text())["sampler"] == "tpe-cost"
    assert SAMPLERS == ("tpe-mix", "tpe", "nsga2", "random", "grid", "ehvi")  # restored
    opts = ["--budget", "800MB", "--space", TINY, "--runs-dir", str(runs),
            "--tracking-uri", "none"]
    for argv in (["search", "--sampler", "tpe-cost", "--study", "y", *opts],
                 ["search", "--resume", "--study", "x", *opts]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1, err
        assert "sampler 'tpe-cost' was an experiment, now in benchmarks/" in err[0]
        assert err[0].endswith("use one of tpe-mix, tpe, nsga2, random, grid, ehvi")


def test_the_replays_of_the_moved_kinds_build_them_from_benchmarks() -> None:
    """compare.py's cost-aware and prior methods get the benchmarks' TPE (through the
    harness's seam: a method's own sampler maker), with the table's start points as the
    prior."""
    import sys
    from types import SimpleNamespace

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "replay"))
    import compare
    import samplers  # the module as compare.py imports it (benchmarks/ on its path)

    rows = {0: {"source": "start", "fits": True, "params": {"x": 0.9}},
            1: {"source": "random", "fits": True, "params": {"x": 0.1}}}
    workload = SimpleNamespace(table=SimpleNamespace(rows=rows))
    cost = compare.METHODS["tpe-mix-cost-asha"].sampler(0, workload)
    prior = compare.METHODS["tpe-mix-prior-asha"].sampler(0, workload)
    assert type(cost.model) is samplers.CostAwareTPE
    assert type(prior.model) is samplers.PriorTPE and prior.model.prior.points == [{"x": 0.9}]
    assert prior.model.cost_model() is None  # the prior alone, not cost-aware
