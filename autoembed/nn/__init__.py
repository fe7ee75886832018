"""Drop-in embedding layers with autoembed's compressions: `Embedding` and `EmbeddingBag`
(`autoembed.nn.layers`) take torch's constructor options and calls, honouring each option or
refusing it in one line, and check ids as torch does (`autoembed.nn.lookup`); this module
holds the storages, which store the table as the compression says:

* ``none``: ``weight`` [V, D] (exactly torch's layer);
* ``hash``: ``weight`` [min(V, hash_buckets), D]; ids hashed (`autoembed.nn.hashing.hash_ids`)
  when V > hash_buckets;
* ``qr``: ``q_weight`` [ceil(V / m), Dq] and ``r_weight`` [m, Dq], rows combined by
  ``mult`` / ``add`` / ``concat`` (Dq = D / 2 for concat); bags pool each part first, as
  DLRM's QREmbeddingBag;
* ``mixed_dim``: ``weight`` [V, d] and ``proj`` (Linear d -> D, no bias);
* ``robe``, ``tt``, ``hot_cold``: `autoembed.nn.methods`.

Serving: `autoembed.quantize(model, "int8" | "int4")` packs each layer's stored weights
(not mixed_dim's projection) into the built-in tables' row format, dequantized on lookup;
robe, tt and host_cached layers are refused (`why_not_packed`).
Placement: ``placement="host_cached"`` (compression none or hash) keeps the whole table and
its optimizer state in host memory and ``cache_rows`` rows on the device (``cache_policy``
lru / lfu, ``table_optimizer`` sgd / adagrad / rowwise_adagrad / sparse_adam, ``dynamic_rows``):
the store is `autoembed.nn.host_cache.HostCache`, the built-in models' cache too, and
``cache_weight`` [cache_rows, D] (sparse gradients) is its one parameter. A training forward
needs the table bound to its optimizer, whose state then moves with the rows:
`autoembed.build_optimizer(model, config)` binds it (a plain ``opt.step()`` loop then trains
it exactly as a device table); with an optimizer of your own, ``layer.store.bind_optimizer(opt)``
(an optimizer of another kind is a ConfigError). ``state_dict`` holds the full table (the
cache is flushed first).

`full_weight()` decodes the whole [V, D] table (a tied output layer reads it each forward);
for a compressed layer the attribute ``weight`` is that decoded table, so code that reads
``embedding.weight`` sees a V x D tensor, never the compressed storage. New compressions
plug in through `COMPRESSIONS` (name -> storage class).

The storages are the one implementation of each compression: the built-in models' plain
(none / hash / shared / mixed_dim, and the wide part), QR, robe, tt and hot/cold tables
(`autoembed.models`) subclass them and add only their pooling, so a weight has the same name
in both (the names `config.param_specs` gives). The hash and mixed_dim weights were once
named ``bucket_weight`` and ``small_weight``: state_dicts saved under those names (and
their ``_packed`` serving rows) still load.
"""

from __future__ import annotations

from autoembed.nn.compressions import COMPRESSIONS
from autoembed.nn.layers import Embedding, EmbeddingBag
from autoembed.nn.storage import _QR as _QR  # the storages, by their old home
from autoembed.nn.storage import LAYER_COMPRESSIONS as LAYER_COMPRESSIONS
from autoembed.nn.storage import PackedWeights
from autoembed.nn.storage import _Hash as _Hash
from autoembed.nn.storage import _MixedDim as _MixedDim
from autoembed.nn.storage import _Plain as _Plain
from autoembed.nn.storage import _Storage as _Storage
from autoembed.nn.storage import hash_layout as hash_layout

__all__ = ["Embedding", "EmbeddingBag", "COMPRESSIONS", "PackedWeights"]

# their public home (pickles and reprs name it; models saved before refer to it)
for _cls in (Embedding, EmbeddingBag, PackedWeights, _Storage, _Plain, _Hash, _QR, _MixedDim):
    _cls.__module__ = __name__
