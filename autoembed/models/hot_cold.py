"""Hot/cold table: the hot ids each own a row, the rest hash into cold buckets.

Layout: `autoembed.compression` (`hot_count`, `cold_rows`). One weight [hot + cold, D]; the
hot set is a buffer ``hot_ids`` (sorted, distinct int64 ids). An id's row:

    p = searchsorted(hot_ids, id)
    row = p                                  if hot_ids[p] == id  (a hot id)
          hot + hash_ids(id, cold, seed)     otherwise            (a cold id)

so no id -> row map over the vocabulary exists (8 B per hot id, not per id). Lookups,
pooling, sparse gradients and int8/int4 serving are a plain table's
(`autoembed.models.embedding.TableModule`), applied to the mapped rows.

`hot_ids_from_counts` picks the hot set from a split's id counts (most frequent first, ties
to the smaller id).

The hot sets are state: `hot_sets_for` computes a config's from its data, `save_hot_sets`
writes them as one ``hot_sets.npz`` (table name -> sorted int64 ids, 8 B per hot id, the
bytes the estimate prices) beside an exported config (its ``hot_sets`` key names the file),
`hot_sets_beside` reads them back for `autoembed train`, and `install_hot_sets` / `apply`
take them, so an exported model rebuilds with the hot set it was searched with.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from torch import nn

from autoembed.batch import PAD_ID
from autoembed.errors import ConfigError
from autoembed.models.computed import projection
from autoembed.models.embedding import LookupSpec, TableModule
from autoembed.nn.methods import _HotCold, checked_hot_ids, hot_cold_rows
from autoembed.nn.storage import _Storage

__all__ = [
    "HotColdTable",
    "HOT_SETS_FILE",
    "HOT_SETS_KEY",
    "checked_hot_ids",
    "export_hot_sets",
    "hot_cold_rows",
    "hot_ids_from_counts",
    "hot_sets_for",
    "hot_sets_beside",
    "install_hot_sets",
    "load_hot_sets",
    "save_hot_sets",
    "train_id_counts",
]

_COUNT_BATCH = 65_536  # train rows read at a time when counting ids
HOT_SETS_FILE = "hot_sets.npz"  # beside an exported config
HOT_SETS_KEY = "hot_sets"  # the exported file's key naming it
HotSets = Mapping[str, npt.NDArray[np.int64]]


def hot_ids_from_counts(counts: npt.ArrayLike, hot: int) -> npt.NDArray[np.int64]:
    """The `hot` ids with the largest counts (counts[i] = lookups of id i), sorted by id.
    Ties go to the smaller id (a stable sort), so the set is a pure function of the counts."""
    c = np.asarray(counts)
    if not 1 <= hot <= c.size:
        raise ConfigError(f"hot ids = {hot}: must be in [1, {c.size}] (the table's ids)")
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


def export_hot_sets(
    config: Any, directory: str | Path, vocab: str | Path | None, force: bool
) -> tuple[Path | None, str | None]:
    """Write the hot sets of `config` (resolved, carrying its `data` spec) to
    ``directory/hot_sets.npz``: (the path, None), or (None, a note) when the data cannot be
    loaded here (`autoembed train` then recomputes them from the data). An existing file that
    differs is a ConfigError unless `force`."""
    from autoembed.data import DataSpec, load_dataset
    from autoembed.errors import DataError

    dst = Path(directory) / HOT_SETS_FILE
    if not config.data:
        return None, "hot sets not written: the config has no data spec"
    try:
        dataset = load_dataset(DataSpec.from_dict(dict(config.data)), vocab=vocab)
        sets = hot_sets_for(config, dataset)
    except (DataError, OSError) as e:
        return None, f"hot sets not written ({e}); autoembed train recomputes them from the data"
    if dst.exists() and not force:
        old = load_hot_sets(dst)
        same = old.keys() == sets.keys() and all(np.array_equal(old[k], sets[k]) for k in sets)
        if not same:
            raise ConfigError(f"hot sets file '{dst}' exists and differs from this config's; "
                              "pass --force to overwrite it or export elsewhere")
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
    (`_data_hot_ids`). A table `hot_sets` lacks, or one of another size, is a ConfigError."""
    for field, table in _hot_tables(model).items():
        hot = int(table.hot_ids.shape[0])
        if hot_sets is not None:
            if field not in hot_sets:
                raise ConfigError(f"hot sets: none for table '{field}' (they hold "
                                  f"{', '.join(sorted(hot_sets)) or 'none'}); export the "
                                  "config again or leave the hot sets out to use the data's")
            ids = np.asarray(hot_sets[field])
        else:
            ids = _data_hot_ids(dataset, field, table.vocab, hot)
        table.set_hot_ids(torch.as_tensor(ids, dtype=torch.int64))


def save_hot_sets(hot_sets: HotSets, path: str | Path) -> Path:
    """Write `hot_sets` (table name -> sorted ids) to one .npz file, atomically."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".npz")
    try:
        with os.fdopen(fd, "wb") as fh:
            arrays: dict[str, Any] = {k: np.asarray(v, dtype=np.int64)
                                      for k, v in hot_sets.items()}
            np.savez(fh, **arrays)
        os.replace(tmp, p)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return p


def load_hot_sets(path: str | Path) -> dict[str, npt.NDArray[np.int64]]:
    """Read a `save_hot_sets` file; a missing or unreadable one is a ConfigError."""
    p = Path(path)
    try:
        with np.load(p, allow_pickle=False) as z:
            out = {k: np.asarray(z[k], dtype=np.int64) for k in z.files}
    except FileNotFoundError:
        raise ConfigError(f"hot sets file '{p}' does not exist; export the config again "
                          "(it writes hot_sets.npz beside the config)") from None
    except (OSError, ValueError) as e:
        raise ConfigError(f"hot sets file '{p}' cannot be read: {e}") from None
    for k, v in out.items():
        if v.ndim != 1:
            raise ConfigError(f"hot sets file '{p}': table '{k}' holds a {v.ndim}-D array; "
                              "a hot set is a 1-D array of ids")
    return out


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
                          f"such as {HOT_SETS_FILE}")
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
