"""Recording the user's functions so a resume can find them, and resolving pkg.mod:name."""

from __future__ import annotations

import functools
import hashlib
import importlib
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from autoembed.errors import ConfigError
from autoembed.user.functions import (
    FunctionRef,
    check_findable,
    check_unchanged,
    record_function,
    resolve_function,
)

SOURCE = textwrap.dedent("""
    def build(params):
        return params

    def outer():
        def inner(params):
            return params
        return inner

    square = lambda x: x * x  # noqa: E731

    class Factory:
        @staticmethod
        def make(params):
            return params

    alias = build
    not_callable = 3
""")


@pytest.fixture
def usermod(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    pkg = tmp_path / "userpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "code.py").write_text(SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    for name in ("userpkg", "userpkg.code"):
        sys.modules.pop(name, None)
    yield importlib.import_module("userpkg.code")
    for name in ("userpkg", "userpkg.code"):
        sys.modules.pop(name, None)


def test_records_module_qualname_and_the_module_source_hash(usermod) -> None:
    ref = record_function(usermod.build, "model")
    assert ref.spec == "userpkg.code:build"
    assert ref.source_hash == hashlib.sha256(SOURCE.encode()).hexdigest()
    assert FunctionRef.from_dict(ref.to_dict()) == ref
    assert record_function(usermod.Factory.make, "model").spec == "userpkg.code:Factory.make"
    assert record_function(usermod.Factory, "model").spec == "userpkg.code:Factory"


@pytest.mark.parametrize("what, says", [
    (lambda m: m.square, "a lambda"),
    (lambda m: m.outer(), "nested in another"),
    (lambda m: functools.partial(m.build), "functools.partial"),
])
def test_unfindable_functions_are_recorded_and_refused_where_they_are_looked_for(
        usermod, what, says) -> None:
    ref = record_function(what(usermod), "train")  # runs in this process as it is
    assert ref.missing is not None and says in ref.missing
    assert FunctionRef.from_dict(ref.to_dict()) == ref  # a resume reads why
    for who, script in (("a Ray worker", False), ("a resume", True)):
        with pytest.raises(ConfigError, match=says) as e:
            check_findable({"train": ref}, who, script)
        assert "\n" not in str(e.value) and str(e.value).startswith(f"train = {ref.spec}: {who}")


def test_something_not_callable_is_refused(usermod) -> None:
    with pytest.raises(ConfigError, match="train = 3: must be a function"):
        record_function(usermod.not_callable, "train")


def test_a_function_of_main_is_found_by_a_resume_of_its_script_not_by_ray(
        tmp_path: Path) -> None:
    script = tmp_path / "my_search.py"
    script.write_text(textwrap.dedent("""
        from autoembed.errors import ConfigError
        from autoembed.user.functions import check_findable, record_function
        def train(model, params, report):
            pass
        ref = record_function(train, "train")
        check_findable({"train": ref}, "a resume", script=True)
        try:
            check_findable({"train": ref}, "a Ray worker", script=False)
        except ConfigError as e:
            print(ref.missing, e)
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         check=True).stdout
    assert out.startswith("None train = __main__:train: a Ray worker finds your functions by "
                          "name, and it is defined in the script being run")


def test_a_name_holding_another_object_is_not_findable(usermod) -> None:
    usermod.build2 = usermod.build  # fine: same object under its own qualname
    assert record_function(usermod.build, "model").missing is None

    def impostor(params):
        return params
    impostor.__module__, impostor.__qualname__ = "userpkg.code", "build"
    assert "is another object" in (record_function(impostor, "model").missing or "")


def test_resolve_imports_from_the_current_directory(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "cwdmod.py").write_text("def train(model, params, report):\n    return 1\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    sys.modules.pop("cwdmod", None)
    fn = resolve_function("cwdmod:train", "--train")
    assert fn(None, None, None) == 1
    sys.modules.pop("cwdmod", None)


@pytest.mark.parametrize("spec, says", [
    ("userpkg.code", "give pkg.module:name"),
    ("userpkg.nope:build", "module 'userpkg.nope' does not import (ModuleNotFoundError"),
    ("userpkg.code:biuld", "has no 'biuld' (did you mean 'build'?)"),
    ("userpkg.code:not_callable", "'not_callable' is a int, not a function"),
])
def test_resolve_errors(usermod, spec, says) -> None:
    with pytest.raises(ConfigError) as e:
        resolve_function(spec, "--model")
    assert says in str(e.value) and str(e.value).startswith(f"--model '{spec}'")


def test_resolve_a_module_that_raises_on_import(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "boom.py").write_text("raise RuntimeError('no GPU here')\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"does not import \(RuntimeError: no GPU here\)"):
        resolve_function("boom:f", "--example")


def test_resume_refuses_changed_source_unless_allowed() -> None:
    a = FunctionRef("m", "train", "aa")
    check_unchanged(a, a, "train", allow_changed=False)
    changed = FunctionRef("m", "train", "bb")
    with pytest.raises(ConfigError, match="changed since the study started.*--allow-changed"):
        check_unchanged(a, changed, "train", allow_changed=False)
    check_unchanged(a, changed, "train", allow_changed=True)
    with pytest.raises(ConfigError, match="resume with --train m:train"):
        check_unchanged(a, FunctionRef("m", "train2", "aa"), "train", allow_changed=True)
