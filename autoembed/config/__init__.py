"""`EmbeddingConfig`: the one frozen, serialisable object that fully determines a model and
its training step. It is what the search proposes, the memory model prices, `export` writes
and `train` reads. The package's modules by job: docs/ARCHITECTURE.md, the "config" row;
the names other modules use are re-exported here. Pure Python (no torch, no YAML at import)
so the memory model and the GPU scripts can use it with torch alone.
"""

from __future__ import annotations

from autoembed.config.buildable import check_model_rules
from autoembed.config.choices import (
    CACHE_POLICIES,
    COMPRESSIONS,
    FP16_MIN_ADAM_EPS,
    OPTIMIZERS,
    SERVING,
    SPARSE_GRAD_OPTIMIZERS,
    TABLE_ONLY_OPTIMIZERS,
)
from autoembed.config.fields import (
    FIELD_ALIASES,
    FIELD_FLAGS,
    FIELD_RULES,
    TABLE_RULES,
    optimizer_alias,
)
from autoembed.config.io import (
    as_config,
    config_from_dict,
    load_config,
    parse_config_text,
    safe_load_yaml,
    save_config,
)
from autoembed.config.layout import (
    WIDE_PREFIX,
    ParamSpec,
    param_specs,
    tower_input_width,
)
from autoembed.config.precision import PRECISIONS, PrecisionPolicy, precision_policy
from autoembed.config.tables import (
    TABLE_OVERRIDES,
    TableConfig,
    TableSettings,
    buckets_of,
)
from autoembed.config.value import (
    EmbeddingConfig,
    cache_rows,
    map_bucket_counts,
    model_key,
    resolved_tables,
    storage_rows,
    with_data_tables,
)
from autoembed.rules import check_fields

__all__ = ["COMPRESSIONS", "PRECISIONS", "SERVING", "OPTIMIZERS", "TABLE_ONLY_OPTIMIZERS",
           "FIELD_RULES", "TABLE_RULES", "FIELD_FLAGS", "FIELD_ALIASES", "check_fields",
           "optimizer_alias", "SPARSE_GRAD_OPTIMIZERS", "CACHE_POLICIES", "TABLE_OVERRIDES",
           "TableConfig", "TableSettings", "resolved_tables", "buckets_of", "with_data_tables",
           "map_bucket_counts", "EmbeddingConfig", "ParamSpec", "PrecisionPolicy",
           "precision_policy", "param_specs", "cache_rows", "storage_rows", "WIDE_PREFIX",
           "load_config", "as_config", "save_config", "config_from_dict", "parse_config_text",
           "safe_load_yaml", "FP16_MIN_ADAM_EPS", "tower_input_width", "model_key",
           "check_model_rules"]
