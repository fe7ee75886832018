"""A user search's bad input is found before any trial: one line each."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from autoembed.errors import ConfigError
from autoembed.user.request import UserRequest

ROOT = Path(__file__).resolve().parents[1]
SPACE = str(ROOT / "examples" / "text_space.yaml")
FNS = ("examples.text_search:build", "examples.text_search:example",
       "examples.text_search:train")


def test_a_good_request_records_the_functions() -> None:
    r = UserRequest.parse("800MB", *FNS, SPACE, executor="local")
    assert r.budget.bytes == 800 * 10**6 and r.trials == r.space.trials == 6
    assert {k: v.spec for k, v in r.records.items()} == dict(zip(
        ("model", "example", "train"), FNS, strict=True))
    r.check_resume(r.meta())  # the same code resumes


@pytest.mark.parametrize("kw, says", [
    ({"budget": "8XB"}, "budget '8XB' is not a size"),
    ({"executor": "dask"}, "executor 'dask': use ray"),
    ({"model": "examples.text_search:biuld"}, "--model 'examples.text_search:biuld'"),
    ({"train": "examples.nope:train"}, "--train 'examples.nope:train': module"),
    ({"example": "examples.text_search:VOCAB"}, "'VOCAB' is a int, not a function"),
    ({"train": lambda m, p, r: None}, "test_user_request:<lambda>: a lambda cannot"),
    ({"space": "nope.yaml"}, "space file 'nope.yaml' does not exist"),
    ({"trials": 0}, "trials = 0: must be an integer >= 1"),
])
def test_bad_input_is_one_line(kw, says) -> None:
    args = {"budget": "800MB", "model": FNS[0], "example": FNS[1], "train": FNS[2],
            "space": SPACE, **kw}
    with pytest.raises(ConfigError) as e:
        UserRequest.parse(args.pop("budget"), args.pop("model"), args.pop("example"),
                          args.pop("train"), args.pop("space"), **args)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_resume_refuses_changed_code_unless_allowed() -> None:
    r = UserRequest.parse("800MB", *FNS, SPACE)
    meta = r.meta()
    meta["functions"]["train"]["source_hash"] = "0" * 64  # the study ran an older copy
    with pytest.raises(ConfigError, match="train examples.text_search:train: module"):
        r.check_resume(meta)
    UserRequest.parse("800MB", *FNS, SPACE, allow_changed_code=True).check_resume(meta)
    with pytest.raises(ConfigError, match="was not a search over your own model"):
        r.check_resume({"space": "x"})


def test_a_script_function_is_refused(tmp_path, monkeypatch) -> None:
    import types

    main = types.ModuleType("__main__")
    exec("def train(model, params, report):\n    pass\n", main.__dict__)
    monkeypatch.setitem(sys.modules, "__main__", main)
    with pytest.raises(ConfigError, match="train = __main__:train: a function defined in"):
        UserRequest.parse("800MB", FNS[0], FNS[1], main.train, SPACE)
