"""The user's code travels to Ray workers in the runtime_env, and a node with another copy is
caught by its source hash before the first trial."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from autoembed.user.functions import FunctionRef, record_function
from autoembed.user.ship import EXCLUDES, StaleCode, check_node, runtime_env

CODE = "def train(model, params, report):\n    return {'quality': 0.5}\n"


def make_pkg(root: Path, body: str = CODE) -> Path:
    pkg = root / "shippkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "loop.py").write_text(body)
    return pkg


@pytest.fixture
def shippkg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    pkg = make_pkg(tmp_path / "src")
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    for n in ("shippkg", "shippkg.loop"):
        sys.modules.pop(n, None)
    yield importlib.import_module("shippkg.loop"), pkg
    for n in ("shippkg", "shippkg.loop"):
        sys.modules.pop(n, None)


def test_a_package_ships_as_py_modules(shippkg) -> None:
    mod, pkg = shippkg
    ref = record_function(mod.train, "train")
    env = runtime_env([ref], {"env_vars": {"A": "1"}})
    assert env == {"env_vars": {"A": "1"}, "py_modules": [str(pkg.resolve())]}


def test_a_single_file_module_ships_its_directory(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "loose_loop.py").write_text(CODE)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("loose_loop", None)
    mod = importlib.import_module("loose_loop")
    env = runtime_env([record_function(mod.train, "train")])
    assert env["working_dir"] == str(tmp_path.resolve())
    assert set(EXCLUDES) <= set(env["excludes"]) and "py_modules" not in env
    sys.modules.pop("loose_loop", None)


def test_check_node_passes_on_the_same_copy_and_names_a_stale_one(shippkg, tmp_path) -> None:
    mod, _ = shippkg
    ref = record_function(mod.train, "train")
    check_node([ref])
    other = make_pkg(tmp_path / "node2", CODE + "# edited on node 2\n").parent
    script = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(other)!r})
        from autoembed.user.functions import FunctionRef
        from autoembed.user.ship import StaleCode, check_node
        try:
            check_node([FunctionRef(**json.loads(sys.argv[1]))], "node 2")
        except StaleCode as e:
            print(e)
    """)
    import json

    out = subprocess.run([sys.executable, "-c", script, json.dumps(ref.to_dict())],
                         capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")})
    line = out.stdout.strip()
    assert line.startswith("shippkg.loop:train: node 2 has another copy of 'shippkg.loop'")
    assert ref.source_hash[:12] in line and str(other) in line


def test_check_node_names_a_missing_module() -> None:
    with pytest.raises(StaleCode, match="does not import on node 3"):
        check_node([FunctionRef("no_such_pkg_x.loop", "train", "0" * 64)], "node 3")


def test_ray_worker_imports_the_shipped_package_not_the_drivers_path(shippkg, tmp_path,
                                                                     monkeypatch) -> None:
    """The worker starts elsewhere with the package off its path: only the runtime_env
    can bring it, and the hash check passes there."""
    ray = pytest.importorskip("ray")
    mod, _ = shippkg
    ref = record_function(mod.train, "train")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv("RAY_worker_niceness", "0")
    from autoembed.pipeline.ray_tune import ray_session

    # the worker's PYTHONPATH keeps autoembed (this checkout) but not the package's folder;
    # Ray as a search starts it (without its idle helpers)
    with ray_session(None, 1, None, runtime_env=runtime_env([ref], {"env_vars": {
            "PYTHONPATH": os.environ.get("PYTHONPATH", "")}})):
        @ray.remote
        def on_node(r: dict) -> str:
            from autoembed.user.functions import FunctionRef as F
            from autoembed.user.ship import check_node as check

            check([F(**r)], "worker")
            import shippkg.loop

            return str(shippkg.loop.train(None, None, None))

        assert ray.get(on_node.remote(ref.to_dict())) == "{'quality': 0.5}"
