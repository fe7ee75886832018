"""The names a config's fields take (tasks, compressions, optimizers, poolings, placements)
and the constants the rules between fields read. Pure Python."""

from __future__ import annotations

__all__ = ["TASKS", "COMPRESSIONS", "TABLE_COMPRESSIONS", "QR_OPERATIONS", "SERVING", "OPTIMIZERS",
           "TABLE_ONLY_OPTIMIZERS", "DENSE_OPTIMIZERS", "SPARSE_GRAD_OPTIMIZERS", "POOLINGS",
           "INTERACTIONS", "PLACEMENTS", "CACHE_POLICIES", "HOST_CACHE_OPTIMIZERS",
           "HOST_CACHE_COMPRESSIONS", "FP16_MIN_ADAM_EPS"]

TASKS = ("ctr", "text")
COMPRESSIONS = ("none", "hash", "qr", "mixed_dim", "shared", "robe", "tt", "hot_cold")
QR_OPERATIONS = ("mult", "add", "concat")
SERVING = ("none", "int8", "int4")
OPTIMIZERS = ("sgd", "momentum", "adam", "adamw", "adagrad", "rowwise_adagrad", "sparse_adam")
# Optimizers that only make sense for embedding rows (they need sparse, row-indexed gradients).
TABLE_ONLY_OPTIMIZERS = ("rowwise_adagrad", "sparse_adam")
DENSE_OPTIMIZERS = tuple(o for o in OPTIMIZERS if o not in TABLE_ONLY_OPTIMIZERS)
# Table optimizers that take sparse gradients (torch.optim.SGD without momentum and Adagrad
# accept them; rowwise_adagrad and sparse_adam require them). Tables under any other
# optimizer get dense V x D gradients.
SPARSE_GRAD_OPTIMIZERS = ("sgd", "adagrad", "rowwise_adagrad", "sparse_adam")
# idf: each token weighs its inverse document frequency on the train split (scikit-learn's
# smooth idf, ln((1 + n) / (1 + df)) + 1; padding and OOV weigh 0), and the bag is the
# weighted mean: TF-IDF weighting for text tables without compression (`models.idf`).
POOLINGS = ("mean", "sum", "naive", "idf")
INTERACTIONS = ("concat", "dot")
# Placement: `device` keeps whole tables on the GPU; `host_cached` keeps each full
# table and its optimizer state in host memory and a cache of `cache_load_factor` of its rows
# (FBGEMM's UVM caching, TorchRec's cache load factor) on the device.
PLACEMENTS = ("device", "host_cached")
CACHE_POLICIES = ("lru", "lfu")
# Table optimizers under which a row not looked up in a step does not change, so a row held on
# the host between its lookups trains exactly as on the device. Dense-gradient optimizers
# (momentum, adam, adamw) move every row every step and are refused.
HOST_CACHE_OPTIMIZERS = ("sgd", "adagrad", "rowwise_adagrad", "sparse_adam")
HOST_CACHE_COMPRESSIONS = ("none", "hash")
# fp16 cannot represent 1e-8 (smallest subnormal is 6e-8): Adam's default eps rounds to 0 and
# rows a step does not touch become 0/0 = NaN (docs/contracts.md#low-precision).
FP16_MIN_ADAM_EPS = 1e-4

# Compressions a single table may carry (`shared` is one table for all fields: config-wide).
TABLE_COMPRESSIONS = ("none", "hash", "qr", "mixed_dim", "robe", "tt", "hot_cold")
