"""The search-space model: which config fields a search varies (`Param`), over which values,
on which data (`SearchSpace`), and the sampler-neutral naming of each param (``dim/8`` for a
``multiple_of: 8`` range). No Optuna here: `autoembed.pipeline.optuna_space` maps a space onto
Optuna's distributions and trials."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from autoembed.config import FIELD_RULES, TABLE_OVERRIDES, EmbeddingConfig, config_from_dict
from autoembed.config.user import selects
from autoembed.errors import ConfigError
from autoembed.rules import Integer, Interval, Rule
from autoembed.space.objectives import DEFAULT_OBJECTIVES, OBJECTIVES, Objective

__all__ = ["SPACE_KEYS", "SEARCHABLE", "Param", "StandIn", "TableRule", "apply_table_rules",
           "table_param_name", "table_rules_of", "with_table_rules", "SearchSpace", "when_label",
           "builtin_space_path", "BUILTIN_SPACES"]

SPACE_KEYS = ("description", "data", "stand_in", "base", "tables", "params", "objectives",
              "target", "run", "trials", "trial_time_limit")
PARAM_KEYS = ("choices", "type", "low", "high", "log", "step", "multiple_of", "when", "grid")
RUN_KEYS = ("max_steps", "max_seconds", "epochs", "eval_every", "eval_batches", "test_batches",
            "warmup_steps", "measure_latency")
STAND_IN_KEYS = ("vocab_scale", "rows")
DEFAULT_TRIALS = 20  # trained trials when neither the space nor the caller says
# seconds a trial may run before it is ended as `timeout` (pipeline.time_limit); 30 days at most
TRIAL_TIME_LIMIT = Interval(0, 30 * 86400, open_low=True)
GRID_POINTS = 3  # points per numeric range in the grid sampler's grid (low, middle, high)

# Fields the data decide (resolution writes them): never searched, never in `base`. (Text's
# seq_len is searchable: documents are truncated or padded to it; runner.resolve_for_data.)
DATA_FIELDS = ("task", "tables", "num_classes", "data")
LIST_FIELDS = ("dense_layers",)
# Params that are no config field: tokens_per_batch is batch_size x seq_len (text), searched
# with seq_len (its split); batch_size = tokens_per_batch // seq_len (`config_for`).
TOKENS_PER_BATCH = "tokens_per_batch"
DERIVED_RULES: dict[str, Rule] = {TOKENS_PER_BATCH: Integer(1)}
PARAM_RULES: dict[str, Rule] = {**FIELD_RULES, **DERIVED_RULES}
# Searchable: every config field with a declared rule (config.FIELD_RULES), and the lists.
SEARCHABLE = tuple(sorted({*(k for k in FIELD_RULES if k not in DATA_FIELDS), *LIST_FIELDS,
                           *DERIVED_RULES}))
# Numeric fields that do not change memory: the cheapest corner takes their low end only.
MEMORY_NEUTRAL = ("lr", "dense_lr", "adam_eps", "momentum", "weight_decay", "warmup_steps",
                   "hash_seed", "seed")

# Keys a space's `tables` entry may set on the tables it selects.
TABLE_SETTING_KEYS = (*TABLE_OVERRIDES, "dim")

BUILTIN_SPACES = ("default", "ctr", "text", "tiny", "host_cache")

# A space over the user's own model (`SearchSpace.kind` "user"): its top-level keys, the
# config-wide settings `embedding:` may hold (the rest describe autoembed's own models), the
# settings one of its tables may carry (rows and dim are the module's own), and the built-in
# model settings a user's model would silently ignore, with what to do instead.
USER_SPACE_KEYS = ("description", "embedding", "user", "metrics", "objectives", "target",
                   "trials", "early_stop", "topology", "trial_time_limit")
USER_SECTIONS = ("embedding", "user")
EMBEDDING_KEYS = ("precision", "serving", "table_optimizer", "dense_optimizer", "compression",
                  "hash_buckets", "hash_seed", "qr_collisions", "qr_operation",
                  "mixed_dim_alpha", "mixed_dim_min", "lr", "dense_lr", "adam_eps", "momentum",
                  "weight_decay", "warmup_steps")
USER_TABLE_KEYS = TABLE_OVERRIDES
EARLY_STOP_KEYS = ("max_steps", "eval_every")
# A space over a TorchRec model (`topology:`, the machines it is planned for): its tables take
# TorchRec's knobs (`autoembed.torchrec.settings.TABLE_KEYS`), and `embedding:` besides them
# the fused table optimizer's learning rate and the dense optimizer the loop steps (priced)
TOPOLOGY = "topology"
TORCHREC_EMBEDDING_KEYS = ("lr", "dense_optimizer")
NOT_FOR_USER_MODELS = {
    "checkpointing": "name the modules to checkpoint in your code: "
                     "autoembed.apply(model, config, checkpoint=[...])",
    **{k: "host_cached is not searched over your model (a trial's loop builds its own "
          "optimizer, which the search cannot bind to a cache); keep your tables on the "
          "device, or apply host_cached yourself with autoembed.apply and "
          "autoembed.build_optimizer" for k in ("placement", "cache_load_factor",
                                                "cache_policy")},
}
EMBEDDING = "embedding"  # the params key holding the embedding settings (not a user name)


def builtin_space_path(name: str) -> Path:
    """The packaged copy of a built-in space (`autoembed/search_spaces/<name>.yaml`)."""
    return Path(__file__).resolve().parents[1] / "search_spaces" / f"{name}.yaml"


# ===================================================================== value types


@dataclass(frozen=True)
class StandIn:
    """Train on a scaled-down copy of synthetic data while pricing the full-size tables.

    vocab_scale: every vocabulary (and `hash_buckets`) is multiplied by this and rounded,
        at least 1 (2 for text, whose id 0 is padding); compression ratios stay the same.
    rows: rows per split (train, valid, test) of the training copy; None keeps the data's.
    """

    vocab_scale: float
    rows: tuple[int, int, int] | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"vocab_scale": self.vocab_scale}
        if self.rows is not None:
            d["rows"] = list(self.rows)
        return d


@dataclass(frozen=True)
class Param:
    """One searched config field.

    Categorical: `choices` (Optuna sees labels; lists such as dense_layers become "256,64").
    Numeric: `kind` "int" or "float" over [low, high], `log` scale, `step`, and for ints
    `multiple_of`: Optuna then searches `name/m` over [ceil(low/m), floor(high/m)] and the
    config gets m times the value (tensor cores want dims that are multiples of 8).
    `when`: {param: allowed values} that must all hold for the param to be suggested.
    """

    name: str
    kind: str  # "categorical", "int" or "float"
    choices: tuple[Any, ...] = ()
    low: float = 0.0
    high: float = 0.0
    log: bool = False
    step: float | None = None
    multiple_of: int | None = None
    when: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    grid: tuple[Any, ...] = ()

    @property
    def optuna_name(self) -> str:
        return f"{self.name}/{self.multiple_of}" if self.multiple_of else self.name

    @property
    def labels(self) -> tuple[Any, ...]:
        return tuple(_label(c) for c in self.choices)

    def active(self, values: Mapping[str, Any]) -> bool:
        """Whether the condition holds given the config values chosen so far."""
        return all(name in values and when_label(values[name]) in allowed
                   for name, allowed in self.when)

    def int_bounds(self) -> tuple[int, int]:
        """The integer range the sampler searches (in units of `multiple_of`)."""
        m = self.multiple_of or 1
        return math.ceil(self.low / m), math.floor(self.high / m)

    def from_optuna(self, raw: Any) -> Any:
        """The config value for the value Optuna holds."""
        if self.kind == "categorical":
            return self.choices[self.labels.index(raw)]
        if self.kind == "int":
            return int(raw) * (self.multiple_of or 1)
        return float(raw)

    def to_optuna(self, value: Any) -> Any:
        if self.kind == "categorical":
            return _label(value)
        if self.kind == "int":
            return int(value) // (self.multiple_of or 1)
        return float(value)

    def grid_values(self) -> tuple[Any, ...]:
        """Values the grid sampler visits: choices, `grid`, or GRID_POINTS across the range."""
        if self.kind == "categorical":
            return self.choices
        if self.grid:
            return tuple(sorted({self.on_step(g) for g in self.grid}))
        if self.kind == "int":
            lo, hi = self.int_bounds()
            pts = _spread(lo, hi, self.log, GRID_POINTS)
            units = sorted({self.on_step(min(hi, max(lo, round(p)))) for p in pts})
            return tuple(u * (self.multiple_of or 1) for u in units)
        pts = _spread(self.low, self.high, self.log, GRID_POINTS)
        return tuple(sorted({self.on_step(p) for p in pts}))

    def on_step(self, value: Any) -> Any:
        """`value` (an int range's in units of `multiple_of`) moved to the nearest point
        of the range's `step` (a log range has none): low + k * step, k whole."""
        if not self.step or self.log:
            return value
        if self.kind == "int":
            lo = self.int_bounds()[0]
            return lo + round((value - lo) / self.step) * int(self.step)
        # as Optuna computes a stepped float (k * step + low, in [low, high]), so a grid
        # point and the same value proposed by a sampler are one config
        k = round((value - self.low) / self.step)
        return min(max(k * self.step + self.low, self.low), self.high)

    def corner_values(self) -> tuple[Any, ...]:
        """Values the cheapest-corner search tries: every choice, or the range's ends."""
        if self.kind == "categorical":
            return self.choices
        ends = self.grid_values()
        if self.name in MEMORY_NEUTRAL:
            return ends[:1]
        return tuple(dict.fromkeys((ends[0], ends[-1])))

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {}
        if self.kind == "categorical":
            d["choices"] = [list(c) if isinstance(c, tuple) else c for c in self.choices]
        else:
            d.update(type=self.kind, low=self.low, high=self.high, log=self.log)
            if self.step is not None:
                d["step"] = self.step
            if self.multiple_of is not None:
                d["multiple_of"] = self.multiple_of
        if self.when:
            d["when"] = {k: list(v) for k, v in self.when}
        return d


def _label(value: Any) -> Any:
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value) or "none"
    return value


def when_label(value: Any) -> Any:
    """How a `when` condition holds a value: a list (dense_layers' [32, 16], as a proposal
    holds it or `base` gives it) by its label ("32,16"), any other value as it is."""
    return _label(tuple(value) if isinstance(value, list) else value)


def _spread(lo: float, hi: float, log: bool, n: int) -> list[float]:
    if hi <= lo or n <= 1:
        return [lo]
    if log:
        a, b = math.log(lo), math.log(hi)
        pts = [math.exp(a + (b - a) * i / (n - 1)) for i in range(n)]
    else:
        pts = [lo + (hi - lo) * i / (n - 1) for i in range(n)]
    # 6 significant digits (no 0.0020000000000000005), kept inside [lo, hi]
    return [min(hi, max(lo, float(f"{p:.6g}"))) for p in pts]


@dataclass(frozen=True)
class TableRule:
    """Per-table settings of a space: for the table called `name`, for every table whose name
    matches the glob `pattern` (a user space's `embedding.tables`, keyed by module path), or for
    every table of at least `min_rows` rows, the table keys in `settings` (e.g. compression
    hash, hash_buckets 0.01: a share of that table's rows).

    `searched`: table key -> the name of the `Param` that searches it (``tables[i].<key>``,
    ``embedding.tables.<pattern>.<key>``; ``min_rows`` may be searched too); `with_values`
    writes a proposal's values in."""

    name: str | None
    min_rows: int | None
    settings: Mapping[str, Any]
    searched: Mapping[str, str] = field(default_factory=dict)
    pattern: str | None = None

    def selects(self, name: str, rows: int) -> bool:
        if self.pattern is not None:
            return selects(self.pattern, name)
        if self.name is not None:
            return name == self.name
        return self.min_rows is not None and rows >= self.min_rows

    def with_values(self, values: Mapping[str, Any]) -> TableRule:
        """The rule with the searched keys set from `values` (an inactive one is left out)."""
        got = {k: values[p] for k, p in self.searched.items() if p in values}
        min_rows = got.pop("min_rows", self.min_rows)
        return replace(self, min_rows=min_rows, settings={**self.settings, **got}, searched={})

    @property
    def label(self) -> str:
        """How the space names the rule: its pattern, name or row threshold."""
        return self.pattern or self.name or f"min_rows {self.min_rows}"

    def to_dict(self) -> dict[str, Any]:
        sel = {"name": self.name} if self.name is not None else {"min_rows": self.min_rows}
        return {**sel, **self.settings}


def table_param_name(index: int, key: str) -> str:
    """The name of the param searching key `key` of the space's `tables[index]`."""
    return f"tables[{index}].{key}"


_RULES_ATTR = "_space_table_rules"


def with_table_rules(config: EmbeddingConfig, rules: tuple[TableRule, ...]) -> EmbeddingConfig:
    """`config` carrying a proposal's table rules (searched values written in) to the
    workload, which applies them against the data's tables (`table_rules_of`)."""
    object.__setattr__(config, _RULES_ATTR, rules)
    return config


def table_rules_of(
    config: EmbeddingConfig, default: tuple[TableRule, ...]
) -> tuple[TableRule, ...]:
    """The table rules `config` carries from `SearchSpace.config_for`, else `default`."""
    rules: tuple[TableRule, ...] | None = config.__dict__.get(_RULES_ATTR)
    return default if rules is None else rules


def apply_table_rules(
    rules: tuple[TableRule, ...], config: EmbeddingConfig
) -> EmbeddingConfig:
    """`config` (with the data's tables) with a space's per-table settings written into the
    tables they select, a later entry over an earlier one; a table's own setting in the
    config wins over both."""
    if not rules:
        return config
    tables = []
    for t in config.tables:
        settings: dict[str, Any] = {}
        for rule in rules:
            if rule.selects(t.name, t.vocab_size):
                settings.update(rule.settings)
        own = {**t.overrides, **({"dim": t.dim} if t.dim is not None else {})}
        tables.append(replace(t, **{**settings, **own}))
    return replace(config, tables=tuple(tables))


@dataclass(frozen=True)
class SearchSpace:
    """A validated search space; `text` is the file as read (stored with a study).

    `kind` "builtin": autoembed's own models on `data` (`base`: fixed config fields, params
    named by config field). `kind` "user": a search over the user's own model, from a file
    with `embedding:` (applied by autoembed to the built model) and `user:` (passed to the
    user's functions) sections; `base` holds the fixed values and params are named by their
    place (`embedding.precision`, `user.dim`, `embedding.tables.<pattern>.<key>`);
    `sections` maps each section's keys to those names; `metrics` are what the user's loop
    may report besides quality; `early_stop` its (max_steps, eval_every), None: off;
    `topology` (a TorchRec model's space): the ranks a trial runs as and their memory
    (`autoembed.torchrec.settings.TOPOLOGY_KEYS`, fixed values), None for any other model."""

    source: str
    params: tuple[Param, ...]
    kind: str = "builtin"
    sections: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    metrics: tuple[str, ...] = ()
    early_stop: tuple[int, int] | None = None
    topology: Mapping[str, Any] | None = None
    data: Mapping[str, Any] = field(default_factory=lambda: {"name": "synthetic-ctr"})
    stand_in: StandIn | None = None
    base: Mapping[str, Any] = field(default_factory=dict)
    objectives: tuple[Objective, ...] = tuple(Objective(n, OBJECTIVES[n])
                                              for n in DEFAULT_OBJECTIVES)
    target: float | None = None
    run: Mapping[str, Any] = field(default_factory=dict)
    trials: int = DEFAULT_TRIALS
    description: str = ""
    tables: tuple[TableRule, ...] = ()
    trial_time_limit: float | None = None  # seconds (None: derived, pipeline.time_limit)
    text: str = field(default="", compare=False, repr=False)

    # ------------------------------------------------------------------ configs
    def base_config(self) -> EmbeddingConfig:
        return config_from_dict(dict(self.base), f"{self.source}: base")

    def config_for(self, values: Mapping[str, Any]) -> EmbeddingConfig:
        """The (unresolved) config for field -> value choices; ConfigError if invalid. It
        carries the proposal's table rules (`table_rules_of`): the data decide which tables
        they select, so the workload applies them."""
        table_keys = {p for r in self.tables for p in r.searched.values()}
        raw = {**self.base, **{k: v for k, v in values.items() if k not in table_keys}}
        tokens = raw.pop(TOKENS_PER_BATCH, None)
        if tokens is not None:  # the loader made sure seq_len is searched or in base
            raw["batch_size"] = max(1, int(tokens) // int(raw.get("seq_len", 1)))
        for k in LIST_FIELDS:
            if k in raw and isinstance(raw[k], tuple):
                raw[k] = list(raw[k])
        config = config_from_dict(raw, f"{self.source}: proposal")
        return with_table_rules(config, tuple(r.with_values(values) for r in self.tables))

    def values_from_optuna(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Config field -> value for a trial's Optuna params (inactive ones dropped)."""
        values: dict[str, Any] = dict(self.base)
        out: dict[str, Any] = {}
        for p in self.params:
            if p.optuna_name in params and p.active(values):
                out[p.name] = values[p.name] = p.from_optuna(params[p.optuna_name])
        return out

    def optuna_params(self, values: Mapping[str, Any]) -> dict[str, Any]:
        return {p.optuna_name: p.to_optuna(values[p.name]) for p in self.params
                if p.name in values}

    def grid(self, limit: int = 100_000) -> list[dict[str, Any]]:
        """Every distinct combination of `grid_values` (conditions respected), as Optuna
        params, in a fixed order."""
        return [self.optuna_params(v) for v in self._combinations(Param.grid_values, limit)]

    def _combinations(
        self, values_of: Callable[[Param], tuple[Any, ...]], limit: int
    ) -> Iterator[dict[str, Any]]:
        count = 0

        def walk(i: int, chosen: dict[str, Any]) -> Iterator[dict[str, Any]]:
            nonlocal count
            if i == len(self.params):
                count += 1
                if count > limit:
                    raise ConfigError(
                        f"{self.source}: the grid has more than {limit} points; give numeric "
                        "params fewer `grid` values or fewer choices"
                    )
                yield {k: v for k, v in chosen.items() if k not in self.base}
                return
            p = self.params[i]
            if not p.active(chosen):
                yield from walk(i + 1, chosen)
                return
            for v in values_of(p):
                yield from walk(i + 1, {**chosen, p.name: v})

        yield from walk(0, dict(self.base))

    def describe(self, values: Mapping[str, Any]) -> str:
        return ", ".join(f"{k}={_label(v)}" for k, v in values.items())

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"data": dict(self.data)}
        if self.stand_in is not None:
            d["stand_in"] = self.stand_in.to_dict()
        d["base"] = dict(self.base)
        by_name = {p.name: p for p in self.params}
        if self.tables:
            d["tables"] = [{**t.to_dict(), **{k: by_name[n].to_dict()
                                              for k, n in t.searched.items()}}
                           for t in self.tables]
        table_params = {n for t in self.tables for n in t.searched.values()}
        d["params"] = {p.name: p.to_dict() for p in self.params if p.name not in table_params}
        d["objectives"] = [o.to_dict() for o in self.objectives]
        d["target"] = self.target
        d["run"] = dict(self.run)
        d["trials"] = self.trials
        if self.trial_time_limit is not None:
            d["trial_time_limit"] = self.trial_time_limit
        return d
