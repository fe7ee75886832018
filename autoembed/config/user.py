"""A user space's embedding settings as a config (no torch): one meaning for the price of
a proposal (`user.space`) and for `build_optimizer(model, params)`, which takes what
`train(model, params, report)` is handed (`params["embedding"]`: config-wide keys, and
`tables`: table rule -> settings)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fnmatch import fnmatchcase
from typing import Any

from autoembed.config.fields import optimizer_alias
from autoembed.config.io import config_from_dict
from autoembed.config.value import EmbeddingConfig

__all__ = ["selects", "rule_settings", "embedding_config"]


def selects(pattern: str, name: str) -> bool:
    """Whether the table rule `pattern` (a module path or a glob over module paths) selects
    the table at module path `name`."""
    return name == pattern or fnmatchcase(name, pattern)


def rule_settings(rules: Mapping[str, Mapping[str, Any]], name: str) -> dict[str, Any]:
    """The settings of the table at `name`: those of the `rules` (pattern -> settings) that
    select it, merged in their order."""
    return {k: v for pattern, s in rules.items() if selects(pattern, name) for k, v in s.items()}


def embedding_config(embedding: Mapping[str, Any], tables: Sequence[Mapping[str, Any]],
                     source: str) -> EmbeddingConfig:
    """The config of `embedding`'s config-wide keys (its `tables` is not read) over `tables`
    (config table entries): a `table_optimizer` without a `dense_optimizer` sets that too,
    as `--optimizer` does (`optimizer_alias`)."""
    raw = {k: v for k, v in embedding.items() if k != "tables"}
    if "dense_optimizer" not in raw and "table_optimizer" in raw:
        raw["dense_optimizer"] = optimizer_alias(str(raw["table_optimizer"]))["dense_optimizer"]
    return config_from_dict({**raw, "tables": list(tables)}, source)
