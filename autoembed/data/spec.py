"""`DataSpec`: which data a run uses and every parameter that determines them.

Pure Python (no numpy, no pandas): it is validated early, serialised into the exported
config's `data` field as plain JSON types, and read back with `from_dict`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import PurePath
from typing import Any

from autoembed.errors import DataError, did_you_mean
from autoembed.rules import Each, Flag, Integer, Interval, Is, Rule, check_fields, field_rule, plain

__all__ = ["BUILTIN_NAMES", "SYNTHETIC_NAMES", "REAL_NAMES", "FILE_SUFFIXES", "SPLITS", "DataSpec"]

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
DEFAULT_SEPARATOR = "|"  # what a multi-hot cell's values are joined by


# The keys that name a data file's columns (built-in data have their own), with their flags.
FILE_COLUMN_KEYS = {"label": "--label", "categorical": "--categorical", "multi_hot": "",
                    "text_column": "--text-column", "separator": ""}


def suffix_of(name: str) -> str:
    """The recognised (possibly double) suffix of a file name, lower case, or ''."""
    low = name.lower()
    for s in sorted(FILE_SUFFIXES, key=len, reverse=True):
        if low.endswith(s):
            return s
    return ""


def _ruled(default: Any, rule: Rule) -> Any:
    """A field with its `default` and its `rule` (`DataSpec.validate` checks it)."""
    return field(default=default, metadata=field_rule(rule))


def _check(key: str, value: Any, rule: Rule) -> None:
    rule.check(key, value, "data spec key", DataError)


def _split_ok(split: Any) -> bool:
    return (Each(Interval(0.0, 1.0), "", 3, seq=(tuple,)).ok(split) and all(s > 0 for s in split)
            and abs(sum(split) - 1.0) < 1e-9)


_NAME = Is(str, "a column name", filled=True)
_COLUMNS = Each(_NAME, "a list of column names, each once", seq=(tuple,), distinct=True)
_SCALE = Interval(0.0, 100.0)


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
    `interaction_scale`; `ctr_bias` the planted logit's bias.

    synthetic-text: `vocab_size` table rows (id 0 padding; default 50,000), `seq_len`
    (default 64), `num_classes`,
    `indicative_share` of tokens that point to a class, `label_noise` (Gumbel scale on the
    class scores). Real/user text: `vocab_size` caps the table, `seq_len` truncates.

    files only (built-in data have their own, and refuse these): `label` column (binary for
    ctr; any classes for text), `categorical` columns (None: auto-detected), `multi_hot`
    columns holding `separator`-joined bags, `text_column` (a text task). Files and real
    data: `min_count` (values seen fewer times in the train split fold into the OOV id),
    `split` fractions; `vocab` the path of a saved vocabulary to
    encode with (what an exported config carries), instead of maps built on train.
    """

    name: str = _ruled("synthetic-ctr", Is(str, "a data name or a file path", filled=True))
    seed: int = _ruled(0, Integer(0))
    rows: tuple[int, int, int] = _ruled(DEFAULT_ROWS, Each(
        Integer(1), "three row counts >= 1: train, valid, test", 3, seq=(tuple,)))
    # synthetic-ctr (bag_sizes, zipf_exponent and interaction_pairs: checked per field)
    vocab_sizes: tuple[int, ...] = _ruled(DEFAULT_CTR_VOCABS, Each(
        Integer(1), "a list of vocab sizes >= 1, one per field", filled=True, seq=(tuple,)))
    bag_sizes: tuple[int, ...] | None = None
    zipf_exponent: float | tuple[float, ...] = 1.2
    scramble: bool = _ruled(True, Flag())
    effect_scale: float = _ruled(1.0, _SCALE)
    head_size: int = _ruled(100, Integer(0))
    tail_scale: float = _ruled(0.1, _SCALE)
    interaction_pairs: tuple[tuple[int, int], ...] | None = None
    interaction_rank: int = _ruled(4, Integer(1))
    interaction_scale: float = _ruled(0.3, _SCALE)
    ctr_bias: float = _ruled(-1.0, Interval(-100.0, 100.0))
    # text (synthetic and real)
    vocab_size: int | None = _ruled(None, Integer(3))
    seq_len: int | None = _ruled(None, Integer(1))
    num_classes: int = _ruled(4, Integer(2))
    indicative_share: float = _ruled(0.5, Interval(0.0, 1.0))
    label_noise: float = _ruled(0.5, _SCALE)
    # files and real data
    label: str = _ruled("label", _NAME)
    categorical: tuple[str, ...] | None = _ruled(None, _COLUMNS)
    multi_hot: tuple[str, ...] = _ruled((), _COLUMNS)
    separator: str = _ruled(DEFAULT_SEPARATOR, Is(str, "a non-empty string", filled=True))
    text_column: str | None = _ruled(None, _NAME)
    min_count: int = _ruled(1, Integer(1))
    split: tuple[float, float, float] = _ruled(
        (0.8, 0.1, 0.1), Is(_split_ok, "three positive fractions summing to 1"))
    # a saved vocabulary (directory or vocab.json) to encode with instead of building one
    vocab: str | None = _ruled(None, Is(str, "the path of a saved vocabulary", filled=True))

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
        """Every field against its declared rule, then the rules that tie fields together."""
        check_fields(self, what="data spec key", error=DataError)
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
        if not self.is_file:
            self._require_no_file_columns()
        nf = len(self.vocab_sizes)
        if self.bag_sizes is not None:
            _check("bag_sizes", self.bag_sizes,
                   Each(Integer(1), f"{nf} sizes >= 1, one per field", nf, seq=(tuple,)))
        one = Interval(0.0, 10.0)
        _check("zipf_exponent", self.zipf_exponent, Is(
            lambda z: one.ok(z) or Each(one, "", nf, seq=(tuple,)).ok(z),
            f"{one.noun}, or {nf} of them (one per field)"))
        pair = Is(lambda p: Each(Integer(0, nf - 1), "", 2, seq=(tuple,)).ok(p) and p[0] != p[1],
                  "")
        if self.interaction_pairs is not None:
            _check("interaction_pairs", self.interaction_pairs,
                   Each(pair, f"a list of pairs of two different fields in [0, {nf})",
                        seq=(tuple,)))

    def _require_no_file_columns(self) -> None:
        """Built-in data have their own label and columns: a key naming a file's columns
        would be ignored (stored in the study, never read), so it is refused."""
        given = [f.name for f in fields(self) if f.name in FILE_COLUMN_KEYS
                 and getattr(self, f.name) != f.default]
        if given:
            flags = [FILE_COLUMN_KEYS[k] for k in given if FILE_COLUMN_KEYS[k]]
            said = f" ({', '.join(flags)})" if flags else ""
            raise DataError(
                f"data '{self.name}' is built in, with its own label and columns: "
                f"{', '.join(given)}{said} describe{'s' if len(given) == 1 else ''} a data "
                f"file; drop {'it' if len(given) == 1 else 'them'}, or give a file's path"
            )

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
