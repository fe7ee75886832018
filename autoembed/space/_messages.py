"""The one message shape of a search-space error: the file, the key, the value, the rule."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from autoembed.errors import ConfigError, did_you_mean
from autoembed.rules import Rule


def space_error(source: str, key: str, value: Any, rule: str) -> ConfigError:
    return ConfigError(f"search space '{source}': key '{key}' = {value!r}: {rule}")


def check_value(source: str, key: str, value: Any, rule: Rule) -> None:
    """`value` against `rule`: the shape above, worded by the rule."""
    rule.check(key, value, f"search space '{source}': key")


def unknown_key(source: str, where: str, key: Any, valid: Sequence[str]) -> ConfigError:
    prefix = f"{where}." if where else ""
    return ConfigError(f"search space '{source}': unknown key '{prefix}{key}'"
                       f"{did_you_mean(key, valid)}; valid: {', '.join(valid)}")


def known_keys(source: str, where: str, spec: Any, valid: Sequence[str]) -> None:
    """Every key of `spec` is one of `valid` (else `unknown_key` of the first that is not)."""
    for key in spec:
        if key not in valid:
            raise unknown_key(source, where, key, valid)
