"""Search spaces: a YAML file that says which `EmbeddingConfig` fields a search varies, over
which values, on which data, for which objectives.

Schema (README.md, "Search spaces"): top-level keys `data` (a DataSpec mapping), `stand_in`
(train on scaled-down synthetic tables while pricing the full ones), `base` (fixed config
fields), `params` (searched fields), `objectives`, `target`, `run` (RunSettings fields) and
`trials`. Loading validates everything; an error names the file, the key and the value.

Optuna is imported only by the functions that need it (`distributions`, `suggest`), so
loading a space stays light.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autoembed.config import (
    CACHE_POLICIES,
    COMPRESSIONS,
    INTERACTIONS,
    OPTIMIZERS,
    PLACEMENTS,
    POOLINGS,
    PRECISIONS,
    QR_OPERATIONS,
    SERVING,
    TABLE_ONLY_OPTIMIZERS,
    EmbeddingConfig,
    config_from_dict,
    safe_load_yaml,
)
from autoembed.errors import ConfigError

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution
    from optuna.trial import BaseTrial

__all__ = [
    "OBJECTIVES",
    "DEFAULT_OBJECTIVES",
    "SPACE_KEYS",
    "Objective",
    "Param",
    "StandIn",
    "SearchSpace",
    "load_space",
    "parse_space",
    "parse_objectives",
    "cheapest_config",
    "builtin_space_path",
    "BUILTIN_SPACES",
]

# Objective name -> the direction that makes sense for it (the only one accepted).
OBJECTIVES: dict[str, str] = {
    "quality": "maximize",  # AUC (ctr) or accuracy (text) on the test split
    "memory": "minimize",  # device_total in bytes (estimate, or measured on a GPU)
    "throughput": "maximize",  # training samples per second
    "latency": "minimize",  # p50 inference latency at batch 1, milliseconds
    "steps_to_target": "minimize",  # optimizer steps until validation quality >= target
}
DEFAULT_OBJECTIVES = ("quality", "memory", "throughput")
SPACE_KEYS = ("description", "data", "stand_in", "base", "params", "objectives", "target",
              "run", "trials")
PARAM_KEYS = ("choices", "type", "low", "high", "log", "step", "multiple_of", "when", "grid")
RUN_KEYS = ("max_steps", "max_seconds", "epochs", "eval_every", "eval_batches", "test_batches",
            "warmup_steps", "measure_latency")
STAND_IN_KEYS = ("vocab_scale", "rows")
DEFAULT_TRIALS = 20  # trained trials when neither the space nor the caller says
GRID_POINTS = 3  # points per numeric range in the grid sampler's grid (low, middle, high)
MAX_CHEAPEST_CORNERS = 20_000  # exhaustive corner search above this falls back to descent

# Fields the data decide (resolution writes them): never searched, never in `base`.
_DATA_FIELDS = ("task", "tables", "num_classes", "seq_len", "data")
_INT_FIELDS = {  # field -> smallest valid value (EmbeddingConfig.validate)
    "dim": 1, "hash_buckets": 1, "hash_seed": 0, "qr_collisions": 2, "mixed_dim_min": 1,
    "warmup_steps": 0, "batch_size": 1, "grad_accum_steps": 1, "seed": 0,
    "dynamic_rows": 0, "robe_block": 1, "tt_rank": 1,
}
_FLOAT_FIELDS = {  # field -> (low, high, low open)
    "mixed_dim_alpha": (0.0, 1.0, False), "lr": (0.0, 100.0, True),
    "dense_lr": (0.0, 100.0, True), "adam_eps": (0.0, 1.0, True),
    "momentum": (0.0, 1.0, False), "weight_decay": (0.0, 1.0, False),
    "cache_load_factor": (0.0, 1.0, True),
    "robe_size": (0.0, 1.0, True), "hot_share": (0.0, 1.0, True),  # robe: as a share here
}
_CHOICE_FIELDS: dict[str, tuple[Any, ...]] = {
    "compression": COMPRESSIONS, "qr_operation": QR_OPERATIONS, "precision": PRECISIONS,
    "serving": SERVING, "table_optimizer": OPTIMIZERS,
    "dense_optimizer": tuple(o for o in OPTIMIZERS if o not in TABLE_ONLY_OPTIMIZERS),
    "pooling": POOLINGS, "interaction": INTERACTIONS, "checkpointing": (True, False),
    "placement": PLACEMENTS, "cache_policy": CACHE_POLICIES,
    "wide": (True, False),
}
_LIST_FIELDS = ("dense_layers",)
SEARCHABLE = tuple(sorted({*_INT_FIELDS, *_FLOAT_FIELDS, *_CHOICE_FIELDS, *_LIST_FIELDS}))
# Numeric fields that do not change memory: the cheapest corner takes their low end only.
_MEMORY_NEUTRAL = ("lr", "dense_lr", "adam_eps", "momentum", "weight_decay", "warmup_steps",
                   "hash_seed", "seed")

BUILTIN_SPACES = ("default", "ctr", "text", "tiny", "host_cache")


def builtin_space_path(name: str) -> Path:
    """The packaged copy of a built-in space (`autoembed/search_spaces/<name>.yaml`)."""
    return Path(__file__).resolve().parent / "search_spaces" / f"{name}.yaml"


# ===================================================================== value types


@dataclass(frozen=True)
class Objective:
    """One objective: a metric name and its direction ("maximize" or "minimize")."""

    name: str
    direction: str

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "direction": self.direction}


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
        return all(name in values and values[name] in allowed for name, allowed in self.when)

    def distribution(self) -> BaseDistribution:
        from optuna.distributions import (
            CategoricalDistribution,
            FloatDistribution,
            IntDistribution,
        )

        if self.kind == "categorical":
            return CategoricalDistribution(self.labels)
        if self.kind == "int":
            lo, hi = self._int_bounds()
            step = int(self.step) if self.step and not self.log else 1
            return IntDistribution(lo, hi, log=self.log, step=step)
        return FloatDistribution(self.low, self.high, log=self.log,
                                 step=None if self.log else self.step)

    def _int_bounds(self) -> tuple[int, int]:
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

    def suggest(self, trial: BaseTrial) -> Any:
        n = self.optuna_name
        if self.kind == "categorical":
            return self.from_optuna(trial.suggest_categorical(n, self.labels))
        if self.kind == "int":
            lo, hi = self._int_bounds()
            step = int(self.step) if self.step and not self.log else 1
            return self.from_optuna(trial.suggest_int(n, lo, hi, step=step, log=self.log))
        return trial.suggest_float(n, self.low, self.high, log=self.log,
                                   step=None if self.log else self.step)

    def grid_values(self) -> tuple[Any, ...]:
        """Values the grid sampler visits: choices, `grid`, or GRID_POINTS across the range."""
        if self.kind == "categorical":
            return self.choices
        if self.grid:
            return self.grid
        if self.kind == "int":
            lo, hi = self._int_bounds()
            pts = _spread(lo, hi, self.log, GRID_POINTS)
            units = sorted({min(hi, max(lo, round(p))) for p in pts})
            return tuple(u * (self.multiple_of or 1) for u in units)
        return tuple(sorted(set(_spread(self.low, self.high, self.log, GRID_POINTS))))

    def corner_values(self) -> tuple[Any, ...]:
        """Values the cheapest-corner search tries: every choice, or the range's ends."""
        if self.kind == "categorical":
            return self.choices
        ends = self.grid_values()
        if self.name in _MEMORY_NEUTRAL:
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
class SearchSpace:
    """A validated search space; `text` is the file as read (stored with a study)."""

    source: str
    params: tuple[Param, ...]
    data: Mapping[str, Any] = field(default_factory=lambda: {"name": "synthetic-ctr"})
    stand_in: StandIn | None = None
    base: Mapping[str, Any] = field(default_factory=dict)
    objectives: tuple[Objective, ...] = tuple(Objective(n, OBJECTIVES[n])
                                              for n in DEFAULT_OBJECTIVES)
    target: float | None = None
    run: Mapping[str, Any] = field(default_factory=dict)
    trials: int = DEFAULT_TRIALS
    description: str = ""
    text: str = field(default="", compare=False, repr=False)

    # ------------------------------------------------------------------ configs
    def distributions(self) -> dict[str, BaseDistribution]:
        """Optuna name -> distribution of every param (conditional ones included)."""
        return {p.optuna_name: p.distribution() for p in self.params}

    def base_config(self) -> EmbeddingConfig:
        return config_from_dict(dict(self.base), f"{self.source}: base")

    def config_for(self, values: Mapping[str, Any]) -> EmbeddingConfig:
        """The (unresolved) config for field -> value choices; ConfigError if invalid."""
        raw = {**self.base, **values}
        for k in _LIST_FIELDS:
            if k in raw and isinstance(raw[k], tuple):
                raw[k] = list(raw[k])
        return config_from_dict(raw, f"{self.source}: proposal")

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

    def suggest_values(self, trial: BaseTrial) -> dict[str, Any]:
        """Ask `trial` for each param whose condition holds; field -> value."""
        values: dict[str, Any] = dict(self.base)
        out: dict[str, Any] = {}
        for p in self.params:
            if p.active(values):
                out[p.name] = values[p.name] = p.suggest(trial)
        return out

    def suggest(self, trial: BaseTrial) -> EmbeddingConfig:
        """The config `trial` proposes (unresolved: the data fill in tables)."""
        return self.config_for(self.suggest_values(trial))

    def grid(self, limit: int = 100_000) -> list[dict[str, Any]]:
        """Every distinct combination of `grid_values` (conditions respected), as Optuna
        params, in a fixed order."""
        out = [self.optuna_params(v) for v in self._combinations(Param.grid_values, limit)]
        return out

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
        d["params"] = {p.name: p.to_dict() for p in self.params}
        d["objectives"] = [o.to_dict() for o in self.objectives]
        d["target"] = self.target
        d["run"] = dict(self.run)
        d["trials"] = self.trials
        return d


def cheapest_config(
    space: SearchSpace, price: Callable[[EmbeddingConfig], int]
) -> tuple[dict[str, Any], EmbeddingConfig, int]:
    """The corner of the space with the smallest `price` (device bytes): field values, the
    config and its price.

    Every choice and both ends of each memory-relevant range (smallest dim, most
    compression, lowest precision, cheapest optimizer, smallest batch ...) are combined and
    priced (the analytic estimate takes well under a millisecond); above
    MAX_CHEAPEST_CORNERS corners, a coordinate descent from the low corner stands in.
    Invalid combinations are skipped. ConfigError when no combination is valid.
    """
    best: tuple[int, dict[str, Any], EmbeddingConfig] | None = None

    def consider(values: dict[str, Any]) -> int | None:
        nonlocal best
        try:
            cfg = space.config_for(values)
            cost = price(cfg)
        except ConfigError:
            return None
        if best is None or cost < best[0]:
            best = (cost, values, cfg)
        return cost

    corners = 1
    for p in space.params:
        corners *= len(p.corner_values())
    if corners <= MAX_CHEAPEST_CORNERS:
        for values in space._combinations(Param.corner_values, MAX_CHEAPEST_CORNERS):
            consider(values)
    else:
        current = {p.name: p.corner_values()[0] for p in space.params}
        for _ in range(3):  # passes of coordinate descent
            for p in space.params:
                for v in p.corner_values():
                    trial = {**current, p.name: v}
                    active = _active_only(space, trial)
                    consider(active)
                    if best is not None and best[1] == active:
                        current = trial
    if best is None:
        raise ConfigError(f"{space.source}: no combination of the params is a valid config")
    return best[1], best[2], best[0]


def _active_only(space: SearchSpace, values: Mapping[str, Any]) -> dict[str, Any]:
    chosen: dict[str, Any] = dict(space.base)
    out: dict[str, Any] = {}
    for p in space.params:
        if p.name in values and p.active(chosen):
            out[p.name] = chosen[p.name] = values[p.name]
    return out


# ===================================================================== loading


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


def _fail(source: str, key: str, value: Any, rule: str) -> ConfigError:
    return ConfigError(f"search space '{source}': key '{key}' = {value!r}: {rule}")


def _unknown(source: str, where: str, key: Any, valid: Sequence[str]) -> ConfigError:
    close = difflib.get_close_matches(str(key), list(valid), n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    prefix = f"{where}." if where else ""
    return ConfigError(
        f"search space '{source}': unknown key '{prefix}{key}'{hint}; valid: {', '.join(valid)}"
    )


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def parse_objectives(raw: Any, source: str) -> tuple[Objective, ...]:
    """Objectives from a list of names or {name, direction} mappings, or a comma string."""
    if isinstance(raw, str):
        raw = [s.strip() for s in raw.split(",") if s.strip()]
    if not isinstance(raw, list) or not raw:
        raise _fail(source, "objectives", raw, "must be a non-empty list of objective names")
    out: list[Objective] = []
    for i, item in enumerate(raw):
        key = f"objectives[{i}]"
        if isinstance(item, Mapping):
            bad = [k for k in item if k not in ("name", "direction")]
            if bad:
                raise _unknown(source, key, bad[0], ("name", "direction"))
            name, direction = item.get("name"), item.get("direction")
        else:
            name, direction = item, None
        if name not in OBJECTIVES:
            close = difflib.get_close_matches(str(name), list(OBJECTIVES), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise _fail(source, f"{key}.name", name,
                        f"unknown objective{hint}; use {', '.join(OBJECTIVES)}")
        natural = OBJECTIVES[name]
        if direction is not None and direction != natural:
            raise _fail(source, f"{key}.direction", direction,
                        f"objective '{name}' can only be '{natural}'")
        if any(o.name == name for o in out):
            raise _fail(source, key, name, "each objective may appear once")
        out.append(Objective(name, natural))
    return tuple(out)


def parse_space(raw: Any, source: str, text: str = "") -> SearchSpace:
    """Validate plain data (a parsed YAML document) into a SearchSpace."""
    if not isinstance(raw, Mapping):
        raise ConfigError(
            f"search space '{source}': expected a mapping with keys {', '.join(SPACE_KEYS)}, "
            f"got {type(raw).__name__}"
        )
    for k in raw:
        if k not in SPACE_KEYS:
            raise _unknown(source, "", k, SPACE_KEYS)
    data = _parse_data(raw.get("data", {"name": "synthetic-ctr"}), source)
    stand_in = _parse_stand_in(raw.get("stand_in"), data, source)
    base = _parse_base(raw.get("base", {}) or {}, source)
    params = _parse_params(raw.get("params"), base, source)
    objectives = (parse_objectives(raw["objectives"], source) if "objectives" in raw
                  else SearchSpace.objectives)
    target = raw.get("target")
    if target is not None and not (_is_number(target) and 0 < target <= 1):
        raise _fail(source, "target", target, "must be a quality in (0, 1] or null")
    run = _parse_run(raw.get("run", {}) or {}, source)
    trials = raw.get("trials", DEFAULT_TRIALS)
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise _fail(source, "trials", trials, "must be an integer >= 1")
    desc = raw.get("description", "") or ""
    if not isinstance(desc, str):
        raise _fail(source, "description", desc, "must be a string")
    space = SearchSpace(source=source, params=params, data=data, stand_in=stand_in, base=base,
                        objectives=objectives, target=float(target) if target else None,
                        run=run, trials=trials, description=desc, text=text)
    space.base_config()  # base alone must be a valid config
    return space


def _parse_data(raw: Any, source: str) -> dict[str, Any]:
    from autoembed.data.spec import DataSpec

    if not isinstance(raw, Mapping):
        raise _fail(source, "data", raw, "must be a data spec mapping (name and parameters)")
    DataSpec.from_dict(raw, f"search space '{source}': data")
    return dict(raw)


def _parse_stand_in(raw: Any, data: Mapping[str, Any], source: str) -> StandIn | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise _fail(source, "stand_in", raw, "must be a mapping with vocab_scale and rows")
    for k in raw:
        if k not in STAND_IN_KEYS:
            raise _unknown(source, "stand_in", k, STAND_IN_KEYS)
    if data.get("name", "synthetic-ctr") not in ("synthetic-ctr", "synthetic-text"):
        raise _fail(source, "stand_in", dict(raw),
                    "a stand-in scales synthetic data only; remove it for real or file data")
    scale = raw.get("vocab_scale", 1.0)
    if not _is_number(scale) or not 0 < scale <= 1:
        raise _fail(source, "stand_in.vocab_scale", scale, "must be a number in (0, 1]")
    rows = raw.get("rows")
    if rows is not None:
        ok = isinstance(rows, list) and len(rows) == 3 and all(
            isinstance(r, int) and not isinstance(r, bool) and r >= 1 for r in rows)
        if not ok:
            raise _fail(source, "stand_in.rows", rows,
                        "must be three row counts >= 1: train, valid, test")
        return StandIn(float(scale), (rows[0], rows[1], rows[2]))
    return StandIn(float(scale))


def _parse_base(raw: Any, source: str) -> dict[str, Any]:
    from dataclasses import fields

    if not isinstance(raw, Mapping):
        raise _fail(source, "base", raw, "must be a mapping of config fields")
    valid = tuple(sorted(f.name for f in fields(EmbeddingConfig) if f.name not in _DATA_FIELDS))
    for k in raw:
        if k in _DATA_FIELDS:
            raise _fail(source, f"base.{k}", raw[k],
                        "comes from the data (set `data` instead)")
        if k not in valid:
            raise _unknown(source, "base", k, valid)
    try:
        config_from_dict(dict(raw), f"search space '{source}': base")
    except ConfigError as e:
        raise ConfigError(str(e)) from None
    return dict(raw)


def _parse_run(raw: Any, source: str) -> dict[str, Any]:
    if not isinstance(raw, Mapping):
        raise _fail(source, "run", raw, "must be a mapping of run settings")
    for k in raw:
        if k not in RUN_KEYS:
            raise _unknown(source, "run", k, RUN_KEYS)
    from autoembed.runner import RunSettings

    for k, v in raw.items():
        if k == "measure_latency":
            if not isinstance(v, bool):
                raise _fail(source, f"run.{k}", v, "must be true or false")
        elif k == "max_seconds":
            if not _is_number(v):
                raise _fail(source, f"run.{k}", v, "must be a number of seconds")
        elif v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise _fail(source, f"run.{k}", v, "must be an integer")
    try:
        RunSettings(**dict(raw))
    except ConfigError as e:
        raise ConfigError(f"search space '{source}': run: {e}") from None
    return dict(raw)


def _parse_params(raw: Any, base: Mapping[str, Any], source: str) -> tuple[Param, ...]:
    if not isinstance(raw, Mapping) or not raw:
        raise _fail(source, "params", raw, "must map at least one config field to its values")
    params: list[Param] = []
    for name, spec in raw.items():
        key = f"params.{name}"
        if name in _DATA_FIELDS:
            raise _fail(source, key, spec, "comes from the data and cannot be searched")
        if name not in SEARCHABLE:
            close = difflib.get_close_matches(str(name), SEARCHABLE, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ConfigError(
                f"search space '{source}': unknown parameter name '{name}'{hint}; "
                f"searchable: {', '.join(SEARCHABLE)}"
            )
        if name in base:
            raise _fail(source, key, spec, f"'{name}' is also fixed in `base`; keep one")
        if not isinstance(spec, Mapping):
            raise _fail(source, key, spec, "must be a mapping with `choices` or `low`/`high`")
        for k in spec:
            if k not in PARAM_KEYS:
                raise _unknown(source, key, k, PARAM_KEYS)
        params.append(_parse_param(str(name), spec, params, base, source))
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
            raise _fail(source, f"{key}.{extra[0]}", spec[extra[0]],
                        "give either `choices` or a `low`/`high` range, not both")
        choices = spec["choices"]
        if not isinstance(choices, list) or not choices:
            raise _fail(source, f"{key}.choices", choices, "must be a non-empty list")
        values = tuple(_check_choice(name, c, f"{key}.choices", source) for c in choices)
        if len(set(map(_label, values))) != len(values):
            raise _fail(source, f"{key}.choices", choices, "must not repeat a value")
        return Param(name, "categorical", choices=values, when=when)
    if name in _CHOICE_FIELDS or name in _LIST_FIELDS:
        raise _fail(source, key, dict(spec), "is categorical: give `choices: [...]`")
    if "low" not in spec or "high" not in spec:
        raise _fail(source, key, dict(spec), "needs `choices` or both `low` and `high`")
    natural = "int" if name in _INT_FIELDS else "float"
    kind = spec.get("type", natural)
    if kind not in ("int", "float"):
        raise _fail(source, f"{key}.type", kind, "must be int or float")
    if kind != natural:
        raise _fail(source, f"{key}.type", kind, f"'{name}' is a{'n' * (natural == 'int')} "
                    f"{natural} field")
    low, high = spec["low"], spec["high"]
    for k, v in (("low", low), ("high", high)):
        if not _is_number(v) or (kind == "int" and not isinstance(v, int)):
            what = "an integer" if kind == "int" else "a number"
            raise _fail(source, f"{key}.{k}", v, f"must be {what}")
        _check_numeric(name, v, f"{key}.{k}", source)
    if low > high:
        raise _fail(source, key, f"low={low}, high={high}",
                    "empty range: low must be <= high")
    log = spec.get("log", False)
    if not isinstance(log, bool):
        raise _fail(source, f"{key}.log", log, "must be true or false")
    if log and low <= 0:
        raise _fail(source, f"{key}.low", low, "a log-scale range needs low > 0")
    step = spec.get("step")
    if step is not None:
        if not _is_number(step) or step <= 0 or (kind == "int" and not isinstance(step, int)):
            raise _fail(source, f"{key}.step", step, "must be a positive number")
        if log:
            raise _fail(source, f"{key}.step", step, "cannot be combined with log: true")
    mult = spec.get("multiple_of")
    if mult is not None:
        if kind != "int" or isinstance(mult, bool) or not isinstance(mult, int) or mult < 1:
            raise _fail(source, f"{key}.multiple_of", mult,
                        "must be an integer >= 1 on an int param")
        if step is not None:
            raise _fail(source, f"{key}.multiple_of", mult, "cannot be combined with step")
        if math.ceil(low / mult) > math.floor(high / mult):
            raise _fail(source, key, f"low={low}, high={high}, multiple_of={mult}",
                        "empty range: no multiple of it lies in [low, high]")
        if log and math.ceil(low / mult) < 1:
            raise _fail(source, f"{key}.low", low, "a log-scale range needs low >= multiple_of")
    grid = spec.get("grid")
    grid_t: tuple[Any, ...] = ()
    if grid is not None:
        if not isinstance(grid, list) or not grid:
            raise _fail(source, f"{key}.grid", grid, "must be a non-empty list of values")
        for g in grid:
            if not _is_number(g) or not low <= g <= high or (
                    kind == "int" and (not isinstance(g, int) or g % (mult or 1))):
                raise _fail(source, f"{key}.grid", g, f"must lie in [{low}, {high}]"
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
        raise _fail(source, f"{key}.when", raw, "must map a param name to its value(s)")
    known = {p.name: p for p in earlier}
    out = []
    for ref, allowed in raw.items():
        if ref not in known and ref not in base:
            raise _fail(source, f"{key}.when.{ref}", allowed,
                        "a condition must name a param listed above it (or a base field)")
        values = tuple(allowed) if isinstance(allowed, list) else (allowed,)
        if ref in known:
            p = known[ref]
            if p.kind == "categorical":
                for v in values:
                    if _label(v) not in p.labels:
                        raise _fail(source, f"{key}.when.{ref}", v,
                                    f"is not one of {ref}'s choices {list(p.labels)}")
        out.append((str(ref), values))
    return tuple(out)


def _check_choice(name: str, value: Any, key: str, source: str) -> Any:
    if name in _CHOICE_FIELDS:
        if value not in _CHOICE_FIELDS[name] or isinstance(value, bool) != isinstance(
                _CHOICE_FIELDS[name][0], bool):
            raise _fail(source, key, value,
                        f"must be one of {', '.join(map(str, _CHOICE_FIELDS[name]))}")
        return value
    if name in _LIST_FIELDS:
        if not isinstance(value, list) or not all(
                isinstance(w, int) and not isinstance(w, bool) and w >= 1 for w in value):
            raise _fail(source, key, value, "each choice must be a list of layer widths")
        return tuple(value)
    if name in _INT_FIELDS and (isinstance(value, bool) or not isinstance(value, int)):
        raise _fail(source, key, value, "must be an integer")
    if not _is_number(value):
        raise _fail(source, key, value, "must be a number")
    _check_numeric(name, value, key, source)
    return value


def _check_numeric(name: str, value: float, key: str, source: str) -> None:
    if name in _INT_FIELDS:
        if value < _INT_FIELDS[name]:
            raise _fail(source, key, value, f"must be >= {_INT_FIELDS[name]}")
        return
    lo, hi, open_low = _FLOAT_FIELDS[name]
    if (value <= lo if open_low else value < lo) or value > hi:
        raise _fail(source, key, value, f"must be in {'(' if open_low else '['}{lo}, {hi}]")


def product_size(space: SearchSpace) -> int:
    """Combinations of grid values (an upper bound: conditions only remove some)."""
    return math.prod(len(p.grid_values()) for p in space.params)
