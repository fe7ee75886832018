"""`SearchOptions`: every option of a search, declared once (`autoembed.options`).

`autoembed.search(...)`'s signature, `autoembed search`'s options and their help (and so
docs/cli.md), the rule each value is checked against (`SearchRequest.of`) and the request's
fields (`SearchRequest` extends this class) are all read from the fields below, in this
order. Adding an option: one field here, then its use where the search reads the request.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any

from autoembed.budget import BUDGET_HELP, BudgetLike
from autoembed.options import declared, option
from autoembed.pareto import DEFAULT_PICK, pick_help
from autoembed.rules import Integer, Positive
from autoembed.space import SearchSpace
from autoembed.space.search_space import TRIAL_TIME_LIMIT

__all__ = ["SearchOptions", "MAX_SEED", "sampler_help", "space_help"]

MAX_SEED = 2**32 - 1  # Optuna's samplers seed numpy's RandomState, which takes 0..2**32 - 1
# The user's functions: a callable, or its "pkg.module:name" (what the CLI gives).
UserFunction = str | Callable[..., Any]


def sampler_help() -> str:
    """--sampler's help: the samplers that exist (pipeline.study)."""
    from autoembed.pipeline.study import DEFAULT_SAMPLER, SAMPLERS

    others = ", ".join(k for k in SAMPLERS if k != DEFAULT_SAMPLER)
    return f"{DEFAULT_SAMPLER} (default), or one of {others}."


def space_help() -> str:
    """--space's help: the built-in spaces that exist (space.search_space)."""
    from autoembed.space.search_space import BUILTIN_SPACES

    return (f"Search space YAML, a built-in ({', '.join(BUILTIN_SPACES)}), or auto: derived "
            "from --data and the budget (default: auto with real --data, else "
            "search_spaces/default.yaml, shipped with the package).")


@dataclass(frozen=True)
class SearchOptions:
    """A search's options as given (None: not given; the request resolves defaults)."""

    budget: BudgetLike = field(metadata=declared(
        help=BUDGET_HELP, cli_type=str))
    space: str | Path | SearchSpace | None = option(None, cli_type=str, help=space_help)
    _: KW_ONLY
    trials: int | None = option(
        None, rule=Positive(), help="Trials that train (over-budget proposals are free); "
        "default: the space's, or no count when --time-budget is given.")
    time_budget: float | None = option(
        None, rule=Positive(integer=False), help="Seconds after which no new trial starts "
        "(running ones finish, each by its --trial-time-limit).")
    trial_time_limit: float | None = option(
        None, rule=TRIAL_TIME_LIMIT, flags=("--trial-time-limit",),
        help="Seconds a trial may run; one past it ends as timeout and the search goes on "
        "(default: derived, stated when the search starts; docs/searching.md).")
    objectives: str | Sequence[str] | None = option(
        None, cli_type=str,
        help="Comma list of quality, memory, throughput, latency, steps_to_target.")
    sampler: str | None = option(None, help=sampler_help)
    seed: int | None = option(
        None, rule=Integer(0, MAX_SEED, note="(2**32 - 1)"),
        help="Seed of the sampler and of every trial's model init and data order (a space's "
        "base `seed` wins). Default 0.")
    workers: int | None = option(
        None, rule=Positive(), help="Trials at once on Ray (default: one per GPU; on a CPU 1, "
        "or one per core under --time-budget); --executor local runs one at a time.")
    device: str = option("auto", help="auto, cpu, cuda (every GPU) or cuda:N (GPU N only; "
                         "not with --ray-address or --executor local).")
    study: str | None = option(
        None, help="Study name (default search-<date>-<time>); letters, digits, _ - .")
    resume: bool = option(False, flags=("--resume",), help="Continue --study after a stop.")
    runs_dir: str | Path = option(
        Path("runs"), cli_type=Path, help="Where studies and optuna.db live.")
    ray_address: str | None = option(None, help="Join this Ray cluster.")
    trial_resources: Sequence[str] | None = option(
        None, flags=("--trial-resources",), cli_type=list[str] | None,
        help="Custom Ray resources per trial, NAME=AMOUNT[,...]; repeat to alternate trials "
        "between them (docs/clusters.md).")
    tracking_uri: str | None = option(
        None, help="MLflow URI (default <runs-dir>/mlflow.db; 'none' to skip).")
    storage: str | None = option(
        None, help="Optuna storage URL (default <runs-dir>/optuna.db), e.g. "
        "postgresql://user:pw@host/optuna (pip install 'autoembed[team]').")
    pick_rule: str = option(
        DEFAULT_PICK, flags=("--pick",), help=pick_help)
    data: str | None = option(None, help="Data name or a CSV/Parquet path.")
    label: str | None = option(None, help="Label column of --data.")
    categorical: str | Sequence[str] | None = option(
        None, cli_type=str, help="Comma list of categorical columns.")
    text_column: str | None = option(None, help="Text column of --data (a text task).")
    early_stop: bool | None = option(
        None, flags=("--early-stop/--no-early-stop",),
        help="Stop trials that cannot reach the front (default on; docs/searching.md).")
    start_points: bool | None = option(
        None, flags=("--start-points/--no-start-points",),
        help="Train known-good configs first (default on; not with --sampler grid).")
    host_budget: BudgetLike | None = option(
        None, cli_type=str,
        help="Host memory for host_cached tables, e.g. 64GB (over it: infeasible).")
    repeatable: bool = option(
        False, flags=("--repeatable",), help="Repeat exactly with the same --seed: one trial "
        "at a time, and throughput/latency (wall-clock figures) never steer the proposals.")
    multi_fidelity: bool = option(
        False, flags=("--multi-fidelity",), help="Stop trials outside the top third at rungs "
        "of their length (MO-ASHA; default off; docs/searching.md).")
    model: UserFunction | None = option(
        None, cli_type=str, help="Your model: pkg.module:build, build(params) -> nn.Module "
        "(with --example and --train; the current directory is on the import path).")
    example: UserFunction | None = option(
        None, cli_type=str,
        help="pkg.module:example, example(params) -> one batch as the forward takes it.")
    train: UserFunction | None = option(
        None, cli_type=str,
        help="pkg.module:train, train(model, params, report): your training loop.")
    loss: UserFunction | None = option(
        None, cli_type=str, help="With --model: pkg.module:fn, fn(output, example) -> the "
        "scalar loss, when your forward returns logits (default: the output is the loss, else "
        "cross-entropy over its last dimension is priced).")
    executor: Any = option(
        "ray", cli_type=str, help="ray (default: Ray Tune) or local (one trial at a time in "
        "this process, for a debugger).")  # in Python also an Executor object
    allow_changed_code: bool = option(
        False, flags=("--allow-changed-code",), help="--resume although --model/--example/"
        "--train's module source changed since the study started.")
    apply: Callable[..., Any] | str | None = option(
        None, cli=False, help="apply(model, config) rewrites the built model instead of "
        "autoembed.apply (with model=, example=, train=).")
    reference: bool = option(
        True, flags=("--reference/--no-reference",), help="With --model: train your model "
        "as written (nothing applied) first, as trial 0 (default on).")
    enqueue: str | Path | Sequence[Mapping[str, Any]] | None = option(
        None, cli_type=Path, flags=("--enqueue",), help="With --model: a YAML list of param "
        "dicts (e.g. - {dim: 64, lr: 0.01}) trained first, in order.")
