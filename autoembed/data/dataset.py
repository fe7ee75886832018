"""The `Dataset` protocol: what every loaded data set offers the runner and the exporter."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from autoembed.batch import Batch
    from autoembed.config import TableConfig
    from autoembed.data.spec import DataSpec
    from autoembed.data.vocab import VocabMap, Vocabulary

__all__ = ["Dataset"]


@runtime_checkable
class Dataset(Protocol):
    """A loaded data set with deterministic train/valid/test splits.

    task: "ctr" (binary labels, one table per categorical field) or "text" (one token table).
    tables: one `TableConfig` per field (name, vocab_size, pooling_factor, frequency);
        `frequency` = sum_i p_i^2 over the field's id distribution (None: unknown).
    seq_len: padded token sequence length (text); 1 for ctr.
    vocab_maps: value -> id maps built on the train split (empty for synthetic data).
    The metadata is read-only by contract.
    """

    spec: DataSpec
    task: str
    num_classes: int
    tables: tuple[TableConfig, ...]
    seq_len: int
    vocabulary: Vocabulary

    @property
    def vocab_maps(self) -> Mapping[str, VocabMap]: ...

    def num_rows(self, split: str) -> int: ...

    def batches(
        self,
        split: str,
        batch_size: int,
        *,
        seed: int = 0,
        shuffle: bool = True,
        drop_last: bool = False,
    ) -> Iterator[Batch]: ...

    def save_vocab(self, directory: str | Path) -> Path: ...

    def config_values(self) -> dict[str, Any]: ...
