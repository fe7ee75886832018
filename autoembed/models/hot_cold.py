"""Hot/cold table: the hot ids each own a row, the rest hash into cold buckets.

Layout: `autoembed.compression` (`hot_count`, `cold_rows`). One weight [hot + cold, D]; the
hot set is a buffer ``hot_ids`` (sorted, distinct int64 ids). An id's row:

    p = searchsorted(hot_ids, id)
    row = p                                  if hot_ids[p] == id  (a hot id)
          hot + hash_ids(id, cold, seed)     otherwise            (a cold id)

Lookups, pooling, sparse gradients and int8/int4 serving are a plain table's, on the mapped
rows. The hot sets are state: `hot_sets_for` computes a config's from its data
(`hot_ids_from_counts`: most frequent first, ties to the smaller id); an export writes them
beside the config, named by content (`hot_sets_name`; docs/training.md), and
`hot_sets_beside` / `load_hot_sets` read them back (a bad file is one ConfigError line), so
an exported model rebuilds with the hot set it was searched with.
"""

from __future__ import annotations

import hashlib
import math
import zipfile
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from torch import nn

from autoembed.batch import PAD_ID
from autoembed.errors import ConfigError
from autoembed.models.computed_rows import projection
from autoembed.models.embedding import LookupSpec, TableModule
from autoembed.nn.methods import _HotCold, checked_hot_ids
from autoembed.nn.storage import _Storage
from autoembed.rules import Integer

__all__ = ["HotColdTable", "HOT_SETS_KEY", "checked_hot_ids", "export_hot_sets",
           "hot_ids_from_counts", "hot_sets_for", "hot_sets_beside", "hot_sets_name",
           "install_hot_sets", "load_hot_sets", "save_hot_sets", "train_id_counts"]

_COUNT_BATCH = 65_536  # train rows read at a time when counting ids
HOT_SETS_KEY = "hot_sets"  # the exported file's key naming it
HotSets = Mapping[str, npt.NDArray[np.int64]]


def hot_ids_from_counts(counts: npt.ArrayLike, hot: int) -> npt.NDArray[np.int64]:
    """The `hot` ids with the largest counts (counts[i] = lookups of id i), sorted by id.
    Ties go to the smaller id (a stable sort), so the set is a pure function of the counts."""
    c = np.asarray(counts)
    Integer(1, c.size, note="(the table's ids)").check_argument("hot ids", hot)
    order = np.argsort(-c, kind="stable")[:hot]
    return np.sort(order).astype(np.int64)


def train_id_counts(dataset: Any, field: str, vocab: int) -> npt.NDArray[np.int64]:
    """Lookups of every id of `field` over the train split (missing ids and pads left out)."""
    counts = np.zeros(vocab, dtype=np.int64)
    for b in dataset.batches("train", _COUNT_BATCH, shuffle=False):
        ids = b.features[field].numpy().reshape(-1)
        ids = ids[(ids >= 0) & (ids < vocab)]
        counts += np.bincount(ids, minlength=vocab)
    return counts


def _data_hot_ids(dataset: Any, field: str, vocab: int, hot: int) -> npt.NDArray[np.int64]:
    """The generator's hot set when the data have one (synthetic-ctr), else the most frequent
    ids of the train split (text: padding left out)."""
    if hasattr(dataset, "hot_ids"):
        return np.asarray(dataset.hot_ids(field, hot), dtype=np.int64)
    counts = train_id_counts(dataset, field, vocab)
    if getattr(dataset, "task", None) == "text":
        counts[PAD_ID] = -1  # padding is looked up but masked out: never worth a hot row
    return hot_ids_from_counts(counts, hot)


def hot_sets_for(config: Any, dataset: Any) -> dict[str, npt.NDArray[np.int64]]:
    """Every hot/cold table's hot set of `config` (resolved against `dataset`'s tables): its
    `hot_count` ids by the data (`_data_hot_ids`). Empty when no table is hot/cold."""
    from autoembed.compression import hot_count
    from autoembed.config import resolved_tables

    return {ts.name: _data_hot_ids(dataset, ts.name, ts.vocab_size,
                                   hot_count(ts.vocab_size, ts.hot_share))
            for ts in resolved_tables(config) if ts.compression == "hot_cold"}


def hot_sets_name(hot_sets: HotSets) -> str:
    """``hot_sets-HASH.npz``: HASH the first 16 hex digits of the SHA-256 of the tables'
    names and int64 ids, so the name is a pure function of the content."""
    h = hashlib.sha256()
    for name in sorted(hot_sets):
        ids = np.ascontiguousarray(np.asarray(hot_sets[name], dtype=np.int64))
        h.update(f"{name}\0{ids.size}\0".encode())
        h.update(ids.tobytes())
    return f"hot_sets-{h.hexdigest()[:16]}.npz"


def export_hot_sets(
    config: Any, directory: str | Path, vocab: str | Path | None
) -> tuple[Path | None, str | None]:
    """Write the hot sets of `config` (resolved, carrying its `data` spec) to
    ``directory/hot_sets-HASH.npz`` (`hot_sets_name`): (the path, None), or (None, a note)
    when the data cannot be loaded here (`autoembed train` then recomputes them from the
    data). A file of that name already holding these sets is kept as it is."""
    from autoembed.data import DataSpec, load_dataset
    from autoembed.errors import DataError

    if not config.data:
        return None, "hot sets not written: the config has no data spec"
    try:
        dataset = load_dataset(DataSpec.from_dict(dict(config.data)), vocab=vocab)
        sets = hot_sets_for(config, dataset)
    except (DataError, OSError) as e:
        return None, f"hot sets not written ({e}); autoembed train recomputes them from the data"
    dst = Path(directory) / hot_sets_name(sets)
    if dst.exists():
        try:
            held = load_hot_sets(dst)
            if held.keys() == sets.keys() and all(np.array_equal(held[k], sets[k]) for k in sets):
                return dst, None
        except ConfigError:
            pass  # a damaged copy: written again below
    return save_hot_sets(sets, dst), None


def _hot_tables(model: nn.Module) -> dict[str, HotColdTable]:
    """Hot/cold tables of a built model by table name (dotted names are nested modules)."""
    tables = getattr(model, "tables", None)
    if not isinstance(tables, nn.Module):
        return {}
    return {name: m for name, m in tables.named_modules() if isinstance(m, HotColdTable)}


def install_hot_sets(model: nn.Module, dataset: Any = None,
                     hot_sets: HotSets | None = None) -> None:
    """Give every hot/cold table of `model` (in its ``tables``) its hot set: the one in
    `hot_sets` (saved beside an exported config) when given, else its data's
    (`_data_hot_ids`). A table `hot_sets` lacks or names that is no hot/cold table of the
    model, or a set of another size, is a ConfigError."""
    tables = _hot_tables(model)
    if hot_sets is not None:
        missing = [f for f in tables if f not in hot_sets]
        if missing:
            raise ConfigError(f"hot sets: none for table '{missing[0]}' (they hold "
                              f"{', '.join(sorted(hot_sets)) or 'none'}); export the "
                              "config again or leave the hot sets out to use the data's")
        check_hot_set_names(hot_sets, tables)
    for field, table in tables.items():
        ids = hot_sets[field] if hot_sets is not None else _data_hot_ids(
            dataset, field, table.vocab, int(table.hot_ids.shape[0]))
        table.set_hot_ids(torch.as_tensor(np.asarray(ids)))  # checked there, dtype too


def check_hot_set_names(hot_sets: HotSets, tables: Any) -> None:
    """Refuse hot sets naming a table that `tables` (the hot/cold tables' names) lacks."""
    extra = sorted(set(hot_sets) - set(tables))
    if extra:
        raise ConfigError(f"hot sets: {', '.join(map(repr, extra))} named, but the config has "
                          f"no such hot/cold table (it has {', '.join(sorted(tables)) or 'none'}"
                          "); export the config again, or give the sets of its own tables")


def save_hot_sets(hot_sets: HotSets, path: str | Path) -> Path:
    """Write `hot_sets` (table name -> sorted ids) to one .npz file, atomically, with the
    user's umask."""
    from autoembed.files import atomic_write

    arrays: dict[str, Any] = {k: np.asarray(v, dtype=np.int64) for k, v in hot_sets.items()}
    return atomic_write(path, lambda fh: np.savez(fh, **arrays))


_DAMAGED = (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error)


def load_hot_sets(path: str | Path) -> dict[str, npt.NDArray[np.int64]]:
    """Read a `save_hot_sets` file: table name -> 1-D int64 ids. A missing, damaged or
    truncated file, one that is no .npz archive, or one holding anything but 1-D integer
    arrays is a ConfigError (one line, exit status 2)."""
    p = Path(path)
    again = "export the config again (it writes the hot sets beside the config)"
    if not p.is_file():
        raise ConfigError(f"hot sets file '{p}' does not exist; {again}")
    if not zipfile.is_zipfile(p):
        raise ConfigError(f"hot sets file '{p}' is not a whole .npz archive (truncated, or "
                          f"another format); {again}")
    try:
        with np.load(p, allow_pickle=False) as z:
            raw = {k: z[k] for k in z.files}
    except _DAMAGED as e:
        raise ConfigError(f"hot sets file '{p}' is damaged ({type(e).__name__}); "
                          f"{again}") from None
    for k, v in raw.items():
        if v.ndim != 1 or v.dtype.kind not in "iu":
            raise ConfigError(f"hot sets file '{p}': table '{k}' holds a {v.ndim}-D {v.dtype} "
                              "array; a hot set is a 1-D array of integer ids")
    return {k: v.astype(np.int64) for k, v in raw.items()}


def hot_sets_beside(config_path: str | Path) -> dict[str, npt.NDArray[np.int64]] | None:
    """The hot sets an exported config file names (its `hot_sets` key, a path relative to
    the file), or None when it names none."""
    from autoembed.config import safe_load_yaml

    p = Path(config_path)
    try:
        raw = safe_load_yaml(p.read_text(), str(p))
    except (OSError, UnicodeDecodeError):
        return None  # load_config has already said what is wrong with the file
    name = raw.get(HOT_SETS_KEY) if isinstance(raw, Mapping) else None
    if name is None:
        return None
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{p}: '{HOT_SETS_KEY}' = {name!r} must name a file beside it, "
                          "such as hot_sets-HASH.npz")
    return load_hot_sets(p.parent / name)


class HotColdTable(TableModule, _HotCold):
    """The `autoembed.nn` hot_cold storage (`weight` [len(hot_ids) + cold, dim], buffer
    ``hot_ids``, `row_of`), pooled as a built-in table: ids in `hot_ids` own rows, the rest
    hash."""

    def __init__(
        self,
        vocab: int,
        dim: int,
        hot_ids: torch.Tensor,
        cold: int,
        spec: LookupSpec,
        *,
        seed: int = 0,
        out_dim: int | None = None,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        # the storage's layout from a resolved hot set and cold count
        _Storage.__init__(self, vocab, dim, {"device": device, "dtype": dtype})
        self.vocab, self.spec = vocab, spec
        self._layout(checked_hot_ids(hot_ids, vocab, None), cold, seed)
        self.reset_parameters()
        self.proj = projection(dim, out_dim, device, dtype)

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Rows of std 1/sqrt(dim); the hot set is left as it is."""
        self.weight.normal_(0.0, 1.0 / math.sqrt(self.dim))

    def set_hot_ids(self, hot_ids: torch.Tensor) -> None:
        """Install a hot set (sorted, distinct ids in [0, vocab)) of the built size."""
        size = self.hot_ids.numel()
        self.hot_ids = checked_hot_ids(hot_ids.to(device=self.hot_ids.device), self.vocab, size)
        self._hot_host = self.hot_ids.cpu()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Pooled [B, D] of one field's [B, L] ids."""
        idx, valid = self._masked(ids)
        idx = self.row_of(idx)
        if self.spec.pooling == "naive":
            out = self._maybe_checkpoint(self._naive, idx, valid)
        else:
            out = self._bags("weight", [idx], [valid])[0]
        return out if self.proj is None else self.proj(out)

    def _naive(self, idx: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        return self._pool_rows(self._rows("weight", idx, valid, None), valid)
