"""Each search option is declared once (`SearchOptions`): `autoembed search`'s options and
help, `autoembed.search`'s signature, the request's checks and the CLI reference
(docs/cli.md) all read the declaration, so an option added there is in all four."""

from __future__ import annotations

import dataclasses
import inspect
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from rich.markup import escape
from typer.testing import CliRunner

import autoembed
from autoembed import cli
from autoembed.errors import ConfigError
from autoembed.options import help_of, option
from autoembed.pipeline.driver import SearchCall
from autoembed.pipeline.request import SearchRequest
from autoembed.pipeline.search_options import SearchOptions
from autoembed.pricing.estimate_options import EstimateOptions
from autoembed.rules import Positive

DOCS_EXT = Path(__file__).resolve().parents[1] / "docs" / "_ext"
KNOB_HELP = "Clicks of the test's knob (a count)."


@dataclasses.dataclass(frozen=True, kw_only=True)
class WithKnob(SearchOptions):
    """The declaration with one option more, as a new option would be added."""

    knob_clicks: int | None = option(None, rule=Positive(), help=KNOB_HELP)


@dataclasses.dataclass(frozen=True, kw_only=True)
class KnobRequest(SearchRequest, WithKnob):
    """The request of that declaration: nothing written for the new option."""


def _app(options: type, seen: dict[str, Any]) -> typer.Typer:
    """An `autoembed`-like app whose search command is built from `options`."""
    app = typer.Typer(add_completion=False)
    app.callback()(lambda: None)

    def run(**values: Any) -> None:
        """Search."""
        seen.update(values)

    app.command("search")(cli.declared_command(run, options))
    return app


def test_an_option_added_to_the_declaration_is_in_the_cli_the_signature_the_checks_and_docs(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen: dict[str, Any] = {}
    app = _app(WithKnob, seen)
    # 1. the command line: listed with its help, parsed, handed on by its declared name
    runner = CliRunner()
    shown = runner.invoke(app, ["search", "--help"], env={"COLUMNS": "300"})
    assert "--knob-clicks" in shown.output and KNOB_HELP in shown.output, shown.output
    ran = runner.invoke(app, ["search", "--budget", "8GB", "--knob-clicks", "3", "--pick",
                              "knee"])
    assert ran.exit_code == 0, ran.output
    assert seen["knob_clicks"] == 3 and seen["pick_rule"] == "knee" and seen["budget"] == "8GB"
    # 2. the Python signature
    from autoembed.options import takes

    params = inspect.signature(takes(WithKnob)(lambda o: o)).parameters
    assert params["knob_clicks"].default is None
    assert params["knob_clicks"].kind is inspect.Parameter.KEYWORD_ONLY
    # 3. the request's checks: its rule, before anything is loaded; and the request holds it
    with pytest.raises(ConfigError, match=r"^--knob-clicks 0: must be an integer > 0$"):
        SearchRequest.of(WithKnob("8GB", "no-such-space.yaml", knob_clicks=0))
    request = KnobRequest.of(WithKnob("8GB", "tiny", knob_clicks=3, runs_dir=tmp_path,
                                      device="cpu"))
    assert request.knob_clicks == 3 and request.budget.bytes == 8 * 10**9  # type: ignore[attr-defined]
    # 4. the CLI reference
    sys.path.insert(0, str(DOCS_EXT))
    try:
        import autoembed_docs
    finally:
        sys.path.remove(str(DOCS_EXT))
    monkeypatch.setattr(cli, "app", app)
    rows = [r for r in autoembed_docs.cli_lines() if "`--knob-clicks`" in r]
    assert len(rows) == 1 and KNOB_HELP in rows[0], rows


def test_autoembed_search_takes_exactly_the_declared_keywords() -> None:
    params = inspect.signature(autoembed.search).parameters
    declared = [f.name for f in dataclasses.fields(SearchCall)]
    assert list(params) == declared
    assert {"trials", "pick_rule", "apply", "progress"} <= set(params)  # options and hooks
    assert params["budget"].default is inspect.Parameter.empty
    assert params["device"].default == "auto" and params["executor"].default == "ray"
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in list(params.values())[2:])
    with pytest.raises(TypeError, match="trialz"):
        autoembed.search("8GB", trialz=3)  # type: ignore[call-arg]


@pytest.mark.parametrize(("command", "options", "cli_only"), [
    ("search", SearchOptions, 1),  # --json
    ("estimate", EstimateOptions, 0),
])
def test_each_command_has_every_declared_cli_option_with_its_help(
        command: str, options: type, cli_only: int) -> None:
    cmd = typer.main.get_command(cli.app).commands[command]  # type: ignore[attr-defined]
    declared = [f for f in dataclasses.fields(options) if f.metadata["cli"]]
    for f in declared:
        flag = (f.metadata["flags"] or ("--" + f.name.replace("_", "-"),))[0].split("/")[0]
        (p,) = [p for p in cmd.params if flag in p.opts]
        assert p.help == escape(help_of(f)), f.name  # as written, shown by rich (not markup)
        assert p.required == (f.default is dataclasses.MISSING), f.name
        assert p.default == (None if p.required else f.default), f.name
    assert len(cmd.params) == len(declared) + cli_only
    python_only = {f.name for f in dataclasses.fields(options) if not f.metadata["cli"]}
    assert python_only == ({"apply"} if command == "search" else set())


def test_the_request_holds_every_option_as_given_but_those_it_resolves(tmp_path: Path) -> None:
    given = {"trials": 7, "seed": 3, "sampler": "random", "pick_rule": "knee", "label": "y",
             "data": "synthetic-ctr", "early_stop": False, "multi_fidelity": True}
    request = SearchRequest.parse("1GB", "tiny", runs_dir=tmp_path, device="cpu", **given)
    assert {k: getattr(request, k) for k in given} == given
    declared = [f.name for f in dataclasses.fields(SearchOptions)]
    assert [f.name for f in dataclasses.fields(SearchRequest)][:len(declared)] == declared
    # resolved: the budget parsed, the pick rule read, the runs folder made absolute
    assert (request.budget.bytes, request.pick.rule, request.runs_dir) == (
        10**9, "knee", tmp_path.resolve())


def test_a_comma_list_of_categorical_columns_is_split_in_python_as_on_the_cli(
        tmp_path: Path) -> None:
    request = SearchRequest.parse("8GB", "tiny", categorical="a, b,,c", runs_dir=tmp_path,
                                  device="cpu")
    assert request.categorical == ("a", "b", "c")  # was ("a", ",", " ", "b", ...)
    listed = SearchRequest.parse("8GB", "tiny", categorical=["a"], runs_dir=tmp_path,
                                 device="cpu")
    assert listed.categorical == ("a",)


def test_space_help_names_every_built_in_space_the_docs_list() -> None:
    """docs/search_spaces.md's table of built-in spaces; the help left out host_cache."""
    import re

    from autoembed.space import load_space

    page = (DOCS_EXT.parent / "search_spaces.md").read_text()
    section = page.split("## The built-in spaces", 1)[1].split("\n## ", 1)[0]
    names = re.findall(r"^\| `(\w+)` \|", section, flags=re.M)
    assert "host_cache" in names and "tiny" in names
    shown = help_of(next(f for f in dataclasses.fields(SearchOptions) if f.name == "space"))
    listed = re.search(r"a built-in \(([^)]*)\)", shown)
    assert listed and sorted(listed.group(1).split(", ")) == sorted(names), shown
    for name in names:
        assert load_space(name).params, name  # each one listed loads by its name
