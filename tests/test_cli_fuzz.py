"""Bad input everywhere (issue 8): hypothesis feeds random argv, budgets, YAML configs, search
spaces and study files to every command, and the exit-status contract (docs/contracts.md) must
hold: the exit status is 0, 2 or 3; for 2 and 3 stderr holds one `autoembed:` line (plus any
`autoembed: note:`); never a traceback.

The CLI runs in process (`autoembed.cli.main`). Where a command would start real work, a
sentinel stops it: `search` at `open_tracker` (after every check, the pricing of the space's
cheapest corner and the study store; before Ray); `train` at `make_trainer` (after the
config, the data and the device checks; a traced estimate's fake trainer still runs); `ui`
where the MLflow store or server would start. Reaching a sentinel means "validated, would
run", which the contract allows. A few subprocess checks run the real `python -m autoembed`
for the same invariants, and absurd sizes (vocab 10**12 to 2**63 - 1) are priced, not crashed
on, by the estimate and by the search.
"""

from __future__ import annotations

import contextlib
import copy
import io
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

from autoembed.cli import main

EXE = [sys.executable, "-m", "autoembed"]
SPACES_DIR = Path(__file__).resolve().parents[1] / "search_spaces"

# Tuned so the whole file runs in under a minute on the 2-core machine; for a deeper run:
# AUTOEMBED_FUZZ_EXAMPLES=1000 pytest tests/test_cli_fuzz.py
FUZZ = settings(
    max_examples=int(os.environ.get("AUTOEMBED_FUZZ_EXAMPLES", "60")),
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


class WouldRun(BaseException):
    """Raised where a command would start real work: every check has passed."""


def _stop(what: str) -> Any:
    def stop(*_: Any, **__: Any) -> None:
        raise WouldRun(what)

    return stop


@pytest.fixture(scope="module", autouse=True)
def sentinels() -> Iterator[None]:
    import autoembed.models as models
    import autoembed.models.step as step
    import autoembed.tracking as tracking
    import autoembed.tracking.mlflow_store as mlflow_store
    import autoembed.tracking.ui as ui

    real_make_trainer = models.make_trainer

    def make_trainer(config: Any, device: Any = "cpu", *, check_device: bool = True) -> Any:
        if not check_device:  # the traced estimate's fake step: run it for real
            return real_make_trainer(config, device, check_device=False)
        step.check_supported(config.resolve(), step.as_device(device))  # what train checks
        raise WouldRun("train")

    mp = pytest.MonkeyPatch()
    mp.setattr(tracking, "open_tracker", _stop("search"))
    mp.setattr(models, "make_trainer", make_trainer)
    mp.setattr(ui, "server_command", _stop("ui"))
    mp.setattr(mlflow_store, "open_client", _stop("ui"))  # creating the store comes first
    yield
    mp.undo()


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


_counter = itertools.count()


def fresh_dir(scratch: Path) -> Path:
    d = scratch / f"x{next(_counter)}"
    d.mkdir()
    return d


def run_cli(argv: list[str]) -> tuple[int | None, str, str]:
    """(exit status or None if a sentinel was reached, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc: int | None = main(argv)
            except WouldRun:
                rc = None
    finally:
        for s, h in handlers.items():  # `ui` installs its own before the server starts
            signal.signal(s, h)
    return rc, out.getvalue(), err.getvalue()


def check(argv: list[str], rc: int | None, out: str, err: str) -> list[str]:
    """The exit-status contract (docs/contracts.md); returns the error line(s) for further
    checks."""
    where = f"argv={argv!r}\nrc={rc}\nstderr={err[-3000:]}\nstdout={out[-1500:]}"
    if currently_in_test_context():  # pytest --hypothesis-show-statistics shows the mix
        event(f"exit {'would run' if rc is None else rc}")
    assert "Traceback" not in out + err, where
    if rc is None:
        return []
    assert rc in (0, 2, 3), where
    lines = [ln for ln in err.splitlines()
             if ln.strip() and not ln.startswith("autoembed: note:")]
    if rc in (2, 3):
        assert len(lines) == 1 and lines[0].startswith("autoembed: "), where
    return lines


# ============================================================== values, valid and not

NASTY = ["", " ", "abc", "[/]", "[bold]x", "[/bold]", "]]", "%s", "{0}", "\x00", "é", "🙂",
         "nan", "inf", "-inf", "-1", "1e400", "0x10", "8XB", "../../etc", "a\nb", "~", "null",
         "-", "--", "--json"]
BIG = [0, -1, -3, 1, 2, 10**9, 10**12, 10**15, 10**18, 2**63 - 1, 2**63, 2**64, 10**30]
SIZES = ["8GB", "8GiB", "7.5G", "7500MB", "0.5TB", "80%", "100%", "1", "1KiB", "1e3GB",
         "8XB", "-1GB", "nan", "NaN%", "inf", "1e400GB", "1e400%", "0", "0%", "0.0001%",
         "0.5", "1e-30GB", "150%", "-5%", "%", "8 GB", "8G B", "", " ", "1,000MB", "8gb",
         "1e400", "9" * 400, "0x10GB", "8GB8"]

scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from(BIG),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(NASTY),
    st.text(max_size=8),
)
anything = st.recursive(
    scalar,
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=6,
)
int_text = st.one_of(st.sampled_from(BIG).map(str), st.sampled_from(NASTY),
                     st.integers(-5, 5000).map(str))
float_text = st.one_of(st.sampled_from(["0", "0.5", "1", "-1", "nan", "inf", "1e400", "2",
                                        "1e-400", "abc"]), st.floats().map(str))


def mix(valid: list[str], invalid: list[str]) -> st.SearchStrategy[str]:
    """Valid values two times in three, so that some whole command lines are valid."""
    return st.one_of(st.sampled_from(valid), st.sampled_from(valid), st.sampled_from(invalid))


def flag(name: str, values: st.SearchStrategy[str]) -> st.SearchStrategy[list[str]]:
    return values.map(lambda v: [name, v])


def argv_of(flags: list[st.SearchStrategy[list[str]]], extra: st.SearchStrategy[list[str]]
            ) -> st.SearchStrategy[list[str]]:
    """A random subset of `flags` in random order, sometimes with a stray token."""
    return st.tuples(
        st.lists(st.sampled_from(range(len(flags))), unique=True, max_size=6)
        .flatmap(lambda idx: st.tuples(*[flags[i] for i in idx])),
        extra,
    ).map(lambda t: [tok for pair in t[0] for tok in pair] + t[1])


stray: st.SearchStrategy[list[str]] = st.one_of(
    st.just([]), st.just([]), st.just([]),
    st.sampled_from([["--bogus"], ["extra"], ["--json", "--json"], ["--dim"], ["--budget"],
                     ["--", "x"], ["-h"]]),
)


# ============================================================== files, valid and not

CONFIGS: list[dict[str, Any]] = [
    {"task": "ctr", "tables": [{"name": "user", "vocab_size": 1024}], "dim": 8},
    {"task": "text", "tables": [{"name": "tokens", "vocab_size": 5000}], "dim": 16,
     "seq_len": 32, "num_classes": 4, "batch_size": 8, "pooling": "mean"},
    {"task": "ctr", "tables": [{"name": "a", "vocab_size": 100000, "pooling_factor": 2.0},
                               {"name": "b", "vocab_size": 50}],
     "dim": 16, "compression": "hash", "hash_buckets": 1000, "table_optimizer": "adagrad",
     "dense_optimizer": "adam", "precision": "bf16_master", "batch_size": 64,
     "dense_layers": [32, 8], "data": {"name": "synthetic-ctr"}},
]
SPACES = {n: yaml.safe_load((SPACES_DIR / f"{n}.yaml").read_text()) for n in ("tiny", "ctr")}
BAD_TEXT = [
    "task: [ctr\n", "::\n", "\t- x\n", "a: *nope\n", "{", "a: 1\na: 2\n",
    "!!python/object:os.system x\n",
    "%YAML 9.9\n---\na: 1\n", "a: " + "[" * 5000 + "]" * 5000 + "\n",
    "- " * 2000 + "x\n", "{" * 3000 + "}" * 3000, "null\n", "42\n", "[1, 2]\n", "'just text'\n",
    "---\na: 1\n---\nb: 2\n", "a: &x {b: *x}\n",
]


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*prefix, i))
    return out


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    parent = doc
    for k in path[:-1]:
        parent = parent[k]
    parent[path[-1]] = value
    return doc


def _nest(depth: int, leaf: Any) -> Any:
    for i in range(depth):
        leaf = [leaf] if i % 2 else {"a": leaf}
    return leaf


@st.composite
def mutated(draw: st.DrawFn, bases: list[dict[str, Any]]) -> Any:
    """A valid document with 0-3 random mutations (kept valid about one time in six)."""
    doc = copy.deepcopy(draw(st.sampled_from(bases)))
    for _ in range(draw(st.integers(0, 3))):
        paths = _paths(doc)
        path = draw(st.sampled_from(paths))
        op = draw(st.sampled_from(["set", "set", "delete", "unknown", "nest", "huge",
                                   "empty_range", "top"]))
        if op == "set":
            doc = _set(doc, path, draw(anything))
        elif op == "delete" and path:
            parent = doc
            for k in path[:-1]:
                parent = parent[k]
            del parent[path[-1]]
        elif op == "unknown" and isinstance(doc, dict):
            doc[draw(st.sampled_from(["dimm", "vocab", "extra", "", "params", "1"]))] = draw(
                anything)
        elif op == "nest":
            doc = _set(doc, path, _nest(draw(st.sampled_from([3, 30, 200])), draw(scalar)))
        elif op == "huge":
            doc = _set(doc, path, draw(st.sampled_from(BIG + [1e308, float("inf")])))
        elif (op == "empty_range" and isinstance(doc, dict) and isinstance(doc.get("params"), dict)
              and doc["params"]):
            name = draw(st.sampled_from(sorted(doc["params"], key=str)))
            doc["params"][name] = draw(st.sampled_from([
                {"type": "int", "low": 64, "high": 8}, {"choices": []},
                {"type": "float", "low": 1.0, "high": 1.0, "log": True},
                {"type": "int", "low": 0, "high": 10, "log": True}, {"choices": None},
                {"type": "int", "low": 8, "high": 64, "multiple_of": 0},
                {"type": "int", "low": 8, "high": 64, "multiple_of": 100},
                {"type": "float", "low": float("nan"), "high": 1.0}]))
        elif op == "top":
            doc = draw(st.sampled_from([[], [doc], "text", 7, None, 1.5, True]))
        if not isinstance(doc, (dict, list)):
            break
    return doc


@st.composite
def a_file(draw: st.DrawFn, bases: list[dict[str, Any]], suffix: str) -> tuple[str, Any]:
    """What to write: ("yaml"|"json", doc), ("text", str), ("bytes", b), or a non-file."""
    kind = draw(st.sampled_from(["yaml", "yaml", "yaml", "json", "text", "bytes", "empty",
                                 "missing", "dir"]))
    if kind in ("yaml", "json"):
        return kind, draw(mutated(bases))
    if kind == "text":
        return kind, draw(st.one_of(st.sampled_from(BAD_TEXT), st.text(max_size=40)))
    if kind == "bytes":
        return kind, draw(st.sampled_from([b"\x00\x01\xff\xfe" * 8, b"\x89PNG\r\n\x1a\n",
                                           bytes(range(256))]))
    return kind, None


def write_file(d: Path, spec: tuple[str, Any], suffix: str = ".yaml") -> str:
    kind, content = spec
    p = d / f"input{suffix}"
    if kind == "yaml":
        try:
            p.write_text(yaml.safe_dump(content, allow_unicode=True))
        except (yaml.YAMLError, RecursionError):
            p.write_text("a: [\n")
    elif kind == "json":
        p.write_text(json.dumps(content, allow_nan=True))
    elif kind == "text":
        p.write_text(content)
    elif kind == "bytes":
        p.write_bytes(content)
    elif kind == "empty":
        p.write_text("")
    elif kind == "dir":
        p.mkdir()
    return str(p)


# ============================================================== estimate

ESTIMATE_FLAGS = [
    flag("--budget", st.sampled_from(SIZES)),
    flag("--method", st.sampled_from(["analytic", "traced", "psychic", "", "TRACED"])),
    flag("--gpus", st.sampled_from(["1", "2", "8", "0", "-1", "abc", str(10**6)])),
    flag("--sharding", st.sampled_from(["table", "row", "diag", ""])),
    flag("--task", st.sampled_from(["ctr", "text", "vision", ""])),
    flag("--vocab", st.one_of(
        st.sampled_from(["1000000", "1000000,5000", "1000000000000", "1000000000000000",
                         str(2**63 - 1), str(2**63), str(10**18), "0", "-5", "", ",", "1,,2",
                         "abc", "1e6", "1000000000000,1000000000000"]),
        st.lists(st.sampled_from(BIG), min_size=1, max_size=3).map(
            lambda v: ",".join(map(str, v))))),
    flag("--dim", st.sampled_from(["8", "300", "0", "-3", str(10**9), "abc", "7", "1"])),
    flag("--batch", int_text),
    flag("--seq", int_text),
    flag("--pooling-factor", float_text),
    flag("--precision", st.sampled_from(["fp32", "fp16", "bf16", "fp16_master", "bf16_master",
                                         "amp_fp16", "amp_bf16", "fp8", "int8", ""])),
    flag("--serving", st.sampled_from(["none", "int8", "int4", "int2"])),
    flag("--optimizer", st.sampled_from(["sgd", "momentum", "adam", "adamw", "adagrad",
                                         "rowwise_adagrad", "sparse_adam", "lion", ""])),
    flag("--dense-optimizer", st.sampled_from(["adam", "sgd", "sparse_adam", "rowwise_adagrad",
                                               "x"])),
    flag("--compression", st.sampled_from(["none", "hash", "qr", "mixed_dim", "shared", "zip"])),
    flag("--hash-buckets", int_text),
    flag("--qr-collisions", int_text),
    flag("--qr-operation", st.sampled_from(["mult", "add", "concat", "div"])),
    flag("--mixed-dim-alpha", float_text),
    flag("--pooling", st.sampled_from(["mean", "sum", "naive", "max"])),
    flag("--interaction", st.sampled_from(["concat", "dot", "cross"])),
    flag("--dense-layers", st.sampled_from(["", "256,64", "0", "-1,2", "a,b", "1000000000,2",
                                            "1," * 50 + "1"])),
    flag("--num-classes", int_text),
    flag("--grad-accum", int_text),
    flag("--reserve", st.sampled_from(SIZES)),
    flag("--device-memory", st.sampled_from(SIZES)),
    st.sampled_from([["--checkpointing"], ["--no-checkpointing"], ["--json"], ["--json"]]),
]


@FUZZ
@given(argv=argv_of(ESTIMATE_FLAGS, stray))
def test_fuzz_estimate_flags(argv: list[str]) -> None:
    argv = ["estimate", *argv]
    rc, out, err = run_cli(argv)
    check(argv, rc, out, err)
    if rc == 0 and "--json" in argv and "-h" not in argv:
        d = json.loads(out)
        assert d["device_total"] == d["reserved_peak"] + d["overhead"]
        assert d["fits"] in (None, True)


@FUZZ
@given(budget=st.one_of(st.sampled_from(SIZES), st.text(max_size=12)),
       device_memory=st.one_of(st.none(), st.sampled_from(["24GB", "80GB", "nan", "0"])))
def test_fuzz_budgets_name_the_value(budget: str, device_memory: str | None) -> None:
    argv = ["estimate", "--budget", budget, "--json"]
    if device_memory is not None:
        argv += ["--device-memory", device_memory]
    rc, out, err = run_cli(argv)
    lines = check(argv, rc, out, err)
    if rc == 2 and budget.isprintable() and not budget.startswith("-"):
        # a value click itself refuses (e.g. a missing one) has no budget text to name
        bad = budget.strip() if device_memory is None or device_memory in ("24GB", "80GB") \
            else None
        if bad:
            assert bad in lines[0], (argv, lines)
    if rc in (0, 3):
        assert json.loads(out)["fits"] is (rc == 0)


@FUZZ
@given(spec=a_file(CONFIGS, ".yaml"),
       budget=st.one_of(st.none(), st.sampled_from(SIZES)),
       method=st.sampled_from(["analytic", "traced"]),
       as_json=st.booleans())
def test_fuzz_estimate_config_files(spec: tuple[str, Any], budget: str | None, method: str,
                                    as_json: bool, scratch: Path) -> None:
    d = fresh_dir(scratch)
    path = write_file(d, spec, ".json" if spec[0] == "json" else ".yaml")
    argv = ["estimate", "--config", path, "--method", method] + (["--json"] if as_json else [])
    if budget is not None:
        argv += ["--budget", budget, "--device-memory", "24GB"]
    rc, out, err = run_cli(argv)
    lines = check(argv, rc, out, err)
    if rc == 2 and spec[0] in ("missing", "dir", "bytes", "empty") and budget in (None, "8GB"):
        assert path in lines[0], (argv, lines)  # the file is named


# ============================================================== search (stops before Ray)

SEARCH_FLAGS = [
    flag("--trials", mix(["1", "4"], ["0", "-1", "abc", str(10**18)])),
    flag("--time-budget", mix(["60", "0.5"], ["0", "-1", "nan", "inf", "1e400", "abc"])),
    flag("--objectives", mix(["quality,memory", "quality,memory,throughput"],
                             ["", ",", "speed", "quality,quality", "latency,steps_to_target"])),
    flag("--sampler", mix(["tpe", "nsga2", "random", "grid"], ["cmaes", ""])),
    flag("--seed", mix(["0", "7", str(2**32 - 1)], ["-1", "abc", str(2**32), str(2**64)])),
    flag("--workers", mix(["1", "2"], ["0", "-3", "abc"])),
    flag("--device", mix(["auto", "cpu"], ["cuda", "cuda:3", "tpu", ""])),
    flag("--study", mix(["s1", "ok-name_1.2"], ["../../etc", "", "a b", "x" * 300, "/abs",
                                                "."])),
    flag("--pick", mix(["within-noise", "knee", "max-quality", "min-memory", "max-throughput",
                        "trial:3"],
                       ["trial:-1", "trial:x", "best", ""])),
    flag("--data", mix(["synthetic-ctr"], ["nope", "/no/such.csv", "", "movielens"])),
    flag("--label", st.sampled_from(["y", ""])),
    flag("--categorical", st.sampled_from(["a,b", "", ","])),
    flag("--text-column", st.sampled_from(["text", ""])),
    st.sampled_from([["--resume"], ["--early-stop"], ["--no-early-stop"], ["--json"]]),
]


@FUZZ
@given(budget=mix(["8GB", "800MB", "1GB", "2GiB"], SIZES), space=st.one_of(
    st.sampled_from(["tiny", "ctr", "text", "default", "nope", "search_spaces/tiny.yaml"]),
    a_file(list(SPACES.values()), ".yaml")),
    rest=argv_of(SEARCH_FLAGS, stray), runs=st.sampled_from(["shared", "shared", "file",
                                                             "under-file"]))
def test_fuzz_search_inputs(budget: str, space: Any, rest: list[str], runs: str,
                            scratch: Path) -> None:
    d = fresh_dir(scratch)
    space_arg = space if isinstance(space, str) else write_file(d, space)
    (d / "file").write_text("not a directory")
    runs_dir = {"shared": scratch / "runs", "file": d / "file",
                "under-file": d / "file" / "runs"}[runs]
    argv = ["search", "--budget", budget, "--space", space_arg, "--runs-dir",
            str(runs_dir), "--tracking-uri", "none", *rest]
    rc, out, err = run_cli(argv)
    check(argv, rc, out, err)
    assert rc != 0 or "-h" in argv  # a search that would run stops at the sentinel


# ============================================================== train (stops before the model)

@FUZZ
@given(spec=a_file(CONFIGS, ".yaml"), rest=argv_of([
    flag("--data", mix(["synthetic-ctr", "synthetic-text"],
                       ["nope", "@missing", "@dir", "@binary", "@empty", ""])),
    flag("--max-steps", mix(["1", "50"], ["0", "-1", "abc", str(10**30)])),
    flag("--epochs", mix(["1"], ["0", "-1", "abc"])),
    flag("--device", mix(["cpu"], ["cuda", "cuda:7", "tpu", "", "meta"])),
    flag("--checkpoint-every", mix(["10"], ["0", "-1", "abc"])),
    st.sampled_from([["--resume"], ["--no-resume"], ["--json"]]),
], stray), out=st.sampled_from(["out", "out", "file", "file/out"]))
def test_fuzz_train_inputs(spec: tuple[str, Any], rest: list[str], out: str,
                           scratch: Path) -> None:
    d = fresh_dir(scratch)
    path = write_file(d, spec)
    (d / "dir").mkdir()
    (d / "binary.csv").write_bytes(b"\x00\xff" * 20)
    (d / "empty.csv").write_text("")
    rest = [str(d / f"{t[1:]}.csv") if t.startswith("@") and t != "@dir" else
            (str(d / "dir") if t == "@dir" else t) for t in rest]
    (d / "file").write_text("not a directory")
    argv = ["train", "--config", path, "--out", str(d / out), *rest]
    rc, out, err = run_cli(argv)
    check(argv, rc, out, err)


# ============================================================== ui (stops before the server)

@pytest.fixture(scope="module")
def busy_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


@FUZZ
@given(port=st.sampled_from(["0", "-1", "65536", str(10**12), "abc", "", "free", "busy"]),
       host=st.sampled_from(["127.0.0.1", "0.0.0.0", "::1", "1.2.3.4", "", "::2"]),
       runs=st.sampled_from(["fresh", "file", "missing"]))
def test_fuzz_ui_inputs(port: str, host: str, runs: str, scratch: Path, busy_port: int) -> None:
    d = fresh_dir(scratch)
    if port == "free":
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = str(s.getsockname()[1])
    elif port == "busy":
        port = str(busy_port)
    runs_dir = d / "runs"
    if runs == "fresh":
        runs_dir.mkdir()
        (runs_dir / "mlflow.db").write_text("")  # so the sentinel is the server itself
    elif runs == "file":
        runs_dir.write_text("not a directory")
    argv = ["ui", "--port", port, "--host", host, "--runs-dir", str(runs_dir)]
    rc, out, err = run_cli(argv)
    check(argv, rc, out, err)


# ============================================================== export (real, on a fake study)

def _pareto() -> dict[str, Any]:
    members = [{"trial": n, "config": {**CONFIGS[0], "dim": 8 * (n + 1)},
                "metrics": {"quality": 0.5 + n / 10, "memory": 100 * (3 - n),
                            "throughput": 1000.0}} for n in range(3)]
    return {"study": "s", "budget_bytes": 8_000_000_000, "members": members, "best": 1,
            "pick": "knee", "objectives": [{"name": "quality", "direction": "maximize"},
                                           {"name": "memory", "direction": "minimize"}]}


@FUZZ
@given(pareto=a_file([_pareto()], ".json"), rest=argv_of([
    flag("--pick", st.sampled_from(["within-noise", "knee", "max-quality", "min-memory",
                                    "max-throughput",
                                    "trial:1", "trial:2", "trial:99", "trial:-1", "trial:",
                                    "best", ""])),
    flag("--format", st.sampled_from(["yaml", "json", "xml", ""])),
    flag("--run-id", st.sampled_from(["abc"])),
    flag("--tracking-uri", st.sampled_from(["none", "file:///tmp/x", "ftp://x"])),
    st.sampled_from([["--force"], ["--force"]]),
], stray), study=st.sampled_from(["s", "s", "missing", "../s", ""]),
    out=st.sampled_from(["best.yaml", "best.json", "best.txt", "dir", "exists.yaml",
                         "sub/best.yaml"]))
def test_fuzz_export_inputs(pareto: tuple[str, Any], rest: list[str], study: str, out: str,
                            scratch: Path) -> None:
    d = fresh_dir(scratch)
    sdir = d / "runs" / "s"
    sdir.mkdir(parents=True)
    kind = pareto[0]
    write_file(sdir, ("json", pareto[1]) if kind == "yaml" else pareto, ".json")
    if (sdir / "input.json").exists():
        (sdir / "input.json").rename(sdir / "pareto.json")
    (d / "dir").mkdir()
    (d / "exists.yaml").write_text("x: 1\n")
    if "--run-id" in rest:  # a real MLflow store is not what this fuzz is about
        rest += ["--pick", "knee"]
    argv = ["export", "--study", study, "--out", str(d / out), "--runs-dir", str(d / "runs"),
            *rest]
    rc, outp, err = run_cli(argv)
    check(argv, rc, outp, err)
    if rc == 0 and "-h" not in argv:
        assert "wrote" in outp


# ============================================================== regressions, one per bug found


@pytest.mark.parametrize("argv", [
    ["search"],  # missing --budget
    ["estimate", "--bogus"],
    ["estimate", "--dim", "abc"],
    ["estimate", "--dim"],
    ["nosuchcommand"],
    ["ui", "--port", "abc"],
])
def test_usage_errors_are_one_line(argv: list[str]) -> None:
    rc, out, err = run_cli(argv)
    assert rc == 2 and len(err.strip().splitlines()) == 1, err  # was click's 4-line block
    assert err.startswith("autoembed: error: ") and "--help" in err


@pytest.mark.parametrize("value", ["inf", "1e400", "-inf", "nan", "0"])
def test_a_time_budget_must_be_a_finite_number(value: str) -> None:
    """--time-budget inf was taken: a search with no trial count then never ended."""
    rc, out, err = run_cli(["search", "--budget", "1GB", "--time-budget", value])
    assert rc == 2 and err.startswith("autoembed: error: --time-budget "), err
    assert err.rstrip().endswith(": must be a finite number > 0"), err


@pytest.mark.parametrize(("argv", "value"), [
    (["estimate", "--dim", "1.5"], "Invalid value '1.5' for '--dim'"),
    (["ui", "--port=abc"], "Invalid value 'abc' for '--port'"),
    (["search", "--budget", "1GB", "--trials", "2", "--trials", "x"],
     "Invalid value 'x' for '--trials'"),
])
def test_a_value_of_the_wrong_type_is_named(argv: list[str], value: str) -> None:
    rc, out, err = run_cli(argv)  # was "Invalid value for '--dim': Input should be a ..."
    assert rc == 2 and len(err.strip().splitlines()) == 1 and value in err, err


@pytest.mark.parametrize(("argv", "fix"), [
    (["search", "--budget", "1GB", "--categorical", "user", "item", "--trials", "2"],
     "'item' after '--categorical user': --categorical takes one comma-separated list: "
     "--categorical user,item"),
    (["search", "--budget", "1GB", "--objectives", "quality", "memory", "throughput"],
     "--objectives quality,memory,throughput"),
    (["estimate", "--vocab", "1000", "2000"], "--vocab 1000,2000"),
])
def test_a_list_given_as_shell_words_says_the_comma_list(argv: list[str], fix: str) -> None:
    """`--categorical user item`, as shells and compare.py take a list, is refused in one
    line that gives the comma list (was click's bare "unexpected extra argument (item)")."""
    rc, out, err = run_cli(argv)
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert fix in err


def test_extra_words_after_a_single_value_option_are_not_made_a_list() -> None:
    rc, out, err = run_cli(["search", "--budget", "1GB", "--study", "my", "study"])
    assert rc == 2 and "unexpected extra argument" in err and "comma" not in err


@pytest.mark.parametrize("budget", ["0\x1e0", "8\nXB", "8\u2028XB", "\x00"])
def test_a_value_with_line_breaks_stays_on_one_line(budget: str) -> None:
    rc, out, err = run_cli(["estimate", "--budget", budget])
    assert rc == 2 and len(err.splitlines()) == 1, err  # was two lines: '0', then '0' is ...
    assert repr(budget)[1:-1] in err  # the value, escaped


@pytest.mark.parametrize("argv", [
    ["search", "--budget", "8GB", "--space", "tiny", "--tracking-uri", "none", "--runs-dir"],
    ["ui", "--runs-dir"],
    ["train", "--config", "CONFIG", "--out"],
    ["export", "--study", "s", "--out"],
])
def test_a_file_where_a_directory_is_needed(argv: list[str], tmp_path: Path) -> None:
    file = tmp_path / "file"
    file.write_text("x")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(CONFIGS[2]))
    argv = [str(cfg) if a == "CONFIG" else a for a in argv] + [str(file / "sub")]
    rc, out, err = run_cli(argv)  # was FileExistsError / NotADirectoryError, exit 1
    assert rc == 2 and err.count("\n") == 1 and f"'{file}' is a file" in err, err


@pytest.mark.parametrize(("text", "command"), [
    ("a: " + "[" * 2000 + "]" * 2000, ["estimate", "--config"]),
    ("{" * 2000 + "}" * 2000, ["train", "--config"]),
    ("- " * 2000 + "x", ["search", "--budget", "8GB", "--space"]),
])
def test_deep_nesting_is_bad_input(text: str, command: list[str], tmp_path: Path) -> None:
    f = tmp_path / "deep.yaml"
    f.write_text(text)
    rc, out, err = run_cli([*command, str(f), *(["--runs-dir", str(tmp_path / "runs")]
                                                if command[0] == "search" else [])])
    assert rc == 2 and "nested too deeply" in err and str(f) in err, err  # was RecursionError


def test_damaged_pareto_json_is_bad_input(tmp_path: Path) -> None:
    sdir = tmp_path / "runs" / "s"
    sdir.mkdir(parents=True)
    for content in (json.dumps({**_pareto(), "members": [None]}),  # was AttributeError
                    json.dumps({**_pareto(), "objectives": "quality"}),
                    "[" * 100_000, "\udcff".encode("utf-8", "surrogatepass").decode("latin-1")):
        (sdir / "pareto.json").write_text(content, encoding="latin-1")
        rc, out, err = run_cli(["export", "--study", "s", "--out", str(tmp_path / "b.yaml"),
                                "--runs-dir", str(tmp_path / "runs")])
        assert rc == 2 and str(sdir / "pareto.json") in err, (content[:50], err)


@pytest.mark.parametrize("extra", [[], ["--gpus", "2"]])
def test_table_names_are_text_not_markup(extra: list[str], tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"task": "ctr", "dim": 8, "tables": [
        {"name": "[/bold]", "vocab_size": 1000}, {"name": "[red]x", "vocab_size": 10}]}))
    rc, out, err = run_cli(["estimate", "--config", str(cfg), *extra])
    assert rc == 0, err  # was MarkupError (exit 1): rich read the name as a closing tag
    assert "[/bold]" in out and "[red]x" in out


def test_a_million_gpus_is_refused_not_priced_for_minutes() -> None:
    rc, out, err = run_cli(["estimate", "--gpus", "1000000"])
    assert rc == 2 and "1000000" in err and "4096" in err, err  # took minutes, exit 0
    assert run_cli(["estimate", "--gpus", "4096", "--json"])[0] == 0


@pytest.mark.parametrize(("seed", "ok"), [(str(2**32 - 1), True), (str(2**32), False),
                                          (str(2**64), False)])
def test_seed_past_numpy_is_refused_before_ray(seed: str, ok: bool, tmp_path: Path) -> None:
    rc, out, err = run_cli(["search", "--budget", "8GB", "--space", "tiny", "--seed", seed,
                            "--runs-dir", str(tmp_path), "--tracking-uri", "none"])
    if ok:
        assert rc is None  # reaches the sentinel: would run
    else:  # was a ValueError from numpy inside the search, after Ray had started (exit 1)
        assert rc == 2 and seed in err and "2**32 - 1" in err, err


@pytest.mark.parametrize("every", ["0", "-1"])
def test_checkpoint_every_below_one_is_refused(every: str, tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(CONFIGS[2]))
    rc, out, err = run_cli(["train", "--config", str(cfg), "--out", str(tmp_path / "o"),
                            "--checkpoint-every", every])
    assert rc == 2 and f"--checkpoint-every {every}" in err, err  # was accepted silently


@pytest.mark.parametrize("device", ["cuda", "cuda:7", "meta"])
def test_train_on_a_device_not_here_is_bad_input(device: str, tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available() and device != "meta":
        pytest.skip("a GPU is visible")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(CONFIGS[2]))
    rc, out, err = run_cli(["train", "--config", str(cfg), "--out", str(tmp_path / "o"),
                            "--device", device])
    assert rc == 2 and f"device '{device}'" in err, err  # was UnsupportedError, exit 1


@pytest.mark.parametrize("data", [0, "synthetic-ctr", [1, 2]])
def test_a_data_key_that_is_not_a_mapping_is_bad_input(data: Any, tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({**CONFIGS[2], "data": data}))
    rc, out, err = run_cli(["train", "--config", str(cfg), "--out", str(tmp_path / "o")])
    assert rc == 2 and "'data'" in err and str(cfg) in err, err  # was TypeError, exit 1


def test_nan_time_budget_is_refused(tmp_path: Path) -> None:
    rc, out, err = run_cli(["search", "--budget", "8GB", "--space", "tiny", "--time-budget",
                            "nan", "--runs-dir", str(tmp_path), "--tracking-uri", "none"])
    assert rc == 2 and "--time-budget nan" in err, err  # was accepted: a limit never reached


def test_not_fitting_says_so_on_stderr() -> None:
    rc, out, err = run_cli(["estimate", "--budget", "2GB", "--json"])
    assert rc == 3 and json.loads(out)["fits"] is False
    assert err.strip().splitlines() == [err.strip()] and "2GB" in err and "does not fit" in err


@pytest.mark.parametrize(("vocab", "method", "table_bytes"), [
    (10**12, "analytic", 10**12 * 300 * 4),
    (10**12, "traced", 10**12 * 300 * 4),
    (10**15, "traced", 10**15 * 300 * 4),
    # (2**63 - 1) x 1200 B = 11068046444225730968400, in 512 B allocator blocks: + 176 B.
    # Traced was a RuntimeError (storage size overflowed); both were off by float rounding.
    (2**63 - 1, "traced", 11068046444225730968576),
    (2**63 - 1, "analytic", 11068046444225730968576),
])
def test_absurd_vocab_is_priced_and_does_not_fit(vocab: int, method: str,
                                                 table_bytes: int) -> None:
    argv = ["estimate", "--vocab", str(vocab), "--method", method, "--budget", "8GB", "--json"]
    rc, out, err = run_cli(argv)
    check(argv, rc, out, err)
    d = json.loads(out)
    assert rc == 3 and d["fits"] is False
    assert d["tables"][0]["parameters"] == table_bytes  # fp32 rows x 300, by hand
    assert d["device_total"] >= 4 * table_bytes  # params, grads, two Adam states at least
    assert "does not fit" in err


def test_train_refuses_a_config_larger_than_the_device_before_allocating(tmp_path: Path) -> None:
    cfg = tmp_path / "big.yaml"
    # the data (synthetic-ctr) fixes the vocabularies; a dim of 10**8 makes the tables absurd
    cfg.write_text(yaml.safe_dump({**CONFIGS[0], "dim": 10**8, "data": {"name": "synthetic-ctr"}}))
    argv = ["train", "--config", str(cfg), "--out", str(tmp_path / "out"), "--max-steps", "1"]
    rc, out, err = run_cli(argv)  # was: an allocation of petabytes (crash or OOM killer)
    check(argv, rc, out, err)
    assert rc == 3 and "PB" in err and "RAM" in err, err
    assert not (tmp_path / "out").exists()  # refused before anything was written


def _absurd_space(tmp_path: Path, compression: list[str]) -> Path:
    doc = copy.deepcopy(SPACES["tiny"])
    doc["data"]["vocab_sizes"] = [10**12, 2**63 - 1, 100_000]
    doc["params"]["compression"] = {"choices": compression}
    if "hash" not in compression:
        del doc["params"]["hash_buckets"]
    p = tmp_path / "absurd.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def test_absurd_vocab_search_where_nothing_fits_exits_3(tmp_path: Path) -> None:
    space = _absurd_space(tmp_path, ["none"])
    argv = ["search", "--budget", "8GB", "--space", str(space), "--runs-dir",
            str(tmp_path / "runs"), "--tracking-uri", "none"]
    rc, out, err = run_cli(argv)
    check(argv, rc, out, err)
    assert rc == 3 and "nothing in the search space" in err and "EB" in err, err


def test_absurd_vocab_proposals_are_infeasible_not_crashes(tmp_path: Path) -> None:
    import optuna

    from autoembed.budget import Budget
    from autoembed.pipeline.builtin import BuiltinWorkload
    from autoembed.pipeline.engine import SearchEngine, SearchSettings
    from autoembed.pipeline.priced_data import build_priced_data as build_workload
    from autoembed.pipeline.priced_data import data_spec_for
    from autoembed.pipeline.study import make_sampler
    from autoembed.space import load_space

    space = load_space(_absurd_space(tmp_path, ["none", "hash"]))
    workload = build_workload(*data_spec_for(space))
    study = optuna.create_study(directions=["maximize", "minimize", "maximize"],
                                sampler=make_sampler("random", 0))
    budget = 8 * 10**9
    eng = SearchEngine(study, SearchSettings(
        workload=BuiltinWorkload.of(space, workload, run={"max_steps": 60}),
        budget=Budget.parse("8GB"),
        objectives=[("quality", "maximize"), ("memory", "minimize"),
                    ("throughput", "maximize")],
        trials=2))
    launched = []
    for _ in range(3):  # each call prices (and tells) the infeasible ones before a launch
        prop = eng.propose()
        assert prop is not None
        launched.append(prop)
        eng.abandon("not trained in this test")
    infeasible = [r for r in eng.rows.values() if r.status == "infeasible"]
    assert infeasible and all(r.config.compression == "none" for r in infeasible)
    for r in infeasible:
        # the 2**63 - 1 row table alone, fp32, at the smallest dim (8): by hand
        assert (r.metrics["device_total"] or 0) >= (2**63 - 1) * 8 * 4
        assert study.trials[r.number].constraints["memory"] > 0  # told: over budget
    for prop in launched:  # what would train is hashed into a table that fits
        assert prop.config.compression == "hash" and prop.estimate.device_total <= budget


# ============================================================== the real process


@pytest.mark.parametrize(("args", "code"), [
    (["estimate", "--budget", "1e400GB"], 2),
    (["estimate", "--vocab", str(2**63 - 1), "--method", "traced", "--budget", "8GB"], 3),
    (["estimate", "--config", "/"], 2),
    (["search", "--budget", "8XB"], 2),
    (["train", "--config", "/no/such.yaml"], 2),
    (["ui", "--port", "70000"], 2),
])
def test_process_contract(args: list[str], code: int, tmp_path: Path) -> None:
    r = subprocess.run([*EXE, *args, *(["--runs-dir", str(tmp_path)] if args[0] in (
        "search", "ui") else [])], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == code, r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    lines = [ln for ln in r.stderr.splitlines() if not ln.startswith("autoembed: note:")]
    assert len(lines) == 1 and lines[0].startswith("autoembed: "), r.stderr


@pytest.mark.parametrize(("command", "options"), [("search", "SearchOptions"),
                                                  ("estimate", "EstimateOptions")])
def test_help_shows_each_declared_help_as_written(command: str, options: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from autoembed.options import cli_fields, help_of
    from autoembed.pipeline.search_options import SearchOptions
    from autoembed.pricing.estimate_options import EstimateOptions

    monkeypatch.setenv("COLUMNS", "1000")  # one line per option
    rc, out, err = run_cli([command, "--help"])
    assert rc == 0, err
    declared = {"SearchOptions": SearchOptions, "EstimateOptions": EstimateOptions}[options]
    for f in cli_fields(declared):  # was `(pip install 'autoembed')`: rich ate `[team]`
        assert " ".join(help_of(f).split()) in " ".join(out.split()), f.name


def test_the_command_list_wraps_only_where_the_terminal_ends(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`autoembed --help` broke estimate's, train's and search's summaries where their
    docstrings' source lines ended."""
    import inspect

    from autoembed.cli import app

    monkeypatch.setenv("COLUMNS", "1000")
    rc, out, err = run_cli(["--help"])
    assert rc == 0, err
    lines = [ln.strip("│ ").split(None, 1) for ln in out.splitlines() if ln.startswith("│ ")]
    shown = {w[0]: w[1].strip() for w in lines if len(w) == 2}
    for info in app.registered_commands:
        doc = " ".join((inspect.getdoc(info.callback) or "").split())
        name = info.name or info.callback.__name__  # type: ignore[union-attr]
        assert shown[name] == doc, (name, shown)


@pytest.mark.parametrize("flag", [["--allow-changed-code"], ["--no-reference"],
                                  ["--enqueue", "q.yaml"]])
def test_an_option_of_a_search_of_your_own_model_is_refused_without_one(
        flag: list[str]) -> None:
    """--allow-changed-code on a search of autoembed's models was taken and did nothing."""
    rc, out, err = run_cli(["search", "--budget", "1GB", *flag])
    assert rc == 2 and err.startswith(f"autoembed: error: {flag[0]} applies to a search "
                                      "over your own model"), err
