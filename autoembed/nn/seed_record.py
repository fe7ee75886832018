"""The one rule for a hashed table's seed in its state_dict, shared by the `autoembed.nn`
layers (`autoembed.apply`'s) and the built-in models' tables (`build_model`'s): where a seed
maps ids to rows (`hash_seed` not None: hash past its buckets, robe, hot_cold's cold ids,
host_cached hash), ``<prefix>hash_seed`` (int64, `seed_int64`) is saved beside the weights,
and rows saved under another seed are refused in one line naming both, under strict=False
too: loaded, each id would read another id's row."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch._subclasses.fake_tensor import is_fake

from autoembed.errors import ConfigError
from autoembed.nn.hashing import seed_int64

__all__ = ["SeedRecorded"]

SEED_KEY = "hash_seed"


class SeedRecorded(nn.Module):
    """A module that records its `hash_seed` (None: its ids are not hashed) in its
    state_dict and refuses rows saved under another (`_check_seed`). Subclasses name
    themselves (`_seed_label`, `seed_noun`) and say how to load such rows (`_seed_fix`)."""

    hash_seed: int | None
    seed_noun = "table"  # the refusal's "this table hashes ids ..."

    def _save_to_state_dict(self, destination: Any, prefix: str, keep_vars: bool) -> None:
        super()._save_to_state_dict(destination, prefix, keep_vars)
        seed = self.hash_seed
        if seed is not None:
            destination[prefix + SEED_KEY] = torch.tensor(seed_int64(seed), device="cpu")

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str,
                              *args: Any) -> None:
        self._check_seed(state_dict.pop(prefix + SEED_KEY, None), prefix + SEED_KEY)
        super()._load_from_state_dict(state_dict, prefix, *args)

    def _check_seed(self, saved: Any, key: str) -> None:
        """Rows saved under hash_seed `saved` would be read by other ids under another seed:
        a ConfigError naming both. None (a state_dict saved before the seed was recorded),
        a seed with no value to read (meta, fake) and a module whose ids are not hashed load
        as before, unchecked."""
        seed = self.hash_seed
        if saved is None or seed is None or getattr(saved, "is_meta", False) or is_fake(saved):
            return
        if int(saved) == seed_int64(seed):
            return
        was = int(saved) % (1 << 64)
        raise ConfigError(f"{self._seed_label()}: the state_dict's '{key}' is {was}, and this "
                          f"{self.seed_noun} hashes ids with hash_seed {seed}, so each id would "
                          f"read another id's row; {self._seed_fix(was)}")

    def _seed_label(self) -> str:
        return type(self).__name__

    def _seed_fix(self, was: int) -> str:
        """How to load rows saved under hash seed `was`."""
        return f"build the model from a config with hash_seed {was}"
