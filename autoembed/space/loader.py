"""Loading a search space: a YAML file (or plain data) checked key by key into a
`SearchSpace`. Config values are checked by the config's own declared rules
(`autoembed.config.FIELD_RULES`, `TABLE_RULES`); an error names the file, the key and the
value."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from autoembed.config import (
    TABLE_RULES,
    EmbeddingConfig,
    config_from_dict,
    safe_load_yaml,
)
from autoembed.errors import ConfigError, did_you_mean
from autoembed.rules import Rule, is_number
from autoembed.space._messages import space_error, unknown_key
from autoembed.space.model import (
    BUILTIN_SPACES,
    DATA_FIELDS,
    DEFAULT_TRIALS,
    LIST_FIELDS,
    PARAM_KEYS,
    PARAM_RULES,
    RUN_KEYS,
    SEARCHABLE,
    SPACE_KEYS,
    STAND_IN_KEYS,
    TABLE_SETTING_KEYS,
    TOKENS_PER_BATCH,
    Param,
    SearchSpace,
    StandIn,
    TableRule,
    _label,
    builtin_space_path,
)
from autoembed.space.objectives import parse_objectives

__all__ = ["load_space", "parse_space"]


def load_space(path: str | Path) -> SearchSpace:
    """Read and validate a search space YAML file. A bare name ("tiny") means a built-in."""
    p = Path(path)
    if not p.exists() and p.suffix == "" and str(path) in BUILTIN_SPACES:
        p = builtin_space_path(str(path))
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise ConfigError(
            f"search space file '{p}' does not exist; give a YAML file or one of the built-in "
            f"spaces: {', '.join(BUILTIN_SPACES)}"
        ) from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"search space file '{p}' cannot be read: {e}") from None
    raw = safe_load_yaml(text, f"search space '{p}'", "search space")
    try:
        return parse_space(raw, str(p), text)
    except RecursionError:
        raise ConfigError(f"search space '{p}' holds a value nested too deeply; "
                          "a space is a mapping a few levels deep") from None


def parse_space(raw: Any, source: str, text: str = "") -> SearchSpace:
    """Validate plain data (a parsed YAML document) into a SearchSpace."""
    if not isinstance(raw, Mapping):
        raise ConfigError(
            f"search space '{source}': expected a mapping with keys {', '.join(SPACE_KEYS)}, "
            f"got {type(raw).__name__}"
        )
    for k in raw:
        if k not in SPACE_KEYS:
            raise unknown_key(source, "", k, SPACE_KEYS)
    data = _parse_data(raw.get("data", {"name": "synthetic-ctr"}), source)
    stand_in = _parse_stand_in(raw.get("stand_in"), data, source)
    base = _parse_base(raw.get("base", {}) or {}, source)
    tables = _parse_tables(raw.get("tables"), base, source)
    params = _parse_params(raw.get("params"), base, source)
    objectives = (parse_objectives(raw["objectives"], source) if "objectives" in raw
                  else SearchSpace.objectives)
    target = raw.get("target")
    if target is not None and not (is_number(target) and 0 < target <= 1):
        raise space_error(source, "target", target, "must be a quality in (0, 1] or null")
    run = _parse_run(raw.get("run", {}) or {}, source)
    trials = raw.get("trials", DEFAULT_TRIALS)
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise space_error(source, "trials", trials, "must be an integer >= 1")
    desc = raw.get("description", "") or ""
    if not isinstance(desc, str):
        raise space_error(source, "description", desc, "must be a string")
    space = SearchSpace(source=source, params=params, data=data, stand_in=stand_in, base=base,
                        tables=tables,
                        objectives=objectives, target=float(target) if target else None,
                        run=run, trials=trials, description=desc, text=text)
    space.base_config()  # base alone must be a valid config
    return space


def _parse_data(raw: Any, source: str) -> dict[str, Any]:
    from autoembed.data.spec import DataSpec

    if not isinstance(raw, Mapping):
        raise space_error(source, "data", raw, "must be a data spec mapping (name and parameters)")
    DataSpec.from_dict(raw, f"search space '{source}': data")
    return dict(raw)


def _parse_stand_in(raw: Any, data: Mapping[str, Any], source: str) -> StandIn | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise space_error(source, "stand_in", raw, "must be a mapping with vocab_scale and rows")
    for k in raw:
        if k not in STAND_IN_KEYS:
            raise unknown_key(source, "stand_in", k, STAND_IN_KEYS)
    if data.get("name", "synthetic-ctr") not in ("synthetic-ctr", "synthetic-text"):
        raise space_error(source, "stand_in", dict(raw),
                    "a stand-in scales synthetic data only; remove it for real or file data")
    scale = raw.get("vocab_scale", 1.0)
    if not is_number(scale) or not 0 < scale <= 1:
        raise space_error(source, "stand_in.vocab_scale", scale, "must be a number in (0, 1]")
    rows = raw.get("rows")
    if rows is not None:
        ok = isinstance(rows, list) and len(rows) == 3 and all(
            isinstance(r, int) and not isinstance(r, bool) and r >= 1 for r in rows)
        if not ok:
            raise space_error(source, "stand_in.rows", rows,
                        "must be three row counts >= 1: train, valid, test")
        return StandIn(float(scale), (rows[0], rows[1], rows[2]))
    return StandIn(float(scale))


def _parse_base(raw: Any, source: str) -> dict[str, Any]:
    from dataclasses import fields

    if not isinstance(raw, Mapping):
        raise space_error(source, "base", raw, "must be a mapping of config fields")
    valid = tuple(sorted(f.name for f in fields(EmbeddingConfig) if f.name not in DATA_FIELDS))
    for k in raw:
        if k in DATA_FIELDS:
            raise space_error(source, f"base.{k}", raw[k],
                        "comes from the data (set `data` instead)")
        if k not in valid:
            raise unknown_key(source, "base", k, valid)
    try:
        config_from_dict(dict(raw), f"search space '{source}': base")
    except ConfigError as e:
        raise ConfigError(str(e)) from None
    return dict(raw)


def _parse_run(raw: Any, source: str) -> dict[str, Any]:
    if not isinstance(raw, Mapping):
        raise space_error(source, "run", raw, "must be a mapping of run settings")
    for k in raw:
        if k not in RUN_KEYS:
            raise unknown_key(source, "run", k, RUN_KEYS)
    from autoembed.runner import RunSettings

    for k, v in raw.items():
        if k == "measure_latency":
            if not isinstance(v, bool):
                raise space_error(source, f"run.{k}", v, "must be true or false")
        elif k == "max_seconds":
            if not is_number(v):
                raise space_error(source, f"run.{k}", v, "must be a number of seconds")
        elif v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise space_error(source, f"run.{k}", v, "must be an integer")
    try:
        RunSettings(**dict(raw))
    except ConfigError as e:
        raise ConfigError(f"search space '{source}': run: {e}") from None
    return dict(raw)


def _parse_params(raw: Any, base: Mapping[str, Any], source: str) -> tuple[Param, ...]:
    if not isinstance(raw, Mapping) or not raw:
        raise space_error(source, "params", raw, "must map at least one config field to its values")
    params: list[Param] = []
    for name, spec in raw.items():
        key = f"params.{name}"
        if name in DATA_FIELDS:
            raise space_error(source, key, spec, "comes from the data and cannot be searched")
        if name not in SEARCHABLE:
            raise ConfigError(
                f"search space '{source}': unknown parameter name '{name}'"
                f"{did_you_mean(name, SEARCHABLE)}; "
                f"searchable: {', '.join(SEARCHABLE)}"
            )
        if name in base:
            raise space_error(source, key, spec, f"'{name}' is also fixed in `base`; keep one")
        if not isinstance(spec, Mapping):
            raise space_error(source, key, spec, "must be a mapping with `choices` or `low`/`high`")
        for k in spec:
            if k not in PARAM_KEYS:
                raise unknown_key(source, key, k, PARAM_KEYS)
        params.append(_parse_param(str(name), spec, params, base, source))
    if TOKENS_PER_BATCH in raw:
        if "batch_size" in raw or "batch_size" in base:
            raise space_error(source, "params.batch_size", raw.get("batch_size", base.get(
                "batch_size")), f"follows from {TOKENS_PER_BATCH} // seq_len; drop it")
        if "seq_len" not in raw and "seq_len" not in base:
            raise space_error(source, f"params.{TOKENS_PER_BATCH}", raw[TOKENS_PER_BATCH],
                              "is split by seq_len: search seq_len too (or fix it in base)")
    return tuple(params)


def _parse_param(
    name: str, spec: Mapping[str, Any], earlier: Sequence[Param], base: Mapping[str, Any],
    source: str,
) -> Param:
    key = f"params.{name}"
    when = _parse_when(spec.get("when"), key, earlier, base, source)
    if "choices" in spec:
        extra = [k for k in ("type", "low", "high", "log", "step", "multiple_of", "grid")
                 if k in spec]
        if extra:
            raise space_error(source, f"{key}.{extra[0]}", spec[extra[0]],
                        "give either `choices` or a `low`/`high` range, not both")
        choices = spec["choices"]
        if not isinstance(choices, list) or not choices:
            raise space_error(source, f"{key}.choices", choices, "must be a non-empty list")
        values = tuple(_check_choice(name, c, f"{key}.choices", source) for c in choices)
        if len(set(map(_label, values))) != len(values):
            raise space_error(source, f"{key}.choices", choices, "must not repeat a value")
        return Param(name, "categorical", choices=values, when=when)
    rule = PARAM_RULES.get(name)
    if rule is None or rule.kind == "choice":
        raise space_error(source, key, dict(spec), "is categorical: give `choices: [...]`")
    if "low" not in spec or "high" not in spec:
        raise space_error(source, key, dict(spec), "needs `choices` or both `low` and `high`")
    natural = "float" if rule.kind == "float" else "int"
    kind = spec.get("type", natural)
    if kind not in ("int", "float"):
        raise space_error(source, f"{key}.type", kind, "must be int or float")
    if kind != natural and rule.kind != "count_or_share":  # a count, or a share range
        raise space_error(source, f"{key}.type", kind, f"'{name}' is a{'n' * (natural == 'int')} "
                    f"{natural} field")
    low, high = spec["low"], spec["high"]
    for k, v in (("low", low), ("high", high)):
        if not is_number(v) or (kind == "int" and not isinstance(v, int)):
            what = "an integer" if kind == "int" else "a number"
            raise space_error(source, f"{key}.{k}", v, f"must be {what}")
        _check_rule(rule, v, f"{key}.{k}", source)
    if low > high:
        raise space_error(source, key, f"low={low}, high={high}",
                    "empty range: low must be <= high")
    log = spec.get("log", False)
    if not isinstance(log, bool):
        raise space_error(source, f"{key}.log", log, "must be true or false")
    if log and low <= 0:
        raise space_error(source, f"{key}.low", low, "a log-scale range needs low > 0")
    step = spec.get("step")
    if step is not None:
        if not is_number(step) or step <= 0 or (kind == "int" and not isinstance(step, int)):
            raise space_error(source, f"{key}.step", step, "must be a positive number")
        if log:
            raise space_error(source, f"{key}.step", step, "cannot be combined with log: true")
    mult = spec.get("multiple_of")
    if mult is not None:
        if kind != "int" or isinstance(mult, bool) or not isinstance(mult, int) or mult < 1:
            raise space_error(source, f"{key}.multiple_of", mult,
                        "must be an integer >= 1 on an int param")
        if step is not None:
            raise space_error(source, f"{key}.multiple_of", mult, "cannot be combined with step")
        if math.ceil(low / mult) > math.floor(high / mult):
            raise space_error(source, key, f"low={low}, high={high}, multiple_of={mult}",
                        "empty range: no multiple of it lies in [low, high]")
        if log and math.ceil(low / mult) < 1:
            raise space_error(source, f"{key}.low", low,
                              "a log-scale range needs low >= multiple_of")
    grid = spec.get("grid")
    grid_t: tuple[Any, ...] = ()
    if grid is not None:
        if not isinstance(grid, list) or not grid:
            raise space_error(source, f"{key}.grid", grid, "must be a non-empty list of values")
        for g in grid:
            if not is_number(g) or not low <= g <= high or (
                    kind == "int" and (not isinstance(g, int) or g % (mult or 1))):
                raise space_error(source, f"{key}.grid", g, f"must lie in [{low}, {high}]"
                            + (f" and be a multiple of {mult}" if mult else ""))
        grid_t = tuple(sorted(set(grid)))
    return Param(name, kind, low=low, high=high, log=log, step=step, multiple_of=mult,
                 when=when, grid=grid_t)


def _parse_when(
    raw: Any, key: str, earlier: Sequence[Param], base: Mapping[str, Any], source: str
) -> tuple[tuple[str, tuple[Any, ...]], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, Mapping) or not raw:
        raise space_error(source, f"{key}.when", raw, "must map a param name to its value(s)")
    known = {p.name: p for p in earlier}
    out = []
    for ref, allowed in raw.items():
        if ref not in known and ref not in base:
            raise space_error(source, f"{key}.when.{ref}", allowed,
                        "a condition must name a param listed above it (or a base field)")
        values = tuple(allowed) if isinstance(allowed, list) else (allowed,)
        if ref in known:
            p = known[ref]
            if p.kind == "categorical":
                for v in values:
                    if _label(v) not in p.labels:
                        raise space_error(source, f"{key}.when.{ref}", v,
                                    f"is not one of {ref}'s choices {list(p.labels)}")
        out.append((str(ref), values))
    return tuple(out)


def _check_choice(name: str, value: Any, key: str, source: str) -> Any:
    if name in LIST_FIELDS:
        if not isinstance(value, list) or not all(
                isinstance(w, int) and not isinstance(w, bool) and w >= 1 for w in value):
            raise space_error(source, key, value, "each choice must be a list of layer widths")
        return tuple(value)
    _check_rule(PARAM_RULES[name], value, key, source)
    return value


def _check_rule(rule: Rule, value: Any, key: str, source: str) -> None:
    """`value` against a config field's declared rule, worded as the rule words it."""
    if not rule.ok(value):
        raise space_error(source, key, value, rule.text)


def _parse_tables(raw: Any, base: Mapping[str, Any], source: str) -> tuple[TableRule, ...]:
    """Per-table settings: a list of {name | min_rows, and table keys}, each value checked by
    the table key's own rule (`config.TABLE_RULES`), the whole against `base`."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise space_error(source, "tables", raw, "must be a list of {name or min_rows, and "
                          f"settings: {', '.join(TABLE_SETTING_KEYS)}}}")
    out = []
    for i, item in enumerate(raw):
        key = f"tables[{i}]"
        if not isinstance(item, Mapping):
            raise space_error(source, key, item, "must be a mapping")
        for k in item:
            if k not in ("name", "min_rows", *TABLE_SETTING_KEYS):
                raise unknown_key(source, key, k, ("name", "min_rows", *TABLE_SETTING_KEYS))
        name, min_rows = item.get("name"), item.get("min_rows")
        if (name is None) == (min_rows is None):
            raise space_error(source, key, dict(item),
                              "select the tables by `name` or by `min_rows`, one of the two")
        if name is not None and (not isinstance(name, str) or not name):
            raise space_error(source, f"{key}.name", name, "must be a table name")
        if min_rows is not None:
            _check_rule(TABLE_RULES["vocab_size"], min_rows, f"{key}.min_rows", source)
        settings = {k: v for k, v in item.items() if k in TABLE_SETTING_KEYS}
        if not settings:
            raise space_error(source, key, dict(item),
                              f"sets nothing; give some of {', '.join(TABLE_SETTING_KEYS)}")
        for k, v in settings.items():
            _check_rule(TABLE_RULES[k], v, f"{key}.{k}", source)
        rule = TableRule(name, min_rows, settings)
        probe = {"name": name or "t", "vocab_size": max(min_rows or 1, 2**31), **settings}
        try:  # the settings on a table under `base`: e.g. hash needs hash_buckets somewhere
            config_from_dict({**base, "tables": [probe]}, f"search space '{source}': {key}")
        except ConfigError as e:
            raise ConfigError(str(e)) from None
        out.append(rule)
    return tuple(out)
