"""Vocabulary maps (value -> id) for real and user data, built on the train split only.

Ids: categorical fields reserve 0 for OOV (unseen or rarer than `min_count`), values get
1..n in order of train count (ties by value). Token vocabularies reserve 0 for padding and 1
for OOV, tokens get 2..n+1. Saved as one JSON file beside an exported config.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autoembed.errors import DataError
from autoembed.rules import Each, Integer, Is

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import pandas as pd

__all__ = ["VocabMap", "Vocabulary", "load_vocab", "VOCAB_FILE", "VOCAB_FORMAT", "KEYS_RULE",
           "OLD_KEYS", "cell_key", "canonical", "keyed_by_this_rule"]

VOCAB_FILE = "vocab.json"
VOCAB_FORMAT = "autoembed-vocab/1"
KINDS = ("categorical", "multi_hot", "tokens")
# How a data file's categorical cells become keys (`cell_key`), recorded in a
# vocabulary, a study and a checkpoint: 2 reads a cell's text stripped ('007' and '7' are
# two codes, ' a' is 'a'); 1 (unrecorded, before) read numbers ('007' was 7) and kept a
# one-hot value's spaces. Records of another rule map the file's rows to other ids.
KEYS_RULE = 2
OLD_KEYS = ("with categorical values keyed by autoembed's earlier rule (a column of digits "
            "read as numbers: '007' was '7'; one-hot values kept their spaces), so this "
            "version would give its rows other ids")


def keyed_by_this_rule(recorded: Any) -> bool:
    """Whether a record's keys rule (its `keys` / `data_keys` entry, None where it recorded
    none: the earlier rule, 1) is this version's `KEYS_RULE`."""
    return (1 if recorded is None else recorded) == KEYS_RULE


def canonical(value: Any) -> str:
    """One string per value: integral numbers without '.0' (1, 1.0 and '1' are one key)."""
    import numpy as np

    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        f = float(value)
        return str(int(f)) if f.is_integer() else repr(f)
    return str(value)


# A whole number written as a decimal ('7.0': how a writer gives an integer column with
# missing values as floats); its key is the integer's ('7')
_WHOLE_DECIMAL = re.compile(r"(-?\d+)\.0+")


def cell_key(value: Any) -> str:
    """A categorical value's key, the one rule for one-hot cells and multi-hot parts alike:
    a string's text stripped of surrounding spaces, a whole number written as a decimal
    without its '.0' ('7.0' is '7'; leading zeros are kept: '007' and '7' are two codes);
    any other value its `canonical` string. '' (blank) is missing."""
    if not isinstance(value, str):
        return canonical(value)
    text = value.strip()
    whole = _WHOLE_DECIMAL.fullmatch(text) if "." in text else None
    return whole.group(1) if whole else text


@dataclass(frozen=True)
class VocabMap:
    """One field's value -> id map.

    values[i] has id `first_id + i`; anything else has `oov_id`. Values are keys as
    `cell_key` makes them of a cell (its text stripped of surrounding spaces, a
    whole number without a trailing '.0', leading zeros kept): look a raw value up by its
    key.
    """

    name: str
    kind: str
    values: tuple[str, ...]

    @property
    def oov_id(self) -> int:
        return 1 if self.kind == "tokens" else 0

    @property
    def first_id(self) -> int:
        return self.oov_id + 1

    @property
    def size(self) -> int:
        """Table rows: reserved ids plus one per value."""
        return self.first_id + len(self.values)

    @cached_property
    def _index(self) -> dict[str, int]:
        return {v: i + self.first_id for i, v in enumerate(self.values)}

    def id_of(self, value: Any) -> int:
        """The id of a key, or of a categorical cell as a data file gives it (' 007', 7,
        7.0: its `cell_key`, the key training gave it); else `oov_id`."""
        found = self._index.get(value) if isinstance(value, str) else None
        if found is None and self.kind != "tokens":  # tokens are keys as they come
            found = self._index.get(cell_key(value))
        return self.oov_id if found is None else found

    def encode(self, keys: pd.Series) -> npt.NDArray[np.int64]:
        """Ids of keys, or of cells (`id_of`; missing values and unknown keys get
        `oov_id`)."""
        import numpy as np
        import pandas as pd

        if self.kind != "tokens":
            keys = keys.map(cell_key, na_action="ignore")
        pos = pd.Index(self.values, dtype=object).get_indexer(keys.astype(object))
        ids: npt.NDArray[np.int64] = np.where(pos < 0, self.oov_id, pos + self.first_id)
        return ids.astype(np.int64)


@dataclass(frozen=True)
class Vocabulary:
    """Every field's map plus the label values (id = position), the data spec they serve
    and the rule its categorical keys were made by (`KEYS_RULE`; 1: a file saved before
    the rule was recorded)."""

    maps: Mapping[str, VocabMap]
    labels: tuple[str, ...]
    data: Mapping[str, Any] = field(default_factory=dict)
    keys: int = KEYS_RULE

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": VOCAB_FORMAT,
            "keys": self.keys,
            "data": dict(self.data),
            "labels": list(self.labels),
            "fields": {
                name: {"kind": m.kind, "values": list(m.values)} for name, m in self.maps.items()
            },
        }

    def save(self, directory: str | Path) -> Path:
        """Write `<directory>/vocab.json` atomically; return its path."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        from autoembed.files import atomic_write_text

        return atomic_write_text(d / VOCAB_FILE, json.dumps(self.to_dict()))


def load_vocab(path: str | Path) -> Vocabulary:
    """Read a vocabulary saved by `Dataset.save_vocab` (its directory or the JSON file)."""
    p = Path(path)
    if p.is_dir():
        p = p / VOCAB_FILE
    try:
        raw = json.loads(p.read_text())
    except FileNotFoundError:
        raise DataError(f"vocabulary file '{p}' does not exist; save one with save_vocab") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DataError(f"vocabulary file '{p}' cannot be read: {e}") from None
    if not isinstance(raw, dict) or raw.get("format") != VOCAB_FORMAT:
        raise DataError(f"vocabulary file '{p}' is not an {VOCAB_FORMAT} file")
    maps: dict[str, VocabMap] = {}
    fields_raw = raw.get("fields", {})
    Is(dict, "a mapping").check("fields", fields_raw, f"vocabulary file '{p}': key", DataError)
    for name, m in fields_raw.items():
        ok = isinstance(m, dict) and m.get("kind") in KINDS and isinstance(m.get("values"), list)
        if not ok or not all(isinstance(v, str) for v in m["values"]):
            raise DataError(
                f"vocabulary file '{p}': field '{name}' needs a kind in {KINDS} and string values"
            )
        maps[name] = VocabMap(name, m["kind"], tuple(m["values"]))
    labels = raw.get("labels", [])
    Each(Is(str, "a string"), "a list of strings", seq=(list,)).check(
        "labels", labels, f"vocabulary file '{p}': key", DataError)
    data = raw.get("data", {})
    keys = raw.get("keys", 1)
    Integer(1).check("keys", keys, f"vocabulary file '{p}': key", DataError)
    return Vocabulary(maps, tuple(labels), data if isinstance(data, dict) else {}, keys)
