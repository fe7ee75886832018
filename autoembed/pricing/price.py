"""`price(...)`: what `autoembed estimate` runs. A config given as a file and/or flags (the
seed workload's defaults filling what neither gives), or the user's own model (`--model`,
`--example`), priced for one training step and judged against the budgets. The CLI only
parses the options, calls `price` and prints the `Priced` it returns (`cli_render`).

Bad input is a ConfigError (exit 2), raised in the order the options are read: the
config-setting flags, the config, the budgets and sizes, then the model.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from autoembed.budget import Budget, format_bytes, parse_size, with_device_memory
from autoembed.config import (
    FIELD_ALIASES,
    FIELD_FLAGS,
    FIELD_RULES,
    EmbeddingConfig,
    TableConfig,
    check_model_rules,
    load_config,
)
from autoembed.errors import ConfigError
from autoembed.memory import MemoryEstimate
from autoembed.options import check_options
from autoembed.pricing.estimate_options import EstimateOptions
from autoembed.rules import Integer
from autoembed.trace import estimate as estimate_memory

__all__ = ["Priced", "price", "config_flags", "fields_of_flags", "build_config", "SEED_DEFAULTS"]

# The seed workload (the article's text model): V=1M tokens, D=300, batch 64, seq 512, Adam.
SEED_DEFAULTS: dict[str, Any] = {
    "task": "text",
    "vocab": "1000000",
    "dim": 300,
    "batch": 64,
    "seq": 512,
    "num_classes": 4,
    "dense_layers": "",
}
# `estimate` flags that are not config fields: they build the tables and the tower.
_SHAPE_FLAGS = ("vocab", "pooling_factor", "dense_layers")
# flags read as a count or a share of each table's rows
_COUNT_OR_SHARE = ("hash_buckets", "robe_size")
# flags that describe the user's own model too (the rest describe the built-in one)
_USER_FLAGS = ("precision", "optimizer")


@dataclass(frozen=True)
class Priced:
    """What `autoembed estimate` prints: the estimate, the config it priced (None: the
    user's own model), the budget it was judged against, and a note for stderr."""

    estimate: MemoryEstimate
    config: EmbeddingConfig | None
    budget: Budget | None
    note: str | None = None

    @property
    def user(self) -> bool:
        return self.config is None


# `autoembed estimate`'s options that print or plan ranks (the command reads them, not `price`)
_NOT_PRICED = ("as_json", "suggest", "world_size", "plan_device", "torchrec_tables")


def price(**options: Any) -> Priced:
    """Price what the options describe: `EstimateOptions`' fields by name (defaults as
    declared there), and the config-setting options (`config_flags`, None where not
    given); an option it does not read is a TypeError. With `model`, `example`,
    `apply_cfg` or `loss_spec` (the loss of a forward that returns logits,
    ``pkg.module:fn``) it is the user's model, and the built-in model's options are
    refused; `user_space` (``--space``): the search space whose reference values a
    ``build(params)`` receives."""
    flags = config_flags()
    own = {f.name for f in fields(EstimateOptions)} - flags - set(_NOT_PRICED)
    o = EstimateOptions(**{k: options.pop(k) for k in own & set(options)})
    check_options(o)
    unknown = set(options) - flags
    if unknown:
        raise TypeError(f"price() got options it does not know: {', '.join(sorted(unknown))}")
    given: dict[str, Any] = {k: _count_or_share(v, k) if k in _COUNT_OR_SHARE else v
                             for k, v in options.items()}
    user = any(v is not None for v in (o.model, o.example, o.apply_cfg, o.loss_spec,
                                       o.user_space))
    if not user and o.sharding != "table" and o.gpus == 1:  # else priced as on one GPU
        raise ConfigError(f"--sharding {o.sharding} spreads the tables over --gpus: give "
                          "--gpus N (N >= 2) with it, or drop it")
    with _named_by_flags(given, o.config is None):
        cfg = None if user else build_config(o.config, given)
    host = None if o.host_budget is None else Budget.for_host(o.host_budget)
    bud = with_device_memory(o.budget, o.device_memory)
    reserve_b = 0 if o.reserve.strip() in ("0", "") else parse_size(
        o.reserve, "--reserve", hint="use 0 (the default) or a size, e.g. 2GB")
    if cfg is None:  # your own model: autoembed.pricing.user_model_cli
        from autoembed.pricing.user_model_cli import estimate_for_cli

        refused = {k: v for k, v in given.items() if k not in _USER_FLAGS}
        refused.update(config=o.config, host_budget=o.host_budget,
                       gpus=None if o.gpus == 1 else o.gpus,
                       sharding=None if o.sharding == "table" else o.sharding)
        est = estimate_for_cli(o.model, o.example, o.apply_cfg,
                               optimizer=given.get("optimizer"),
                               precision=given.get("precision"), budget=bud, reserve=reserve_b,
                               refused=refused, loss=o.loss_spec, space=o.user_space)
    else:
        with _named_by_flags(given, o.config is None):
            est = estimate_memory(cfg, method=o.method, budget=bud, gpus=o.gpus,
                                  sharding=o.sharding, reserve=reserve_b, host_budget=host)
    _check_host_budget(est, o.host_budget)
    note = est.notes[-1] if cfg is not None and est.method != o.method else None
    return Priced(est, cfg, bud, note)


def config_flags() -> set[str]:
    """Every `estimate` flag that sets the config: the fields' names, their CLI spellings
    (`config.FIELD_FLAGS`), the aliases that set several (`--optimizer`) and the shape."""
    return {*FIELD_RULES, *FIELD_FLAGS, *FIELD_ALIASES, *_SHAPE_FLAGS}


def fields_of_flags(given: Mapping[str, Any]) -> dict[str, Any]:
    """Config field -> value for the given flags (`_set_by`)."""
    return {name: value for name, (_, value) in _set_by(given).items()}


def _set_by(given: Mapping[str, Any]) -> dict[str, tuple[str, Any]]:
    """Config field -> (the flag that sets it, value), read from the config's declared
    flags: an alias first (`--optimizer` sets both optimizers), then the fields named
    directly."""
    kw: dict[str, tuple[str, Any]] = {}
    for flag, expand in FIELD_ALIASES.items():
        if flag in given:
            kw.update((name, (flag, v)) for name, v in expand(given[flag]).items())
    for flag, value in given.items():
        name = FIELD_FLAGS.get(flag, flag)
        if name in FIELD_RULES and flag not in FIELD_ALIASES:
            kw[name] = (flag, value)
    return kw


# the keys `_SHAPE_FLAGS` set: (a table's key?, key) -> flag
_SHAPE_KEYS = {(True, "vocab_size"): "vocab", (True, "pooling_factor"): "pooling_factor",
               (False, "dense_layers"): "dense_layers"}
_KEY = re.compile(r"config key '(tables\[\d+\]\.)?(\w+)' = ")
# each config key `estimate` has a flag for -> that flag (`--batch` sets batch_size)
_KEY_FLAGS = {key: flag for flag, key in FIELD_FLAGS.items()}
_FLAG_OF_KEY = {k: f for k in FIELD_RULES if (f := _KEY_FLAGS.get(k, k))
                in {o.name for o in fields(EstimateOptions)}}
# a key only an alias sets is named by it (table_optimizer: --optimizer)
_FLAG_OF_KEY.update({k: flag for flag, expand in FIELD_ALIASES.items()
                     for k in expand("") if k not in _FLAG_OF_KEY})


@contextmanager
def _named_by_flags(given: Mapping[str, Any], flags_only: bool) -> Iterator[None]:
    """A refusal of a config key that a flag set ("config key 'batch_size' = 0: ...") is
    raised naming that flag, as typed ("--batch = 0: ..."), and so is each such key its
    text names after that ("use robe_block <= robe_size": "use --robe-block <=
    --robe-size"; keys of one word, which prose uses too, are left); any other as it is.
    `flags_only` (no --config file): every key with a flag is named by it, set or not; one
    left out and unset (None) is said missing ("--hash-buckets missing: ..."), not "= None"."""
    try:
        yield
    except ConfigError as e:
        on = {k: v for k, v in given.items() if v is not None}
        flags = {(False, name): flag for name, (flag, _) in _set_by(on).items()}
        flags.update({key: flag for key, flag in _SHAPE_KEYS.items() if flag in on})
        if flags_only:
            for key, named in _FLAG_OF_KEY.items():
                flags.setdefault((False, key), named)
        text = str(e)
        m = _KEY.match(text)
        head = flags.get((m.group(1) is not None, m.group(2))) if m else None
        if m is not None and head is not None:
            rest = _as_typed(text[m.end():], on.get(head))
            if head not in on and rest.startswith("None: "):  # no value: the flag was left out
                text = f"{_typed(head)} missing: {_keys_typed(rest[6:], flags)}"
            else:
                text = f"{_typed(head)} = {_keys_typed(rest, flags)}"
        if text == str(e):
            raise
        raise type(e)(text) from None


def _as_typed(rest: str, typed: Any) -> str:
    """`rest` ("VALUE: rule") with a list the flag took as text ("--dense-layers 0", read
    as the tuple (0,)) shown as typed: "0: rule"."""
    if isinstance(typed, str) and rest.startswith("(") and "): " in rest:
        return f"{typed}{rest[rest.index('): ') + 1:]}"
    return rest


def _typed(flag: str) -> str:
    return f"--{flag.replace('_', '-')}"


def _keys_typed(text: str, flags: Mapping[tuple[bool, str], str]) -> str:
    """`text` with each config key of several words that a flag set (`flags`) named by that
    flag as typed."""
    for (_, key), flag in flags.items():
        if "_" in key:
            text = re.sub(rf"(?<![\w.'-]){key}(?![\w'])", _typed(flag), text)
    return text


def build_config(config_path: Path | None, flags: Mapping[str, Any]) -> EmbeddingConfig:
    """The config file (else the seed workload's defaults) with the given flags over it
    (`--pooling-factor` without `--vocab`: over each of the file's tables)."""
    given = {k: v for k, v in flags.items() if v is not None}
    base = load_config(config_path) if config_path is not None else None
    if config_path is not None:  # a user search's record: not a model of autoembed's
        from autoembed.training import refuse_user_record

        refuse_user_record(config_path, command="estimate")
    if base is not None and "vocab" not in given:
        base = _with_data_tables(base)
    if base is None:
        several = "vocab" in given and "," in str(given["vocab"])
        ctr = several or given.get("task") == "ctr"
        for k, v in SEED_DEFAULTS.items():
            if ctr and k in ("task", "seq", "num_classes"):
                continue  # several tables or --task ctr: a ctr model, not the seed's text one
            given.setdefault(k, v)
    kw = fields_of_flags(given)
    if "dense_layers" in given:
        kw["dense_layers"] = _int_list(given["dense_layers"], "dense-layers", "256,64")
    if "vocab" in given:
        kw.update(_tables(given, kw, base))
    elif base is not None and "pooling_factor" in given:  # the file's tables, each
        kw["tables"] = tuple(replace(t, pooling_factor=given["pooling_factor"])
                             for t in base.tables)
    config = EmbeddingConfig(**kw) if base is None else replace(base, **kw) if kw else base
    check_model_rules(config)  # what train and search would refuse (models.check_buildable)
    return config


def _with_data_tables(config: EmbeddingConfig) -> EmbeddingConfig:
    """A config that names its data but leaves `tables` at the placeholder, with the data's
    tables written in (as `autoembed train` resolves it before training); else as it is."""
    from autoembed.config.value import names_tables

    if config.data is None or names_tables(config):
        return config
    from autoembed.data import DataSpec, load_dataset
    from autoembed.runner import resolve_for_data

    return resolve_for_data(config, load_dataset(DataSpec.from_dict(dict(config.data), "data")))


def _tables(given: Mapping[str, Any], kw: Mapping[str, Any],
            base: EmbeddingConfig | None) -> dict[str, Any]:
    """The tables `--vocab` (one size, or a comma list) and `--pooling-factor` describe, and
    the task they imply (several tables: ctr)."""
    vocabs = _int_list(given["vocab"], "vocab", "1000000,5000")
    if not vocabs:
        raise ConfigError("--vocab '' needs at least one size, e.g. --vocab 1000000")
    for v in vocabs:
        Integer(1).check_argument("--vocab", v)
    pooling = given.get("pooling_factor")
    pooling = 1.0 if pooling is None else pooling
    task = kw.get("task", getattr(base, "task", ""))
    names = (["tokens"] if len(vocabs) == 1 and task == "text"
             else [f"f{i}" for i in range(len(vocabs))])
    out: dict[str, Any] = {
        "tables": tuple(TableConfig(n, v, pooling) for n, v in zip(names, vocabs, strict=True))}
    if len(vocabs) > 1 and "task" not in kw:
        out["task"] = "ctr"
    if out.get("task", kw.get("task", getattr(base, "task", "ctr"))) == "ctr":
        out["num_classes"] = kw.get("num_classes", 2)
    return out


def _int_list(text: str, key: str, example: str) -> tuple[int, ...]:
    """`--KEY`'s comma list of integers; a bad one is refused with `example`, a good one."""
    if text.strip() == "":
        return ()
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise ConfigError(
            f"--{key} '{text}' must be a comma list of integers, e.g. {example}"
        ) from None


def _count_or_share(text: str | None, key: str) -> int | float | None:
    """A count ("65536") or a share of each table's rows ("0.01")."""
    if text is None:
        return None
    for number in (int, float):
        try:
            return number(text)
        except ValueError:
            pass
    flag = "--" + key.replace("_", "-")
    raise ConfigError(f"{flag} '{text}' must be a count (e.g. 65536) or a share of each "
                      "table's rows in (0, 1) (e.g. 0.01)")


def _check_host_budget(est: MemoryEstimate, text: str | None) -> None:
    """Host memory too small for the host_cached tables: bad input, exit 2."""
    if est.host_fits is False:
        raise ConfigError(
            f"--host-budget {text} = {format_bytes(est.host_budget or 0)} is smaller than the "
            f"{format_bytes(est.host_bytes)} the host_cached tables need on the host; raise "
            "--host-budget, lower dim or vocab, or use an optimizer with less state (sgd, "
            "rowwise_adagrad)"
        )
