"""A search over the user's model: its bad input is found before any trial, one line each,
by the same request and plan as a built-in search's."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from autoembed.errors import ConfigError
from autoembed.pipeline.plan import SearchPlan
from autoembed.pipeline.request import SearchRequest

ROOT = Path(__file__).resolve().parents[1]
SPACE = str(ROOT / "examples" / "text_space.yaml")
FNS = {"model": "examples.text_search:build", "example": "examples.text_search:example",
       "train": "examples.text_search:train"}


def plan(tmp_path: Path, stored: dict | None = None, **kw) -> SearchPlan:
    args = {"budget": "800MB", "space": SPACE, **FNS, "runs_dir": tmp_path, **kw}
    return SearchPlan.build(SearchRequest.parse(args.pop("budget"), args.pop("space"), **args),
                            stored or {})


def test_a_good_request_records_the_functions(tmp_path: Path) -> None:
    p = plan(tmp_path, executor="local")
    assert p.budget.bytes == 800 * 10**6 and p.trials == p.space.trials == 6
    assert p.request.kind == "user" and p.workload.kind == "user"
    assert {k: v.spec for k, v in p.workload.records.items()} == FNS
    assert p.request.pick.rule == "within-noise"  # the default pick of every search
    p.workload.check_resume(p.meta())  # the same code resumes


@pytest.mark.parametrize("kw, says", [
    ({"budget": "8XB"}, "budget '8XB' is not a size"),
    ({"executor": "dask"}, "executor 'dask' is not known; use ray"),
    ({"model": "examples.text_search:biuld"}, "--model 'examples.text_search:biuld'"),
    ({"train": "examples.nope:train"}, "--train 'examples.nope:train': module"),
    ({"example": "examples.text_search:VOCAB"}, "'VOCAB' is a int, not a function"),
    # a Ray worker finds functions by name: a lambda is refused there (not in process)
    ({"train": lambda m, p, r: None}, "test_user_request:<lambda>: a Ray worker finds"),
    ({"space": "nope.yaml"}, "space file 'nope.yaml' does not exist"),
    ({"space": "tiny"}, "is a space of autoembed's own models"),
    ({"trials": 0}, "--trials 0: must be an integer > 0"),
    ({"data": "movielens"}, "--data does not apply to a search over your own model"),
    ({"host_budget": "8GB"}, "--host-budget does not apply to a search over your own model"),
    ({"start_points": True}, "--start-points does not apply"),
    # it did nothing: the model as written trained first all the same
    ({"start_points": False}, "--no-start-points does not apply to a search over your own "
                              "model (it has no start points; your model as written trains "
                              "first): remove it, or give --no-reference to skip that"),
    ({"early_stop": True}, "--early-stop: your loop's length is unknown"),
    ({"study": "../../somewhere"}, "study name '../../somewhere' is not allowed"),
    ({"model": None}, "--model missing"),
])
def test_bad_input_is_one_line(tmp_path: Path, kw, says) -> None:
    with pytest.raises(ConfigError) as e:
        plan(tmp_path, **kw)
    assert says in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_a_builtin_space_option_with_a_user_space_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="searches your own model"):
        SearchPlan.build(SearchRequest.parse("800MB", SPACE, runs_dir=tmp_path), {})


def test_resume_refuses_changed_code_unless_allowed(tmp_path: Path) -> None:
    p = plan(tmp_path)
    meta = p.meta()
    meta["functions"]["train"]["source_hash"] = "0" * 64  # the study ran an older copy
    with pytest.raises(ConfigError, match="train examples.text_search:train: module"):
        p.workload.check_resume(meta)
    plan(tmp_path, allow_changed_code=True).workload.check_resume(meta)
    with pytest.raises(ConfigError, match="was not a search over your own model"):
        p.workload.check_resume({"space": "x"})


def script_module(monkeypatch) -> object:
    import types

    main = types.ModuleType("__main__")
    exec("def train(model, params, report):\n    pass\n", main.__dict__)
    monkeypatch.setitem(sys.modules, "__main__", main)
    return main


def test_a_script_function_runs_in_process_and_is_refused_on_ray(tmp_path, monkeypatch) -> None:
    main = script_module(monkeypatch)
    local = plan(tmp_path, train=main.train, executor="local")  # type: ignore[attr-defined]
    assert local.workload.records["train"].spec == "__main__:train"
    # (a notebook's module has no source file; a script's does: test_user_functions)
    with pytest.raises(ConfigError, match="train = __main__:train: a Ray worker finds your "
                                          "functions by name, and module '__main__' has no"):
        plan(tmp_path, train=main.train)  # type: ignore[attr-defined]


def test_a_lambda_runs_in_process_but_a_resume_cannot_find_it(tmp_path, monkeypatch) -> None:
    p = plan(tmp_path, train=lambda m, params, r: None, executor="local")
    with pytest.raises(ConfigError, match="a resume finds your functions by name, and a lambda"):
        p.workload.check_resume(p.meta())


def test_a_time_budget_alone_bounds_the_search_by_time(tmp_path: Path) -> None:
    from autoembed.pipeline.plan import TIME_BOXED_TRIALS

    boxed = plan(tmp_path, time_budget=60)
    assert boxed.trials == TIME_BOXED_TRIALS  # no count: as optimize(timeout=) without n_trials
    assert plan(tmp_path, time_budget=60, trials=3).trials == 3
    # resumed: a time-boxed study trains the space's 6 without a time budget, none with one
    assert plan(tmp_path, stored=boxed.meta()).trials == 6
    assert plan(tmp_path, stored=boxed.meta(), time_budget=30).trials == TIME_BOXED_TRIALS
    # a study with a count keeps it under a new time budget
    assert plan(tmp_path, stored=plan(tmp_path, trials=4).meta(), time_budget=30).trials == 4


def test_a_time_box_on_a_cpu_runs_one_trial_per_core(tmp_path: Path, monkeypatch) -> None:
    import os

    monkeypatch.setattr(os, "cpu_count", lambda: 6)
    boxed = plan(tmp_path, time_budget=60, device="cpu")
    assert boxed.workers == 6 and boxed.threads == 1  # one torch thread each
    assert plan(tmp_path, device="cpu").workers == 1  # no time box: one, on 5 threads
    assert plan(tmp_path, device="cpu").threads == 5
    assert plan(tmp_path, time_budget=60, device="cpu", workers=2).workers == 2  # as asked
    # in process, or on a cluster the driver's cores say nothing of: one
    assert plan(tmp_path, time_budget=60, device="cpu", executor="local").workers == 1
    assert plan(tmp_path, time_budget=60, device="cpu",
                ray_address="10.0.0.1:6379").workers == 1
    # a resumed study keeps its own count, with or without a time box
    assert plan(tmp_path, stored=boxed.meta(), device="cpu").workers == 6
    # ... but in process trials run one at a time (pareto.json said workers 6, concurrency 1)
    assert plan(tmp_path, stored=boxed.meta(), device="cpu", executor="local").workers == 1
    assert plan(tmp_path, stored=plan(tmp_path, device="cpu").meta(), time_budget=60,
                device="cpu").workers == 1


def test_workers_in_process_are_refused_in_one_line(tmp_path: Path) -> None:
    # --executor local runs one trial at a time: --workers 2 was taken and ignored
    with pytest.raises(ConfigError, match=r"^--executor local runs one trial at a time: drop "
                       r"--workers 2, or run trials side by side with --executor ray$"):
        plan(tmp_path, executor="local", workers=2)
    assert plan(tmp_path, executor="local", workers=1).workers == 1
