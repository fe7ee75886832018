"""Search spaces: a YAML file that says which `EmbeddingConfig` fields a search varies, over
which values, on which data, for which objectives (the keys: docs/search_spaces.md). Loading
validates everything; an error names the file, the key and the value.

Modules: `search_space` (Param, SearchSpace, StandIn, TableRule), `objectives`, `loader`
(load_space, parse_space: the YAML validator, reading the config's declared rules),
`corners` (cheapest_config) and `start` (start points). No Optuna here:
`autoembed.pipeline.optuna_space` maps a space onto Optuna's distributions and trials.
"""

from __future__ import annotations

from autoembed.space.corners import MAX_CHEAPEST_CORNERS, cheapest_config
from autoembed.space.loader import load_space, parse_space, space_kind
from autoembed.space.objectives import (
    DEFAULT_OBJECTIVES,
    OBJECTIVES,
    Objective,
    check_objective,
    parse_objectives,
)
from autoembed.space.search_space import (
    BUILTIN_SPACES,
    DEFAULT_TRIALS,
    EMBEDDING,
    EMBEDDING_KEYS,
    GRID_POINTS,
    PARAM_KEYS,
    RUN_KEYS,
    SEARCHABLE,
    SPACE_KEYS,
    STAND_IN_KEYS,
    USER_SPACE_KEYS,
    Param,
    SearchSpace,
    StandIn,
    TableRule,
    apply_table_rules,
    builtin_space_path,
    table_param_name,
    table_rules_of,
    with_table_rules,
)

__all__ = ["OBJECTIVES", "DEFAULT_OBJECTIVES", "SPACE_KEYS", "PARAM_KEYS", "RUN_KEYS",
           "STAND_IN_KEYS", "SEARCHABLE", "DEFAULT_TRIALS", "GRID_POINTS", "MAX_CHEAPEST_CORNERS",
           "Objective", "Param", "StandIn", "TableRule", "apply_table_rules", "table_param_name",
           "table_rules_of", "with_table_rules", "SearchSpace", "load_space", "parse_space",
           "space_kind", "EMBEDDING", "EMBEDDING_KEYS", "USER_SPACE_KEYS", "parse_objectives",
           "check_objective", "cheapest_config", "builtin_space_path", "BUILTIN_SPACES"]
