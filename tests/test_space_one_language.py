"""One space language: every parameter key a built-in space accepts means the same, and is
refused with the same message, inside a user space's `user:` and `embedding:` sections.

Each spec below is parsed twice: as a built-in space's `params:` entry and as a user
space's entry; the parsed Param (but its name) and every error (but the key's section
prefix) must agree. `user:` values have no declared rule, so specs there stay clear of the
config field's own bounds (`dim` >= 1); `embedding:` values are config fields, checked by
the same declared rules as a built-in space's, bounds included."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from autoembed.errors import ConfigError
from autoembed.space import PARAM_KEYS, Param, parse_space

COND = {"compression": {"choices": ["none", "hash"]}}  # a param a `when` can name
SPECS: list[dict[str, Any]] = [
    # every key, alone and together, as a built-in space would write it
    {"choices": [8, 16, 64]},
    {"low": 8, "high": 64},
    {"type": "int", "low": 8, "high": 64},
    {"low": 8, "high": 64, "log": True},
    {"low": 8, "high": 64, "step": 8},
    {"low": 16, "high": 128, "log": True, "multiple_of": 16},
    {"low": 8, "high": 64, "grid": [8, 32]},
    {"choices": [8, 16], "when": {"compression": "hash"}},
    {"low": 8, "high": 64, "when": {"compression": ["hash"]}},
    # and the mistakes
    {"choices": []},
    {"choices": [8, 8]},
    {"choices": [8], "low": 1},
    {"low": 8},
    {"low": 64, "high": 8},
    {"low": 8, "high": 64, "type": "str"},
    {"low": 8.5, "high": 64, "type": "int"},
    {"low": 8, "high": 64, "log": "yes"},
    {"low": 8, "high": 64, "log": True, "step": 8},
    {"low": 8, "high": 64, "step": 0},
    {"low": 8, "high": 64, "multiple_of": 0},
    {"low": 8, "high": 64, "multiple_of": 16, "step": 8},
    {"low": 9, "high": 15, "multiple_of": 16},
    {"low": 8, "high": 64, "grid": []},
    {"low": 8, "high": 64, "grid": [100]},
    {"low": 8, "high": 64, "multiple_of": 8, "grid": [12]},
    {"choices": [8], "when": {"nope": 1}},
    {"choices": [8], "when": {"compression": "zip"}},
    {"choices": [8], "when": []},
    {"choices": [8], "hgh": 3},
]


def test_the_specs_use_every_parameter_key() -> None:
    used = {k for spec in SPECS for k in spec}
    assert set(PARAM_KEYS) <= used


def _parse(raw: dict[str, Any]) -> tuple[Param | None, str | None]:
    try:
        space = parse_space(raw, "s.yaml")
    except ConfigError as e:
        return None, str(e)
    return next(p for p in space.params if p.name.endswith("dim")), None


def _same(builtin: tuple[Param | None, str | None], user: tuple[Param | None, str | None],
          prefix: str) -> None:
    (bp, be), (up, ue) = builtin, user
    if be is not None or ue is not None:
        assert ue is not None and be is not None, (be, ue)
        assert ue.replace(f"'{prefix}dim", "'params.dim") == be
        return
    assert bp is not None and up is not None
    assert replace(up, name=bp.name, when=tuple(
        (n.removeprefix(prefix), v) for n, v in up.when)) == bp


@pytest.mark.parametrize("spec", SPECS, ids=[str(s) for s in SPECS])
def test_a_user_value_means_what_a_builtin_param_means(spec: dict[str, Any]) -> None:
    builtin = _parse({"params": {**COND, "dim": spec}})
    user = _parse({"user": {**COND, "dim": spec}})
    _same(builtin, user, "user.")


LR_SPECS: list[dict[str, Any]] = [
    {"low": 0.001, "high": 0.1, "log": True},
    {"choices": [0.01, 0.1]},
    {"low": -1.0, "high": 0.1},  # the config field's own rule: lr > 0
    {"choices": [0.01, "fast"]},
    {"low": 0.001, "high": 0.1, "type": "int"},
]


@pytest.mark.parametrize("spec", LR_SPECS, ids=[str(s) for s in LR_SPECS])
def test_an_embedding_value_is_checked_by_the_config_fields_rule(spec: dict[str, Any]) -> None:
    def parse(raw: dict[str, Any]) -> tuple[Param | None, str | None]:
        try:
            space = parse_space(raw, "s.yaml")
        except ConfigError as e:
            return None, str(e).replace("'params.lr", "'X").replace("'embedding.lr", "'X")
        return next(p for p in space.params if p.name.endswith("lr")), None

    (bp, be), (up, ue) = parse({"params": {"lr": spec}}), parse({"embedding": {"lr": spec}})
    assert be == ue
    if bp is not None:
        assert up is not None and replace(up, name="lr") == bp


def test_a_condition_names_an_earlier_value_of_its_own_section() -> None:
    """`when` in `user:` names its section's keys bare; a fixed value counts."""
    space = parse_space({"user": {"layers": 2, "wd": {"low": 0.0, "high": 0.1,
                                                       "when": {"layers": [2, 3]}}}}, "s.yaml")
    (wd,) = space.params
    assert wd.when == (("user.layers", (2, 3)),) and wd.active(space.base)
