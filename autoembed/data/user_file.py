"""User data files: a CSV/TSV/Parquet table with a `label` column.

ctr (default): categorical columns as named, else auto-detected (strings, categories,
booleans, integers with few distinct values); `multi_hot` columns hold separator-joined bags;
labels must be binary. text (`text_column` given): the column is tokenised, labels may be any
classes, other columns are ignored.
"""

from __future__ import annotations

from autoembed.data.base import InMemoryDataset
from autoembed.data.spec import DataSpec
from autoembed.data.table_files import read_table
from autoembed.data.tabular import CtrColumns, build_ctr, detect_categorical, require_columns
from autoembed.data.text import DEFAULT_SEQ_LEN, build_text
from autoembed.data.vocab import Vocabulary
from autoembed.errors import DataError

__all__ = ["load_user_file"]


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
        return build_text(frame, spec, spec.text_column, spec.label, source, seq_len, vocabulary)
    require_columns(frame, spec.multi_hot, "multi_hot", source)
    if spec.categorical is not None:
        categorical = tuple(c for c in spec.categorical if c not in spec.multi_hot)
    else:
        exclude = (spec.label, *spec.multi_hot)
        categorical = tuple(detect_categorical(frame, exclude))
    cols = CtrColumns(spec.label, categorical, spec.multi_hot, spec.separator)
    return build_ctr(frame, spec, cols, source, vocabulary)
