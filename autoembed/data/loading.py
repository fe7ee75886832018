"""`load_dataset`: a `DataSpec` in, a `Dataset` out (heavy imports happen here, lazily)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from autoembed.data.spec import DataSpec
from autoembed.data.vocab import VocabMap, Vocabulary, load_vocab
from autoembed.errors import DataError

if TYPE_CHECKING:
    from autoembed.data.dataset import Dataset

__all__ = ["load_dataset"]


VocabLike = Vocabulary | Mapping[str, VocabMap] | str | Path


def _vocabulary(vocab: VocabLike | None) -> Vocabulary | None:
    if vocab is None or isinstance(vocab, Vocabulary):
        return vocab
    if isinstance(vocab, (str, Path)):
        return load_vocab(vocab)
    return Vocabulary(dict(vocab), ())


def load_dataset(
    spec: DataSpec | Mapping[str, object] | str,
    *,
    vocab: VocabLike | None = None,
) -> Dataset:
    """Load the data a spec names (a DataSpec, its dict, or just a name or path).

    `vocab` (a saved vocabulary's directory or file, or maps; default `spec.vocab`): encode
    real and user data with these value -> id maps instead of building them from the train
    split, so a model exported with them sees the same ids.
    """
    if isinstance(spec, str):
        spec = DataSpec(spec)
    elif not isinstance(spec, DataSpec):
        spec = DataSpec.from_dict(spec)
    vocabulary = _vocabulary(vocab if vocab is not None else spec.vocab)
    if spec.kind in ("synthetic-ctr", "synthetic-text"):
        if vocabulary is not None and vocabulary.maps:
            raise DataError(f"data '{spec.name}' is synthetic: it has no vocabulary to load")
        from autoembed.data.synthetic import SyntheticCTR, SyntheticText

        return SyntheticCTR(spec) if spec.kind == "synthetic-ctr" else SyntheticText(spec)
    if spec.kind in ("movielens", "flights", "bbcnews"):
        from autoembed.data.real import load_real

        return load_real(spec, vocabulary)
    from autoembed.data.user_file import load_user_file

    return load_user_file(spec, vocabulary)
