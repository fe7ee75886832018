"""Loading a search space: a YAML file (or plain data) checked key by key into a
`SearchSpace`. Config values are checked by the config's own declared rules
(`autoembed.config.FIELD_RULES`, `TABLE_RULES`); an error names the file, the key and the
value."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from pathlib import Path
from typing import Any

from autoembed.config import (
    FIELD_RULES,
    TABLE_RULES,
    EmbeddingConfig,
    config_from_dict,
    safe_load_yaml,
)
from autoembed.errors import ConfigError, did_you_mean
from autoembed.rules import Each, Flag, Integer, Interval, Is, OneOf, Rule, is_number
from autoembed.space._messages import check_value, known_keys, space_error, unknown_key
from autoembed.space.objectives import MEASURED, parse_objectives
from autoembed.space.search_space import (
    BUILTIN_SPACES,
    DATA_FIELDS,
    DEFAULT_TRIALS,
    EARLY_STOP_KEYS,
    EMBEDDING,
    EMBEDDING_KEYS,
    LIST_FIELDS,
    NOT_FOR_USER_MODELS,
    PARAM_KEYS,
    PARAM_RULES,
    RUN_KEYS,
    SEARCHABLE,
    SPACE_KEYS,
    STAND_IN_KEYS,
    TABLE_SETTING_KEYS,
    TOKENS_PER_BATCH,
    TOPOLOGY,
    TORCHREC_EMBEDDING_KEYS,
    TRIAL_TIME_LIMIT,
    USER_SECTIONS,
    USER_SPACE_KEYS,
    USER_TABLE_KEYS,
    Param,
    SearchSpace,
    StandIn,
    TableRule,
    _label,
    builtin_space_path,
    table_param_name,
    when_label,
)

__all__ = ["load_space", "parse_space", "space_kind", "SHAPES", "WHEN_RULE"]


def _size(v: Any) -> bool:
    """Bytes, or a size string ("16GB")."""
    from autoembed.budget import BudgetError, parse_size

    try:
        return not isinstance(v, str) or parse_size(v) > 0
    except BudgetError:
        return False


def _free(v: Any) -> bool:
    """A user value: a scalar, or a list of scalars."""
    items = v if isinstance(v, list) else [v]
    return not any(isinstance(x, (Mapping, list)) for x in items)


# What each key of a space file is where no config field's rule says (a param's own keys by
# their last part: `low`, `step`, ...); `_check_rule` checks them, each words itself.
SHAPES: dict[str, Rule] = {
    "target": Is(lambda v: v is None or is_number(v),
                 "a quality (a number; higher is better) or null"),
    "trials": Integer(1),
    "description": Is(str, "a string"),
    "size": Is(_size, "a size: bytes, or e.g. 16GB, 16GiB"),
    "mapping": Is(lambda m: isinstance(m, Mapping) and all(isinstance(k, str) and k for k in m),
                  "a mapping (with non-empty names as keys)"),
    "early_stop": Integer(1, note="(the loop's most steps, and its steps between reports)"),
    "metrics": Each(Is(lambda m: isinstance(m, str) and m.isidentifier(), "an identifier"),
                    "a list of metric names (identifiers)", seq=(list,)),
    "data": Is(Mapping, "a data spec mapping (name and parameters)"),
    "stand_in": Is(Mapping, "a mapping with vocab_scale and rows"),
    "stand_in.vocab_scale": Interval(0, 1, open_low=True),
    "stand_in.rows": Each(Integer(1), "three row counts >= 1: train, valid, test", 3, seq=(list,)),
    "base": Is(Mapping, "a mapping of config fields"),
    "run": Is(Mapping, "a mapping of run settings"),
    "param": Is(Mapping, "a mapping with `choices` or `low`/`high`"),
    "choices": Each(None, "a non-empty list", filled=True, seq=(list,)),
    "type": OneOf(("int", "float")),
    "int": Is(lambda v: is_number(v) and isinstance(v, int), "an integer"),
    "float": Is(is_number, "a number"),
    "log": Flag(),
    "int.step": Integer(1),
    "float.step": Interval(0, open_low=True),
    "multiple_of": Integer(1),
    "grid": Each(None, "a non-empty list of values", filled=True, seq=(list,)),
    "widths": Each(Integer(1), "a list of layer widths", seq=(list,)),
    "free": Is(_free, "a scalar or a list of scalars"),
    "tables": Is(list, "a list of {name or min_rows, and settings: "
                 f"{', '.join(TABLE_SETTING_KEYS)}}}"),
    "table": Is(Mapping, "a mapping"),
    "table.name": Is(str, "a table name", filled=True),
}


def load_space(path: str | Path, kind: str | None = None) -> SearchSpace:
    """Read and validate a search space YAML file. A bare name ("tiny") means a built-in.
    `kind`: "builtin" or "user" when the caller knows which search it runs (None: the file's
    keys say: `embedding:`/`user:` sections make a space over the user's own model)."""
    p = Path(path)
    if not p.exists():
        # a built-in by name ("tiny"), or by its repository path from another directory
        if str(path) in BUILTIN_SPACES:
            p = builtin_space_path(str(path))
        elif (p.stem in BUILTIN_SPACES and p.suffix == ".yaml"
              and p.parent.name == "search_spaces" and len(p.parts) == 2):
            p = builtin_space_path(p.stem)
    from autoembed.data.spec import suffix_of

    if suffix_of(p.name):  # `--space clicks.csv` for `--data clicks.csv`
        raise ConfigError(f"search space '{path}' is a data file: give it with --data (the "
                          "space is then derived from it); --space takes a YAML search space")
    try:
        text = p.read_text()
    except FileNotFoundError:
        hint = ("the YAML file with `embedding:` and `user:` sections" if kind == "user" else
                f"a YAML file or one of the built-in spaces: {', '.join(BUILTIN_SPACES)}")
        raise ConfigError(f"search space file '{p}' does not exist; give {hint}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"search space file '{p}' cannot be read: {e}") from None
    raw = safe_load_yaml(text, f"search space '{p}'", "search space")
    try:
        return parse_space(raw, str(p), text, kind)
    except RecursionError:
        raise ConfigError(f"search space '{p}' holds a value nested too deeply; "
                          "a space is a mapping a few levels deep") from None


def space_kind(raw: Mapping[str, Any]) -> str:
    """"user" for a space with `embedding:` or `user:` sections or a `topology:` (only a
    TorchRec model's space has one), else "builtin"."""
    return "user" if any(k in raw for k in (*USER_SECTIONS, TOPOLOGY)) else "builtin"


def parse_space(raw: Any, source: str, text: str = "", kind: str | None = None) -> SearchSpace:
    """Validate plain data (a parsed YAML document) into a SearchSpace (`kind` as for
    `load_space`)."""
    if not isinstance(raw, Mapping):
        keys = USER_SPACE_KEYS if kind == "user" else SPACE_KEYS
        raise ConfigError(
            f"search space '{source}': expected a mapping with keys {', '.join(keys)}, "
            f"got {type(raw).__name__}"
        )
    found = space_kind(raw)
    builtin_only = any(k in raw for k in SPACE_KEYS if k not in USER_SPACE_KEYS)
    if (kind == "builtin" and found == "user") or (kind == "user" and builtin_only
                                                   and found == "builtin"):
        raise ConfigError(_WRONG_KIND[kind].format(source=source))
    if (kind or found) == "user":
        return _parse_user_space(raw, source, text)
    known_keys(source, "", raw, SPACE_KEYS)
    data = _parse_data(raw.get("data", {"name": "synthetic-ctr"}), source)
    stand_in = _parse_stand_in(raw.get("stand_in"), data, source)
    base = _parse_base(raw.get("base", {}) or {}, source)
    tables, table_params = _parse_tables(raw.get("tables"), base, source)
    params = _parse_params(raw.get("params"), base, source, table_params)
    run = _parse_run(raw.get("run", {}) or {}, source)
    space = SearchSpace(source=source, params=params, data=data, stand_in=stand_in, base=base,
                        tables=tables, run=run, text=text, **_common(raw, source))
    space.base_config()  # base alone must be a valid config
    return space


_WRONG_KIND = {
    "builtin": "search space '{source}' searches your own model (`embedding:` and `user:` "
               "sections): give --model, --example and --train with it",
    "user": "search space '{source}' is a space of autoembed's own models; a search over your "
            "model takes a file with `embedding:` and `user:` sections",
}


def _common(raw: Mapping[str, Any], source: str) -> dict[str, Any]:
    """What both kinds of space say the same way: objectives, target, trials, description."""
    objectives = (parse_objectives(raw["objectives"], source) if "objectives" in raw
                  else SearchSpace.objectives)
    target = raw.get("target")
    trials = raw.get("trials", DEFAULT_TRIALS)
    desc = raw.get("description", "") or ""
    for key, value in (("target", target), ("trials", trials), ("description", desc)):
        _check_rule(key, value, key, source)
    limit = raw.get("trial_time_limit")
    if limit is not None and not TRIAL_TIME_LIMIT.ok(limit):
        raise space_error(source, "trial_time_limit", limit,
                          TRIAL_TIME_LIMIT.text + " (seconds)")
    return {"objectives": objectives, "target": None if target is None else float(target),
            "trials": trials, "description": desc,
            "trial_time_limit": None if limit is None else float(limit)}


# ===================================================================== a user's own model


def _parse_user_space(raw: Mapping[str, Any], source: str, text: str) -> SearchSpace:
    """A space over the user's own model (`SearchSpace.kind` "user"): `embedding:` (config
    fields autoembed applies; `tables:` rules by module path or glob), `user:` (values passed
    to the user's functions), `metrics`, `early_stop`, `topology` (a TorchRec model's: its
    tables then take TorchRec's knobs, `_Keys.torchrec`) and the common keys. Every value is
    fixed or searched with the same keys, checks and messages as a built-in space's params;
    `when` names a key listed above it in the same section."""
    known_keys(source, "", raw, USER_SPACE_KEYS)
    topology = _topology(source, raw[TOPOLOGY]) if TOPOLOGY in raw else None
    keys = _Keys.torchrec() if topology is not None else _Keys.torch()
    params: list[Param] = []
    base: dict[str, Any] = {}
    emb = dict(_mapping(source, "embedding", raw.get("embedding")))
    tables_raw = _mapping(source, "embedding.tables", emb.pop("tables", None))
    for k in emb:
        keys.check_embedding(source, k, emb[k])
    sections = {"embedding": _section("embedding", emb, params, base, source, FIELD_RULES)}
    rules = []
    for pattern, settings in tables_raw.items():
        where = f"embedding.tables.{pattern}"
        settings = _mapping(source, where, settings)
        if not settings:
            raise space_error(source, where, settings,
                              f"give settings: {', '.join(keys.table)}")
        for k in settings:
            keys.check_table(source, where, k, settings[k])
        names = _section(where, settings, params, base, source, keys.table_rules)
        rules.append(TableRule(None, None, {}, names, pattern=str(pattern)))
        if topology is not None and not any(isinstance(v, Mapping) for v in settings.values()):
            _probe_torchrec(source, where, settings)
    user = _mapping(source, "user", raw.get("user"))
    for k in user:
        if k == EMBEDDING or k in emb:
            raise space_error(source, f"user.{k}", user[k], f"'{k}' is an embedding setting; "
                              "keep it under `embedding:` only")
    sections["user"] = _section("user", user, params, base, source, None)
    if not params:
        raise ConfigError(f"search space '{source}': nothing is searched; give at least one "
                          "value as `choices: [...]` or a `low`/`high` range")
    return SearchSpace(source=source, params=tuple(params), kind="user", base=base, data={},
                       sections=sections, tables=tuple(rules),
                       metrics=_metrics(source, raw.get("metrics")),
                       early_stop=_early_stop(source, raw.get("early_stop")),
                       topology=topology, text=text, **_common(raw, source))


@dataclass(frozen=True)
class _Keys:
    """What a user space's `embedding:` section and its tables may set: autoembed's config
    keys (`torch`), or a TorchRec model's knobs (`torchrec`: `autoembed.torchrec.settings`)."""

    embedding: tuple[str, ...]
    table: tuple[str, ...]
    table_rules: Mapping[str, Rule]
    torchrec_space: bool

    @classmethod
    def torch(cls) -> _Keys:
        return cls(EMBEDDING_KEYS, USER_TABLE_KEYS, TABLE_RULES, False)

    @classmethod
    def torchrec(cls) -> _Keys:
        from autoembed.torchrec import settings

        return cls(TORCHREC_EMBEDDING_KEYS, settings.TABLE_KEYS, settings.TABLE_RULES, True)

    def check_embedding(self, source: str, k: str, value: Any) -> None:
        if self.torchrec_space and k in self.table:
            raise space_error(source, f"embedding.{k}", value, "is a TorchRec table setting: "
                              "give it under embedding.tables.<pattern> (\"*\": every table)")
        if not self.torchrec_space and k in NOT_FOR_USER_MODELS:
            raise space_error(source, f"embedding.{k}", value, NOT_FOR_USER_MODELS[k])
        if k not in self.embedding:
            raise unknown_key(source, "embedding", k, (*self.embedding, "tables"))

    def check_table(self, source: str, where: str, k: str, value: Any) -> None:
        if self.torchrec_space and k in (*USER_TABLE_KEYS, "dim", "vocab_size"):
            raise space_error(source, f"{where}.{k}", value, "TorchRec's tables cannot "
                              f"express it; a TorchRec table takes {', '.join(self.table)}")
        if k not in self.table:
            raise unknown_key(source, where, k, self.table)


def _topology(source: str, raw: Any) -> dict[str, Any]:
    """`topology:` of a TorchRec model's space: fixed values, sizes as bytes or "16GB"."""
    from autoembed.budget import parse_size
    from autoembed.torchrec.settings import TOPOLOGY_KEYS, TOPOLOGY_RULES

    spec = _mapping(source, TOPOLOGY, raw)
    if "world_size" not in spec:
        raise space_error(source, TOPOLOGY, dict(spec), "give world_size: the ranks a trial "
                          "runs as (and hbm, ddr, compute_device where the defaults differ)")
    known_keys(source, TOPOLOGY, spec, TOPOLOGY_KEYS)
    out: dict[str, Any] = {}
    for k, v in spec.items():
        key = f"{TOPOLOGY}.{k}"
        if isinstance(v, (Mapping, list)):
            raise space_error(source, key, v, "the machines a search plans for are fixed: "
                              "give one value")
        if k in ("hbm", "ddr") and isinstance(v, str):
            _check_rule("size", v, key, source)
            v = parse_size(v)
        _check_rule(TOPOLOGY_RULES[k], v, key, source)
        out[k] = v
    return out


def _probe_torchrec(source: str, where: str, settings: Mapping[str, Any]) -> None:
    """Fixed TorchRec settings that contradict each other, refused when the space loads."""
    from autoembed.torchrec.settings import TorchRecTable

    try:
        TorchRecTable("t", **dict(settings))
    except ConfigError as e:
        why = str(e).split(": ", 1)[-1]
        raise space_error(source, where, dict(settings), why) from None


def _mapping(source: str, key: str, raw: Any) -> Mapping[str, Any]:
    if raw is None:
        return {}
    _check_rule("mapping", raw, key, source)
    return raw


def _section(prefix: str, raw: Mapping[str, Any], params: list[Param], base: dict[str, Any],
             source: str, rules: Mapping[str, Rule] | None) -> dict[str, str]:
    """Each key of `raw` as a fixed value (into `base`) or a Param (onto `params`), named
    `prefix.key`; a value is checked by `rules[key]` (None: a free value). Key -> name."""
    names: dict[str, str] = {}
    for k, spec in raw.items():
        q = f"{prefix}.{k}"
        rule = None if rules is None else rules[k]
        if isinstance(spec, Mapping):
            known_keys(source, q, spec, PARAM_KEYS)
            params.append(_parse_param(q, spec, params, base, source, q, rule, prefix))
        else:
            if rule is not None:
                _check_rule(rule, spec, q, source)
            base[q] = tuple(spec) if isinstance(spec, list) else spec
        names[k] = q
    return names


def _early_stop(source: str, raw: Any) -> tuple[int, int] | None:
    """`early_stop: {max_steps: N, eval_every: M}` -> (N, M); absent -> None (off)."""
    if raw is None:
        return None
    spec = _mapping(source, "early_stop", raw)
    known_keys(source, "early_stop", spec, EARLY_STOP_KEYS)
    for k in EARLY_STOP_KEYS:
        _check_rule("early_stop", spec.get(k), f"early_stop.{k}", source)
    return spec["max_steps"], spec["eval_every"]


def _metrics(source: str, raw: Any) -> tuple[str, ...]:
    if raw is None:
        return ()
    _check_rule("metrics", raw, "metrics", source)
    for m in raw:
        if m == "quality" or m in MEASURED:
            raise space_error(source, "metrics", m, "is reported or measured already; list "
                              "only extra names the loop passes to report(...)")
    return tuple(dict.fromkeys(raw))


# ===================================================================== autoembed's own models


def _parse_data(raw: Any, source: str) -> dict[str, Any]:
    from autoembed.data.spec import DataSpec

    _check_rule("data", raw, "data", source)
    DataSpec.from_dict(raw, f"search space '{source}': data")
    return dict(raw)


def _parse_stand_in(raw: Any, data: Mapping[str, Any], source: str) -> StandIn | None:
    if raw is None:
        return None
    _check_rule("stand_in", raw, "stand_in", source)
    known_keys(source, "stand_in", raw, STAND_IN_KEYS)
    if data.get("name", "synthetic-ctr") not in ("synthetic-ctr", "synthetic-text"):
        raise space_error(source, "stand_in", dict(raw),
                    "a stand-in scales synthetic data only; remove it for real or file data")
    scale = raw.get("vocab_scale", 1.0)
    _check_rule("stand_in.vocab_scale", scale, "stand_in.vocab_scale", source)
    rows = raw.get("rows")
    if rows is not None:
        _check_rule("stand_in.rows", rows, "stand_in.rows", source)
        return StandIn(float(scale), (rows[0], rows[1], rows[2]))
    return StandIn(float(scale))


def _parse_base(raw: Any, source: str) -> dict[str, Any]:
    from dataclasses import fields

    _check_rule("base", raw, "base", source)
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
    from autoembed.runner import check_run

    _check_rule("run", raw, "run", source)
    check_run(raw, f"search space '{source}'", "run.", RUN_KEYS)
    steps = raw.get("max_steps")
    if steps is not None and raw.get("epochs") is not None:
        raise space_error(source, "run.epochs", raw["epochs"],
                          "give `max_steps` or `epochs`, not both (epochs would win)")
    if steps is not None and raw.get("warmup_steps", 0) >= steps:
        raise space_error(source, "run.warmup_steps", raw["warmup_steps"],
                          f"leaves none of the {steps} steps (max_steps) to measure the "
                          "throughput on; give fewer")
    return dict(raw)


def _parse_params(
    raw: Any, base: Mapping[str, Any], source: str, earlier: Sequence[Param] = ()
) -> tuple[Param, ...]:
    """The space's params: `earlier` (the tables' searched keys) then `params:` in order."""
    if raw is None and earlier:
        raw = {}
    if not isinstance(raw, Mapping) or not (raw or earlier):
        raise space_error(source, "params", raw, "must map at least one config field to its values")
    params: list[Param] = list(earlier)
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
        _check_rule("param", spec, key, source)
        known_keys(source, key, spec, PARAM_KEYS)
        params.append(_parse_param(str(name), spec, params, base, source))
    if TOKENS_PER_BATCH in raw:
        if "batch_size" in raw or "batch_size" in base:
            raise space_error(source, "params.batch_size", raw.get("batch_size", base.get(
                "batch_size")), f"follows from {TOKENS_PER_BATCH} // seq_len; drop it")
        if "seq_len" not in raw and "seq_len" not in base:
            raise space_error(source, f"params.{TOKENS_PER_BATCH}", raw[TOKENS_PER_BATCH],
                              "is split by seq_len: search seq_len too (or fix it in base)")
    return tuple(params)


_FIELD_RULE = object()  # `_parse_param`'s default: the config field's declared rule


def _parse_param(
    name: str, spec: Mapping[str, Any], earlier: Sequence[Param], base: Mapping[str, Any],
    source: str, key: str | None = None, rule: Any = _FIELD_RULE, scope: str | None = None,
) -> Param:
    """Param `name` from its spec; errors name `key` (default params.<name>). `rule`: the
    value's declared rule (default: the config field's, `PARAM_RULES`); None for a value
    no rule constrains (a user space's `user:` section), whose kind follows its bounds."""
    key = key or f"params.{name}"
    field_rule = rule is _FIELD_RULE
    if field_rule:
        rule = PARAM_RULES.get(name)
    when = _parse_when(spec.get("when"), key, earlier, base, source, scope)
    if "choices" in spec:
        return _categorical(name, spec, key, source, rule, when)
    if (rule is None and field_rule) or (rule is not None and rule.kind == "choice"):
        raise space_error(source, key, dict(spec), "is categorical: give `choices: [...]`")
    if "low" not in spec or "high" not in spec:
        raise space_error(source, key, dict(spec), "needs `choices` or both `low` and `high`")
    low, high = spec["low"], spec["high"]
    natural = _natural_kind(rule, low, high)
    kind = spec.get("type", natural)
    _check_rule("type", kind, f"{key}.type", source)
    if rule is not None and kind != natural and rule.kind != "count_or_share":
        field_name = name.rsplit(".", 1)[-1]
        raise space_error(source, f"{key}.type", kind,
                          f"'{field_name}' is a{'n' * (natural == 'int')} {natural} field")
    for k, v in (("low", low), ("high", high)):
        _check_rule(kind, v, f"{key}.{k}", source)
        if rule is not None:
            _check_rule(rule, v, f"{key}.{k}", source)
    if low > high:
        raise space_error(source, key, f"low={low}, high={high}",
                    "empty range: low must be <= high")
    log = spec.get("log", False)
    _check_rule("log", log, f"{key}.log", source)
    if log and low <= 0:
        raise space_error(source, f"{key}.low", low, "a log-scale range needs low > 0")
    step, mult = _step(spec, kind, key, source), _multiple_of(spec, kind, key, source)
    grid = _grid(spec, kind, mult, step, key, source)
    return Param(name, kind, low=low, high=high, log=log, step=step, multiple_of=mult,
                 when=when, grid=grid)


def _categorical(name: str, spec: Mapping[str, Any], key: str, source: str, rule: Any,
                 when: Any) -> Param:
    """A `choices:` param: each choice checked against `rule`, none repeated."""
    extra = [k for k in ("type", "low", "high", "log", "step", "multiple_of", "grid")
             if k in spec]
    if extra:
        raise space_error(source, f"{key}.{extra[0]}", spec[extra[0]],
                          "give either `choices` or a `low`/`high` range, not both")
    choices = spec["choices"]
    _check_rule("choices", choices, f"{key}.choices", source)
    values = tuple(_check_choice(name, c, f"{key}.choices", source, rule) for c in choices)
    if len(set(map(_label, values))) != len(values):
        raise space_error(source, f"{key}.choices", choices, "must not repeat a value")
    return Param(name, "categorical", choices=values, when=when)


def _step(spec: Mapping[str, Any], kind: str, key: str, source: str) -> Any:
    """A range's `step` (None: none), never with log; `high` a whole number of steps above
    `low` (else a sampler would move it: Optuna shortens such a range with a warning)."""
    step = spec.get("step")
    if step is not None:
        _check_rule(f"{kind}.step", step, f"{key}.step", source)
        if spec.get("log", False):
            raise space_error(source, f"{key}.step", step, "cannot be combined with log: true")
        low, high = (Decimal(str(spec[k])) for k in ("low", "high"))
        steps = (high - low) / Decimal(str(step))
        if steps != steps.to_integral_value():
            on = low + int(steps) * Decimal(str(step))
            fix = f"{float(on):g}" if kind == "float" else str(int(on))
            raise space_error(source, f"{key}.high", spec["high"],
                              f"is not low ({spec['low']}) plus a whole number of steps of "
                              f"{step}; give high: {fix}")
    return step


def _multiple_of(spec: Mapping[str, Any], kind: str, key: str, source: str) -> Any:
    """An int range's `multiple_of` (None: none): never with step, some multiple in range
    (on a log scale, one >= 1)."""
    mult = spec.get("multiple_of")
    if mult is None:
        return None
    low, high = spec["low"], spec["high"]
    if kind != "int":
        raise space_error(source, f"{key}.multiple_of", mult, "applies to an int param only")
    _check_rule("multiple_of", mult, f"{key}.multiple_of", source)
    if spec.get("step") is not None:
        raise space_error(source, f"{key}.multiple_of", mult, "cannot be combined with step")
    if math.ceil(low / mult) > math.floor(high / mult):
        raise space_error(source, key, f"low={low}, high={high}, multiple_of={mult}",
                          "empty range: no multiple of it lies in [low, high]")
    if spec.get("log", False) and math.ceil(low / mult) < 1:
        raise space_error(source, f"{key}.low", low,
                          "a log-scale range needs low >= multiple_of")
    return mult


def _grid(spec: Mapping[str, Any], kind: str, mult: Any, step: Any, key: str,
          source: str) -> tuple[Any, ...]:
    """A range's `grid` (() : none), sorted, each point in [low, high] (an int range's, a
    multiple of `mult`), and on the range's `step` (low + k * step)."""
    grid, low, high = spec.get("grid"), spec["low"], spec["high"]
    if grid is None:
        return ()
    _check_rule("grid", grid, f"{key}.grid", source)
    for g in grid:
        if not is_number(g) or not low <= g <= high or (
                kind == "int" and (not isinstance(g, int) or g % (mult or 1))) or (
                step and (Decimal(str(g)) - Decimal(str(low))) % Decimal(str(step))):
            raise space_error(source, f"{key}.grid", g, f"must lie in [{low}, {high}]"
                              + (f" and be a multiple of {mult}" if mult else "")
                              + (f" and be low plus a whole number of steps of {step}"
                                 if step else ""))
    return tuple(sorted(set(grid)))


WHEN_RULE = "a condition must name a param listed above it (searched or fixed)"


def _parse_when(
    raw: Any, key: str, earlier: Sequence[Param], base: Mapping[str, Any], source: str,
    scope: str | None = None,
) -> tuple[tuple[str, tuple[Any, ...]], ...]:
    """`when: {param: value(s)}`. `scope`: a user space's section, whose keys a condition
    names bare (`layers` is `user.layers`)."""
    if raw is None:
        return ()
    if not isinstance(raw, Mapping) or not raw:
        raise space_error(source, f"{key}.when", raw, "must map a param name to its value(s)")
    known = {p.name: p for p in earlier}
    out = []
    for bare, allowed in raw.items():
        ref = f"{scope}.{bare}" if scope else bare
        if ref not in known and ref not in base:
            names = [n.removeprefix(f"{scope}.") for n in (*known, *base)
                     if not scope or n.startswith(f"{scope}.")]
            raise space_error(source, f"{key}.when.{bare}", allowed,
                              WHEN_RULE + did_you_mean(str(bare), names))
        values = tuple(map(when_label, allowed if isinstance(allowed, list) else [allowed]))
        for v in values:
            why = _never(known[ref], v, bare) if ref in known else (
                None if when_label(base[ref]) in values else
                f"'{bare}' is fixed at {base[ref]!r} in `base`, so the condition never holds")
            if why:
                raise space_error(source, f"{key}.when.{bare}", v, why)
        out.append((str(ref), values))
    return tuple(out)


def _never(p: Param, v: Any, bare: str) -> str | None:
    """Why param `p` never takes `v` (a condition on it would never hold), else None."""
    if p.kind == "categorical":
        return None if v in p.labels else f"is not one of {bare}'s choices {list(p.labels)}"
    if v in p.grid:
        return None
    if not is_number(v) or not p.low <= v <= p.high:
        return f"is not in {bare}'s range [{p.low}, {p.high}]"
    if p.kind == "float" and (not p.step or p.log):
        return (f"{bare} is a float range, which takes no one value but by chance; give it a "
                "step, or make the condition on a param with choices")
    m = p.multiple_of or 1
    on = p.on_step(v / m) * m if p.kind == "int" else p.on_step(v)
    if (p.kind == "int" and (not isinstance(v, int) or v % m)) or on != v:
        return f"is not a value {bare} takes (its step or multiple_of)"
    return None


def _natural_kind(rule: Rule | None, low: Any, high: Any) -> str:
    """A range's kind: its rule's, or (no rule) int when both ends are integers."""
    if rule is not None:
        return "float" if rule.kind == "float" else "int"
    ints = all(isinstance(v, int) and not isinstance(v, bool) for v in (low, high))
    return "int" if ints else "float"


def _check_choice(name: str, value: Any, key: str, source: str, rule: Rule | None) -> Any:
    if name in LIST_FIELDS or rule is None:  # layer widths; or a free value
        _check_rule("widths" if name in LIST_FIELDS else "free", value, key, source)
        return tuple(value) if isinstance(value, list) else value
    _check_rule(rule, value, key, source)
    return value


def _check_rule(rule: Rule | str, value: Any, key: str, source: str) -> None:
    """`value` against a declared rule (a config field's, or a key's in `SHAPES`), worded
    as the rule words it."""
    check_value(source, key, value, SHAPES[rule] if isinstance(rule, str) else rule)


def _parse_tables(
    raw: Any, base: Mapping[str, Any], source: str
) -> tuple[tuple[TableRule, ...], tuple[Param, ...]]:
    """Per-table settings: a list of {name | min_rows, and table keys}, each value checked by
    the table key's own rule (`config.TABLE_RULES`), the whole against `base`. A value given
    as a param spec (`choices`, or `low`/`high`; `when` naming keys of the same entry or
    params above) is searched: the param ``tables[i].<key>`` (`min_rows` by `choices`)."""
    if raw is None:
        return (), ()
    _check_rule("tables", raw, "tables", source)
    out: list[TableRule] = []
    params: list[Param] = []
    for i, item in enumerate(raw):
        key = f"tables[{i}]"
        _check_rule("table", item, key, source)
        known_keys(source, key, item, ("name", "min_rows", *TABLE_SETTING_KEYS))
        name, min_rows = item.get("name"), item.get("min_rows")
        if (name is None) == (min_rows is None):
            raise space_error(source, key, dict(item),
                              "select the tables by `name` or by `min_rows`, one of the two")
        if name is not None:
            _check_rule("table.name", name, f"{key}.name", source)
        searched = _parse_table_params(i, item, params, base, source)
        if min_rows is not None and "min_rows" not in searched:
            _check_rule(TABLE_RULES["vocab_size"], min_rows, f"{key}.min_rows", source)
        settings = {k: v for k, v in item.items() if k in TABLE_SETTING_KEYS and k not in searched}
        if not settings and not searched:
            raise space_error(source, key, dict(item),
                              f"sets nothing; give some of {', '.join(TABLE_SETTING_KEYS)}")
        for k, v in settings.items():
            _check_rule(TABLE_RULES[k], v, f"{key}.{k}", source)
        fixed_rows = None if "min_rows" in searched else min_rows
        rule = TableRule(name, fixed_rows, settings, searched)
        probe = {"name": name or "t", "vocab_size": max(fixed_rows or 1, 2**31), **settings}
        try:  # the settings on a table under `base`: e.g. hash needs hash_buckets somewhere
            if settings:
                config_from_dict({**base, "tables": [probe]}, f"search space '{source}': {key}")
        except ConfigError as e:
            raise ConfigError(str(e)) from None
        out.append(rule)
    return tuple(out), tuple(params)


def _parse_table_params(
    i: int, item: Mapping[str, Any], params: list[Param], base: Mapping[str, Any], source: str
) -> dict[str, str]:
    """The searched keys of `tables[i]` (values given as param specs), appended to `params`
    as ``tables[i].<key>``; returns key -> param name."""
    searched: dict[str, str] = {}
    for k, spec in item.items():
        if not isinstance(spec, Mapping) or k == "name":
            continue
        key = table_param_name(i, k)
        known_keys(source, key, spec, PARAM_KEYS)
        when = spec.get("when")
        if isinstance(when, Mapping):  # a key of this entry means its searched param
            for r, v in when.items():
                if r in item and r not in searched and not isinstance(item[r], Mapping):
                    raise space_error(source, f"{key}.when.{r}", v, f"'{r}' is fixed in this "
                                      f"entry ({item[r]!r}), not searched: drop the condition")
            when = {searched.get(r, r): v for r, v in when.items()}
            spec = {**spec, "when": when}
        if k == "min_rows":
            p = _parse_min_rows(spec, key, params, base, source)
        else:
            p = replace(_parse_param(k, spec, params, base, source, key), name=key)
            for v in (p.choices if p.kind == "categorical" else (p.low, p.high)):
                _check_rule(TABLE_RULES[k], v, key, source)
        searched[k] = key
        params.append(p)
    return searched


def _parse_min_rows(
    spec: Mapping[str, Any], key: str, earlier: Sequence[Param], base: Mapping[str, Any],
    source: str,
) -> Param:
    """A searched `min_rows` threshold: `choices` of row counts."""
    choices = spec.get("choices")
    if not isinstance(choices, list) or not choices or set(spec) - {"choices", "when"}:
        raise space_error(source, key, dict(spec), "a searched min_rows takes `choices: [...]` "
                          "of row counts")
    for c in choices:
        _check_rule(TABLE_RULES["vocab_size"], c, key, source)
    when = _parse_when(spec.get("when"), key, earlier, base, source)
    return Param(key, "categorical", choices=tuple(dict.fromkeys(choices)), when=when)


