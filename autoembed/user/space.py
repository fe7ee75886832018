"""The space of a search over the user's own model: what autoembed applies, what it passes on.

```yaml
embedding:                      # applied by autoembed to the built model (autoembed.apply)
  precision: {choices: [fp32, bf16_master]}
  table_optimizer: rowwise_adagrad
  tables:                       # rules: a module path, or a glob over module paths
    "*":
      compression: {choices: [none, hash]}
      hash_buckets: {choices: [0.05, 0.25], when: {compression: hash}}
    item_emb:
      compression: none
user:                           # passed to build, example and train as params[name]
  dim: {choices: [16, 32, 64]}
  lr: {low: 0.001, high: 0.1, log: true}
  batch_size: 64
metrics: [loss]                 # names report(...) may log besides quality
objectives: [quality, memory, throughput]
early_stop: {max_steps: 2000, eval_every: 200}   # optional: stop trials that cannot reach the front
trials: 20
```

Every value is fixed (a scalar or list) or searched (a mapping with `choices`, or `low` and
`high` with optional `log`, `step`, `type`, and `when` naming an earlier key of the same
section). A table's settings merge its matching rules in file order (later wins). Searched
values are Optuna params named by their place: `user.dim`, `embedding.precision`,
`embedding.tables.<rule>.compression`.

What a trial's functions receive (`params`): the `user:` values by name, and under
`params["embedding"]` the embedding settings chosen (config-wide keys, and `tables`: rule ->
settings). `early_stop` turns on the search's early stopping (`search.early_stop`): the
loop's most steps and its steps between reports, which project a running trial's quality.
Loading validates everything with one-line errors naming the file and key.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autoembed.config import TABLE_OVERRIDES, EmbeddingConfig, config_from_dict, safe_load_yaml
from autoembed.errors import ConfigError, did_you_mean
from autoembed.rules import is_number
from autoembed.space import DEFAULT_TRIALS, Objective, Param, parse_objectives

__all__ = ["UserSpace", "TableRule", "load_user_space", "parse_user_space", "SPACE_KEYS",
           "EMBEDDING_KEYS", "TABLE_KEYS", "EMBEDDING"]

SPACE_KEYS = ("description", "embedding", "user", "metrics", "objectives", "target", "trials",
              "early_stop")
EARLY_STOP_KEYS = ("max_steps", "eval_every")
# Config-wide settings autoembed applies to a user's model (the rest describe its own models).
EMBEDDING_KEYS = ("precision", "serving", "table_optimizer", "dense_optimizer", "compression",
                  "hash_buckets", "hash_seed", "qr_collisions", "qr_operation",
                  "mixed_dim_alpha", "mixed_dim_min", "lr", "dense_lr", "adam_eps", "momentum",
                  "weight_decay")
# Built-in model settings a user's model does not take, and what to do instead.
NOT_FOR_USER_MODELS = {
    "checkpointing": "name the modules to checkpoint in your code: "
                     "autoembed.apply(model, config, checkpoint=[...])",
    **{k: "host_cached is not searched over your model (a trial's loop builds its own "
          "optimizer, which the search cannot bind to a cache); keep your tables on the "
          "device, or apply host_cached yourself with autoembed.apply and "
          "autoembed.build_optimizer" for k in ("placement", "cache_load_factor",
                                                "cache_policy")},
}
# Settings one table may carry (its rows and dim come from the model).
TABLE_KEYS = TABLE_OVERRIDES
SPEC_KEYS = ("choices", "low", "high", "log", "step", "type", "when")
EMBEDDING = "embedding"  # params key holding the embedding settings (not a user name)


@dataclass(frozen=True)
class TableRule:
    """Settings for the embedding modules whose path matches `pattern` (exact or glob):
    setting -> qualified value name (a key of the space's values)."""

    pattern: str
    settings: Mapping[str, str]

    def matches(self, path: str) -> bool:
        return path == self.pattern or fnmatch.fnmatchcase(path, self.pattern)


@dataclass(frozen=True)
class UserSpace:
    """A validated user space. `fixed`: qualified name -> value; `params`: searched values
    (Param.name is the qualified name); `globals_`/`user`: the config-wide and user keys in
    file order, each mapped to its qualified name."""

    source: str
    params: tuple[Param, ...]
    fixed: Mapping[str, Any]
    globals_: Mapping[str, str]
    rules: tuple[TableRule, ...]
    user: Mapping[str, str]
    metrics: tuple[str, ...] = ()
    objectives: tuple[Objective, ...] = tuple(Objective(n, d) for n, d in (
        ("quality", "maximize"), ("memory", "minimize"), ("throughput", "maximize")))
    target: float | None = None
    trials: int = DEFAULT_TRIALS
    description: str = ""
    early_stop: tuple[int, int] | None = None  # (max_steps, eval_every); None: off
    text: str = field(default="", compare=False, repr=False)

    # ------------------------------------------------------------------ Optuna params
    def values_from_optuna(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """Qualified name -> value for a trial's stored Optuna params (inactive ones off)."""
        values: dict[str, Any] = dict(self.fixed)
        for p in self.params:
            if p.optuna_name in raw and p.active(values):
                values[p.name] = p.from_optuna(raw[p.optuna_name])
        return values

    def optuna_params(self, values: Mapping[str, Any]) -> dict[str, Any]:
        return {p.optuna_name: p.to_optuna(values[p.name]) for p in self.params
                if p.name in values}

    # ------------------------------------------------------------------ a trial's values
    def params_for(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """What build, example and train receive (see the module docstring)."""
        out = {k: values[q] for k, q in self.user.items() if q in values}
        emb: dict[str, Any] = {k: values[q] for k, q in self.globals_.items() if q in values}
        tables = {r.pattern: {k: values[q] for k, q in r.settings.items() if q in values}
                  for r in self.rules}
        if tables:
            emb["tables"] = tables
        out[EMBEDDING] = emb
        return out

    def config_for(self, values: Mapping[str, Any],
                   tables: Sequence[Mapping[str, Any]]) -> EmbeddingConfig:
        """The embedding config for the built model's `tables` (config table entries:
        name = module path, vocab_size, ...): config-wide values, and each table's matching
        rules merged in file order. ConfigError when a rule matches no table."""
        names = [str(t["name"]) for t in tables]
        for r in self.rules:
            if not any(r.matches(n) for n in names):
                hint = did_you_mean(r.pattern, names)
                raise ConfigError(
                    f"user space '{self.source}': embedding.tables '{r.pattern}' names no "
                    f"embedding module of the built model{hint}; its embedding modules: "
                    f"{', '.join(names) or 'none'}")
        rows = []
        for t in tables:
            row = dict(t)
            for r in self.rules:
                if r.matches(row["name"]):
                    row.update({k: values[q] for k, q in r.settings.items() if q in values})
            rows.append(row)
        raw = {k: values[q] for k, q in self.globals_.items() if q in values}
        return config_from_dict({**raw, "tables": rows}, f"user space '{self.source}'")

    def describe(self, values: Mapping[str, Any]) -> str:
        return ", ".join(f"{p.name}={values[p.name]}" for p in self.params if p.name in values)


# ===================================================================== loading


def load_user_space(path: str | Path) -> UserSpace:
    """Read and validate a user space YAML file."""
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise ConfigError(f"space file '{p}' does not exist; give the YAML file with "
                          "`embedding:` and `user:` sections") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"space file '{p}' cannot be read: {e}") from None
    raw = safe_load_yaml(text, f"search space '{p}'", "search space")
    return parse_user_space(raw, str(p), text)


def _fail(source: str, key: str, value: Any, rule: str) -> ConfigError:
    return ConfigError(f"user space '{source}': key '{key}' = {value!r}: {rule}")


def _unknown(source: str, key: str, valid: Sequence[str]) -> ConfigError:
    last = key.rsplit(".", 1)[-1]
    return ConfigError(f"user space '{source}': unknown key '{key}'"
                       f"{did_you_mean(last, valid)}; valid: "
                       f"{', '.join(valid)}")


def _mapping(source: str, key: str, raw: Any) -> Mapping[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise _fail(source, key, raw, "must be a mapping")
    for k in raw:
        if not isinstance(k, str) or not k:
            raise _fail(source, f"{key}.{k}", raw[k], "keys must be non-empty strings")
    return raw


class _Builder:
    """Collects params and fixed values section by section while validating."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.params: list[Param] = []
        self.fixed: dict[str, Any] = {}

    def section(self, prefix: str, raw: Mapping[str, Any],
                check: Any = None) -> dict[str, str]:
        """Each key of `raw` as a fixed value or a Param named `prefix.key`; `check(key, value,
        where)` validates each value (a fixed one or every choice and range end)."""
        names: dict[str, str] = {}
        for k, spec in raw.items():
            q = f"{prefix}.{k}"
            if isinstance(spec, Mapping):
                param = self._param(q, spec, prefix, names)
                for v in (param.choices if param.kind == "categorical"
                          else (param.low, param.high)):
                    if check is not None:
                        check(k, v, q)
                self.params.append(param)
            else:
                if check is not None:
                    check(k, spec, q)
                self.fixed[q] = tuple(spec) if isinstance(spec, list) else spec
            names[k] = q
        return names

    def _param(self, q: str, spec: Mapping[str, Any], prefix: str,
               earlier: Mapping[str, str]) -> Param:
        src = self.source
        for k in spec:
            if k not in SPEC_KEYS:
                raise _unknown(src, f"{q}.{k}", SPEC_KEYS)
        when = self._when(q, spec.get("when"), prefix, earlier)
        if "choices" in spec:
            extra = [k for k in ("low", "high", "log", "step", "type") if k in spec]
            if extra:
                raise _fail(src, f"{q}.{extra[0]}", spec[extra[0]],
                            "give either `choices` or a `low`/`high` range, not both")
            choices = spec["choices"]
            if not isinstance(choices, list) or not choices:
                raise _fail(src, f"{q}.choices", choices, "must be a non-empty list")
            values = tuple(tuple(c) if isinstance(c, list) else c for c in choices)
            if any(isinstance(c, Mapping) for c in values) or len(
                    {repr(c) for c in values}) != len(values):
                raise _fail(src, f"{q}.choices", choices,
                            "must be distinct scalars or lists of scalars")
            return Param(q, "categorical", choices=values, when=when)
        if "low" not in spec or "high" not in spec:
            raise _fail(src, q, dict(spec), "needs `choices`, or both `low` and `high`")
        low, high = spec["low"], spec["high"]
        ints = all(isinstance(v, int) and not isinstance(v, bool) for v in (low, high))
        kind = spec.get("type", "int" if ints else "float")
        if kind not in ("int", "float"):
            raise _fail(src, f"{q}.type", kind, "must be int or float")
        for k, v in (("low", low), ("high", high)):
            if not is_number(v) or (kind == "int" and not isinstance(v, int)):
                what = "an integer" if kind == "int" else "a number"
                raise _fail(src, f"{q}.{k}", v, f"must be {what}")
        if low > high:
            raise _fail(src, q, f"low={low}, high={high}", "empty range: low must be <= high")
        log = spec.get("log", False)
        if not isinstance(log, bool):
            raise _fail(src, f"{q}.log", log, "must be true or false")
        if log and low <= 0:
            raise _fail(src, f"{q}.low", low, "a log-scale range needs low > 0")
        step = spec.get("step")
        int_step = isinstance(step, int) and not isinstance(step, bool)
        if step is not None and (not (int_step or isinstance(step, float)) or step <= 0
                                 or log or (kind == "int" and not int_step)):
            raise _fail(src, f"{q}.step", step, "must be a positive number, without log")
        return Param(q, kind, low=low, high=high, log=log, step=step, when=when)

    def _when(self, q: str, raw: Any, prefix: str,
              earlier: Mapping[str, str]) -> tuple[tuple[str, tuple[Any, ...]], ...]:
        if raw is None:
            return ()
        if not isinstance(raw, Mapping) or not raw:
            raise _fail(self.source, f"{q}.when", raw, "must map an earlier key to its value(s)")
        out = []
        for ref, allowed in raw.items():
            if ref not in earlier:
                raise _fail(self.source, f"{q}.when.{ref}", allowed,
                            f"a condition must name a key listed above it in '{prefix}'")
            out.append((earlier[ref], tuple(allowed) if isinstance(allowed, list) else (allowed,)))
        return tuple(out)


def _config_check(source: str, table: bool) -> Any:
    """A value check that builds a config holding the value: an error naming the key is the
    space's error (errors about other keys belong to combinations, checked per proposal)."""
    def check(key: str, value: Any, where: str) -> None:
        raw: dict[str, Any] = {key: list(value) if isinstance(value, tuple) else value}
        name = f"tables[0].{key}" if table else key
        if table:
            raw = {"tables": [{"name": "t", "vocab_size": 1000, **raw}]}
        try:
            config_from_dict(raw, "probe")
        except ConfigError as e:
            text = str(e).removeprefix("probe: ")
            if f"'{name}'" in text:
                rule = text.removeprefix(f"config key '{name}' = {value!r}: ")
                raise _fail(source, where, value, rule) from None
    return check


def parse_user_space(raw: Any, source: str, text: str = "") -> UserSpace:
    """Validate plain data (a parsed YAML document) into a UserSpace."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"user space '{source}': expected a mapping with keys "
                          f"{', '.join(SPACE_KEYS)}, got {type(raw).__name__}")
    for k in raw:
        if k not in SPACE_KEYS:
            raise _unknown(source, str(k), SPACE_KEYS)
    b = _Builder(source)
    emb = dict(_mapping(source, "embedding", raw.get("embedding")))
    tables = _mapping(source, "embedding.tables", emb.pop("tables", None))
    for k in emb:
        if k in NOT_FOR_USER_MODELS:
            raise _fail(source, f"embedding.{k}", emb[k], NOT_FOR_USER_MODELS[k])
        if k not in EMBEDDING_KEYS:
            raise _unknown(source, f"embedding.{k}", (*EMBEDDING_KEYS, "tables"))
    globals_ = b.section("embedding", emb, _config_check(source, table=False))
    rules = []
    for pattern, settings in tables.items():
        where = f"embedding.tables.{pattern}"
        settings = _mapping(source, where, settings)
        if not settings:
            raise _fail(source, where, settings, f"give settings: {', '.join(TABLE_KEYS)}")
        for k in settings:
            if k not in TABLE_KEYS:
                raise _unknown(source, f"{where}.{k}", TABLE_KEYS)
        rules.append(TableRule(pattern, b.section(where, settings,
                                                  _config_check(source, table=True))))
    user_raw = _mapping(source, "user", raw.get("user"))
    for k in user_raw:
        if k == EMBEDDING or k in emb:
            raise _fail(source, f"user.{k}", user_raw[k], f"'{k}' is an embedding setting; "
                        "keep it under `embedding:` only")
    user = b.section("user", user_raw)
    if not b.params:
        raise ConfigError(f"user space '{source}': nothing is searched; give at least one "
                          "value as `choices: [...]` or a `low`/`high` range")
    metrics = _metrics(source, raw.get("metrics"))
    objectives = (parse_objectives(raw["objectives"], source) if "objectives" in raw
                  else UserSpace.objectives)
    target = raw.get("target")
    if target is not None and not is_number(target):
        raise _fail(source, "target", target, "must be a quality (a number) or null")
    trials = raw.get("trials", DEFAULT_TRIALS)
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise _fail(source, "trials", trials, "must be an integer >= 1")
    desc = raw.get("description", "") or ""
    if not isinstance(desc, str):
        raise _fail(source, "description", desc, "must be a string")
    return UserSpace(source=source, params=tuple(b.params), fixed=b.fixed, globals_=globals_,
                     rules=tuple(rules), user=user, metrics=metrics, objectives=objectives,
                     target=None if target is None else float(target), trials=trials,
                     description=desc, early_stop=_early_stop(source, raw.get("early_stop")),
                     text=text)


def _early_stop(source: str, raw: Any) -> tuple[int, int] | None:
    """`early_stop: {max_steps: N, eval_every: M}` -> (N, M); absent -> None (off)."""
    if raw is None:
        return None
    spec = _mapping(source, "early_stop", raw)
    for k in spec:
        if k not in EARLY_STOP_KEYS:
            raise _unknown(source, f"early_stop.{k}", EARLY_STOP_KEYS)
    got = []
    for k in EARLY_STOP_KEYS:
        v = spec.get(k)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise _fail(source, f"early_stop.{k}", v, "must be an integer >= 1 (the loop's "
                        "most steps, and its steps between reports)")
        got.append(v)
    return got[0], got[1]


def _metrics(source: str, raw: Any) -> tuple[str, ...]:
    from autoembed.user.report import MEASURED_BY_AUTOEMBED

    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(m, str) and m.isidentifier()
                                            for m in raw):
        raise _fail(source, "metrics", raw, "must be a list of metric names (identifiers)")
    for m in raw:
        if m == "quality" or m in MEASURED_BY_AUTOEMBED:
            raise _fail(source, "metrics", m, "is reported or measured already; list only "
                        "extra names the loop passes to report(...)")
    return tuple(dict.fromkeys(raw))
