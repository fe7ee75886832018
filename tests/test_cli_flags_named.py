"""A bad command-line value is refused in one line that names its flag and the fix (the
audit of the CLI's messages): `--pick`, `--format` and `--budget` were said without their
flag or without the rule broken; `--no-start-points` on a search of your own model did
nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from autoembed.cli import main
from autoembed.pareto import PICK_RULES


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one line `autoembed ARGV` printed, refusing with exit status 2."""
    rc = main(argv)
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err, (rc, err)
    return err


def test_a_bad_pick_names_the_flag_and_the_rules(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rules = "within-noise, knee, max-quality, min-memory, max-throughput, trial:N"
    assert ", ".join(PICK_RULES) == rules
    said = f"--pick 'best' is not a rule; use one of {rules}"
    for argv in (["search", "--budget", "8GB", "--runs-dir", str(tmp_path)],
                 ["export", "--study", "nosuch", "--out", str(tmp_path / "b.yaml"),
                  "--runs-dir", str(tmp_path)]):
        assert _refused([*argv, "--pick", "best"], capsys).endswith(said)
    assert not any(tmp_path.iterdir())  # refused before anything was made


def test_a_bad_export_format_names_the_flag_and_the_formats(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = _refused(["export", "--study", "s", "--out", str(tmp_path / "b.xml"),
                    "--format", "xml", "--runs-dir", str(tmp_path)], capsys)
    assert err.endswith("--format 'xml' is not a format; use one of yaml, json, python")


@pytest.mark.parametrize("command", [["search"], ["estimate", "--vocab", "1000", "--dim", "8"]])
def test_a_negative_budget_names_the_flag_and_says_it_must_be_positive(
        command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = ["--runs-dir", str(tmp_path)] if command[0] == "search" else []
    err = _refused([*command, "--budget", "-1GB", *runs], capsys)
    assert "--budget '-1GB' must be greater than zero; use e.g. 8GB" in err, err


def test_no_start_points_on_your_own_model_names_no_reference(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The model as written trained first all the same: that is --no-reference."""
    import autoembed.tracking as tracking

    def would_search(*_: object, **__: object) -> None:
        raise AssertionError("the search went on to run")

    monkeypatch.setattr(tracking, "open_tracker", would_search)
    fns = [f"--{k}=examples.text_search:{f}" for k, f in
           (("model", "build"), ("example", "example"), ("train", "train"))]
    err = _refused(["search", *fns, "--budget", "800MB", "--no-start-points",
                    "--runs-dir", str(tmp_path)], capsys)
    assert "--no-start-points does not apply" in err and "give --no-reference" in err, err
    assert not any(tmp_path.iterdir())


def test_search_and_export_pick_helps_list_the_rules_pick_takes() -> None:
    """`--pick`'s rules were restated by hand in search's and export's help beside
    `PICK_RULES`, the list the check reads: both helps are worded from it."""
    from dataclasses import fields

    import typer

    from autoembed.cli import app
    from autoembed.options import help_of
    from autoembed.pipeline.search_options import SearchOptions
    from autoembed.rules import or_list

    rules = "within-noise, knee, max-quality, min-memory, max-throughput or trial:N"
    assert or_list(["a"]) == "a" and or_list(["a", "b", "c"]) == "a, b or c"
    search_pick = next(f for f in fields(SearchOptions) if f.name == "pick_rule")
    assert help_of(search_pick) == f"{rules}."
    export = typer.main.get_command(app).commands["export"]  # type: ignore[attr-defined]
    said = [p.help for p in export.params if "--pick" in p.opts]  # type: ignore[attr-defined]
    assert said == [f"{rules} (default: the search's own pick, pareto.json 'best')."]


def test_budget_help_is_one_for_both_commands() -> None:
    """--budget was declared twice, its forms listed differently (search's without 0.5TB
    or 7.5G, which both take): one help, the forms the refusal's hint names."""
    from dataclasses import fields

    from autoembed.options import help_of
    from autoembed.pipeline.search_options import SearchOptions
    from autoembed.pricing.estimate_options import EstimateOptions

    said = {help_of(f) for o in (SearchOptions, EstimateOptions) for f in fields(o)
            if f.name == "budget"}
    assert said == {"Device memory budget: 8GB, 8GiB, 7.5G, 7500MB, 0.5TB or 80%."}


def test_start_points_with_the_grid_sampler_is_refused_not_dropped(tmp_path: Path) -> None:
    """`--sampler grid --start-points` searched the grid alone, the flag dropped unsaid (its
    help: "not with --sampler grid"); it is refused before the workload is built."""
    from autoembed.errors import ConfigError
    from autoembed.pipeline.plan import SearchPlan
    from autoembed.pipeline.request import SearchRequest
    from autoembed.pipeline.search_options import SearchOptions

    request = SearchRequest.of(SearchOptions(
        budget="1GB", space="tiny", sampler="grid", start_points=True, runs_dir=tmp_path,
        tracking_uri="none", device="cpu"))  # cpu: no torch import to resolve auto
    with pytest.raises(ConfigError) as e:
        SearchPlan.build(request, {})
    assert str(e.value) == ("--start-points: the grid sampler trains its grid's points only; "
                            "drop --start-points, or give another --sampler")


def test_export_refuses_a_file_as_runs_dir_as_search_and_ui_do(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """export said "unknown study ...: no directory F/s ...; pass --runs-dir" for a --runs-dir
    F that is a file, where search and ui say what is wrong with it."""
    f = tmp_path / "best.yaml"
    f.write_text("x: 1\n")
    for argv in (["export", "--study", "s", "--out", str(tmp_path / "o.yaml")], ["ui"]):
        err = _refused([*argv, "--runs-dir", str(f)], capsys)
        assert err == (f"autoembed: error: --runs-dir '{f}': '{f}' is a file, not a directory; "
                       "give a directory path")


def test_an_objective_named_twice_is_said_as_the_flag() -> None:
    """`--objectives quality,quality` was refused as "search space '--objectives': key
    'objectives[1]' = 'quality'", a space file's shape for a flag; it is said as the flag,
    as an unknown objective is, when the request is read."""
    from autoembed.errors import ConfigError
    from autoembed.pipeline.request import SearchRequest
    from autoembed.pipeline.search_options import SearchOptions

    with pytest.raises(ConfigError) as e:
        SearchRequest.of(SearchOptions(budget="1GB", objectives="quality,memory,quality",
                                       device="cpu"))
    assert str(e.value) == "--objectives: 'quality' is named twice; name each objective once"
