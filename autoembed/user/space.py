"""What a user space's sections mean for the user's model and functions.

The file is read by the one space loader (`autoembed.space.load_space`: a space with
`embedding:` and `user:` sections is a `SearchSpace` of kind "user", its values checked by
the same keys, rules and messages as a built-in space's params); the sections:
docs/own_loop.md (an example: examples/text_space.yaml), their contracts: docs/user_search.md.

This module says what a proposal's values become: `params_for` (what build, example and
train receive: the `user:` values by name, and under `params["embedding"]` the embedding
settings chosen — config-wide keys, and `tables`: rule -> settings) and `config_for` (the
embedding config for the built model's tables: config-wide values, each table's matching
rules merged in file order).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from autoembed.config import EmbeddingConfig
from autoembed.config.user import embedding_config
from autoembed.errors import ConfigError, did_you_mean
from autoembed.space import EMBEDDING, SearchSpace, load_space

__all__ = ["params_for", "config_for", "reference_values", "embedding_value", "as_written_config",
           "as_written_values", "enqueue_values", "short_name", "table_settings_for",
           "torchrec_config", "user_record", "check_plan_device", "load_user_space", "EMBEDDING"]


def _all(space: SearchSpace, values: Mapping[str, Any]) -> dict[str, Any]:
    return {**space.base, **values}


def params_for(space: SearchSpace, values: Mapping[str, Any]) -> dict[str, Any]:
    """What build, example and train receive for a proposal's `values` (see the module
    docstring); the space's fixed values included."""
    got = _all(space, values)
    section = space.sections
    out = {k: got[q] for k, q in section.get("user", {}).items() if q in got}
    emb: dict[str, Any] = {k: got[q] for k, q in section.get("embedding", {}).items()
                           if q in got}
    tables = {r.label: {k: got[q] for k, q in r.searched.items() if q in got}
              for r in space.tables}
    if tables:
        emb["tables"] = tables
    out[EMBEDDING] = emb
    return out


def reference_values(space: SearchSpace) -> dict[str, Any]:
    """The space's reference values (searched param name -> value): the first of each
    `choices`, the middle of each range's grid (its geometric middle under `log`),
    conditions respected. What the model as written is built with (trial 0 of a search) and
    what `estimate --model ... --space` gives a `build(params)`."""
    values: dict[str, Any] = dict(space.base)
    out: dict[str, Any] = {}
    for p in space.params:
        if p.active(values):
            grid = p.grid_values()
            out[p.name] = values[p.name] = grid[0] if p.kind == "categorical" \
                else grid[len(grid) // 2]
    return out


def as_written_values(space: SearchSpace) -> dict[str, Any]:
    """The searched values of the model as written (trial 0): `reference_values` but the
    table rules' (nothing is applied to it)."""
    rules = {q for r in space.tables for q in r.searched.values()}
    return {k: v for k, v in reference_values(space).items() if k not in rules}


def embedding_value(space: SearchSpace, values: Mapping[str, Any], key: str) -> Any:
    """The `embedding:` section's config-wide `key` for `values` (None: not in the space)."""
    name = space.sections.get(EMBEDDING, {}).get(key)
    return None if name is None else _all(space, values).get(name)


def as_written_config(space: SearchSpace, values: Mapping[str, Any],
                      tables: Sequence[Mapping[str, Any]]) -> EmbeddingConfig:
    """The config of the model as written: its own tables (`tables`, no table rule
    applied but its `table_optimizer`, which trains the model rather than rewriting it: the
    optimizer `build_optimizer(model, params)` builds from the params train is handed) under
    the `embedding:` section's config-wide values (precision, optimizer)."""
    settings = table_settings_for(space, values, [str(t["name"]) for t in tables])
    rows = [{**t, **{k: v for k, v in s.items() if k == "table_optimizer"}}
            for t, s in zip(tables, settings, strict=True)]
    return _config(space, values, rows)


def enqueue_values(space: SearchSpace, entries: Sequence[Mapping[str, Any]]
                   ) -> list[dict[str, Any]]:
    """Each entry (param -> value; a param by its full name, `user.dim`, or without its
    section, `dim`) as the searched param name -> value, checked against the space: a
    known param, a value it can take (one of its choices, in its range), its condition
    holding. ConfigError (one line naming the entry, the param and the fix) otherwise;
    params an entry leaves out are the sampler's."""
    return [_entry(space, e, f"--enqueue entry {i + 1}") for i, e in enumerate(entries)]


def _entry(space: SearchSpace, entry: Mapping[str, Any], where: str) -> dict[str, Any]:
    by_name = {p.name: p for p in space.params}
    short = {n.split(".", 1)[1]: n for n in [*by_name, *space.base] if "." in n}
    out: dict[str, Any] = {}
    for key, value in entry.items():
        name = key if key in by_name or key in space.base else short.get(str(key))
        if name is None:
            raise ConfigError(f"{where}: '{key}' is not in the space"
                              f"{did_you_mean(str(key), [*short, *by_name])}; its searched "
                              f"params: {', '.join(short_name(n) for n in by_name)}")
        if name not in by_name:
            if space.base[name] != value:
                raise ConfigError(f"{where}: {key}={value!r}: the space fixes it at "
                                  f"{space.base[name]!r}; drop it or search it")
            continue
        why = _refused(by_name[name], value)
        if why:
            raise ConfigError(f"{where}: {key}={value!r}: {why}")
        out[name] = value
    values = {**space.base, **out}
    for name in out:
        if not by_name[name].active(values):
            cond = ", ".join(f"{k} in {list(v)}" for k, v in by_name[name].when)
            raise ConfigError(f"{where}: {short_name(name)} is searched only when {cond}; "
                              "drop it or set those")
    return out


def short_name(name: str) -> str:
    """A searched param's name without its section (`user.dim` -> `dim`)."""
    return name.split(".", 1)[1] if "." in name else name


def _refused(p: Any, value: Any) -> str | None:
    """Why `value` is not one the param `p` takes (None: it is)."""
    if p.kind == "categorical":
        ok = value in p.choices or value in p.labels
        return None if ok else f"not one of its choices {list(p.choices)}"
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or (p.kind == "int" and not float(value).is_integer()):
        return f"must be {'an integer' if p.kind == 'int' else 'a number'}"
    if not p.low <= value <= p.high:
        return f"outside its range [{p.low:g}, {p.high:g}]"
    if p.multiple_of and int(value) % p.multiple_of:
        return f"not a multiple of {p.multiple_of}"
    return None


def config_for(space: SearchSpace, values: Mapping[str, Any],
               tables: Sequence[Mapping[str, Any]]) -> EmbeddingConfig:
    """The embedding config for the built model's `tables` (config table entries: name =
    module path, vocab_size, ...). ConfigError when a rule matches no table."""
    settings = table_settings_for(space, values, [str(t["name"]) for t in tables])
    rows = [{**t, **s} for t, s in zip(tables, settings, strict=True)]
    return _config(space, values, rows)


def table_settings_for(space: SearchSpace, values: Mapping[str, Any],
                       names: Sequence[str]) -> list[dict[str, Any]]:
    """Each table's settings (`names`: the built model's tables): the space's table rules
    that select it, merged in file order. ConfigError when a rule selects no table."""
    got = _all(space, values)
    rules = [r.with_values(got) for r in space.tables]
    for r in rules:
        if not any(r.selects(n, 0) for n in names):
            raise ConfigError(
                f"search space '{space.source}': embedding.tables '{r.label}' names no "
                f"embedding module of the built model{did_you_mean(r.label, names)}; its "
                f"embedding modules: {', '.join(names) or 'none'}")
    return [{k: v for r in rules if r.selects(n, 0) for k, v in r.settings.items()}
            for n in names]


def torchrec_config(space: SearchSpace, values: Mapping[str, Any],
                    tables: Sequence[Mapping[str, Any]],
                    settings: Sequence[Mapping[str, Any]]) -> EmbeddingConfig:
    """The trial record's config of a TorchRec proposal: each table's name, rows and dim
    after its TorchRec settings (`settings`, aligned with `tables`), and the `embedding:`
    keys; the settings themselves are the record's `torchrec` part (`user_record`)."""
    rows = [{"name": t["name"], "vocab_size": s.get("num_embeddings", t["vocab_size"]),
             "dim": s.get("embedding_dim", t["dim"])} for t, s in zip(tables, settings,
                                                                     strict=True)]
    return _config(space, values, rows)


def _config(space: SearchSpace, values: Mapping[str, Any],
            rows: Sequence[Mapping[str, Any]]) -> EmbeddingConfig:
    got = _all(space, values)
    emb = space.sections.get("embedding", {})
    raw = {k: got[q] for k, q in emb.items() if q in got}
    return embedding_config(raw, rows, f"search space '{space.source}'")


def user_record(space: SearchSpace, config: EmbeddingConfig,
                optuna_params: Mapping[str, Any]) -> dict[str, Any]:
    """What a trial of a user search is, and nothing it is not (best.yaml, export): its
    `seed` (what its build and train were seeded with, `user.run.seed_generators`), the
    embedding settings the space names (config-wide keys, and each table's rows, dim and
    own settings) and the params the user's functions received; for a TorchRec model's
    space also `torchrec`: its topology and each table rule's TorchRec settings (pattern ->
    settings, the trial's values written in)."""
    values = space.values_from_optuna(optuna_params)
    params = params_for(space, values)
    keys = space.sections.get("embedding", {})
    cfg: dict[str, Any] = {k: getattr(config, k) for k in ("seed", *keys)}
    cfg["tables"] = [{"name": t.name, "vocab_size": t.vocab_size, "dim": t.dim, **t.overrides}
                     for t in config.tables]
    out = {"config": cfg, "params": params}
    if space.topology is not None:
        got = _all(space, values)
        out["torchrec"] = {"topology": dict(space.topology), "tables": {
            r.label: dict(r.with_values(got).settings) for r in space.tables}}
    return out


def check_plan_device(space: SearchSpace, compute_device: str) -> None:
    """Refuse (one ConfigError) a TorchRec table value a plan on `compute_device` cannot
    train: on "cpu", an optimizer FBGEMM's CPU table kernel refuses, a sharding type that
    needs CUDA, UVM caching. Every value a rule may take is checked (fixed or a choice)."""
    from autoembed.space._messages import space_error
    from autoembed.torchrec.planner import CPU_SHARDING_TYPES
    from autoembed.torchrec.settings import CPU_OPTIMIZERS

    if compute_device != "cpu":
        return
    allowed = {"optimizer": (CPU_OPTIMIZERS, "FBGEMM's CPU table kernel (fbgemm-gpu-cpu "
                             "1.8.0) takes"),
               "sharding_type": (CPU_SHARDING_TYPES, "needs CUDA; a CPU plan offers"),
               "compute_kernel": (("fused", "dense"), "needs CUDA (UVM); a CPU plan takes")}
    by_name = {p.name: p for p in space.params}
    for r in space.tables:
        for key, (ok, why) in allowed.items():
            name = r.searched.get(key)
            if name is None:
                continue
            values = by_name[name].choices if name in by_name else (
                (space.base[name],) if name in space.base else ())
            for v in values:
                if v not in ok:
                    raise space_error(space.source, name, v, f"{why} "
                                      f"{', '.join(ok)} (topology.compute_device cpu)")


def load_user_space(path: str | Path) -> SearchSpace:
    """`autoembed.space.load_space(path, kind="user")`."""
    return load_space(path, "user")
