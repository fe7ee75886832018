"""The documentation: the site builds in strict mode (a broken link, anchor or reference is an
error), its config and CLI references are generated from the code and miss nothing, the
budget grammar it documents is the parser's, and README.md stays a short front door whose
links resolve."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
sys.path.insert(0, str(DOCS / "_ext"))


def _need_sphinx() -> None:
    """The `docs` extra (scripts/test.sh installs it): skipped without it, except in CI."""
    try:
        import myst_parser  # noqa: F401
        import sphinx  # noqa: F401
    except ImportError:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip("the docs extra is not installed (pip install -e '.[docs]')")


@pytest.mark.slow
def test_site_builds_in_strict_mode(tmp_path: Path) -> None:
    _need_sphinx()
    run = subprocess.run(
        [sys.executable, "-m", "sphinx", "-E", "-W", "--keep-going", "-q", "-b", "html",
         str(DOCS), str(tmp_path / "html"), "-d", str(tmp_path / "doctrees")],
        capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    html = (tmp_path / "html" / "config.html").read_text()
    from autoembed.config import EmbeddingConfig, TableConfig

    for f in [*dataclasses.fields(EmbeddingConfig), *dataclasses.fields(TableConfig)]:
        assert f"<code class=\"docutils literal notranslate\"><span class=\"pre\">{f.name}" \
            in html, f.name
    cli = (tmp_path / "html" / "cli.html").read_text()
    assert "--full-size" in cli
    # every option as typed: two hyphens, never a typographic dash (a copy-paste trap)
    assert "--model" in cli and "\u2013model" not in cli and "\u2014model" not in cli
    pages = {p: p.read_text() for p in (tmp_path / "html").rglob("*.html")}
    numbered = {p.name: m.group(0) for p, t in pages.items()
                if (m := re.search(r"\bissue\s+\d+", t, re.IGNORECASE))}
    assert not numbered, numbered  # the site speaks for itself, not of the tracker
    # a results file renders as a page of the site, not a raw download
    bench = pages[tmp_path / "html" / "benchmarks.html"]
    assert 'href="_results/seed_case.html"' in bench and "seed_case.md\"" not in bench
    assert "<h1>" in pages[tmp_path / "html" / "_results" / "seed_case.html"]


def test_every_config_key_has_its_rule_and_meaning() -> None:
    _need_sphinx()
    import autoembed_docs

    from autoembed.config import FIELD_RULES, EmbeddingConfig, TableConfig

    for which, cls in (("config", EmbeddingConfig), ("table", TableConfig)):
        rows = autoembed_docs.config_rows(which)[2:]
        assert [r.split("`")[1] for r in rows] == [f.name for f in dataclasses.fields(cls)]
    lr = next(r for r in autoembed_docs.config_rows("config") if r.startswith("| `lr` "))
    assert FIELD_RULES["lr"].text.removeprefix("must be ") in lr


def test_an_undocumented_config_key_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    _need_sphinx()
    import autoembed_docs

    real = autoembed_docs.key_meanings()
    del real["config"]["cache_policy"]
    monkeypatch.setattr(autoembed_docs, "key_meanings", lambda: real)
    with pytest.raises(autoembed_docs.Undocumented, match="no meaning for cache_policy"):
        autoembed_docs.config_rows("config")
    real["table"]["colour"] = "not a key"
    with pytest.raises(autoembed_docs.Undocumented, match="colour is not a TableConfig"):
        autoembed_docs.config_rows("table")


def test_every_cli_option_is_in_the_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    _need_sphinx()
    import autoembed_docs
    import typer.main

    from autoembed.cli import app

    text = "\n".join(autoembed_docs.cli_lines())
    group = typer.main.get_command(app)
    for name, cmd in group.commands.items():  # type: ignore[attr-defined]
        assert f"## `autoembed {name}`" in text
        for p in cmd.params:
            for opt in [*p.opts, *p.secondary_opts]:
                assert f"`{opt}`" in text, (name, opt)
    # an option without help fails the build
    option = group.commands["ui"].params[0]  # type: ignore[attr-defined]
    monkeypatch.setattr(option, "help", "")
    monkeypatch.setattr(typer.main, "get_command", lambda _: group)
    with pytest.raises(autoembed_docs.Undocumented, match="autoembed ui --port"):
        autoembed_docs.cli_lines()


def test_the_budget_grammar_table_is_the_parser() -> None:
    """docs/memory_model.md's table of budgets: each row parsed by `Budget.parse` gives the
    bytes it states (`80% of 24GiB`: with that device memory)."""
    from autoembed.budget import Budget, parse_size

    page = (DOCS / "memory_model.md").read_text()
    rows = re.findall(r"^\| `([^`]+)`( of (\S+))? \| ([\d,]+) \|", page, flags=re.M)
    assert {r[0] for r in rows} >= {"8GB", "8G", "8 gb", "8GiB", "80%"}
    for text, _, device, stated in rows:
        memory = parse_size(device) if device else None
        assert Budget.parse(text, memory).bytes == int(stated.replace(",", "")), text


def _links(text: str) -> list[str]:
    return re.findall(r"\]\(([^)\s]+)\)", text)


def _anchors(md: str) -> set[str]:
    """GitHub's heading anchors of a Markdown page (MyST's myst_heading_anchors match)."""
    out = set()
    for h in re.findall(r"^#{1,6} (.+)$", md, flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
        out.add(slug)
    return out


def test_readme_is_a_short_front_door_whose_links_resolve() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    assert "bash scripts/run.sh" in readme and "bash scripts/test.sh" in readme
    for link in _links(readme):
        if re.match(r"[a-z]+://", link):
            continue
        path, _, anchor = link.partition("#")
        target = ROOT / path
        assert target.exists(), link
        if anchor:
            assert anchor in _anchors(target.read_text()), link
    assert _OUTSIDE[2] not in readme and "/work/" not in readme


# Files a clone does not have, spelled in pieces so that this file does not name them.
_OUTSIDE = ("DESIGN" + ".md", "REFERENCES" + ".md", ".." + "/shared")
_OWN_TEXT = {".py", ".md", ".yaml", ".yml", ".toml", ".sh", ".txt", ".cfg", ".rst"}


def _own_text_files() -> list[Path]:
    """The project's own text files: the package, tests, docs, spaces, scripts, benchmarks'
    code and the README (the benchmarks' results are data, and runs/ is output)."""
    files = [ROOT / "README.md", ROOT / "pyproject.toml"]
    for top in ("autoembed", "tests", "docs", "search_spaces", "scripts", "examples",
                "benchmarks"):
        files += [p for p in (ROOT / top).rglob("*") if p.suffix in _OWN_TEXT
                  and "results" not in p.parts and "__pycache__" not in p.parts]
    return files


def test_no_file_points_outside_the_repository() -> None:
    """The contracts live in docs/contracts.md; no file sends a reader to a document a
    clone does not contain."""
    found = [f"{p.relative_to(ROOT)}:{n}: {name}"
             for p in _own_text_files()
             for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
             for name in _OUTSIDE if name in line]
    assert not found, "\n".join(found)


def test_every_pointer_to_the_contracts_names_one_of_its_headings() -> None:
    """`docs/contracts.md#<heading>` in a comment or docstring must name a heading of that page,
    so a pointer cannot go stale when a section is renamed."""
    anchors = _anchors((DOCS / "contracts.md").read_text())
    pointers = [(p, a) for p in _own_text_files()
                for a in re.findall(r"contracts\.md#([\w-]+)", p.read_text(errors="replace"))]
    assert len(pointers) >= 15
    stale = [f"{p.relative_to(ROOT)}: #{a}" for p, a in pointers if a not in anchors]
    assert not stale, stale


# `word.name` in a page where `word` is not a module of the package: a config's field
# (`config.seed`), a user space's section key (`user.dim`, `embedding.tables`), an Optuna
# trial's method, torch's `nn.Linear`; MLflow's tags named `autoembed.*`.
_NOT_MODULES = {"config", "user", "embedding", "trial", "nn"}
_MLFLOW_TAGS = {"autoembed.study", "autoembed.role"}
_FILE_SUFFIXES = {"py", "yaml", "yml", "md", "json", "png", "csv", "npz", "txt", "db", "log",
                  "lock"}


def _module_file(dotted: str) -> Path | None:
    """The file of an `autoembed` module named by its dotted path (`nn.host_cache`), or by a
    module's name alone when one file has it (`workload`); None when it names none."""
    pkg = ROOT / "autoembed"
    parts = dotted.split(".")[1:] if dotted.startswith("autoembed") else dotted.split(".")
    base = pkg.joinpath(*parts)
    for f in (base.with_suffix(".py"), base / "__init__.py"):
        if f.is_file():
            return f
    if len(parts) == 1:
        found = list(pkg.rglob(f"{parts[0]}.py"))
        found += [p / "__init__.py" for p in pkg.rglob(parts[0]) if p.is_dir()]
        return found[0] if len(found) == 1 else None
    return None


def _defines(module: Path, name: str) -> bool:
    """Whether `module` defines, assigns, imports or lazily exports `name`, or has it as a
    submodule."""
    if module.name == "__init__.py" and ((module.parent / f"{name}.py").is_file()
                                         or (module.parent / name).is_dir()):
        return True
    text = module.read_text()
    return bool(re.search(
        rf"^\s*(async\s+)?(def|class)\s+{name}\b|^\s*{name}\s*[:=]|\bself\.{name}\s*[:=]"
        rf"|^\s*(from\s+\S+\s+)?import\s[^\n]*\b{name}\b|import \([^)]*\b{name}\b"
        rf"|[\"']{name}[\"']", text, flags=re.M | re.S))


def test_every_module_and_path_a_page_names_exists() -> None:
    """A page's `module.name` (`workload.final_report`, `nn.host_cache.HostCache`) names
    something that module defines or imports, and its `dir/file.py` a file of the repository,
    so a function that moves does not leave the pages pointing at its old home."""
    tops = {p.name for p in ROOT.iterdir() if p.is_dir()} | {
        p.name for p in (ROOT / "autoembed").iterdir() if p.is_dir()}
    stale = []
    for page in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]:
        for tok in sorted(set(re.findall(r"`([^`\s]+)`", page.read_text()))):
            path = re.fullmatch(r"([\w-]+)/[\w./-]*\.py", tok)
            if path and path.group(1) in tops:
                if not ((ROOT / tok).is_file() or (ROOT / "autoembed" / tok).is_file()):
                    stale.append(f"{page.name}: {tok} (no such file)")
                continue
            ref = re.fullmatch(r"([a-z_][\w.]*)\.([A-Za-z_]\w*)", tok)
            if (not ref or ref.group(2) in _FILE_SUFFIXES
                    or ref.group(1) in _NOT_MODULES or tok in _MLFLOW_TAGS):
                continue
            module = _module_file(ref.group(1))
            if module is not None and not _defines(module, ref.group(2)):
                stale.append(f"{page.name}: {tok} ({module.relative_to(ROOT)} has no "
                             f"{ref.group(2)})")
    assert not stale, "\n".join(stale)


def test_each_error_class_carries_the_status_the_contracts_give_it() -> None:
    """docs/contracts.md#exit-status: every status its table lists, and the one each
    exception class a Python caller gets carries as `exit_code` (130: 128 + SIGINT)."""
    import signal

    from autoembed import errors
    from autoembed.pipeline.workload import NothingFitsError

    page = (DOCS / "contracts.md").read_text()
    table = {int(s) for s in re.findall(r"^\| (\d+) \|", page, flags=re.M)}
    expected = {errors.AutoembedError: 1, errors.UnsupportedError: 1, errors.ConfigError: 2,
                errors.BudgetError: 2, errors.DataError: 2, errors.DoesNotFitError: 3,
                NothingFitsError: 3, errors.Interrupted: 128 + signal.SIGINT}
    assert table == {0, *expected.values()}
    assert {cls: getattr(cls, "exit_code", None) for cls in expected} == expected
