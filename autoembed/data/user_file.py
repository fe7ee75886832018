"""User data files: a CSV/TSV/Parquet table with a `label` column.

ctr (default): categorical columns as named, else auto-detected (categories, booleans,
strings and integers with few distinct values, lists of keys); `multi_hot` columns hold
separator-joined bags, and a list column (Parquet) is a bag of its values; labels must be
binary. text (`text_column` given): the column is tokenised, labels may be any
classes, other columns are ignored.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from autoembed.data.base import BaseDataset, InMemoryDataset
from autoembed.data.spec import DEFAULT_SEPARATOR, DataSpec
from autoembed.data.table_files import read_as_written, read_table
from autoembed.data.tabular import (
    CtrColumns,
    as_bags,
    build_ctr,
    detect_categorical,
    keyed_lists,
    list_columns,
    require_columns,
)
from autoembed.data.text import DEFAULT_SEQ_LEN, build_text
from autoembed.data.vocab import OLD_KEYS, Vocabulary, keyed_by_this_rule
from autoembed.errors import DataError

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["load_user_file", "unused_note"]


def load_user_file(spec: DataSpec, vocabulary: Vocabulary | None = None) -> InMemoryDataset:
    source = spec.name
    frame = read_table(source)
    require_columns(frame, (spec.label,), "label", source)
    if spec.text_column is not None:
        if spec.categorical or spec.multi_hot:
            named = ", ".join((*(spec.categorical or ()), *spec.multi_hot))
            raise DataError(
                f"data file '{source}' is a text task (text column '{spec.text_column}'), "
                f"which reads only its text: drop the categorical columns ({named}), or the "
                f"text column for a ctr task"
            )
        seq_len = spec.seq_len or DEFAULT_SEQ_LEN
        read_as_written(source, frame, (spec.text_column,))  # '007' and '3.50' as written
        return build_text(frame, spec, spec.text_column, spec.label, source, seq_len, vocabulary)
    _require_same_reading(vocabulary, spec)
    require_columns(frame, spec.multi_hot, "multi_hot", source)
    multi_hot, lists = _list_bags(frame, spec)
    unused: list[tuple[str, str]] = []
    if spec.categorical is not None:
        categorical = tuple(c for c in spec.categorical if c not in multi_hot)
    elif vocabulary is not None and vocabulary.maps:  # the columns its maps were built on
        categorical, multi_hot = _vocabulary_columns(vocabulary, spec.multi_hot)
    else:
        exclude = (spec.label, *multi_hot, *lists)
        taken, left = detect_categorical(frame, exclude)
        categorical = tuple(taken)
        unused = [(c, "lists of numbers") for c in lists if c not in multi_hot] + left
    read_as_written(source, frame, (*categorical, *multi_hot))  # keys are labels: '007'
    cols = CtrColumns(spec.label, categorical, multi_hot, spec.separator)
    dataset = build_ctr(frame, spec, cols, source, vocabulary)
    dataset.unused = tuple(unused)
    return dataset


def _vocabulary_columns(vocabulary: Vocabulary, multi_hot: tuple[str, ...]
                        ) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(categorical, multi-hot) columns of a file encoded with a saved vocabulary whose
    columns were auto-detected: the columns of its maps by their kind (and `multi_hot`,
    named), not those detection would take in this file (a column constant here, or with a
    value per row, is still a field of the model; a list column it has no map of is not)."""
    kinds = {name: m.kind for name, m in vocabulary.maps.items()}
    multi = (*multi_hot, *(c for c, k in kinds.items() if k == "multi_hot"))
    return tuple(c for c, k in kinds.items() if k == "categorical"), tuple(dict.fromkeys(multi))


def _require_same_reading(vocabulary: Vocabulary | None, spec: DataSpec) -> None:
    """A saved vocabulary whose keys were made as this file's are: by this version's rule
    (`KEYS_RULE`), multi-hot bags split on the same separator; else a file's rows would be
    encoded with ids its model never saw."""
    if vocabulary is None or not vocabulary.maps:
        return
    source, built_on = spec.name, vocabulary.data.get("name", spec.name)
    if not keyed_by_this_rule(vocabulary.keys):
        raise DataError(
            f"the saved vocabulary was built on '{built_on}' {OLD_KEYS}; leave the "
            f"vocabulary out to build one on '{source}', or encode with the autoembed "
            f"version that saved it"
        )
    bags = [name for name, m in vocabulary.maps.items() if m.kind == "multi_hot"]
    was = vocabulary.data.get("separator", DEFAULT_SEPARATOR)
    if bags and was != spec.separator:
        raise DataError(
            f"the saved vocabulary split the bags of {', '.join(bags)} in '{built_on}' on "
            f"'{was}', and '{source}' is split on '{spec.separator}'; give separator='{was}'"
        )


def unused_note(dataset: BaseDataset | None) -> str | None:
    """One line naming the columns of a data file that auto-detection left out and why
    (None when it left none out, or the columns were named)."""
    if dataset is None or not dataset.unused:
        return None
    unused = dataset.unused
    shown = ", ".join(f"{c} ({why})" for c, why in unused[:8])
    more = f", {len(unused) - 8} more" if len(unused) > 8 else ""
    return (f"columns of {dataset.spec.name} not embedded (auto-detection takes categorical "
            f"columns only): {shown}{more}; --categorical names the columns to embed instead")


def _list_bags(frame: pd.DataFrame, spec: DataSpec) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the multi-hot columns, every list column): list cells become bags in place; a list
    column is multi-hot when named (categorical or multi_hot) or, auto-detected, when it
    holds keys rather than numbers."""
    lists = list_columns(frame)
    if spec.label in lists:
        raise DataError(
            f"label column '{spec.label}' in '{spec.name}' holds lists; a label is one value "
            f"per row"
        )
    named = spec.categorical
    bags = [c for c in lists if (c in named if named is not None else keyed_lists(frame[c]))
            or c in spec.multi_hot]
    for c in lists:
        frame[c] = as_bags(frame[c])
    return tuple(dict.fromkeys((*spec.multi_hot, *bags))), lists
