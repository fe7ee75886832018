"""The `autoembed` command line: parse, call one library function, print.

Exit status (DESIGN.md, Contracts): 0 done; 1 failure while running; 2 bad input;
3 does not fit the budget; 130 interrupted. Bad input never shows a traceback.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import typer

from autoembed.errors import AutoembedError, ConfigError
from autoembed.search.study import DEFAULT_SAMPLER, SAMPLERS

__all__ = ["app", "main"]

EXIT_OK, EXIT_FAILURE, EXIT_BAD_INPUT, EXIT_NO_FIT, EXIT_INTERRUPTED = 0, 1, 2, 3, 130

app = typer.Typer(
    name="autoembed",
    help="Find the best embedding-layer configuration under a GPU memory budget.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """Find the best embedding-layer configuration under a GPU memory budget."""


# The seed workload (the article's text model): V=1M tokens, D=300, batch 64, seq 512, Adam.
SEED_DEFAULTS: dict[str, Any] = {
    "task": "text",
    "vocab": "1000000",
    "dim": 300,
    "batch": 64,
    "seq": 512,
    "num_classes": 4,
    "dense_layers": "",
}
# `estimate` flags that are not config fields: they build the tables and the tower.
_SHAPE_FLAGS = ("vocab", "pooling_factor", "dense_layers")


def _console(stderr: bool = False) -> Any:
    from rich.console import Console

    con = Console(stderr=stderr, highlight=False)
    if not con.is_terminal:
        con.width = max(con.width, 120)  # pipes and CI logs: don't wrap the tables
    return con


def _int_list(text: str, key: str) -> tuple[int, ...]:
    if text.strip() == "":
        return ()
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise ConfigError(
            f"--{key} '{text}' must be a comma list of integers, e.g. 1000000,5000"
        ) from None


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


def _config_flags() -> set[str]:
    """Every `estimate` flag that sets the config: the fields' names, their CLI spellings
    (`config.FIELD_FLAGS`), the aliases that set several (`--optimizer`) and the shape."""
    from autoembed.config import FIELD_ALIASES, FIELD_FLAGS, FIELD_RULES

    return {*FIELD_RULES, *FIELD_FLAGS, *FIELD_ALIASES, *_SHAPE_FLAGS}


def _fields_of_flags(given: dict[str, Any]) -> dict[str, Any]:
    """Config field -> value for the given flags, read from the config's declared flags: an
    alias first (`--optimizer` sets both optimizers), then the fields named directly."""
    from autoembed.config import FIELD_ALIASES, FIELD_FLAGS, FIELD_RULES

    kw: dict[str, Any] = {}
    for flag, expand in FIELD_ALIASES.items():
        if flag in given:
            kw.update(expand(given[flag]))
    for flag, value in given.items():
        name = FIELD_FLAGS.get(flag, flag)
        if name in FIELD_RULES and flag not in FIELD_ALIASES:
            kw[name] = value
    return kw


def _count_or_share(text: str | None, flag: str) -> int | float | None:
    """A count ("65536") or a share of each table's rows ("0.01")."""
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"{flag} '{text}' must be a count (e.g. 65536) or a share of each "
                          "table's rows in (0, 1) (e.g. 0.01)") from None


def _build_config(config_path: Path | None, overrides: dict[str, Any]) -> Any:
    from autoembed.config import EmbeddingConfig, TableConfig, load_config

    given = {k: v for k, v in overrides.items() if v is not None}
    if config_path is not None:
        base = load_config(config_path)
    else:
        base = None
        several = "vocab" in given and "," in str(given["vocab"])
        for k, v in SEED_DEFAULTS.items():
            if several and k in ("task", "seq", "num_classes"):
                continue  # several tables: a ctr model, not the seed's text model
            given.setdefault(k, v)
    kw = _fields_of_flags(given)
    if "dense_layers" in given:
        kw["dense_layers"] = _int_list(given["dense_layers"], "dense-layers")
    if "vocab" in given:
        vocabs = _int_list(given["vocab"], "vocab")
        if not vocabs:
            raise ConfigError("--vocab '' needs at least one size, e.g. --vocab 1000000")
        for v in vocabs:
            if v < 1:
                raise ConfigError(f"--vocab {v}: a vocabulary size must be >= 1")
        pooling = given.get("pooling_factor") or 1.0
        names = (
            ["tokens"]
            if len(vocabs) == 1 and kw.get("task", getattr(base, "task", "")) == "text"
            else [f"f{i}" for i in range(len(vocabs))]
        )
        kw["tables"] = tuple(TableConfig(n, v, pooling) for n, v in zip(names, vocabs, strict=True))
        if len(vocabs) > 1 and "task" not in kw:
            kw["task"] = "ctr"
        if kw.get("task", getattr(base, "task", "ctr")) == "ctr":
            kw.setdefault("num_classes", 2)
    if base is None:
        return EmbeddingConfig(**kw)
    return replace(base, **kw) if kw else base


def _render_estimate(est: Any, config: Any, budget: Any) -> None:
    from rich.markup import escape
    from rich.table import Table

    from autoembed.budget import format_bytes

    con = _console()
    total = est.device_total
    t = Table(title=f"Memory for one training step ({est.method}, peak in {est.peak_phase})")
    t.add_column("category")
    t.add_column("bytes", justify="right")
    t.add_column("size", justify="right")
    t.add_column("of total", justify="right")
    if budget is not None:
        t.add_column("of budget", justify="right")
    rows = [
        ("parameters", est.parameters),
        ("gradients", est.gradients),
        ("optimizer state", est.optimizer_state),
        ("activations", est.activations),
        ("temporaries", est.temporaries),
        ("allocated peak", est.allocated_peak),
        ("reserved peak", est.reserved_peak),
        ("overhead (context, workspace, reserve)", est.overhead),
        ("device total", est.device_total),
        ("serving bytes", est.serving_bytes),
    ]
    for name, b in rows:
        cells = [name, f"{b:,}", format_bytes(b), f"{100 * b / total:.1f}%"]
        if budget is not None:
            cells.append(f"{100 * b / budget.bytes:.1f}%")
        style = "bold" if name in ("allocated peak", "device total") else None
        t.add_row(*cells, style=style)
    con.print(t)
    tt = Table(title="Per table")
    for col in ("table", "rows", "dim", "parameters", "gradients", "optimizer state", "serving"):
        tt.add_column(col, justify="left" if col == "table" else "right")
    for r in est.tables:
        tt.add_row(
            escape(r.name),  # a user's name, not rich markup ("[/bold]" would raise)
            f"{r.rows:,}",
            str(r.dim),
            format_bytes(r.parameters),
            format_bytes(r.gradients),
            format_bytes(r.optimizer_state),
            format_bytes(r.serving_bytes),
        )
    con.print(tt)
    if est.per_gpu:
        gt = Table(title=f"Per GPU ({est.gpus} GPUs, {est.sharding}-wise sharding)")
        for col in ("gpu", "tables", "allocated peak", "device total"):
            gt.add_column(col)
        for g in est.per_gpu:
            gt.add_row(
                str(g.gpu),
                escape(",".join(g.tables)) or "-",
                format_bytes(g.allocated_peak),
                format_bytes(g.device_total),
            )
        con.print(gt)
    if est.cache:
        ct = Table(title="Host-cached tables (device cache of host rows)")
        for col in ("table", "host rows", "cached rows", "host bytes", "bookkeeping",
                    "zipf s", "miss rate", "moved/step"):
            ct.add_column(col, justify="left" if col == "table" else "right")
        for c in est.cache:
            ct.add_row(c.name, f"{c.rows:,}", f"{c.cache_rows:,}", format_bytes(c.host_bytes),
                       format_bytes(c.device_bookkeeping), f"{c.zipf_exponent:.2f}",
                       f"{100 * c.miss_rate:.1f}%", format_bytes(c.transfer_bytes_per_step))
        con.print(ct)
        con.print(f"host memory {format_bytes(est.host_bytes)} (not in the device figures)")
    if budget is not None:
        verdict = "[green]fits[/green]" if est.fits else "[red]does NOT fit[/red]"
        con.print(
            f"device total {format_bytes(est.device_total)} {verdict} the budget "
            f"{escape(budget.text)} = {format_bytes(budget.bytes)}"
        )


def _check_host_budget(est: Any, text: str | None) -> None:
    """Host memory too small for the host_cached tables: bad input (issue 9), exit 2."""
    if est.host_fits is False:
        from autoembed.budget import format_bytes

        raise ConfigError(
            f"--host-budget {text} = {format_bytes(est.host_budget)} is smaller than the "
            f"{format_bytes(est.host_bytes)} the host_cached tables need on the host; raise "
            "--host-budget, lower dim or vocab, or use an optimizer with less state (sgd, "
            "rowwise_adagrad)"
        )


@app.command()
def estimate(
    config: Path | None = typer.Option(None, "--config", help="YAML/JSON config file."),
    budget: str | None = typer.Option(None, help="Budget: 8GB, 8GiB, 7500MB, 0.5TB or 80%."),
    method: str = typer.Option(
        "analytic", help="analytic (microseconds) or traced (one fake step)."
    ),
    gpus: int = typer.Option(1, help="GPUs to shard the tables over."),
    sharding: str = typer.Option("table", help="table or row (with --gpus > 1)."),
    task: str | None = typer.Option(None, help="ctr or text."),
    vocab: str | None = typer.Option(None, help="Vocab size, or a comma list (one per table)."),
    dim: int | None = typer.Option(None, help="Embedding dimension."),
    batch: int | None = typer.Option(None, help="Batch size."),
    seq: int | None = typer.Option(None, help="Sequence length (text)."),
    pooling_factor: float | None = typer.Option(None, help="Ids per sample per table (ctr)."),
    precision: str | None = typer.Option(
        None, help="fp32, fp16, bf16, fp16_master, bf16_master, amp_fp16, amp_bf16."
    ),
    serving: str | None = typer.Option(None, help="none, int8 or int4."),
    optimizer: str | None = typer.Option(None, help="Table optimizer (and dense, where it can)."),
    dense_optimizer: str | None = typer.Option(None, help="Dense tower optimizer."),
    compression: str | None = typer.Option(
        None, help="none, hash, qr, mixed_dim, shared, robe, tt or hot_cold."),
    hash_buckets: str | None = typer.Option(
        None, help="Buckets for --compression hash: a count, or a share of each table's rows "
        "in (0, 1)."),
    qr_collisions: int | None = typer.Option(None, help="m for --compression qr."),
    qr_operation: str | None = typer.Option(None, help="mult, add or concat."),
    mixed_dim_alpha: float | None = typer.Option(None, help="Power-rule exponent in [0, 1]."),
    robe_size: str | None = typer.Option(
        None, help="robe: array values per table (>= 1) or a share of its values in (0, 1); "
        "with --robe-shared, of the one array."),
    robe_block: int | None = typer.Option(None, help="robe: block length Z (<= the array)."),
    robe_shared: bool | None = typer.Option(
        None, "--robe-shared/--no-robe-shared",
        help="robe: every robe table reads one array of --robe-size values (a share: of all "
        "robe tables' values)."),
    tt_rank: int | None = typer.Option(None, help="tt: tensor-train rank (>= 1)."),
    hot_share: float | None = typer.Option(
        None, help="hot_cold: share of ids with their own row, in (0, 1] (cold ids hash into "
        "--hash-buckets rows)."),
    pooling: str | None = typer.Option(None, help="mean, sum or naive."),
    interaction: str | None = typer.Option(None, help="concat or dot (ctr)."),
    dense_layers: str | None = typer.Option(None, help="Tower widths, e.g. 256,64."),
    num_classes: int | None = typer.Option(None, help="Classes (text)."),
    grad_accum: int | None = typer.Option(None, help="Gradient accumulation steps."),
    checkpointing: bool | None = typer.Option(None, "--checkpointing/--no-checkpointing"),
    placement: str | None = typer.Option(None, help="device or host_cached."),
    cache_load_factor: float | None = typer.Option(
        None, help="host_cached: share of rows cached on the device, in (0, 1]."),
    cache_policy: str | None = typer.Option(None, help="host_cached: lru or lfu."),
    host_budget: str | None = typer.Option(
        None, help="Host memory for host_cached tables, e.g. 64GB (checked; exit 2 if short)."),
    reserve: str = typer.Option("0", help="Bytes for the rest of your model, e.g. 2GB."),
    device_memory: str | None = typer.Option(None, help="Device memory for a % budget."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    model: str | None = typer.Option(
        None, "--model", help="Your own model: pkg.module:factory (cwd on sys.path)."),
    example: str | None = typer.Option(
        None, "--example", help="With --model: its input, pkg.module:name (value or function)."),
    apply_cfg: Path | None = typer.Option(
        None, "--apply", help="With --model: rewrite its embeddings by this config first."),
    loss_spec: str | None = typer.Option(
        None, "--loss", help="With --model whose forward returns logits: the loss, "
        "pkg.module:fn (output, example) -> scalar (else a stated cross-entropy stand-in)."),
) -> None:
    """Price a config, or your own model's training step (--model), in bytes (no GPU needed)
    and say whether it fits a budget."""
    flags = dict(locals())  # the options as given; the config's flags are picked from them
    flags["hash_buckets"] = _count_or_share(hash_buckets, "--hash-buckets")
    flags["robe_size"] = _count_or_share(robe_size, "--robe-size")
    from autoembed.budget import Budget, parse_size
    from autoembed.memory import estimate as estimate_memory

    overrides = {k: v for k, v in flags.items() if k in _config_flags()}
    user = any(v is not None for v in (model, example, apply_cfg, loss_spec))
    cfg: Any = None if user else _build_config(config, overrides)
    host_b = parse_size(host_budget, "--host-budget") if host_budget is not None else None
    dev_mem = parse_size(device_memory, "--device-memory") if device_memory else None
    bud = Budget.parse(budget, dev_mem) if budget is not None else None
    reserve_b = 0 if reserve.strip() in ("0", "") else parse_size(reserve, "--reserve")
    if user:  # your own model: autoembed.user_model.command
        from autoembed.user_model.command import estimate_for_cli

        shared = ("precision", "optimizer")
        refused: dict[str, Any] = {k: v for k, v in overrides.items() if k not in shared}
        refused.update(config=config, host_budget=host_budget,
                       gpus=None if gpus == 1 else gpus, sharding=None)
        est = estimate_for_cli(model, example, apply_cfg, optimizer=optimizer,
                               precision=precision, budget=bud.bytes if bud else None,
                               reserve=reserve_b, refused=refused, loss=loss_spec)
    else:
        est = estimate_memory(
            cfg,
            method=method,
            budget=bud.bytes if bud else None,
            gpus=gpus,
            sharding=sharding,
            reserve=reserve_b,
            host_budget=host_b,
        )
    _check_host_budget(est, host_budget)
    if not user and est.method != method:  # e.g. a size the traced estimator cannot represent
        print(f"autoembed: note: {est.notes[-1]}", file=sys.stderr)
    if as_json:
        from autoembed.memory.types import BYTE_FIGURES

        d = est.to_dict()
        print(
            json.dumps(
                {
                    k: d[k]
                    for k in (
                        "method",
                        *BYTE_FIGURES,
                        "tables",
                        "budget",
                        "fits",
                        "peak_phase",
                        "gpus",
                        "sharding",
                        "per_gpu",
                        "host_bytes",
                        "host_budget",
                        "host_fits",
                        "cache",
                        *(("modules",) if user else ()),
                    )
                }
            )
        )
    else:
        _render_estimate(est, cfg, bud)
        if user:
            from autoembed.user_model.command import render_modules

            render_modules(est)
    if est.fits is False:
        from autoembed.budget import format_bytes

        print(f"autoembed: does not fit: device total {format_bytes(est.device_total)} is over "
              f"the budget {bud.text if bud else '?'} = {format_bytes(est.budget or 0)}; "
              "raise --budget or choose a smaller config", file=sys.stderr)
        raise typer.Exit(EXIT_NO_FIT)


@app.command("train")
def train_cmd(
    config: Path = typer.Option(..., "--config", help="Config file (e.g. exported best.yaml)."),
    data: str | None = typer.Option(None, help="Train on other data: a name or CSV/Parquet."),
    max_steps: int | None = typer.Option(
        None, help="Optimizer steps (default: the exported file's train.max_steps, else 1000)."),
    epochs: int | None = typer.Option(None, help="Full passes over the train split."),
    out: Path = typer.Option(Path("runs/train"), help="Directory for checkpoints and metrics."),
    device: str = typer.Option("cpu", help="cpu or cuda[:N]."),
    checkpoint_every: int | None = typer.Option(None, help="Steps between checkpoints."),
    resume: bool = typer.Option(True, "--resume/--no-resume", help="Continue from a checkpoint."),
    as_json: bool = typer.Option(False, "--json", help="Print the final metrics as JSON."),
    force: bool = typer.Option(
        False, "--force", help="Replace a finished result of another config in --out "
        "(only once this run completes)."),
) -> None:
    """Train a config for real: progress, periodic checkpoints, resume, final metrics."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from autoembed.config import load_config, resolved_tables
    from autoembed.training import stored_steps, train

    cfg = load_config(config)
    stored = stored_steps(config) if max_steps is None and epochs is None else None
    max_steps = stored or max_steps  # the search's best evaluation, when exported
    hot_sets = None
    if any(t.compression == "hot_cold" for t in resolved_tables(cfg)):
        from autoembed.models.hot_cold import hot_sets_beside

        hot_sets = hot_sets_beside(config)  # saved by export beside the config
    _dir_arg(out, "--out")
    if max_steps is not None and max_steps < 1:
        raise ConfigError(f"--max-steps {max_steps}: must be >= 1")
    if epochs is not None and epochs < 1:
        raise ConfigError(f"--epochs {epochs}: must be >= 1")
    if checkpoint_every is not None and checkpoint_every < 1:
        raise ConfigError(f"--checkpoint-every {checkpoint_every}: must be >= 1 (steps)")
    con = _console(stderr=True)
    if stored is not None and not as_json:
        con.print(f"training {stored} steps: the step the search judged this config at "
                  f"({config} train.max_steps; --max-steps or --epochs to change it)")
    with Progress("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=con, transient=True,
                  disable=as_json or not con.is_terminal) as prog:
        task = prog.add_task("training", total=max_steps or (None if epochs else 1000))

        def tick(step: int, total: int) -> None:
            prog.update(task, completed=step)

        result = train(cfg, data=data, out_dir=out, max_steps=max_steps, epochs=epochs,
                       device=device, checkpoint_every=checkpoint_every, resume=resume,
                       on_step=tick, force=force, hot_sets=hot_sets)
    if as_json:
        print(json.dumps(result.to_dict(), default=str))
    else:
        out_con = _console()
        if result.env.get("resumed_from"):
            out_con.print(f"resumed from the checkpoint at step {result.env['resumed_from']}")
        out_con.print(f"status {result.status} after {result.steps} steps "
                      f"({result.samples:,} samples, {result.train_seconds:.1f} s training)")
        if result.test_quality is not None:
            out_con.print("test " + ", ".join(f"{k} {v:.4f}" for k, v in result.metrics.items()))
        if result.throughput:
            out_con.print(f"throughput {result.throughput:,.0f} samples/s")
        out_con.print(f"checkpoints and metrics in {out.resolve()}")
    if result.status != "complete":
        if result.error:
            print(f"autoembed: train {result.status}: {result.error}", file=sys.stderr)
        raise typer.Exit(EXIT_FAILURE)


@app.command()
def export(
    study: str | None = typer.Option(None, help="Study name (a directory under --runs-dir)."),
    pick: str | None = typer.Option(
        None,
        help="within-noise, knee, max-quality, min-memory, max-throughput or trial:N "
        "(default: the search's own pick, pareto.json 'best').",
    ),
    run_id: str | None = typer.Option(None, help="Export this trial run's config from MLflow."),
    format: str | None = typer.Option(
        None, "--format", help="yaml or json (default: from the --out suffix); python: a "
        "module that rebuilds a search over your own model (--model) in your code."
    ),
    out: Path = typer.Option(..., "--out", help="File to write, e.g. best.yaml."),
    force: bool = typer.Option(False, "--force", help="Overwrite --out (and its vocab/)."),
    runs_dir: Path = typer.Option(Path("runs"), help="Where searches write their results."),
    tracking_uri: str | None = typer.Option(
        None, help="MLflow tracking URI for --run-id (default: <runs-dir>/mlflow.db)."
    ),
) -> None:
    """Write a searched config, resolved, for `autoembed train --config` or load_config."""
    from autoembed.export import export_config, format_of

    _dir_arg(out.parent, "--out", out)
    if format_of(out, format) == "python":  # your own model: a module that rebuilds it
        from autoembed.errors import ConfigError
        from autoembed.user.export import export_python

        if study is None or run_id is not None:
            raise ConfigError("--format python needs --study (and no --run-id)")
        module, cfg, trial = export_python(study, out, runs_dir=runs_dir, pick=pick,
                                           force=force)
        print(f"wrote {module} and {cfg}: study '{study}' trial {trial}")
        return
    done = export_config(
        study,
        out,
        pick=pick,
        run_id=run_id,
        fmt=format,
        force=force,
        runs_dir=runs_dir,
        tracking_uri=tracking_uri,
    )
    where = f"study '{done.study}' trial {done.trial}" + (
        f" (run {done.run_id})" if done.run_id else f" ({done.pick})"
    )
    print(f"wrote {done.path}: {where}")
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


@app.command("search")
def search_cmd(
    budget: str = typer.Option(..., help="Device memory budget: 8GB, 8GiB, 7500MB or 80%."),
    space: str | None = typer.Option(
        None, help="Search space YAML, a built-in (default, ctr, text, tiny), or auto: "
        "derived from --data and the budget (default: auto with real --data, else "
        "search_spaces/default.yaml, shipped with the package)."),
    trials: int | None = typer.Option(
        None, help="Trials that train (over-budget proposals are free); default: the space's."),
    time_budget: float | None = typer.Option(
        None, help="Seconds after which no new trial starts (running ones finish)."),
    objectives: str | None = typer.Option(
        None, help="Comma list of quality, memory, throughput, latency, steps_to_target."),
    sampler: str | None = typer.Option(
        None, help=f"{DEFAULT_SAMPLER} (default), or one of "
        f"{', '.join(k for k in SAMPLERS if k != DEFAULT_SAMPLER)}."),
    seed: int | None = typer.Option(
        None, help="Seed of the sampler and of every trial's model init and data order "
        "(a space's base `seed` wins). Default 0."),
    workers: int | None = typer.Option(
        None, help="Trials at once (default 1 on CPU, one per GPU)."),
    device: str = typer.Option("auto", help="auto, cpu or cuda."),
    study: str | None = typer.Option(
        None, help="Study name (default search-<date>-<time>); letters, digits, _ - ."),
    resume: bool = typer.Option(False, "--resume", help="Continue --study after a stop."),
    runs_dir: Path = typer.Option(Path("runs"), help="Where studies and optuna.db live."),
    ray_address: str | None = typer.Option(None, help="Join this Ray cluster."),
    trial_resources: list[str] | None = typer.Option(
        None, "--trial-resources", help="Custom Ray resources per trial, NAME=AMOUNT[,...]; "
        "repeat to alternate trials between them (README: Running on a cluster)."),
    tracking_uri: str | None = typer.Option(
        None, help="MLflow URI (default <runs-dir>/mlflow.db; 'none' to skip)."),
    storage: str | None = typer.Option(
        None, help="Optuna storage URL (default <runs-dir>/optuna.db), e.g. "
        "postgresql://user:pw@host/optuna (pip install 'autoembed[team]')."),
    pick: str = typer.Option(
        "within-noise",
        help="within-noise, knee, max-quality, min-memory, max-throughput or trial:N."),
    data: str | None = typer.Option(None, help="Data name or a CSV/Parquet path."),
    label: str | None = typer.Option(None, help="Label column of --data."),
    categorical: str | None = typer.Option(None, help="Comma list of categorical columns."),
    text_column: str | None = typer.Option(None, help="Text column of --data (a text task)."),
    early_stop: bool | None = typer.Option(
        None, "--early-stop/--no-early-stop",
        help="Stop trials that cannot reach the front (default on; see README)."),
    start_points: bool | None = typer.Option(
        None, "--start-points/--no-start-points",
        help="Train known-good configs first (default on; not with --sampler grid)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object at the end."),
    host_budget: str | None = typer.Option(
        None, help="Host memory for host_cached tables, e.g. 64GB (over it: infeasible)."),
    model: str | None = typer.Option(
        None, help="Your model: pkg.module:build, build(params) -> nn.Module (with --example "
        "and --train; the current directory is on the import path)."),
    example: str | None = typer.Option(
        None, help="pkg.module:example, example(params) -> one batch as the forward takes it."),
    train: str | None = typer.Option(
        None, help="pkg.module:train, train(model, params, report): your training loop."),
    executor: str = typer.Option(
        "ray", help="With --model: ray (default) or local (in this process, for a debugger)."),
    allow_changed_code: bool = typer.Option(
        False, "--allow-changed-code", help="--resume although --model/--example/--train's "
        "module source changed since the study started."),
) -> None:
    """Search configs that fit a memory budget; write the Pareto front and the best config."""
    if model is not None or example is not None or train is not None:
        _user_search(budget, space, model, example, train, trials=trials, executor=executor,
                     study=study, resume=resume, runs_dir=runs_dir, seed=seed or 0, pick=pick,
                     allow_changed_code=allow_changed_code, tracking_uri=tracking_uri,
                     ray_address=ray_address, workers=workers or 1,
                     builtin_only={"--data": data, "--label": label,
                                   "--categorical": categorical, "--text-column": text_column,
                                   "--sampler": sampler, "--storage": storage,
                                   "--host-budget": host_budget, "--objectives": objectives,
                                   "--start-points": start_points})
        return
    from autoembed.search import search as run_search
    from autoembed.search.render import SearchProgress, render_result, result_json

    _dir_arg(runs_dir, "--runs-dir")
    cats = None
    if categorical is not None:
        cats = tuple(c.strip() for c in categorical.split(",") if c.strip())
    err = _console(stderr=True)
    with SearchProgress(err, enabled=not as_json) as prog:
        result = run_search(
            budget, space, trials=trials, time_budget=time_budget, objectives=objectives,
            sampler=sampler, seed=seed, workers=workers, device=device, study=study,
            resume=resume, runs_dir=runs_dir, ray_address=ray_address,
            tracking_uri=tracking_uri, storage=storage, trial_resources=trial_resources,
            pick_rule=pick, data=data, label=label,
            categorical=cats, text_column=text_column, early_stop=early_stop,
            start_points=start_points, progress=prog.update, on_recovered=prog.note,
            host_budget=host_budget,
        )
    if as_json:
        print(json.dumps(result_json(result), default=str))
    else:
        render_result(_console(), result)


def _user_search(budget: str, space: str | None, model: str | None, example: str | None,
                 train: str | None, *, builtin_only: dict[str, Any], **kw: Any) -> None:
    """`autoembed search --model ... --example ... --train ... --space ...`."""
    from autoembed.errors import ConfigError
    from autoembed.user.request import UserRequest
    from autoembed.user.search import search_user

    missing = [f for f, v in (("--model", model), ("--example", example), ("--train", train))
               if v is None]
    if missing:
        raise ConfigError(f"{', '.join(missing)} missing: a search of your own model needs "
                          "--model, --example and --train")
    given = [f for f, v in builtin_only.items() if v is not None]
    if given:
        raise ConfigError(f"{given[0]} describes autoembed's own models and runs; with --model "
                          "the model, data and loop are yours: remove it")
    if space is None:
        raise ConfigError("--space missing: give the YAML file with `embedding:` and `user:`")
    request = UserRequest.parse(budget, model, example, train, space, trials=kw.pop("trials"),
                                executor=kw.pop("executor"),
                                allow_changed_code=kw.pop("allow_changed_code"))
    result = search_user(request, note=lambda m: print(m, file=sys.stderr), **kw)
    print(f"study '{result.study}': {len(result.rows)} trials "
          + ", ".join(f"{result.count(s)} {s}" for s in ("complete", "infeasible", "pruned",
                                                        "failed", "diverged") if result.count(s)))
    if result.best is not None:
        print(f"best: trial {result.best.number}, quality {result.best.metrics.get('quality')}, "
              f"device_total {result.best.device_total:,} B; files in {result.out_dir}")


def _one_line(text: str) -> str:
    """`text` as one printable line: a value's line breaks and control characters escaped."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _usage_line(e: Any) -> str:
    """Click's usage error (unknown option, bad or missing value) as one line with the fix."""
    ctx = getattr(e, "ctx", None)
    cmd = "autoembed" + (f" {ctx.info_name}" if ctx is not None and ctx.parent else "")
    msg = " ".join(e.format_message().split()).rstrip(".")
    return _one_line(f"autoembed: error: {msg}; see '{cmd} --help'")


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the app and map errors to exit codes with one clear line."""
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
    except KeyboardInterrupt:
        print("autoembed: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as e:  # noqa: BLE001 - usage errors and failures while running
        # typer vendors its own click: recognise its exceptions by shape, not by class.
        if type(e).__name__ == "Abort":
            print("autoembed: interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED
        code = getattr(e, "exit_code", None)
        if code == 2 and hasattr(e, "format_message") and type(e).__name__ != "NoArgsIsHelpError":
            print(_usage_line(e), file=sys.stderr)  # one line, as for every other bad input
            return EXIT_BAD_INPUT
        if hasattr(e, "show") and isinstance(code, int):
            e.show()
            return EXIT_BAD_INPUT if code == 2 else EXIT_FAILURE
        if debug:
            raise
        print(
            _one_line(f"autoembed: failed: {type(e).__name__}: {e} "
                      "(set AUTOEMBED_DEBUG=1 for the traceback)"),
            file=sys.stderr,
        )
        return EXIT_FAILURE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
