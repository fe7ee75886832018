"""`EstimateOptions`: every option of `autoembed estimate`, declared once (`autoembed.options`).

The command's options, their spelling, defaults and help (and so docs/cli.md) are read from
the fields below, in this order; `autoembed.pricing.price.price` takes them (the config-setting
ones are checked there against the config fields' own rules, named by their flags). Pure
Python.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from autoembed.budget import BUDGET_HELP
from autoembed.options import option
from autoembed.rules import Integer, OneOf, or_list
from autoembed.trace import METHODS, SHARDINGS

__all__ = ["EstimateOptions"]


def _choices(key: str, before: str = "", after: str = "") -> str:
    """The help of a flag that sets config field `key`: its choices as the field's rule
    declares them ("a, b or c"), so the help lists what the check accepts."""
    from autoembed.config import FIELD_RULES

    rule = FIELD_RULES[key]
    assert isinstance(rule, OneOf), key
    return f"{before}{or_list(rule.choices)}{after}."


@dataclass(frozen=True, kw_only=True)
class EstimateOptions:
    """`autoembed estimate`'s options as given (None: not given)."""

    config: Path | None = option(
        None, flags=("--config",),
        help="YAML/JSON config file.")
    budget: str | None = option(
        None, help=BUDGET_HELP)
    method: str = option(
        "analytic", rule=OneOf(METHODS),
        help="analytic (microseconds) or traced (one fake step).")
    gpus: int = option(
        1, rule=Integer(1), help="GPUs to shard the tables over.")
    sharding: str = option(
        "table", rule=OneOf(SHARDINGS), help="table or row (with --gpus > 1).")
    task: str | None = option(
        None, help=lambda: _choices("task"))
    vocab: str | None = option(
        None, help="Vocab size, or a comma list (one per table).")
    dim: int | None = option(
        None, help="Embedding dimension.")
    batch: int | None = option(
        None, help="Batch size.")
    seq: int | None = option(
        None, help="Sequence length (text).")
    pooling_factor: float | None = option(
        None, help="Ids per sample per table (ctr).")
    precision: str | None = option(
        None, help=lambda: _choices("precision"))
    serving: str | None = option(
        None, help=lambda: _choices("serving"))
    optimizer: str | None = option(
        None, help=lambda: _choices("table_optimizer",
                                    before="Table optimizer (and dense, where it can): "))
    dense_optimizer: str | None = option(
        None, help=lambda: _choices("dense_optimizer", before="Dense tower optimizer: "))
    compression: str | None = option(
        None, help=lambda: _choices("compression"))
    hash_buckets: str | None = option(
        None, help="Buckets for --compression hash: a count, or a share of each table's rows "
        "in (0, 1).")
    qr_collisions: int | None = option(
        None, help="m for --compression qr.")
    qr_operation: str | None = option(
        None, help=lambda: _choices("qr_operation"))
    mixed_dim_alpha: float | None = option(
        None, help="Power-rule exponent in [0, 1].")
    robe_size: str | None = option(
        None, help="robe: array values per table (>= 1) or a share of its values in (0, 1); "
        "with --robe-shared, of the one array.")
    robe_block: int | None = option(
        None, help="robe: block length Z (<= the array).")
    robe_shared: bool | None = option(
        None, flags=("--robe-shared/--no-robe-shared",),
        help="robe: every robe table reads one array of --robe-size values (a share: of all "
        "robe tables' values).")
    tt_rank: int | None = option(
        None, help="tt: tensor-train rank (>= 1).")
    hot_share: float | None = option(
        None, help="hot_cold: share of ids with their own row, in (0, 1] (cold ids hash into "
        "--hash-buckets rows).")
    pooling: str | None = option(
        None, help=lambda: _choices("pooling"))
    interaction: str | None = option(
        None, help=lambda: _choices("interaction", after=" (ctr)"))
    dense_layers: str | None = option(
        None, help="Tower widths, e.g. 256,64.")
    num_classes: int | None = option(
        None, help="Classes (text).")
    grad_accum: int | None = option(
        None, help="Gradient accumulation steps.")
    checkpointing: bool | None = option(
        None, flags=("--checkpointing/--no-checkpointing",),
        help="Gradient checkpointing of the tower (recomputed in backward).")
    placement: str | None = option(
        None, help=lambda: _choices("placement"))
    cache_load_factor: float | None = option(
        None, help="host_cached: share of rows cached on the device, in (0, 1].")
    cache_policy: str | None = option(
        None, help=lambda: _choices("cache_policy", before="host_cached: "))
    host_budget: str | None = option(
        None, help="Host memory for host_cached tables, e.g. 64GB (checked; exit 2 if short).")
    reserve: str = option(
        "0", help="Bytes for the rest of your model, e.g. 2GB.")
    device_memory: str | None = option(
        None, help="Device memory for a % budget.")
    as_json: bool = option(
        False, flags=("--json",),
        help="Print one JSON object.")
    model: str | None = option(
        None, flags=("--model",),
        help="Your own model: pkg.module:factory (cwd on sys.path).")
    example: str | None = option(
        None, flags=("--example",),
        help="With --model: its input, pkg.module:name (value or function).")
    apply_cfg: Path | None = option(
        None, flags=("--apply",),
        help="With --model: rewrite its embeddings by this config first.")
    world_size: int | None = option(
        None, flags=("--world-size",),
        help="With --model (TorchRec): price every rank of TorchRec's "
        "plan on this many ranks, TorchRec's own storage estimate beside.")
    plan_device: str = option(
        "cuda", flags=("--plan-device",),
        help="With --world-size: cuda (GPU ranks) or cpu (DMP over gloo).")
    torchrec_tables: Path | None = option(
        None, flags=("--tables",),
        help="With --world-size: TorchRec table settings (YAML/JSON list: "
        "name, optimizer, sharding_type, compute_kernel, ...).")
    loss_spec: str | None = option(
        None, flags=("--loss",),
        help="With --model whose forward returns logits: the loss, "
        "pkg.module:fn (output, example) -> scalar (else a stated cross-entropy stand-in).")
    user_space: Path | None = option(
        None, flags=("--space",),
        help="With --model: a search space; a build(params) / example(params) "
        "gets its reference values, and its embedding optimizer and precision apply.")
    suggest: bool = option(
        False, flags=("--suggest",),
        help="Also when it fits: the changes the budget leaves room for "
        "(over the budget they are always printed).")
