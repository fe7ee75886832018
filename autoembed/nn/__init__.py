"""Drop-in embedding layers with autoembed's compressions: `Embedding` and `EmbeddingBag`
(`autoembed.nn.layers`: torch's options and calls) over storages that store the table as the
compression says (`autoembed.nn.storage`, `autoembed.nn.methods`; docs/compression.md):
``none`` ``weight`` [V, D]; ``hash`` ``weight`` [min(V, hash_buckets), D]; ``qr``
``q_weight`` and ``r_weight``; ``mixed_dim`` ``weight`` [V, d] and ``proj``; ``robe``,
``tt``, ``hot_cold``. New compressions plug in through `COMPRESSIONS` (name -> storage).

``placement="host_cached"`` keeps the table and its optimizer state on the host and
``cache_rows`` rows on the device (`autoembed.nn.host_cache`; docs/host_cache.md).
`autoembed.quantize` packs each layer's stored weights for serving (robe, tt and host_cached
refused: `why_not_packed`). `full_weight()` decodes the [V, D] table; the attribute ``weight``
is the stored table where it is one (compression none: torch's parameter), else the decoded
table, which refuses writes and is decoded only when an op reads its values (its shape,
dtype and device are read without decoding: `autoembed.nn.decoded`).

The storages are the one implementation of each compression: the built-in models' tables
(`autoembed.models`) subclass them and add only their pooling, so a weight has the same name
in both (`config.param_specs`). State_dicts saved under the former names ``bucket_weight``
and ``small_weight`` (and their ``_packed`` rows) still load.
"""

from __future__ import annotations

from autoembed.nn.layers import Embedding, EmbeddingBag
from autoembed.nn.methods import COMPRESSIONS
from autoembed.nn.storage import _QR as _QR  # the storages, by their old home
from autoembed.nn.storage import PackedWeights
from autoembed.nn.storage import _Hash as _Hash
from autoembed.nn.storage import _MixedDim as _MixedDim
from autoembed.nn.storage import _Plain as _Plain
from autoembed.nn.storage import _Storage as _Storage

__all__ = ["Embedding", "EmbeddingBag", "COMPRESSIONS", "PackedWeights"]

# their public home (pickles and reprs name it; models saved before refer to it)
for _cls in (Embedding, EmbeddingBag, PackedWeights, _Storage, _Plain, _Hash, _QR, _MixedDim):
    _cls.__module__ = __name__
