"""The `autoembed` command line: parse, call one library function, print.

Exit status (docs/contracts.md#exit-status): 0 done; 1 failure while running; 2 bad input;
3 does not fit the budget; 130 interrupted. Bad input never shows a traceback.
"""

from __future__ import annotations

import contextlib
import dataclasses
import faulthandler
import inspect
import json
import os
import sys
import typing
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape

from autoembed.errors import AutoembedError, ConfigError, Interrupted
from autoembed.options import cli_fields, flag_of, help_of
from autoembed.pareto import pick_help
from autoembed.pipeline.search_options import SearchOptions
from autoembed.pricing.estimate_options import EstimateOptions

__all__ = ["app", "main"]

EXIT_OK, EXIT_FAILURE, EXIT_BAD_INPUT, EXIT_NO_FIT, EXIT_INTERRUPTED = 0, 1, 2, 3, 130

app = typer.Typer(
    name="autoembed", help="Find the best embedding-layer configuration under a GPU memory budget.",
    no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)


@app.callback()
def _root() -> None:
    """Find the best embedding-layer configuration under a GPU memory budget."""


def _console(stderr: bool = False) -> Any:
    from autoembed.cli_render import console

    return console(stderr)


def _dir_arg(path: Path, flag: str, given: Path | None = None) -> Path:
    """`path` as a directory to use or make: refused when it, or a folder above it, is a file
    (`given`: the value the user typed, when `path` is derived from it)."""
    p = path.expanduser().absolute()
    for q in (p, *p.parents):
        if q.exists():
            if not q.is_dir():
                raise ConfigError(f"{flag} '{given or path}': '{q}' is a file, not a directory; "
                                  "give a directory path")
            break
    return path


def declared_command(run: Callable[..., None], options: type,
                     extra: Mapping[str, inspect.Parameter] = {}) -> Callable[..., None]:
    """A typer command whose options are the fields `options` declares for the CLI
    (`autoembed.options`: spelled, typed, defaulted and helped as declared, in order; the
    help escaped, as typer reads it as rich markup that drops `[team]`), each
    of `extra` (an option of the command line only) after the field it is keyed by; it
    calls `run(**values)` and takes `run`'s docstring as its help."""
    hints = typing.get_type_hints(options)
    params, names = [], {}  # names: the CLI's parameter name (--pick: pick) -> the field's
    for f in cli_fields(options):
        meta = f.metadata
        default = ... if f.default is dataclasses.MISSING else f.default
        name = flag_of(f).removeprefix("--").replace("-", "_")
        names[name] = f.name
        params.append(inspect.Parameter(
            name, inspect.Parameter.KEYWORD_ONLY, annotation=meta["cli_type"] or hints[f.name],
            default=typer.Option(default, *meta["flags"], help=escape(help_of(f)))))
        params += [extra[f.name]] if f.name in extra else []

    def command(**values: Any) -> None:
        run(**{names.get(k, k): v for k, v in values.items()})

    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__doc__, command.__name__ = run.__doc__, run.__name__
    return command


def _estimate(**options: Any) -> None:
    """Price a config, or your own model's training step (--model), in bytes (no GPU needed)
    and say whether it fits a budget."""
    as_json, asked = options.pop("as_json"), options.pop("suggest")
    ranks = {k: options.pop(k) for k in ("world_size", "plan_device", "torchrec_tables")}
    if ranks["world_size"] is None:  # a rank option alone would do nothing
        for flag, given in (("--tables", ranks["torchrec_tables"] is not None),
                            ("--plan-device", ranks["plan_device"] != "cuda")):
            if given:
                raise ConfigError(f"{flag} plans TorchRec's ranks: give --world-size N with "
                                  "it (and --model), or drop it")
    if ranks["world_size"] is not None and asked:
        raise ConfigError("--suggest prices changes to a config or a --model on one device; "
                          "drop it with --world-size (each rank is judged on its own)")
    if ranks["world_size"] is not None:  # a TorchRec model per rank: autoembed.torchrec
        _estimate_ranks(options["model"], options["example"], ranks["torchrec_tables"],
                        ranks["world_size"], ranks["plan_device"], options["budget"],
                        options["device_memory"], options["optimizer"], as_json)
        return
    from autoembed.cli_render import does_not_fit, print_estimate
    from autoembed.pricing.price import price
    from autoembed.pricing.suggest import suggest as changes_that_fit

    priced = price(**options)
    if priced.note:  # e.g. a size the traced estimator cannot represent
        print(f"autoembed: note: {priced.note}", file=sys.stderr)
    over = priced.estimate.fits is False
    tips = changes_that_fit(options, priced) if asked or over else None
    print_estimate(priced, as_json, tips)
    if over:
        print(does_not_fit(priced, bool(tips)), file=sys.stderr)
        raise typer.Exit(EXIT_NO_FIT)


# Every option of `autoembed estimate` (estimate_options), as declared.
estimate = app.command("estimate")(declared_command(_estimate, EstimateOptions))


def _estimate_ranks(model: str | None, example: str | None, tables: Path | None,
                    world_size: int, plan_device: str, budget: str | None,
                    device_memory: str | None, optimizer: str | None, as_json: bool) -> None:
    """`estimate --world-size N`: each rank of TorchRec's plan (exit 3: a rank over budget)."""
    from autoembed.budget import parse_size, with_device_memory
    from autoembed.pricing.torchrec_cli import ranks_json, render_ranks, sharded_for_cli

    dev_mem = parse_size(device_memory, "--device-memory") if device_memory else None
    bud = with_device_memory(budget, device_memory)
    est = sharded_for_cli(model, example, tables, world_size=world_size,
                          plan_device=plan_device, device_memory=dev_mem, host_memory=None,
                          optimizer=optimizer, budget=bud.bytes if bud else None)
    if as_json:
        print(json.dumps(ranks_json(est)))
    else:
        render_ranks(est)
    if bud is not None:
        try:
            est.check_fits()
        except ConfigError as e:
            print(f"autoembed: does not fit: {e}", file=sys.stderr)
            raise typer.Exit(EXIT_NO_FIT) from None


@app.command("train")
def train_cmd(
    config: Path = typer.Option(..., "--config", help="Config file (e.g. exported best.yaml)."),
    full_size: bool = typer.Option(
        False, "--full-size", help="Train the priced config on its full data (a search's "
        "file otherwise reruns its trial as measured, on the data it trained on); prints "
        "the estimated memory and time first."),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Print what would train (and, with --full-size, its "
        "estimate), then stop."),
    data: str | None = typer.Option(None, help="Train on other data: a name or CSV/Parquet."),
    max_steps: int | None = typer.Option(
        None, help="Optimizer steps (default: the file's train.max_steps, else 1000)."),
    epochs: int | None = typer.Option(None, help="Full passes over the train split."),
    out: Path = typer.Option(Path("runs/train"), help="Directory for checkpoints and metrics."),
    device: str = typer.Option("cpu", help="cpu, cuda[:N] or auto (a GPU where one is "
                               "visible, as for search)."),
    checkpoint_every: int | None = typer.Option(None, help="Steps between checkpoints."),
    resume: bool = typer.Option(True, "--resume/--no-resume", help="Continue from a checkpoint."),
    as_json: bool = typer.Option(False, "--json", help="Print the final metrics as JSON."),
    force: bool = typer.Option(
        False, "--force", help="Retrain from step 0, replacing the finished result in --out "
        "(of this config or another) once this run completes."),
) -> None:
    """Train a config for real: progress, periodic checkpoints, resume, final metrics.
    A finished run asked for again (same config and length, same --out) is a no-op."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from autoembed.config import resolved_tables
    from autoembed.training import (
        check_device,
        check_lengths,
        interrupted_note,
        plain_line,
        plan_training,
        train,
    )

    check_lengths(True, max_steps=max_steps, epochs=epochs, checkpoint_every=checkpoint_every)
    plan = plan_training(config, full_size=full_size, data=data, max_steps=max_steps,
                         epochs=epochs)
    hot_sets = None
    hot = [t.name for t in resolved_tables(plan.config) if t.compression == "hot_cold"]
    if not plan.rerun and hot and data is None:  # other data: its own hot sets, by its ids
        from autoembed.models.hot_cold import check_hot_set_names, hot_sets_beside

        hot_sets = hot_sets_beside(config)  # saved by export beside the config
        if hot_sets is not None:
            check_hot_set_names(hot_sets, hot)
    _dir_arg(out, "--out")
    check_device(device)  # a dry run refuses what the run would
    con = _console(stderr=True)
    for line in plan.lines:
        (print if dry_run else con.print)(line)
    if dry_run:
        if not plan.lines:
            print(plain_line(config, plan, data))
        return
    with Progress("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=con, transient=True,
                  disable=as_json or not con.is_terminal) as prog:
        task = prog.add_task("training", total=plan.max_steps or (None if epochs else 1000))

        def tick(step: int, total: int) -> None:
            prog.update(task, completed=step)

        try:
            result = train(plan.config, data=data, out_dir=out, max_steps=plan.max_steps,
                           epochs=plan.epochs, device=device,
                           checkpoint_every=checkpoint_every, resume=resume, on_step=tick,
                           force=force, hot_sets=hot_sets, measure=plan.measure)
        except KeyboardInterrupt:  # typer would exit 130 without a word
            restart = "--force" if force else None if resume else "--no-resume"
            raise typer.Exit(_interrupted(KeyboardInterrupt(interrupted_note(out, restart)))) \
                from None
    if as_json:
        print(json.dumps(result.to_dict(), default=str))
    else:
        _render_training(result, plan.expect, out)
    if result.status != "complete":
        if result.error:
            print(f"autoembed: train {result.status}: {result.error}", file=sys.stderr)
        raise typer.Exit(EXIT_FAILURE)


def _render_training(result: Any, expect: Any, out: Path) -> None:
    """`autoembed train`'s summary, with the trial's figures beside a rerun's."""
    con = _console()
    if result.env.get("already_complete"):
        con.print(f"already complete: {out.resolve()} holds this config's finished run of "
                  f"{result.steps} steps; nothing trained (--force retrains it)")
        return
    if result.env.get("resumed_from"):
        con.print(f"resumed from the checkpoint at step {result.env['resumed_from']}")
    if result.env.get("resized"):
        con.print(f"tables sized by the data, not as the config gives them (its sizes are what "
                  f"was priced): {', '.join(result.env['resized'])}")
    con.print(f"status {result.status} after {result.steps} steps "
              f"({result.samples:,} samples, {result.train_seconds:.1f} s training)")
    if result.valid_quality is not None:
        con.print(f"validation {result.valid_quality:.4f}"
                  + (f" (the trial's: {expect['quality']:.4f})" if "quality" in expect else ""))
    if result.test_quality is not None:
        con.print("test " + ", ".join(f"{k} {v:.4f}" for k, v in result.metrics.items())
                  + (f" (the trial's: {expect['test_quality']:.4f})"
                     if "test_quality" in expect else ""))
    if result.throughput:
        con.print(f"throughput {result.throughput:,.0f} samples/s")
    con.print(f"checkpoints and metrics in {out.resolve()}")


@app.command()
def export(
    study: str | None = typer.Option(None, help="Study name (a directory under --runs-dir)."),
    pick: str | None = typer.Option(None, help=pick_help(
        " (default: the search's own pick, pareto.json 'best')")),
    run_id: str | None = typer.Option(None, help="Export this trial run's config from MLflow."),
    format: str | None = typer.Option(
        None, "--format", help="yaml or json (default: from the --out suffix, .json, .py or "
        "yaml); python: a module (a .py --out) that rebuilds a search over your own model "
        "(--model) in your code."),
    out: Path = typer.Option(..., "--out", help="File to write, e.g. best.yaml."),
    force: bool = typer.Option(
        False, "--force", help="Overwrite --out (the vocab-HASH/ and hot sets beside it are "
        "named by their content and kept)."),
    runs_dir: Path = typer.Option(Path("runs"), help="Where searches write their results."),
    tracking_uri: str | None = typer.Option(
        None, help="MLflow tracking URI for --run-id (default: <runs-dir>/mlflow.db)."),
) -> None:
    """Write a searched config, resolved, for `autoembed train --config` or load_config."""
    from autoembed.export import export_config, format_of

    _dir_arg(out.parent, "--out", out)
    _dir_arg(runs_dir, "--runs-dir")  # as search and ui refuse a file
    done = export_config(study, out, pick=pick, run_id=run_id, fmt=format, force=force,
                         runs_dir=runs_dir, tracking_uri=tracking_uri)
    where = f"study '{done.study}' trial {done.trial}" + (
        f" (run {done.run_id})" if done.run_id else f" ({done.pick})")
    print(f"wrote {done.path}: {where}")
    if format_of(done.path, format) == "python":
        print(f"its config: {done.path.with_suffix('.yaml')}")
    if done.vocab is not None:
        print(f"vocabulary maps in {done.vocab}")
    for note in done.notes:
        print(f"note: {note}", file=sys.stderr)


@app.command()
def ui(
    port: int = typer.Option(5000, help="Port to listen on."),
    host: str = typer.Option("127.0.0.1", help="Interface to bind (0.0.0.0: every one)."),
    runs_dir: Path = typer.Option(Path("runs"), help="The runs directory whose store to show."),
) -> None:
    """Run the MLflow UI for the searches recorded under --runs-dir (Ctrl-C stops it)."""
    from autoembed.tracking.ui import serve_ui

    raise typer.Exit(serve_ui(_dir_arg(runs_dir, "--runs-dir").absolute(), host, port))


def _search(as_json: bool, **options: Any) -> None:
    """Search configs that fit a memory budget; write the Pareto front and the best config.
    Searches autoembed's own models on data, or your own model and loop (--model, --example,
    --train, with a --space of `embedding:` and `user:` sections)."""
    from autoembed.pipeline import search as run_search
    from autoembed.pipeline.render import SearchProgress, render_result, result_json

    _dir_arg(options["runs_dir"], "--runs-dir")
    err = _console(stderr=True)
    with _interrupt_said(), SearchProgress(err, enabled=not as_json) as prog:
        result = run_search(**options, progress=prog.update, on_recovered=prog.note)
    if as_json:
        print(json.dumps(result_json(result), default=str))
    else:
        render_result(_console(), result)


# Every option of `autoembed.search` the CLI takes (pipeline.search_options), and --json.
search_cmd = app.command("search")(declared_command(_search, SearchOptions, {
    "start_points": inspect.Parameter(
        "as_json", inspect.Parameter.KEYWORD_ONLY, annotation=bool,
        default=typer.Option(False, "--json", help="Print one JSON object at the end."))}))

for _info in app.registered_commands:  # a docstring's line breaks are layout, not help's
    _info.help = " ".join((inspect.getdoc(_info.callback) or "").split())


def _one_line(text: str) -> str:
    """`text` as one printable line: a value's line breaks and control characters escaped."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _usage_line(e: Any, argv: list[str]) -> str:
    """Click's usage error (unknown option, bad or missing value) as one line with the fix."""
    ctx = getattr(e, "ctx", None)
    cmd = "autoembed" + (f" {ctx.info_name}" if ctx is not None and ctx.parent else "")
    msg = " ".join(e.format_message().split()).rstrip(".")
    msg = _list_spread(msg, ctx, argv) or msg
    value = _typed(getattr(e, "param", None), argv)
    if value is not None and f"'{value}'" not in msg:  # typer's wording leaves it out
        msg = msg.replace("Invalid value for ", f"Invalid value '{value}' for ", 1)
    return _one_line(f"autoembed: error: {msg}; see '{cmd} --help'")


def _typed(param: Any, argv: list[str]) -> str | None:
    """The value typed for `param` (`--dim 1.5` or `--dim=1.5`; the last one given, which
    click reads), or None."""
    found = None
    for i, arg in enumerate(argv):
        for opt in getattr(param, "opts", ()):
            if arg == opt and i + 1 < len(argv):
                found = argv[i + 1]
            elif arg.startswith(opt + "="):
                found = arg[len(opt) + 1:]
    return found


def _list_spread(msg: str, ctx: Any, argv: list[str]) -> str | None:
    """Words left over after a comma-list option's value (`--categorical user item`, as a
    shell list is written): the message with the one value to give instead."""
    import re

    m = re.fullmatch(r"Got unexpected extra argument(?:s|\(s\))? \((.+)\)", msg)
    if m is None or ctx is None:
        return None
    extra = m.group(1).split()
    for i in range(2, len(argv) - len(extra) + 1):
        if argv[i:i + len(extra)] != extra:
            continue
        flag, value = argv[i - 2], argv[i - 1]
        param = next((p for p in ctx.command.params if flag in getattr(p, "opts", ())), None)
        if param is not None and "comma list" in (getattr(param, "help", "") or "").lower():
            return (f"'{' '.join(extra)}' after '{flag} {value}': {flag} takes one "
                    f"comma-separated list: {flag} {','.join([value, *extra])}")
    return None


def _interrupted(e: BaseException | None) -> int:
    """Ctrl-C: one line, with what a search kept and how to resume (errors.Interrupted)."""
    said = str(e) if isinstance(e, KeyboardInterrupt) else ""
    print(_one_line(f"autoembed: interrupted{': ' + said if said else ''}"), file=sys.stderr)
    return EXIT_INTERRUPTED


@contextlib.contextmanager
def _interrupt_said() -> Iterator[None]:
    """Say a search's Ctrl-C (`Interrupted`: what it kept) in one line and exit 130 (typer
    would turn it into a silent exit 130 before `main` sees it)."""
    try:
        yield
    except Interrupted as e:
        raise typer.Exit(_interrupted(e)) from None


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the app and map errors to exit codes with one clear line. A crash
    of the process itself (a segmentation fault in a native library) prints every thread's
    Python stack to stderr before it dies, so that it can be reported."""
    if not faulthandler.is_enabled():
        faulthandler.enable()
    debug = os.environ.get("AUTOEMBED_DEBUG") == "1"
    try:
        rc = app(args=argv, standalone_mode=False)  # returns typer.Exit codes in this mode
        return rc if isinstance(rc, int) else EXIT_OK
    except typer.Exit as e:
        return int(e.exit_code)
    except AutoembedError as e:
        if debug:
            raise
        print(_one_line(f"autoembed: error: {e}"), file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt as e:
        return _interrupted(e)
    except Exception as e:  # noqa: BLE001 - usage errors and failures while running
        # typer vendors its own click: recognise its exceptions by shape, not by class.
        if type(e).__name__ == "Abort":  # click's form of Ctrl-C: the interrupt its cause
            return _interrupted(e.__cause__)
        code = getattr(e, "exit_code", None)
        if code == 2 and hasattr(e, "format_message") and type(e).__name__ != "NoArgsIsHelpError":
            # one line, as for every other bad input
            print(_usage_line(e, sys.argv[1:] if argv is None else argv), file=sys.stderr)
            return EXIT_BAD_INPUT
        if hasattr(e, "show") and isinstance(code, int):
            e.show()
            return EXIT_BAD_INPUT if code == 2 else EXIT_FAILURE
        if debug:
            raise
        print(_one_line(f"autoembed: failed: {type(e).__name__}: {e} "
                        "(set AUTOEMBED_DEBUG=1 for the traceback)"), file=sys.stderr)
        return EXIT_FAILURE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
