"""A search space derived from the data's tables and the budget (`--space auto`; its rules
in docs/searching.md, "A space from the data").

`derive_space(facts, budget_bytes)` is a pure function of plain values (`DataFacts`, read from
a loaded Dataset by `facts_of`); `AutoSpace.to_space_dict()` writes it in the space file format
that `autoembed.space.parse_space` validates, every small table pinned to `compression:
none` and `hash_buckets` / `qr_collisions` searched as shares of each table's rows;
`summary(space)` is the few lines a search prints before its first trial. No Optuna, no torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autoembed.errors import ConfigError
from autoembed.rules import Positive
from autoembed.selection import TrainingLength, training_length

if TYPE_CHECKING:
    from autoembed.data.dataset import Dataset
    from autoembed.space import SearchSpace

__all__ = ["TableFacts", "DataFacts", "TablePlan", "AutoSpace", "facts_of", "derive_space",
           "auto_space", "AUTO_SOURCE", "dim_bound", "hash_bucket_range", "qr_collision_range",
           "seq_len_choices", "summary"]

AUTO_SOURCE = "auto"  # the space's source name (`--space auto`)
DIM_LOW = 8
DIM_HIGH = 256
DIM_MULTIPLE = 8  # tensor cores want multiples of 8
# Training bytes per table value at the dim bound: fp32 weight + gradient + Adam's 2 moments.
BYTES_PER_VALUE = 16
BIG_TABLE_SHARE = 0.01  # a table worth compressing holds >= 1% of the budget
HASH_SHARES = (0.01, 0.5)  # hash buckets as a share of the table's rows (100x to 2x)
QR_MAX_COLLISIONS = 64
SEQ_LEN_LOW = 16
SEQ_LEN_QUANTILE = 0.95
BATCH_SIZES = (256, 512, 1024, 2048)
TEXT_BATCH_SIZES = (32, 64, 128, 256)
TEXT_POOLINGS = ("mean", "sum", "idf")  # idf: TF-IDF's weighting, for uncompressed tables
MIN_STEPS_PER_EPOCH = 20  # a batch size leaves at least this many steps in an epoch
EVALS_PER_TRIAL = 8
EVAL_ROWS = 20_000  # validation rows read per evaluation (at most): AUC's s.e. ~0.004
WEIGHT_DECAYS = (0.0, 2e-5, 2e-4, 2e-3)  # L2 (Adam's weight_decay): none to strong
LR_RANGE = (0.001, 0.05)
TABLE_OPTIMIZERS = ("adam", "adagrad", "rowwise_adagrad")
DECAY_OPTIMIZERS = ("adam", "rowwise_adagrad")  # those of TABLE_OPTIMIZERS that take L2
BIG_TABLE_OPTIMIZERS = ("rowwise_adagrad",)  # memory savers: searched only with a big table


@dataclass(frozen=True)
class TableFacts:
    """One table as the data give it: name, rows (vocab_size), ids per sample."""

    name: str
    rows: int
    pooling_factor: float = 1.0


@dataclass(frozen=True)
class DataFacts:
    """What the derivation reads from the data. `doc_lengths`: tokens per train document
    (text; after the load's truncation to `seq_len`); `spec`: the DataSpec dict (the space's
    `data`)."""

    task: str
    tables: tuple[TableFacts, ...]
    train_rows: int
    valid_rows: int
    seq_len: int = 1
    doc_lengths: tuple[int, ...] = ()
    spec: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TablePlan:
    """What the space searches for one table: its dim bound and, when it is big, its
    compression sizes (hash buckets and QR collisions as counts, and the shares they are)."""

    name: str
    rows: int
    dim_high: int
    big: bool
    hash_buckets: tuple[int, int] | None = None
    qr_collisions: tuple[int, int] | None = None


@dataclass(frozen=True)
class AutoSpace:
    """A derived space: per-table plans and the config-wide ranges; `to_space_dict()` is the
    space file form."""

    task: str
    tables: tuple[TablePlan, ...]
    dim: tuple[int, int]
    batch_sizes: tuple[int, ...]
    length: TrainingLength
    eval_batches: int
    seq_lens: tuple[int, ...] = ()
    spec: Mapping[str, Any] = field(default_factory=dict)
    budget_bytes: int = 0

    @property
    def big_tables(self) -> tuple[TablePlan, ...]:
        return tuple(t for t in self.tables if t.big)

    def to_space_dict(self) -> dict[str, Any]:
        """The space file form (`parse_space` validates it): `tables:` pins the small tables
        to no compression; hash buckets and QR collisions are searched as shares of rows."""
        params: dict[str, Any] = {"dim": {"type": "int", "low": self.dim[0], "high": self.dim[1],
                                          "log": True, "multiple_of": DIM_MULTIPLE}}
        compression = self.share_params()
        params.update(compression)
        if self.task == "ctr":
            params["interaction"] = {"choices": ["concat", "dot"]}
            params["dense_layers"] = {"choices": [[], [64], [256, 64]]}
            params["wide"] = {"choices": [False, True]}
        else:
            # idf weighs the rows of uncompressed tables (compressed ones pool by the mean)
            params["pooling"] = {"choices": list(TEXT_POOLINGS),
                                 **({"when": {"compression": "none"}} if compression else {})}
            if len(self.seq_lens) > 1:  # documents truncated or padded to it (runner)
                params["seq_len"] = {"choices": list(self.seq_lens)}
        optimizers = self.table_optimizers()
        params["table_optimizer"] = {"choices": list(optimizers)}
        params["lr"] = {"type": "float", "low": LR_RANGE[0], "high": LR_RANGE[1], "log": True}
        # adagrad's sparse gradients take no weight decay (models.embedding_model refuses it)
        params["weight_decay"] = {"choices": list(WEIGHT_DECAYS), "when": {"table_optimizer": [
            o for o in DECAY_OPTIMIZERS if o in optimizers]}}
        params["batch_size"] = {"choices": list(self.batch_sizes)}
        base: dict[str, Any] = {"dense_optimizer": "adam"}
        if self.task == "text":
            base["dense_layers"] = []
        tables = self.table_rules()
        return {
            "description": self.describe(),
            "data": dict(self.spec),
            "base": base,
            **({"tables": tables} if tables else {}),
            "params": params,
            "objectives": [{"name": "quality", "direction": "maximize"},
                           {"name": "memory", "direction": "minimize"},
                           {"name": "throughput", "direction": "maximize"}],
            "run": self.length.run_settings(self.eval_batches),
        }

    def table_optimizers(self) -> tuple[str, ...]:
        """TABLE_OPTIMIZERS, less BIG_TABLE_OPTIMIZERS when no table is big."""
        if self.big_tables:
            return TABLE_OPTIMIZERS
        return tuple(o for o in TABLE_OPTIMIZERS if o not in BIG_TABLE_OPTIMIZERS)

    def table_rules(self) -> list[dict[str, Any]]:
        """Per-table settings: every small table uncompressed (when any table is big)."""
        if not self.big_tables:
            return []
        return [{"name": t.name, "compression": "none"} for t in self.tables if not t.big]

    def share_params(self) -> dict[str, Any]:
        """Compression params as shares of each table's rows: hash buckets HASH_SHARES; QR
        shares s (m = ceil(1/s) collisions, a quotient table of at most s of the rows) from
        1/min(QR_MAX_COLLISIONS, sqrt(rows)) of the smallest big table to 1/2."""
        big = self.big_tables
        if not big:
            return {}
        out: dict[str, Any] = {
            "compression": {"choices": ["none", "hash"]},
            "hash_buckets": {"when": {"compression": "hash"}, "type": "float",
                             "low": HASH_SHARES[0], "high": HASH_SHARES[1], "log": True}}
        qr = [t.qr_collisions for t in big]
        if all(qr):
            most = min(q[1] for q in qr if q)
            out["compression"]["choices"].append("qr")
            out["qr_collisions"] = {"when": {"compression": "qr"}, "type": "float",
                                    "low": 1 / most, "high": 0.5, "log": True}
        return out

    def describe(self) -> str:
        big = ", ".join(t.name for t in self.big_tables) or "none"
        seq = f"; seq_len {list(self.seq_lens)}" if self.seq_lens else ""
        return (f"auto: {_tables_text(self.tables)}; compressed: {big}; dim "
                f"{self.dim[0]}-{self.dim[1]}{seq}; {self.length.describe()}")


def _tables_text(tables: Sequence[TablePlan], shown: int = 6) -> str:
    """The tables by name and rows (the columns a file gave, auto-detected or named), the
    first `shown` of them when there are more."""
    rows = [t.rows for t in tables]
    named = ", ".join(f"{t.name}: {t.rows:,} rows" for t in tables[:shown])
    if len(tables) == 1:
        return f"1 table ({named})"
    if len(tables) <= shown:
        return f"{len(tables)} tables ({named})"
    return (f"{len(tables)} tables of {min(rows):,}-{max(rows):,} rows ({named}, "
            f"{len(tables) - shown} more)")


def dim_bound(rows: int) -> int:
    """The most dims a table of `rows` rows is searched with: ceil8(1.6 * rows**0.56)
    (fast.ai's rule of thumb), within [DIM_LOW, DIM_HIGH] and at most `rows`."""
    rule = 1.6 * rows ** 0.56
    bound = min(rule, rows, DIM_HIGH)
    return max(DIM_LOW, min(DIM_HIGH, DIM_MULTIPLE * math.ceil(bound / DIM_MULTIPLE)))


def hash_bucket_range(rows: int) -> tuple[int, int] | None:
    """Bucket counts HASH_SHARES of `rows`: at least 1, always fewer than `rows`; None when
    the table is too small to hash into fewer rows."""
    low = max(1, math.ceil(HASH_SHARES[0] * rows))
    high = min(rows - 1, math.floor(HASH_SHARES[1] * rows))
    return (low, high) if low <= high else None


def qr_collision_range(rows: int) -> tuple[int, int] | None:
    """QR collision counts worth searching for `rows` rows (past sqrt(rows) the remainder
    table outgrows the quotient table); None when below 2."""
    high = min(QR_MAX_COLLISIONS, math.isqrt(rows))
    return (2, high) if high >= 2 else None


def seq_len_choices(doc_lengths: Sequence[int], loaded: int) -> tuple[int, ...]:
    """Powers of two from SEQ_LEN_LOW to the first holding SEQ_LEN_QUANTILE of the documents,
    capped at `loaded` (which is then the last choice)."""
    if not doc_lengths:
        return (loaded,)
    ordered = sorted(doc_lengths)
    q = ordered[min(len(ordered) - 1, math.ceil(SEQ_LEN_QUANTILE * len(ordered)) - 1)]
    out = []
    n = SEQ_LEN_LOW
    while n < min(q, loaded):
        out.append(n)
        n *= 2
    out.append(min(n, loaded))
    return tuple(sorted(set(out)))


def _batch_sizes(task: str, train_rows: int) -> tuple[int, ...]:
    """The task's choices that leave MIN_STEPS_PER_EPOCH steps an epoch; else the smallest,
    or, for a train split smaller than it (where no trial could take a step), the largest
    power of two within the split."""
    choices = TEXT_BATCH_SIZES if task == "text" else BATCH_SIZES
    fit = tuple(b for b in choices if b * MIN_STEPS_PER_EPOCH <= train_rows)
    if fit:
        return fit
    return (min(choices[0], 1 << (max(1, train_rows).bit_length() - 1)),)


def derive_space(facts: DataFacts, budget_bytes: int) -> AutoSpace:
    """The space for `facts` under a budget of `budget_bytes` device bytes (docs/searching.md)."""
    Positive(integer=False).check_argument("auto space: budget (bytes)", budget_bytes)
    if not facts.tables:
        raise ConfigError("auto space: the data have no tables to embed")
    plans = []
    for t in facts.tables:
        d = dim_bound(t.rows)
        big = t.rows * d * BYTES_PER_VALUE >= BIG_TABLE_SHARE * budget_bytes
        plans.append(TablePlan(t.name, t.rows, d, big,
                               hash_bucket_range(t.rows) if big else None,
                               qr_collision_range(t.rows) if big else None))
    dim_high = max(p.dim_high for p in plans)
    batches = _batch_sizes(facts.task, facts.train_rows)
    length = training_length(facts.train_rows, batches[len(batches) // 2], EVALS_PER_TRIAL)
    eval_rows = min(facts.valid_rows, EVAL_ROWS)
    eval_batches = max(1, math.ceil(eval_rows / batches[0]))
    seq = seq_len_choices(facts.doc_lengths, facts.seq_len) if facts.task == "text" else ()
    return AutoSpace(facts.task, tuple(plans), (DIM_LOW, dim_high), batches, length,
                     eval_batches, seq, dict(facts.spec), budget_bytes)


def facts_of(dataset: Dataset, max_docs: int = 100_000) -> DataFacts:
    """The facts of a loaded Dataset (text: lengths of up to `max_docs` train documents)."""
    tables = tuple(TableFacts(t.name, t.vocab_size, t.pooling_factor) for t in dataset.tables)
    lengths: list[int] = []
    if dataset.task == "text":
        from autoembed.batch import PAD_ID

        for b in dataset.batches("train", 4096, shuffle=False):
            for ids in b.features.values():
                lengths.extend(int(n) for n in (ids != PAD_ID).sum(dim=1).tolist())
            if len(lengths) >= max_docs:
                break
    return DataFacts(dataset.task, tables, dataset.num_rows("train"), dataset.num_rows("valid"),
                     dataset.seq_len, tuple(lengths[:max_docs]), dataset.spec.to_dict())


def auto_space(dataset: Dataset, budget_bytes: int) -> SearchSpace:
    """The validated space derived from a loaded Dataset and the budget (`--space auto`);
    its `text` is the YAML of the derived file (what a study stores and a user can edit)."""
    import yaml

    from autoembed.space import parse_space

    raw = derive_space(facts_of(dataset), budget_bytes).to_space_dict()
    return parse_space(raw, AUTO_SOURCE, yaml.safe_dump(raw, sort_keys=False))


def summary(space: SearchSpace, stored_at: Path | None = None) -> str:
    """A derived space in a few lines: its description, each searched parameter's range or
    choices (with its condition), the per-table settings, and where it is stored."""
    lines = ["search space derived from the data and the budget"
             + (f" (stored in {stored_at}; --resume reuses it)" if stored_at else "") + ":",
             f"  {space.description}"]
    params = []
    for p in space.params:
        if p.kind == "categorical":
            what = "|".join(_label(c) for c in p.choices)
        else:
            what = f"{p.low:g}..{p.high:g}"
            if p.name == "qr_collisions" and p.kind == "float":
                what = f"1/{1 / p.low:g}..1/{1 / p.high:g}"
            if p.name in ("hash_buckets", "qr_collisions") and p.kind == "float":
                what += " of each table's rows"
            what += (" log" if p.log else "") + (f" x{p.multiple_of}" if p.multiple_of else "")
        cond = "".join(f" if {k}={'|'.join(map(str, v))}" for k, v in p.when)
        params.append(f"{p.name} {what}{cond}")
    lines += ["  " + "; ".join(params[i:i + 4]) for i in range(0, len(params), 4)]
    pinned = [f"{t.name or f'>={t.min_rows} rows'}: "
              + ", ".join(f"{k} {v}" for k, v in t.settings.items()) for t in space.tables]
    if pinned:
        lines.append("  tables: " + "; ".join(pinned))
    return "\n".join(lines)


def _label(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(map(str, value)) + "]"
    return str(value)
