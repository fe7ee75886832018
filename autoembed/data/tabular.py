"""Categorical tables (CTR task) from a DataFrame: vocabularies built on the train split,
rare values folded into OOV, multi-hot bags, binary labels.

Ids per field: 0 is OOV (missing, unseen in train, or seen fewer than `min_count` times
there); kept values get 1..n by descending train count. Multi-hot bags are right-padded
with MISSING_ID (-1); an empty or missing bag is [OOV].
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
from pandas.api import types as ptypes

from autoembed.batch import MISSING_ID
from autoembed.config import TableConfig
from autoembed.data.base import InMemoryDataset, IntArray, split_rows
from autoembed.data.spec import DataSpec
from autoembed.data.vocab import VocabMap, Vocabulary, canonical, cell_key
from autoembed.errors import DataError

__all__ = ["CtrColumns", "build_ctr", "canonical", "detect_categorical", "class_labels",
           "empirical_frequency", "require_split_classes", "list_columns", "keyed_lists",
           "as_bags", "AUTO_MAX_DISTINCT_SHARE", "why_not_categorical", "cell_key"]

# Auto-detection: a string or integer column is categorical when its distinct values are at
# most this share of its rows (a row number, uuid or other id-per-row column is not).
AUTO_MAX_DISTINCT_SHARE = 0.5


def _where(source: str, column: str) -> str:
    return f"column '{column}' in '{source}'"


# The flag that names a column of each role (`autoembed search`) and its DataSpec key (a
# config file's `data:`, which `autoembed train` reads; Python).
ROLE_FLAGS = {"label": "--label", "categorical": "--categorical", "text": "--text-column"}
ROLE_KEYS = {"label": "label", "categorical": "categorical", "text": "text_column"}


def require_columns(frame: pd.DataFrame, columns: Sequence[str], role: str, source: str) -> None:
    """Each of `columns` is in the frame, else a DataError listing the columns there and the
    flag that names a column of this `role`."""
    for c in columns:
        if c not in frame.columns:
            flag = (f"; name the {role} column with {ROLE_FLAGS[role]} (a config file: its "
                    f"data key '{ROLE_KEYS[role]}')") if role in ROLE_FLAGS else ""
            raise DataError(
                f"{role} column '{c}' is not in '{source}'; available columns: "
                f"{', '.join(repr(str(x)) for x in frame.columns)}{flag}"
            )


def _require_flat_names(fields: Sequence[str], source: str) -> None:
    """Each column becomes a table, and a dotted table name is a module path: refuse a
    column that would sit inside another ('user' and 'user.id')."""
    from autoembed.config.value import nested_name

    found = nested_name(fields)
    if found is not None:
        inner, outer = fields[found[0]], found[1]
        raise DataError(
            f"columns '{outer}' and '{inner}' in '{source}' cannot both be tables: a dotted "
            f"name is a path, so '{inner}' would sit inside '{outer}'; rename one (e.g. "
            f"'{inner.replace('.', '_')}')"
        )


def require_values(frame: pd.DataFrame, column: str, role: str, source: str) -> None:
    if not frame[column].notna().any():
        raise DataError(
            f"{role} {_where(source, column)} has no values (all missing); fill it or "
            f"leave it out"
        )


def detect_categorical(frame: pd.DataFrame, exclude: Sequence[str]
                       ) -> tuple[list[str], list[tuple[str, str]]]:
    """The columns (`exclude` aside) that look categorical (`why_not_categorical` says
    None), and those it leaves out, each with why; each column judged once."""
    taken: list[str] = []
    left: list[tuple[str, str]] = []
    for c in frame.columns:
        if c in exclude:
            continue
        why = why_not_categorical(frame[c])
        if why is None:
            taken.append(c)
        else:
            left.append((str(c), why))
    return taken, left


def why_not_categorical(s: pd.Series) -> str | None:
    """None when the column looks categorical: categories, booleans, and string or integer
    columns whose distinct values are at most AUTO_MAX_DISTINCT_SHARE of the rows (an id per
    row, a uuid or free text, has nothing to learn: every validation value would be unseen).
    An integer column with missing values (which a CSV reader gives as floats: 3.0, NaN) is
    an integer column. Else why not, in a few words; left out whatever the dtype, as
    nothing can be learnt from them (and a named one is refused): a column with no value, a
    constant (one value on every row), and one whose present values all differ (also an id
    that is mostly missing)."""
    present = int(s.notna().sum())
    distinct = _distinct(s)
    if not present:
        return "all missing"
    if distinct == float("inf"):
        return f"{type(s.dropna().iloc[0]).__name__} values, not keys"
    categories = ptypes.is_bool_dtype(s) or isinstance(s.dtype, pd.CategoricalDtype)
    if not (categories or ptypes.is_string_dtype(s) or ptypes.is_object_dtype(s) or _integral(s)):
        return "numbers, not whole" if ptypes.is_float_dtype(s) else f"{s.dtype} values"
    if distinct == 1 and present == len(s):
        return "one value"
    if present >= 2 and distinct == present:
        return "a different value on every row"
    if not categories and distinct > AUTO_MAX_DISTINCT_SHARE * len(s):
        return f"{int(distinct):,} distinct values in {len(s):,} rows"
    return None


def _distinct(s: pd.Series) -> float:
    """Distinct values of a column; infinite when its cells are not keys (a Parquet struct's
    dicts), which auto-detection then leaves out."""
    try:
        return float(s.nunique())
    except TypeError:
        return float("inf")


def _integral(s: pd.Series) -> bool:
    """Integer dtype, or floats that are all whole numbers where present (some missing)."""
    if ptypes.is_integer_dtype(s):
        return True
    if not ptypes.is_float_dtype(s):
        return False
    present = s.dropna().to_numpy()
    return bool(present.size) and bool(np.all(np.mod(present, 1) == 0))


# ---------------------------------------------------------------------------- labels


def class_labels(
    series: pd.Series, column: str, source: str, known: tuple[str, ...] | None
) -> tuple[npt.NDArray[np.int64], tuple[str, ...]]:
    """Class index per row and the class values (index = position): numbers sort numerically,
    anything else as strings. With `known` (a saved vocabulary), those classes are used."""
    missing = int(series.isna().sum())
    if missing:
        raise DataError(
            f"label {_where(source, column)} has {missing} missing values; fill or drop those rows"
        )
    codes, uniques = pd.factorize(series, sort=False)
    values = [canonical(u) for u in uniques]
    if known is None:
        numeric = ptypes.is_numeric_dtype(series) and not ptypes.is_bool_dtype(series)
        order = sorted(set(values), key=(lambda v: (float(v), v)) if numeric else None)
        classes = tuple(order)
    else:
        classes = known
        unknown = sorted(set(values) - set(classes))
        if unknown:
            raise DataError(
                f"label {_where(source, column)} has values {unknown[:5]} the saved vocabulary "
                f"does not know (classes: {list(classes)}); use data with those classes only"
            )
    position = {v: i for i, v in enumerate(classes)}
    mapping = np.array([position[v] for v in values], dtype=np.int64)
    return mapping[codes], classes


def binary_labels(
    series: pd.Series, column: str, source: str, known: tuple[str, ...] | None
) -> tuple[npt.NDArray[np.float32], tuple[str, ...]]:
    """0/1 labels: {0, 1} (or False/True, read as 1/0 with or without a saved vocabulary)
    as is; any other two values in sorted order."""
    if ptypes.is_bool_dtype(series):
        series = series.astype("int64")
    if known is None:
        distinct = sorted({canonical(v) for v in series.dropna().unique()})
        if len(distinct) > 2:
            shown = ", ".join(repr(v) for v in distinct[:4])
            if len({v.strip() for v in distinct}) == 2:
                raise DataError(
                    f"label {_where(source, column)} has {len(distinct)} distinct values "
                    f"({shown}) that are two once stripped of surrounding spaces; strip them "
                    f"in the file"
                )
            raise DataError(
                f"label {_where(source, column)} has {len(distinct)} distinct values (e.g. "
                f"{shown}); the ctr task needs two (0/1): binarise the column, or give a text "
                f"column (--text-column, text_column=) for a multi-class text task"
            )
        if len(distinct) < 2:
            only = distinct[0] if distinct else "none"
            raise DataError(
                f"label {_where(source, column)} has only the value {only}; the ctr task needs "
                f"rows of both classes"
            )
        if set(distinct) == {"0", "1"}:
            known = ("0", "1")
    idx, classes = class_labels(series, column, source, known)
    return idx.astype(np.float32), classes


def require_split_classes(dataset: InMemoryDataset) -> None:
    """Every split of a ctr data set holds rows of both classes: a split with one class has
    no AUC, so a search could not rank its trials (valid) or report the pick's test score
    (test), and train rows of one class teach nothing. Raises a one-line DataError naming
    the split and the class it lacks."""
    if dataset.task != "ctr":
        return
    labels = {s: dataset.split_labels(s) > 0.5 for s in ("train", "valid", "test")}
    for split, y in labels.items():
        if 0 < y.sum() < y.size:
            continue
        lacking = int(not y.any())  # 1: the split has no positive rows
        count = sum(int((v == bool(lacking)).sum()) for v in labels.values())
        name = (dataset.vocabulary.labels or ("0", "1"))[lacking]
        total = sum(v.size for v in labels.values())
        spec = dataset.spec
        raise DataError(
            f"label {_where(spec.name, str(spec.label))} has {count} of {total} rows of class "
            f"'{name}' and the {split} split ({y.size} rows) none, so AUC cannot judge a "
            f"trial on it; add rows of class '{name}'"
        )


# ---------------------------------------------------------------------------- fields


@dataclass(frozen=True)
class _Keys:
    """A column factorised: row -> unique code (-1 missing), code -> bag of key indices."""

    codes: IntArray
    bags: list[list[int]]
    keys: list[str]


def list_columns(frame: pd.DataFrame) -> tuple[str, ...]:
    """Columns whose cells are lists (a Parquet list column, e.g. a movie's genres): their
    first present cell is a list, tuple or array."""
    found = []
    for c in frame.columns:
        s = frame[c]
        if ptypes.is_object_dtype(s):
            first = next((v for v in s if v is not None and not _is_nan(v)), None)
            if isinstance(first, (list, tuple, np.ndarray)):
                found.append(str(c))
    return tuple(found)


def keyed_lists(series: pd.Series) -> bool:
    """Whether a list column holds keys (strings, integers, booleans), not numbers such as an
    embedding vector's floats: what auto-detection takes as a bag of values."""
    items = [x for v in series.dropna().head(100) for x in v]
    return all(isinstance(x, (str, bool, int, np.integer, np.bool_)) for x in items)


def as_bags(series: pd.Series) -> pd.Series:
    """A list column as hashable bags: each cell a tuple of its values' keys (`canonical`),
    a missing cell None (OOV, as an empty bag is)."""
    return series.map(lambda v: tuple(canonical(x) for x in v)
                      if isinstance(v, (list, tuple, np.ndarray)) else None)


def _is_nan(v: Any) -> bool:
    return isinstance(v, float) and v != v


def _factorise(series: pd.Series, separator: str | None) -> _Keys:
    try:
        codes, uniques = pd.factorize(series, sort=False)
    except TypeError:  # unhashable cells: a Parquet struct's dicts
        kind = type(series.dropna().iloc[0]).__name__
        raise DataError(
            f"column '{series.name}' holds {kind} values, not keys; name columns of strings, "
            f"numbers or lists as categorical"
        ) from None
    key_index: dict[str, int] = {}
    bags: list[list[int]] = []
    for u in uniques.tolist():  # a list: iterating an Arrow-backed Index is 10x slower
        if isinstance(u, tuple):  # a list cell (`as_bags`): its values, not a joined string
            parts = [cell_key(t) for t in u]
        elif separator is not None:
            parts = [cell_key(t) for t in canonical(u).split(separator)]
        else:
            parts = [cell_key(u)]
        bags.append([key_index.setdefault(t, len(key_index)) for t in parts if t])
    return _Keys(np.asarray(codes, dtype=np.int64), bags, list(key_index))


def _require_learnable(k: _Keys, column: str, source: str) -> None:
    """Refuse a one-hot column whose table could learn nothing, in one line naming it: one
    value on every row (a constant: no row differs), or a different value on every row that
    has one (a row id: every validation value is unseen in train, and the table spends a row
    per train row). A column with one value and some missing cells is kept: present/missing
    is a feature."""
    key_of = np.array([bag[0] if bag else -1 for bag in k.bags] + [-1], dtype=np.int64)
    row_keys = key_of[k.codes]  # code -1 (missing) takes the appended -1
    present = row_keys[row_keys >= 0]
    counts = np.bincount(present, minlength=len(k.keys))
    fix = (f"leave it out of the categorical columns (--categorical; a config file: its data "
           f"key '{ROLE_KEYS['categorical']}')")
    if present.size == row_keys.size and np.count_nonzero(counts) == 1:
        raise DataError(
            f"categorical {_where(source, column)} has the one value "
            f"'{k.keys[int(present[0])]}' on every row: a constant, its table learns nothing; "
            f"{fix}"
        )
    if present.size >= 2 and int(counts.max()) == 1:
        rows = (f"each of its {present.size:,} rows" if present.size == row_keys.size
                else f"each of the {present.size:,} rows that have one")
        raise DataError(
            f"categorical {_where(source, column)} has a different value on {rows} (like a row "
            f"id): no validation value is seen in train, so its table learns nothing and "
            f"spends a row per train row; {fix}"
        )


def _build_map(name: str, kind: str, k: _Keys, train: IntArray, min_count: int) -> VocabMap:
    rows_per_unique = np.bincount(k.codes[train][k.codes[train] >= 0], minlength=len(k.bags))
    counts = np.zeros(len(k.keys), dtype=np.int64)
    for u, bag in enumerate(k.bags):
        if rows_per_unique[u]:
            for t in bag:
                counts[t] += rows_per_unique[u]
    kept = [i for i in range(len(k.keys)) if counts[i] >= min_count]
    kept.sort(key=lambda i: (-counts[i], k.keys[i]))
    return VocabMap(name, kind, tuple(k.keys[i] for i in kept))


def _encode(k: _Keys, vmap: VocabMap, width: int | None) -> IntArray:
    """[n, L] ids; L = the longest bag (or `width` for one-hot fields: 1)."""
    key_ids = np.array([vmap.id_of(t) for t in k.keys], dtype=np.int64)
    bags = [[int(key_ids[t]) for t in bag] or [vmap.oov_id] for bag in k.bags]
    length = width or max((len(b) for b in bags), default=1)
    table = np.full((len(bags) + 1, length), MISSING_ID, dtype=np.int64)
    for u, bag in enumerate(bags):
        table[u, : len(bag)] = bag
    table[len(bags), 0] = vmap.oov_id  # the row for missing values (code -1)
    return table[k.codes]


def empirical_frequency(ids: IntArray) -> float:
    """sum_i p_i^2 of the ids' empirical distribution (padding excluded)."""
    flat = ids[ids >= 0]
    if flat.size == 0:
        return 1.0
    p = np.bincount(flat) / flat.size
    return float(min(1.0, max(np.dot(p, p), 1e-300)))


@dataclass(frozen=True)
class CtrColumns:
    """Which columns make a ctr data set."""

    label: str
    categorical: tuple[str, ...]
    multi_hot: tuple[str, ...] = ()
    separator: str = "|"


def build_ctr(
    frame: pd.DataFrame,
    spec: DataSpec,
    columns: CtrColumns,
    source: str,
    vocabulary: Vocabulary | None = None,
) -> InMemoryDataset:
    """Encode a ctr data set: 80/10/10 split (spec.split, spec.seed), maps on train only."""
    fields = tuple(dict.fromkeys((*columns.categorical, *columns.multi_hot)))
    splits = split_rows(len(frame), spec.split, spec.seed)
    _check_ctr(frame, columns, fields, splits, spec, source, vocabulary is not None)
    known = vocabulary.labels if vocabulary is not None and vocabulary.labels else None
    labels, classes = binary_labels(frame[columns.label], columns.label, source, known)
    train = splits[0]
    maps: dict[str, VocabMap] = {}
    features: dict[str, IntArray] = {}
    tables = []
    for c in fields:
        maps[c], features[c] = _field_ids(frame, c, columns, train, spec, vocabulary, source)
        train_ids = features[c][train]
        tables.append(
            TableConfig(
                c,
                maps[c].size,
                pooling_factor=float((train_ids >= 0).sum(axis=1).mean()),
                frequency=empirical_frequency(train_ids),
            )
        )
    vocab = Vocabulary(maps, classes, spec.to_dict())
    return InMemoryDataset(spec, "ctr", 2, tuple(tables), 1, vocab, features, labels, splits)


def _check_ctr(frame: pd.DataFrame, columns: CtrColumns, fields: tuple[str, ...],
               splits: Sequence[IntArray], spec: DataSpec, source: str, encoding: bool
               ) -> None:
    """Refuse, in one line each, what a ctr data set cannot be made of: a missing or empty
    label or field column, the label among the fields, a dotted field name, a split with no
    row, no field at all. A field with no value is kept when `encoding` with a saved
    vocabulary (its rows are OOV, as a missing value is at train time)."""
    require_columns(frame, (columns.label,), "label", source)
    if columns.label in fields:
        raise DataError(
            f"column '{columns.label}' in '{source}' is the label; leave it out of the "
            f"categorical columns"
        )
    require_columns(frame, fields, "categorical", source)
    _require_flat_names(fields, source)
    if any(s.size == 0 for s in splits):
        raise DataError(
            f"data file '{source}' has {len(frame)} rows: too few for a {spec.split} split; "
            "add rows"
        )
    if not fields:
        kinds = ", ".join(f"{c} ({frame[c].dtype})" for c in frame.columns if c != columns.label)
        raise DataError(
            f"data file '{source}' has no categorical columns besides the label (found: "
            f"{kinds or 'none'}); name them with --categorical a,b (categorical=[...])"
        )
    require_values(frame, columns.label, "label", source)
    for c in () if encoding else fields:
        require_values(frame, c, "categorical", source)


def _field_ids(frame: pd.DataFrame, c: str, columns: CtrColumns, train: IntArray,
               spec: DataSpec, vocabulary: Vocabulary | None, source: str,
               ) -> tuple[VocabMap, IntArray]:
    """Column `c`'s map (the saved `vocabulary`'s, else built on the `train` rows) and its
    ids per row ([rows, 1], or [rows, widest bag] for a multi-hot column)."""
    multi = c in columns.multi_hot
    keys = _factorise(frame[c], columns.separator if multi else None)
    if vocabulary is None:
        if not multi:
            _require_learnable(keys, c, source)
        vmap = _build_map(c, "multi_hot" if multi else "categorical", keys, train,
                          spec.min_count)
        if not vmap.values:  # every id OOV: the table is one row, whatever the value
            raise DataError(
                f"{_where(source, c)} keeps no value: none is seen min_count="
                f"{spec.min_count} times in the train split, so every value is OOV and its "
                f"table learns nothing; lower min_count, or leave the column out"
            )
    elif c in vocabulary.maps:
        vmap = vocabulary.maps[c]
    else:
        raise DataError(
            f"{_where(source, c)} has no map in the saved vocabulary (it has: "
            f"{', '.join(vocabulary.maps)}); use the columns it was built with"
        )
    return vmap, _encode(keys, vmap, None if multi else 1)
