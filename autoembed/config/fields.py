"""Each config field's declared rule, read by validation, the search-space loader and the
CLI: `FIELD_RULES`, `TABLE_RULES`, the CLI spellings `FIELD_FLAGS` and aliases `FIELD_ALIASES`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Any

from autoembed.config.tables import TableConfig
from autoembed.config.value import EmbeddingConfig
from autoembed.rules import Rule

__all__ = ["FIELD_RULES", "TABLE_RULES", "FIELD_FLAGS", "FIELD_ALIASES", "optimizer_alias"]

# Each config field's (and table key's) declared rule: read by validation, the search-space
# loader and the CLI.
FIELD_RULES: dict[str, Rule] = {
    f.name: f.metadata["rule"] for f in fields(EmbeddingConfig) if "rule" in f.metadata
}
TABLE_RULES: dict[str, Rule] = {
    f.name: f.metadata["rule"] for f in fields(TableConfig) if "rule" in f.metadata
}
# CLI flag -> config field, where the flag is spelled otherwise (--batch: batch_size).
FIELD_FLAGS: dict[str, str] = {
    f.metadata["flag"]: f.name for f in fields(EmbeddingConfig) if "flag" in f.metadata
}


def optimizer_alias(name: str) -> dict[str, str]:
    """What `--optimizer NAME` sets: the table optimizer, and the dense optimizer too where
    NAME can train the tower (a table-only optimizer pairs with its dense relative)."""
    return {"table_optimizer": name,
            "dense_optimizer": {"rowwise_adagrad": "adagrad", "sparse_adam": "adam"}.get(
                name, name)}


# CLI flags that set several fields at once: flag -> the fields it sets for a value.
FIELD_ALIASES: dict[str, Callable[[Any], dict[str, Any]]] = {"optimizer": optimizer_alias}
