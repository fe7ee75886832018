"""Every command and code block of README.md and the guides (docs/*.md), run as written, in
order, page by page (two pages at a time), each page in its own copy of the repository's
files (`git ls-files`: what a fresh clone holds) with this environment's `.venv` linked in,
as `bash scripts/setup.sh` would have left it.

What a block is, by its fence:

* ```bash: each command (continuation lines joined) runs in bash from the copy's top
  directory; `source` and `export` carry over to the next command. A trailing `# exit N`
  says the command exits with N (default 0). A page whose text never activates the
  environment is run with it active (the pages say they assume it).
* ```python: the block runs as a script from the copy's top directory, with the venv's
  python; each block stands alone (its own imports).
* ```yaml: a config (`config:`) is loaded with `autoembed.load_config`, a search space
  (`params:`) with `autoembed.space.load_space`, a space for your own model (`embedding:` /
  `user:`) with its parser.
* a first line `# file: PATH` writes the block to PATH instead (later blocks use it);
  `# not run: REASON` skips it, and only a GPU, a cluster or the network may be the reason.
* ```text is output; MyST directives (```{...}) are the site's. Any other fence fails.

What must be smaller in a test is changed by the table `SUBSTITUTIONS` alone (each entry
must match, so the table cannot go stale), and `autoembed ui` is served on a free port,
fetched once and stopped with Ctrl-C (exit 130). The table and the blocks not run are
printed at the end of the test session.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
from _report import report
from _services import free_port

ROOT = Path(__file__).resolve().parents[1]
VENV = Path(sys.prefix)
PAGES = ["README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))]

# (page, as written, as run, why): each must occur in that page's blocks.
SUBSTITUTIONS: list[tuple[str, str, str, str]] = [
    ("README.md", "bash scripts/run.sh --study first",
     "bash scripts/run.sh --study first --trials 1", "the default space's 20 trials -> 1"),
    ("README.md", "bash scripts/test.sh",
     "bash scripts/test.sh tests/test_budget.py -q -p no:cacheprovider -n 0",
     "the suite is what is running: one quick file of it, in one process"),
    ("docs/getting_started.md", "--trials 6 --study tiny", "--trials 2 --study tiny",
     "6 trials -> 2"),
    ("docs/searching.md", "--trials 4 --study clicks", "--trials 2 --study clicks",
     "4 trials -> 2"),
    ("docs/searching.md", 'trials=2, study="from-python"', 'trials=1, study="from-python"',
     "2 trials -> 1"),
    ("docs/own_loop.md", 'executor="local",', 'executor="local", trials=1,',
     "the space's 6 trials -> 1"),
    ("docs/own_loop.md", "--train examples/text_search.py:train --study text-cli",
     "--train examples/text_search.py:train --study text-cli --trials 1",
     "the space's 6 trials -> 1"),
    ("docs/own_loop.md", "train(build_model(), PARAMS,",
     'train(build_model(), {**PARAMS, "steps": 30},', "the pick's 150 steps -> 30"),
    ("docs/getting_started.md", "--trials 3 --seed 7", "--trials 2 --seed 7",
     "each of the two repeatable runs: 3 trials -> 2"),
    ("docs/getting_started.md", "--full-size --max-steps 50", "--full-size --max-steps 2",
     "50 full-size steps (2.6M rows) -> 2"),
    ("docs/benchmarks.md", "--methods random-full ehvi-front --workers 1 8",
     "--budget-trials 40 --methods random-full ehvi-front --workers 1",
     "each replay's budget 320 median trials -> 40 (50 CPU s -> 6), the 8-worker replays "
     "-> none: tests/test_replay_harness.py runs compare.py --workers 1 4"),
    ("docs/benchmarks.md", "--configs 8 --seeded 2", "--configs 5 --seeded 1",
     "8 configs, 2 of them trained on 3 seeds -> 5, 1"),
]
NOT_RUN_REASONS = ("GPU", "cluster", "network")
# Pages run two at a time (CI has 2 cores; a page is mostly one process waiting on another),
# the longest first: seconds per page as measured here (a guess only orders them).
LANES = 2
LONGEST = {"docs/getting_started.md": 47, "docs/own_loop.md": 43, "README.md": 41,
           "docs/searching.md": 29, "docs/benchmarks.md": 20, "docs/own_model.md": 18}
TIMEOUT = 900
# (CPU seconds, wall seconds, where: what) of every command and block run
COSTS: list[tuple[float, float, str]] = []


@dataclass
class Block:
    page: str
    line: int
    lang: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def first(self) -> str:
        return self.text.splitlines()[0] if self.text.strip() else ""


def blocks(page: str) -> list[Block]:
    """The fenced blocks of a page, with the line each starts on."""
    text = (ROOT / page).read_text()
    out = []
    for m in re.finditer(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", text, flags=re.M | re.S):
        out.append(Block(page, text.count("\n", 0, m.start()) + 1, m.group(1).strip(),
                         m.group(2)))
    return out


def commands(block: Block) -> list[str]:
    """A bash block's commands: continuation lines joined, comment lines dropped."""
    joined = re.sub(r"\\\n\s*", "", block.text)
    return [c.strip() for c in joined.splitlines()
            if c.strip() and not c.lstrip().startswith("#")]


def substituted(page: str, text: str, used: set[int]) -> str:
    for i, (where, old, new, _) in enumerate(SUBSTITUTIONS):
        if where == page and old in text:
            text = text.replace(old, new)
            used.add(i)
    return text


def _marker(block: Block, name: str) -> str | None:
    m = re.match(rf"#\s*{name}:\s*(.+)", block.first.strip())
    return m.group(1).strip() if m else None


# ------------------------------------------------------------------ the copy


def fresh_copy(dest: Path) -> Path:
    """The repository's files as a clone has them (tracked ones only: a file the README's
    commands left in the working tree is not the clone's), symlinks kept, and this
    environment's .venv linked in."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src, dst = ROOT / rel, dest / rel
        if not src.exists() and not src.is_symlink():
            continue  # deleted in the working tree, not yet committed
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), dst)
        else:
            shutil.copy2(src, dst)
    (dest / ".venv").symlink_to(VENV)
    return dest


def base_env(copy: Path) -> dict[str, str]:
    """The environment of a new shell: no virtualenv active; the set-up script a no-op (the
    extras this .venv was installed with); no tracking server or Ray address inherited."""
    stamp = (VENV / ".autoembed-installed").read_text().split()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RAY_", "MLFLOW_", "VIRTUAL_ENV", "PYTEST", "AUTOEMBED_"))}
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and Path(p) != VENV / "bin"]
    env.update(PATH=os.pathsep.join(path), HOME=str(copy / ".home"),
               AUTOEMBED_TORCH=stamp[1], AUTOEMBED_EXTRAS=stamp[2],
               RAY_USAGE_STATS_ENABLED="0", MPLBACKEND="Agg")
    (copy / ".home").mkdir(exist_ok=True)
    return env


# ------------------------------------------------------------------ running


def _fail(block: Block, what: str, run: subprocess.CompletedProcess[str] | None = None,
          ) -> None:
    tail = "" if run is None else f"\nstdout:\n{run.stdout[-3000:]}\nstderr:\n{run.stderr[-3000:]}"
    pytest.fail(f"{block.where}: {what}{tail}", pytrace=False)


def _cpu(times: Path) -> float:
    """The CPU seconds bash's `times` wrote: its own and its reaped children's, user and
    system (a process a command leaves to init is not counted)."""
    return sum(int(m) * 60 + float(s)
               for m, s in re.findall(r"(\d+)m([\d.]+)s", times.read_text()))


def run_command(block: Block, cmd: str, env: dict[str, str], copy: Path,
                ) -> tuple[dict[str, str], float]:
    """Run one command; returns the environment after it (`source`, `export`) and its CPU
    seconds."""
    expect = 0
    m = re.search(r"#\s*exit (\d+)\s*$", cmd)
    if m:
        expect = int(m.group(1))
    if re.match(r"autoembed ui\b", cmd):
        serve_ui(block, cmd, env, copy)
        return env, 0.0
    state, times = copy / ".env-after", copy / ".cpu-after"
    script = (f"{cmd}\n__rc=$?\nenv -0 > {shlex.quote(str(state))}\n"
              f"times > {shlex.quote(str(times))}\nexit $__rc\n")
    run = subprocess.run(["bash", "-c", script], cwd=copy, env=env, capture_output=True,
                         text=True, timeout=TIMEOUT)
    if run.returncode != expect:
        _fail(block, f"`{cmd}` exited {run.returncode}, not {expect}", run)
    pairs = state.read_text().split("\0")
    return dict(p.split("=", 1) for p in pairs if "=" in p), _cpu(times)


def serve_ui(block: Block, cmd: str, env: dict[str, str], copy: Path) -> None:
    """`autoembed ui`: on a free port, until it prints its URL; the page answers; Ctrl-C
    stops it with exit status 130."""
    port = free_port()
    cmd = re.sub(r"--port \d+", "", cmd) + f" --port {port}"
    proc = subprocess.Popen(["bash", "-c", f"exec {cmd}"], cwd=copy, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    url, seen = f"http://127.0.0.1:{port}", []
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                if proc.poll() is not None:
                    break
                time.sleep(1)
        else:
            _fail(block, f"`{cmd}`: nothing answered at {url} within 180 s")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
        seen.append(out)
    if proc.returncode != 130 or url not in seen[0]:
        _fail(block, f"`{cmd}` exited {proc.returncode} (expected 130 after Ctrl-C) or did "
              f"not print {url}:\n{seen[0][-3000:]}")


def run_python(block: Block, text: str, env: dict[str, str], copy: Path, n: int) -> float:
    """Run a python block as a script; returns its CPU seconds."""
    script = copy / f".example_{Path(block.page).stem}_{n}.py"
    script.write_text(text)
    times = copy / ".cpu-after"
    python = shlex.quote(str(copy / ".venv" / "bin" / "python"))
    run = subprocess.run(["bash", "-c", f"{python} {shlex.quote(script.name)}\n__rc=$?\n"
                          f"times > {shlex.quote(str(times))}\nexit $__rc\n"],
                         cwd=copy, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    if run.returncode != 0:
        _fail(block, f"python block exited {run.returncode}", run)
    return _cpu(times)


def check_yaml(block: Block, copy: Path, n: int) -> None:
    """A config, a search space or a user space, loaded by autoembed's own loaders."""
    import yaml

    from autoembed.config import parse_config_text
    from autoembed.errors import ConfigError
    from autoembed.space import load_space

    raw = yaml.safe_load(block.text)
    path = copy / f".example_{Path(block.page).stem}_{n}.yaml"
    path.write_text(block.text)
    try:
        if isinstance(raw, dict) and "config" in raw:
            parse_config_text(block.text, block.where)
        elif isinstance(raw, dict) and "params" in raw:
            load_space(str(path))
        elif isinstance(raw, dict) and ("embedding" in raw or "user" in raw):
            from autoembed.space import parse_space

            parse_space(raw, block.where, kind="user")
        else:
            _fail(block, "a yaml block that is neither a config (config:), a space (params:) "
                  "nor a user space (embedding:/user:): mark it `# file: NAME` or make it one")
    except ConfigError as e:
        _fail(block, f"yaml block does not load: {e}")


def run_page(page: str, copy: Path, used: set[int], not_run: list[str]) -> float:
    env = base_env(copy)
    if "source .venv/bin/activate" not in (ROOT / page).read_text():
        env, _ = run_command(Block(page, 0, "bash", ""), "source .venv/bin/activate", env,
                             copy)
    t0 = time.monotonic()
    for n, block in enumerate(blocks(page)):
        if block.lang.startswith("{") or block.lang == "text":
            continue
        reason = _marker(block, "not run")
        if reason is not None:
            if not any(r in reason for r in NOT_RUN_REASONS):
                _fail(block, f"marked not run ({reason}): only a GPU, a cluster or the "
                      "network may keep a block from running")
            not_run.append(f"{block.where} ({block.lang}): {reason}")
            continue
        target = _marker(block, "file")
        if target is not None:
            (copy / target).parent.mkdir(parents=True, exist_ok=True)
            (copy / target).write_text(block.text.split("\n", 1)[1])
            continue
        t_block = time.monotonic()
        if block.lang == "bash":
            for cmd in commands(block):
                t_cmd = time.monotonic()
                env, cpu = run_command(block, substituted(page, cmd, used), env, copy)
                COSTS.append((cpu, time.monotonic() - t_cmd, f"{block.where}: {cmd[:60]}"))
        elif block.lang == "python":
            cpu = run_python(block, substituted(page, block.text, used), env, copy, n)
            COSTS.append((cpu, time.monotonic() - t_block, f"{block.where}: python block"))
        elif block.lang == "yaml":
            check_yaml(block, copy, n)
        else:
            _fail(block, f"a ```{block.lang or '(no language)'} block: say bash, python, yaml "
                  "or text")
    return time.monotonic() - t0


def run_pages(tmp_path: Path, used: set[int], not_run: list[str],
              ) -> list[tuple[str, float]]:
    """Every page in its own copy, LANES pages at a time (each page's commands are separate
    processes; the pages share nothing), the longest first as the last run measured them.
    After a failure no page starts; it is raised once the page beside it has finished."""
    from concurrent.futures import ThreadPoolExecutor

    def one(page: str) -> tuple[str, float]:
        return page, run_page(page, fresh_copy(tmp_path / Path(page).stem), used, not_run)

    order = sorted(PAGES, key=lambda p: -LONGEST.get(p, 0))
    pool = ThreadPoolExecutor(max_workers=LANES)
    try:
        return [f.result() for f in [pool.submit(one, page) for page in order]]
    finally:  # after a failure no further page starts
        pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.slow
def test_every_example_runs_as_written(tmp_path: Path) -> None:
    stamp = VENV / ".autoembed-installed"
    if not stamp.is_file():
        pytest.skip("not run from the .venv that scripts/setup.sh makes")
    # the pages' set-up commands must find .venv installed (else they would re-install it
    # from the copy): the stamp scripts/setup.sh writes names this pyproject.toml
    want = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()[:16]
    if stamp.read_text().split()[0] != want:
        pytest.fail(".venv was installed for another pyproject.toml: run bash scripts/test.sh "
                    "(it re-installs), then this test", pytrace=False)
    used: set[int] = set()
    not_run: list[str] = []
    lines = ["substitutions (as written -> as run):"]
    lines += [f"  {page}: '{old}' -> '{new}' ({why})" for page, old, new, why in SUBSTITUTIONS]
    lines.append("  every page: `autoembed ui` on a free port, fetched once, then Ctrl-C")
    report("examples (tests/test_examples.py)", lines)
    seconds = {page: run for page, run in run_pages(tmp_path, used, not_run)}
    seconds_lines = [f"  {page}: {seconds[page]:.0f} s" for page in PAGES]
    costly = [f"  {cpu:.0f} CPU s, {wall:.0f} s {what}"
              for cpu, wall, what in sorted(COSTS, reverse=True)[:12]]
    report("examples (tests/test_examples.py)",
           ["not run:", *(f"  {x}" for x in sorted(not_run)),
            f"seconds per page ({LANES} at a time):", *seconds_lines,
            f"the costliest commands and blocks ({sum(c for c, _, _ in COSTS):.0f} CPU s in "
            "all; a process left to init, as a Ray worker, uncounted):", *costly])
    unused = [SUBSTITUTIONS[i][:2] for i in range(len(SUBSTITUTIONS)) if i not in used]
    assert not unused, f"substitutions that match nothing (the page changed?): {unused}"


def test_every_fence_says_what_it_is() -> None:
    """Cheap and first: a block of an unknown kind, or a not-run marker with another reason,
    is refused before anything runs."""
    for page in PAGES:
        for block in blocks(page):
            if block.lang.startswith("{"):
                continue
            assert block.lang in ("bash", "python", "yaml", "text"), block.where
            if block.first.startswith(("# not run", "# file")):  # a marker, spelled right
                assert _marker(block, "not run") or _marker(block, "file"), block.where
            reason = _marker(block, "not run")
            assert reason is None or any(r in reason for r in NOT_RUN_REASONS), block.where


def test_the_copy_holds_tracked_files_only(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A file README's commands leave in the working tree (an export's best.yaml) is not
    the clone's: the copy leaves it out, so a later run does not trip over it."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "tracked.md").write_text("kept\n")
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "add", "tracked.md"], cwd=repo, check=True)
    (repo / "best.yaml").write_text("left by an export\n")  # untracked, not ignored
    monkeypatch.setattr(sys.modules[__name__], "ROOT", repo)
    copy = fresh_copy(tmp_path / "copy")
    assert (copy / "tracked.md").read_text() == "kept\n"
    assert not (copy / "best.yaml").exists()


def test_a_commands_cpu_is_what_bash_times_says(tmp_path: Path) -> None:
    """The report's CPU seconds of a command: the shell's and its children's, user and
    system, as bash's `times` writes them (minutes and seconds)."""
    times = tmp_path / "times"
    times.write_text("0m0.010s 0m0.002s\n1m2.500s 0m0.500s\n")
    assert _cpu(times) == pytest.approx(0.012 + 62.5 + 0.5)
