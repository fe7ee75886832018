"""Text at a trial's own sequence length: a loaded text `Dataset` whose documents are
truncated to `seq_len` tokens (the first ones kept) or right-padded with PAD_ID up to it.

A searched `seq_len` (config) moves memory (activations and lookups grow with batch x
sequence), throughput and quality; the runner trains and evaluates every split through this
view. Everything but `seq_len`, the token table's `pooling_factor` and the batches is the
loaded data set's.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from autoembed.errors import ConfigError
from autoembed.rules import Integer

if TYPE_CHECKING:
    import torch

    from autoembed.batch import Batch
    from autoembed.config import TableConfig

__all__ = ["SeqLenView", "with_seq_len", "fit_tokens"]


def fit_tokens(ids: torch.Tensor, seq_len: int) -> torch.Tensor:
    """Token ids [B, S] as [B, seq_len]: the first seq_len columns, or padded with PAD_ID."""
    import torch.nn.functional as F

    from autoembed.batch import PAD_ID

    width = int(ids.shape[1])
    if width >= seq_len:
        return ids[:, :seq_len].contiguous()
    return F.pad(ids, (0, seq_len - width), value=PAD_ID)


class SeqLenView:
    """`base` (a text Dataset) at `seq_len` tokens a document."""

    def __init__(self, base: Any, seq_len: int) -> None:
        self._base = base
        self.seq_len = seq_len

    @property
    def tables(self) -> tuple[TableConfig, ...]:
        return tuple(replace(t, pooling_factor=float(self.seq_len)) for t in self._base.tables)

    def batches(self, split: str, batch_size: int, **kw: Any) -> Iterator[Batch]:
        from autoembed.batch import Batch

        for b in self._base.batches(split, batch_size, **kw):
            yield Batch({k: fit_tokens(v, self.seq_len) for k, v in b.features.items()},
                        b.labels)

    def __getattr__(self, name: str) -> Any:  # spec, task, num_rows, vocabulary, oracles...
        return getattr(self._base, name)


def with_seq_len(dataset: Any, seq_len: int) -> Any:
    """`dataset` with its documents at `seq_len` tokens (itself when already so)."""
    if dataset.task != "text":
        raise ConfigError(f"seq_len = {seq_len}: only text data have a sequence length")
    Integer(1).check_argument("seq_len", seq_len)
    if seq_len == dataset.seq_len:
        return dataset
    base = dataset._base if isinstance(dataset, SeqLenView) else dataset
    return SeqLenView(base, seq_len)
