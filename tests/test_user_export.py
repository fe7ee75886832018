"""`export --format python` for a user search: a module that rebuilds the trial's model."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

import autoembed
from autoembed.errors import ConfigError
from autoembed.user.functions import record_function
from autoembed.user.module_text import python_module

PARAMS = {"dim": 16, "lr": 0.01, "widths": (64, 32), "flag": None,
          "embedding": {"precision": "fp32", "tables": {"*": {"compression": "none"}}}}


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import examples.text_search as ts

    ref = record_function(ts.build, "model")
    out = tmp_path / "best_model.py"
    out.write_text(python_module(ref, PARAMS, "best.yaml", study="s", trial=4))
    return out, ts


def test_the_module_carries_the_params_and_the_users_build(written) -> None:
    out, ts = written
    mod = load(out, "best_model_a")
    assert mod.PARAMS == PARAMS
    assert mod.build is ts.build
    assert mod.CONFIG == out.parent / "best.yaml"
    assert "Trial 4 of study 's'" in out.read_text()


def test_reserved_names_are_aliased(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "clash.py").write_text("def build_model(params):\n    return params\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("clash", None)
    import clash

    text = python_module(record_function(clash.build_model, "model"), {}, "b.yaml",
                         study="s", trial=0)
    assert "from clash import build_model as user_build_model" in text
    assert "model = user_build_model(PARAMS)" in text
    compile(text, "x.py", "exec")


def test_not_importable_name_is_refused() -> None:
    from autoembed.user.functions import FunctionRef

    with pytest.raises(ConfigError, match="not an importable name"):
        python_module(FunctionRef("my-pkg.mod", "build", "0"), {}, "b.yaml", study="s",
                      trial=0)


def test_build_model_rebuilds_the_applied_model(written) -> None:
    out, _ = written
    autoembed.save_config(autoembed.EmbeddingConfig(tables=(
        autoembed.TableConfig("embedding", 100_000, dim=16),)), out.parent / "best.yaml")
    model = load(out, "best_model_b").build_model()
    assert sum(p.numel() for p in model.parameters()) == 100_000 * 16 + 16 * 4 + 4


@pytest.mark.parametrize("with_store", [False, True])
def test_missing_study_names_only_the_flags_given(
        with_store: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`export --study text --format python` of a study that was never made names --study
    (it used to say "--resume: ...", a flag the user never gave), and creates nothing."""
    from autoembed.cli import main

    runs = tmp_path / "runs"
    if with_store:  # a store exists (another search ran there), but not this study
        from autoembed.pipeline.study import open_storage

        open_storage(runs)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    argv = ["export", "--study", "text", "--format", "python", "--out",
            str(tmp_path / "best_model.py"), "--runs-dir", str(runs)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "--study" in err and "text" in err and "--resume" not in err, err
    assert "\n" not in err
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


OWN = '''
import autoembed
from torch import nn

def build(params):
    return nn.Sequential(nn.Embedding(50, params["dim"]), nn.Linear(params["dim"], 2))

def apply(model, config):
    model.applied_with = config
    return None

def build_model(params):  # a name the module itself defines
    return build(params)
'''


@pytest.fixture
def own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A user module with build and its own apply, and an exported config beside it;
    autoembed.apply refuses to be called."""
    (tmp_path / "ownmod.py").write_text(OWN)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("ownmod", None)
    import ownmod

    autoembed.save_config(autoembed.EmbeddingConfig(tables=(
        autoembed.TableConfig("0", 50, dim=4),)), tmp_path / "b.yaml")

    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("autoembed.apply was called")

    monkeypatch.setattr(autoembed, "apply", refuse)
    return ownmod, tmp_path


def test_a_search_with_its_own_apply_rebuilds_through_it(own) -> None:
    """The trial built its model with the search's apply; so does the module (it used to
    call autoembed.apply, a model the search never priced)."""
    ownmod, tmp = own
    out = tmp / "m.py"
    out.write_text(python_module(record_function(ownmod.build, "model"), {"dim": 4}, "b.yaml",
                                 study="s", trial=3,
                                 apply=record_function(ownmod.apply, "apply")))
    model = load(out, "own_a").build_model()
    assert model.applied_with == autoembed.load_config(tmp / "b.yaml")
    assert "ownmod:apply" in out.read_text()


def test_the_model_as_written_is_rebuilt_with_nothing_applied(own) -> None:
    """Trial 0 trained `build(params)` alone: its module applies nothing (neither apply)."""
    ownmod, tmp = own
    out = tmp / "m0.py"
    out.write_text(python_module(record_function(ownmod.build, "model"), {"dim": 4}, "b.yaml",
                                 study="s", trial=0, as_written=True,
                                 apply=record_function(ownmod.apply, "apply")))
    model = load(out, "own_b").build_model()
    assert not hasattr(model, "applied_with")
    assert [p.shape for p in model.parameters()] == [(50, 4), (2, 4), (2,)]


def test_build_and_apply_of_one_name_from_two_modules_both_import(own) -> None:
    ownmod, tmp = own
    (tmp / "ownapply.py").write_text("def build_model(model, config):\n"
                                     "    model.applied_with = 'other'\n")
    sys.modules.pop("ownapply", None)
    import ownapply

    text = python_module(record_function(ownmod.build_model, "model"), {"dim": 4}, "b.yaml",
                         study="s", trial=1, apply=record_function(ownapply.build_model, "apply"))
    (tmp / "m2.py").write_text(text)
    assert load(tmp / "m2.py", "own_c").build_model().applied_with == "other"


@pytest.mark.parametrize("name", ["best.yaml", "best.json", "best"])
def test_python_export_into_a_non_py_name_is_refused_before_anything_is_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    """The module's record goes beside it as <stem>.yaml: into best.yaml the module would
    overwrite its own record and load itself as its config. Refused in one line naming the
    .py path, exit 2, nothing written; a .py name alone means --format python."""
    from autoembed.cli import main
    from autoembed.export import format_of

    out = tmp_path / name
    assert main(["export", "--study", "text", "--format", "python", "--out", str(out),
                 "--runs-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"--out {tmp_path / 'best.py'}" in err, err
    assert list(tmp_path.iterdir()) == []
    assert format_of(Path("m.py"), None) == "python" and format_of(Path("m.yml"), None) == "yaml"


def test_the_module_finds_a_build_given_by_file_path_from_any_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A search given `code/mine.py:build` imported it with code/ on sys.path; the exported
    module, imported where code/ is not on the path, still finds that build (the folder is
    recorded with the function and put on sys.path by the module)."""
    from autoembed.user.model.load import load_object

    code = tmp_path / "code"
    code.mkdir()
    (code / "mine_a1.py").write_text("def build(params):\n    return ('built', params)\n")
    monkeypatch.setattr(sys, "path", list(sys.path))  # load_object adds code/ to it
    sys.modules.pop("mine_a1", None)
    ref = record_function(load_object(f"{code / 'mine_a1.py'}:build", "--model"), "model")
    assert ref.root == str(code.resolve()) and ref.module == "mine_a1"
    out = tmp_path / "elsewhere" / "best_model.py"
    out.parent.mkdir()
    out.write_text(python_module(ref, {"dim": 4}, "b.yaml", study="s", trial=0,
                                 as_written=True))
    sys.path.remove(str(code.resolve()))
    sys.modules.pop("mine_a1")
    assert load(out, "best_model_c").build_model() == ("built", {"dim": 4})
