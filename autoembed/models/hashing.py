"""Id -> row maps (hashing trick, quotient-remainder): `autoembed.nn.hashing`, re-exported
under their old path."""

from __future__ import annotations

from autoembed.nn.hashing import SPLITMIX64_GAMMA, hash_id_reference, hash_ids, qr_indices

__all__ = ["hash_ids", "hash_id_reference", "qr_indices", "SPLITMIX64_GAMMA"]
