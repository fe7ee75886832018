"""Search spaces: a YAML file that says which `EmbeddingConfig` fields a search varies, over
which values, on which data, for which objectives (the keys: docs/search_spaces.md; the
modules: docs/ARCHITECTURE.md, the "search space" and "start points" rows). Loading validates
everything; an error names the file, the key and the value. No Optuna here:
`autoembed.pipeline.optuna_space` maps a space onto Optuna's distributions and trials.
"""

from __future__ import annotations

from autoembed.space.corners import cheapest_config
from autoembed.space.loader import load_space, parse_space
from autoembed.space.objectives import (
    OBJECTIVES,
    Objective,
    check_objective,
    parse_objectives,
)
from autoembed.space.search_space import (
    BUILTIN_SPACES,
    EMBEDDING,
    PARAM_KEYS,
    Param,
    SearchSpace,
    StandIn,
    TableRule,
    apply_table_rules,
    builtin_space_path,
    table_rules_of,
)

__all__ = ["OBJECTIVES", "PARAM_KEYS", "Objective", "Param", "StandIn", "TableRule",
           "apply_table_rules", "table_rules_of", "SearchSpace", "load_space", "parse_space",
           "EMBEDDING", "parse_objectives", "check_objective", "cheapest_config",
           "builtin_space_path", "BUILTIN_SPACES"]
