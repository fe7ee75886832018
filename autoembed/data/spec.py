"""`DataSpec`: which data a run uses and every parameter that determines them.

Pure Python (no numpy, no pandas): it is validated early, serialised into the exported
config's `data` field as plain JSON types, and read back with `from_dict`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import PurePath
from typing import Any

from autoembed.errors import DataError, did_you_mean
from autoembed.rules import Integer, Interval, Rule, plain

__all__ = [
    "BUILTIN_NAMES",
    "SYNTHETIC_NAMES",
    "REAL_NAMES",
    "FILE_SUFFIXES",
    "SPLITS",
    "DataSpec",
]

SYNTHETIC_NAMES = ("synthetic-ctr", "synthetic-text")
REAL_NAMES = ("movielens", "flights", "bbcnews")
BUILTIN_NAMES = SYNTHETIC_NAMES + REAL_NAMES
SPLITS = ("train", "valid", "test")
# User files: suffix -> reader. Compressed CSVs are decompressed by pandas.
CSV_SUFFIXES = (".csv", ".csv.gz", ".csv.bz2", ".csv.xz", ".csv.zip")
TSV_SUFFIXES = (".tsv", ".tsv.gz", ".tsv.bz2", ".tsv.xz", ".tsv.zip")
PARQUET_SUFFIXES = (".parquet", ".pq")
FILE_SUFFIXES = CSV_SUFFIXES + TSV_SUFFIXES + PARQUET_SUFFIXES

# synthetic-ctr defaults: six fields from 10^3 to 10^6 rows (1.12M rows: a full fp32 table
# of dim 64 is 287 MB, so a CPU can still train it; pass larger vocab_sizes up to 10^8+).
DEFAULT_CTR_VOCABS = (1_000, 10_000, 100_000, 1_000_000, 10_000, 1_000)
DEFAULT_ROWS = (200_000, 20_000, 20_000)  # train, valid, test rows of synthetic data
DEFAULT_PAIRS = ((0, 1), (2, 3))  # synthetic-ctr field pairs with a planted interaction


def suffix_of(name: str) -> str:
    """The recognised (possibly double) suffix of a file name, lower case, or ''."""
    low = name.lower()
    for s in sorted(FILE_SUFFIXES, key=len, reverse=True):
        if low.endswith(s):
            return s
    return ""


def _fail(key: str, value: Any, rule: str) -> DataError:
    return DataError(f"data spec key '{key}' = {value!r}: {rule}")


def _int(key: str, value: Any, minimum: int) -> None:
    _check(key, value, Integer(minimum))


def _float(key: str, value: Any, low: float, high: float) -> None:
    _check(key, value, Interval(low, high))


def _check(key: str, value: Any, rule: Rule) -> None:
    if not rule.ok(value):
        raise _fail(key, value, rule.text)


def _columns(key: str, value: Any) -> None:
    if not isinstance(value, tuple) or not all(isinstance(c, str) and c for c in value):
        raise _fail(key, value, "must be a list of column names")


@dataclass(frozen=True)
class DataSpec:
    """The data of a run: a built-in name or a user file, and its parameters.

    name: "synthetic-ctr", "synthetic-text", "movielens", "flights", "bbcnews", or the path
        of a .csv/.tsv/.parquet file (optionally compressed CSV).
    seed: generates synthetic data and draws every 80/10/10 split.
    rows: synthetic rows per split (train, valid, test).

    synthetic-ctr (planted model, see `autoembed.data.synthetic`): `vocab_sizes` one per
    field; `bag_sizes` the most ids per row per field (1 one-hot; None all one-hot);
    `zipf_exponent` one value or one per field; `scramble` maps rank -> id by a keyed
    bijection (False: id = rank); `effect_scale` std of a head id's planted effect (logits);
    `head_size` ranks per field with full effects, `tail_scale` the rest's effect relative to
    it; `interaction_pairs` field pairs (None: (0, 1) and (2, 3) where those fields exist)
    with a planted low-rank interaction of rank `interaction_rank` and std
    `interaction_scale`; `ctr_bias` the planted logit's bias. The defaults were tuned so a
    full-table model gets within about 0.02 AUC of the planted oracle (0.87) from 200k rows
    while hashing into 100 buckets per field costs about 0.05.

    synthetic-text: `vocab_size` table rows (id 0 padding; default 50,000), `seq_len`
    (default 64), `num_classes`,
    `indicative_share` of tokens that point to a class, `label_noise` (Gumbel scale on the
    class scores). Real/user text: `vocab_size` caps the table, `seq_len` truncates.

    files and real data: `label` column (binary for ctr; any classes for text),
    `categorical` columns (None: auto-detected), `multi_hot` columns holding `separator`-joined
    bags, `text_column` (a text task), `min_count` (values seen fewer times in the train split
    fold into the OOV id), `split` fractions; `vocab` the path of a saved vocabulary to
    encode with (what an exported config carries), instead of maps built on train.
    """

    name: str = "synthetic-ctr"
    seed: int = 0
    rows: tuple[int, int, int] = DEFAULT_ROWS
    # synthetic-ctr
    vocab_sizes: tuple[int, ...] = DEFAULT_CTR_VOCABS
    bag_sizes: tuple[int, ...] | None = None
    zipf_exponent: float | tuple[float, ...] = 1.2
    scramble: bool = True
    effect_scale: float = 1.0
    head_size: int = 100
    tail_scale: float = 0.1
    interaction_pairs: tuple[tuple[int, int], ...] | None = None
    interaction_rank: int = 4
    interaction_scale: float = 0.3
    ctr_bias: float = -1.0
    # text (synthetic and real)
    vocab_size: int | None = None
    seq_len: int | None = None
    num_classes: int = 4
    indicative_share: float = 0.5
    label_noise: float = 0.5
    # files and real data
    label: str = "label"
    categorical: tuple[str, ...] | None = None
    multi_hot: tuple[str, ...] = ()
    separator: str = "|"
    text_column: str | None = None
    min_count: int = 1
    split: tuple[float, float, float] = (0.8, 0.1, 0.1)
    # a saved vocabulary (directory or vocab.json) to encode with instead of building one
    vocab: str | None = None

    def __post_init__(self) -> None:
        self.validate()

    # ------------------------------------------------------------------ kinds
    @property
    def is_file(self) -> bool:
        return self.name not in BUILTIN_NAMES

    @property
    def kind(self) -> str:
        """'synthetic-ctr', 'synthetic-text', 'movielens', 'flights', 'bbcnews' or 'file'."""
        return "file" if self.is_file else self.name

    @property
    def task(self) -> str:
        """'ctr' or 'text' (known from the spec alone)."""
        if self.name in ("synthetic-text", "bbcnews"):
            return "text"
        if self.is_file:
            return "text" if self.text_column is not None else "ctr"
        return "ctr"

    # ------------------------------------------------------------------ validation
    def validate(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise _fail("name", self.name, "must be a data name or a file path")
        if self.is_file and not suffix_of(self.name):
            suffix = "".join(PurePath(self.name).suffixes)
            if suffix:
                raise DataError(
                    f"data file '{self.name}' has an unknown extension '{suffix}'; "
                    f"use one of {', '.join(FILE_SUFFIXES)}"
                )
            raise DataError(
                f"unknown data name '{self.name}'{did_you_mean(self.name, BUILTIN_NAMES)}; "
                "use one of "
                f"{', '.join(BUILTIN_NAMES)} or the path of a .csv or .parquet file"
            )
        _int("seed", self.seed, 0)
        if not isinstance(self.rows, tuple) or len(self.rows) != 3:
            raise _fail("rows", self.rows, "must be three row counts: train, valid, test")
        for r in self.rows:
            _int("rows", r, 1)
        if not isinstance(self.vocab_sizes, tuple) or not self.vocab_sizes:
            raise _fail("vocab_sizes", self.vocab_sizes, "must list one vocab size per field")
        for v in self.vocab_sizes:
            _int("vocab_sizes", v, 1)
        nf = len(self.vocab_sizes)
        if self.bag_sizes is not None:
            if not isinstance(self.bag_sizes, tuple) or len(self.bag_sizes) != nf:
                raise _fail("bag_sizes", self.bag_sizes, f"must list {nf} sizes, one per field")
            for b in self.bag_sizes:
                _int("bag_sizes", b, 1)
        zs = self.zipf_exponent if isinstance(self.zipf_exponent, tuple) else (self.zipf_exponent,)
        if isinstance(self.zipf_exponent, tuple) and len(zs) != nf:
            raise _fail("zipf_exponent", self.zipf_exponent, f"must be one number or {nf}")
        for z in zs:
            _float("zipf_exponent", z, 0.0, 10.0)
        if not isinstance(self.scramble, bool):
            raise _fail("scramble", self.scramble, "must be true or false")
        _float("effect_scale", self.effect_scale, 0.0, 100.0)
        _int("head_size", self.head_size, 0)
        _float("tail_scale", self.tail_scale, 0.0, 100.0)
        pairs = () if self.interaction_pairs is None else self.interaction_pairs
        if not isinstance(pairs, tuple):
            raise _fail("interaction_pairs", self.interaction_pairs, "must be a list of pairs")
        for p in pairs:
            ok = isinstance(p, tuple) and len(p) == 2 and all(
                isinstance(i, int) and not isinstance(i, bool) and 0 <= i < nf for i in p
            )
            if not ok or p[0] == p[1]:
                raise _fail(
                    "interaction_pairs", p, f"each pair must be two different fields in [0, {nf})"
                )
        _int("interaction_rank", self.interaction_rank, 1)
        _float("interaction_scale", self.interaction_scale, 0.0, 100.0)
        _float("ctr_bias", self.ctr_bias, -100.0, 100.0)
        if self.vocab_size is not None:
            _int("vocab_size", self.vocab_size, 3)
        if self.seq_len is not None:
            _int("seq_len", self.seq_len, 1)
        _int("num_classes", self.num_classes, 2)
        _float("indicative_share", self.indicative_share, 0.0, 1.0)
        _float("label_noise", self.label_noise, 0.0, 100.0)
        if not isinstance(self.label, str) or not self.label:
            raise _fail("label", self.label, "must be a column name")
        if self.categorical is not None:
            _columns("categorical", self.categorical)
        _columns("multi_hot", self.multi_hot)
        if not isinstance(self.separator, str) or not self.separator:
            raise _fail("separator", self.separator, "must be a non-empty string")
        if self.text_column is not None and (
            not isinstance(self.text_column, str) or not self.text_column
        ):
            raise _fail("text_column", self.text_column, "must be a column name")
        _int("min_count", self.min_count, 1)
        ok = isinstance(self.split, tuple) and len(self.split) == 3
        if ok:
            for s in self.split:
                _float("split", s, 0.0, 1.0)
            ok = abs(sum(self.split) - 1.0) < 1e-9 and all(s > 0 for s in self.split)
        if not ok:
            raise _fail("split", self.split, "must be three positive fractions summing to 1")
        if self.vocab is not None and (not isinstance(self.vocab, str) or not self.vocab):
            raise _fail("vocab", self.vocab, "must be the path of a saved vocabulary")

    def exponents(self) -> tuple[float, ...]:
        """The Zipf exponent of each synthetic-ctr field."""
        if isinstance(self.zipf_exponent, tuple):
            return tuple(float(z) for z in self.zipf_exponent)
        return (float(self.zipf_exponent),) * len(self.vocab_sizes)

    def pairs(self) -> tuple[tuple[int, int], ...]:
        """The synthetic-ctr field pairs with a planted interaction."""
        if self.interaction_pairs is not None:
            return self.interaction_pairs
        nf = len(self.vocab_sizes)
        return tuple(p for p in DEFAULT_PAIRS if max(p) < nf)

    # ------------------------------------------------------------------ serialisation
    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types: `name` and every parameter that differs from its default."""
        out: dict[str, Any] = {"name": self.name}
        for f in fields(self):
            if f.name == "name":
                continue
            value = getattr(self, f.name)
            if value != f.default:
                out[f.name] = plain(value)
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], source: str | None = None) -> DataSpec:
        """Build a spec from plain data (e.g. a config's `data` field); errors name `source`."""
        where = f"{source}: " if source else ""
        if not isinstance(raw, Mapping):
            raise DataError(f"{where}expected a mapping of data keys, got {type(raw).__name__}")
        keys = {f.name for f in fields(cls)}
        for k in raw:
            if k not in keys:
                raise DataError(
                    f"{where}unknown data key '{k}'{did_you_mean(k, sorted(keys))}; "
                    f"valid keys: {', '.join(sorted(keys))}"
                )
        kw: dict[str, Any] = {}
        for k, v in raw.items():
            if k == "interaction_pairs" and isinstance(v, (list, tuple)):
                v = tuple(tuple(p) if isinstance(p, (list, tuple)) else p for p in v)
            elif isinstance(v, list):
                v = tuple(v)
            kw[k] = v
        try:
            return cls(**kw)
        except DataError as e:
            if not where:
                raise
            raise DataError(f"{where}{e}") from None
