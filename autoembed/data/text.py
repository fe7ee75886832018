"""Text classification data from documents: a simple tokenizer and a token vocabulary built
on the train split.

Tokenizer: lower case, then runs of letters and digits of any script (an apostrophe, ' or ’,
may join letters: "don't"; text without spaces between words, as Chinese, is a token per
run); a cell that is a number is its digits. Token ids: 0 padding, 1 OOV, kept tokens 2..
by descending train count (ties by token); `min_count` drops rarer tokens, `vocab_size` caps
the table. Documents are truncated to `seq_len` tokens and right-padded with 0; an empty
document is [OOV].
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

import numpy as np
import pandas as pd

from autoembed.batch import PAD_ID
from autoembed.config import TableConfig
from autoembed.data.base import InMemoryDataset, IntArray, split_rows
from autoembed.data.spec import DataSpec
from autoembed.data.tabular import (
    AUTO_MAX_DISTINCT_SHARE,
    canonical,
    class_labels,
    empirical_frequency,
    require_columns,
    require_values,
)
from autoembed.data.vocab import VocabMap, Vocabulary
from autoembed.errors import DataError

__all__ = ["tokenize", "build_text", "DEFAULT_SEQ_LEN", "TOKENS"]

DEFAULT_SEQ_LEN = 128  # tokens kept per document of a user text file
TOKENS = "tokens"  # the text task's one table / feature name
# letters and digits of any script ([^\W_]: a word character but '_'), then 'letters
_TOKEN_RE = re.compile(r"[^\W_]+(?:'[^\W\d_]+)*")


def tokenize(text: str) -> list[str]:
    """Lower-cased runs of letters and digits; ASCII text as `[a-z0-9]+('[a-z]+)*`."""
    return _TOKEN_RE.findall(text.lower().replace("\u2019", "'"))


def _token_map(docs: Sequence[list[str]], min_count: int, cap: int | None) -> VocabMap:
    counts: Counter[str] = Counter()
    for d in docs:
        counts.update(d)
    kept = sorted((t for t, c in counts.items() if c >= min_count), key=lambda t: (-counts[t], t))
    if cap is not None:
        kept = kept[: max(0, cap - 2)]  # 2 reserved rows: padding and OOV
    return VocabMap(TOKENS, "tokens", tuple(kept))


def _encode(docs: Sequence[list[str]], vmap: VocabMap, seq_len: int) -> IntArray:
    out = np.full((len(docs), seq_len), PAD_ID, dtype=np.int64)
    for i, d in enumerate(docs):
        ids = [vmap.id_of(t) for t in d[:seq_len]] or [vmap.oov_id]
        out[i, : len(ids)] = ids
    return out


def _require_classes(series: pd.Series, count: int, column: str, source: str) -> None:
    """Refuse, in one line, a label that is not classes: numbers that are not whole (a
    measurement: the text task classifies, one class per distinct value), or more classes
    than half the rows (most classes a row or two, never both in train and validation)."""
    if pd.api.types.is_float_dtype(series):
        present = series.dropna().to_numpy()
        fractional = present[np.mod(present, 1) != 0]
        if fractional.size:
            shown = ", ".join(f"{v:g}" for v in fractional[:3])
            raise DataError(
                f"label column '{column}' in '{source}' holds numbers that are not whole "
                f"(e.g. {shown}): the text task classifies, each distinct value a class, and "
                f"does not regress; bin the column into a few classes"
            )
    if count > AUTO_MAX_DISTINCT_SHARE * len(series):
        raise DataError(
            f"label column '{column}' in '{source}' has {count:,} classes in {len(series):,} "
            f"rows: most classes have a row or two, too few to learn or to judge; use a label "
            f"of fewer classes"
        )


def build_text(
    frame: pd.DataFrame,
    spec: DataSpec,
    text_column: str,
    label_column: str,
    source: str,
    seq_len: int,
    vocabulary: Vocabulary | None = None,
) -> InMemoryDataset:
    """Encode a text classification data set (split by spec.split and spec.seed)."""
    if text_column == label_column:
        raise DataError(
            f"column '{label_column}' in '{source}' is the label; the text column must be "
            f"another (the label's own words would be the input)"
        )
    require_columns(frame, (label_column,), "label", source)
    require_columns(frame, (text_column,), "text", source)
    require_values(frame, label_column, "label", source)
    require_values(frame, text_column, "text", source)
    known = vocabulary.labels if vocabulary is not None and vocabulary.labels else None
    labels, classes = class_labels(frame[label_column], label_column, source, known)
    if len(classes) < 2:
        raise DataError(
            f"label column '{label_column}' in '{source}' has one class ({classes[0]}); "
            f"a classifier needs at least two"
        )
    if known is None:
        _require_classes(frame[label_column], len(classes), label_column, source)
    n = len(frame)
    splits = split_rows(n, spec.split, spec.seed)
    if any(s.size == 0 for s in splits):
        raise DataError(f"data file '{source}' has {n} rows: too few for a {spec.split} split")
    texts = frame[text_column]
    # a number cell (a column of codes, read as numbers) is its digits, not an empty document
    docs = [tokenize(t if isinstance(t, str) else canonical(t)) if present else []
            for t, present in zip(texts.tolist(), texts.notna().tolist(), strict=True)]
    if vocabulary is not None:
        if TOKENS not in vocabulary.maps:
            raise DataError(f"the saved vocabulary for '{source}' has no token map")
        vmap = vocabulary.maps[TOKENS]
    else:
        vmap = _token_map([docs[i] for i in splits[0]], spec.min_count, spec.vocab_size)
        if not vmap.values:  # every document [OOV]: nothing to read
            raise DataError(
                f"text column '{text_column}' in '{source}' keeps no token: no run of letters "
                f"or digits is seen min_count={spec.min_count} times in the train split's "
                f"documents; give a column of words (or lower min_count)"
            )
    tokens = _encode(docs, vmap, seq_len)
    nonpad = tokens[splits[0]]
    table = TableConfig(
        TOKENS,
        vmap.size,
        pooling_factor=float(seq_len),
        frequency=empirical_frequency(np.where(nonpad == PAD_ID, -1, nonpad)),
    )
    vocab = Vocabulary({TOKENS: vmap}, classes, spec.to_dict())
    return InMemoryDataset(
        spec, "text", len(classes), (table,), seq_len, vocab, {TOKENS: tokens}, labels, splits
    )
