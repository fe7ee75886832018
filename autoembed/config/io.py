"""Configs from plain data, YAML and JSON, and back (`load_config`, `save_config`). YAML is
imported only when a file is read or written."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from autoembed.config.tables import TableConfig
from autoembed.config.value import EmbeddingConfig
from autoembed.errors import ConfigError, did_you_mean
from autoembed.rules import Each, Is, plain

__all__ = ["config_from_dict", "safe_load_yaml", "parse_config_text", "load_config",
           "as_config", "save_config", "config_text"]

_TABLE_KEYS = {f.name for f in fields(TableConfig)}
_CONFIG_KEYS = {f.name for f in fields(EmbeddingConfig)}
# What a file gives where a config wants a tuple (checked before one is made of it).
_TABLES = Each(Is(Mapping, "a mapping"), "a non-empty list of table mappings", filled=True,
               seq=(list,))
_WIDTHS = Each(None, "a list of widths")


def config_from_dict(raw: Mapping[str, Any], source: str = "config",
                     table_dims: Mapping[str, int] | None = None) -> EmbeddingConfig:
    """Build and validate a config from plain data; errors name the source, key and value.
    `table_dims` (table name -> dim; `autoembed.apply` gives the modules'): a table's dim
    where neither it nor the config gives one (not under mixed_dim, which resolves dims)."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{source}: expected a mapping of config keys (e.g. dim: 16), got "
                          f"{type(raw).__name__}; give a config such as an exported best.yaml")
    unknown = [k for k in raw if k not in _CONFIG_KEYS]
    if unknown:
        k = unknown[0]
        raise ConfigError(
            f"{source}: unknown key '{k}'{did_you_mean(k, sorted(_CONFIG_KEYS))}; "
            f"valid keys: {', '.join(sorted(_CONFIG_KEYS))}"
        )
    kw: dict[str, Any] = _with_dims(raw, table_dims)
    if "tables" in kw:
        _TABLES.check("tables", kw["tables"], f"{source}: key")
        built = []
        for i, t in enumerate(kw["tables"]):
            bad = [k for k in t if k not in _TABLE_KEYS]
            if bad:
                raise ConfigError(
                    f"{source}: unknown key 'tables[{i}].{bad[0]}'"
                    f"{did_you_mean(bad[0], sorted(_TABLE_KEYS))}; "
                    f"valid: {', '.join(sorted(_TABLE_KEYS))}"
                )
            if "name" not in t or "vocab_size" not in t:
                raise ConfigError(f"{source}: 'tables[{i}]' needs 'name' and 'vocab_size'")
            built.append(TableConfig(**t))
        kw["tables"] = tuple(built)
    if "dense_layers" in kw:
        _WIDTHS.check("dense_layers", kw["dense_layers"], f"{source}: key")
        kw["dense_layers"] = tuple(kw["dense_layers"])
    try:
        return EmbeddingConfig(**kw)
    except (ConfigError, TypeError) as e:  # TypeError: defensive, a signature mismatch
        raise ConfigError(f"{source}: {e}") from None


def _with_dims(raw: Mapping[str, Any], table_dims: Mapping[str, int] | None) -> dict[str, Any]:
    """`raw` with the dims `table_dims` gives to tables that have none when the config has
    none (`config_from_dict`): the config's dim when they share one, else each table's."""
    kw = dict(raw)
    tables = kw.get("tables")
    if not table_dims or "dim" in kw or not isinstance(tables, list):
        return kw
    open_ = [t for t in tables if isinstance(t, Mapping) and "dim" not in t
             and t.get("name") in table_dims and "mixed_dim" not in (
                 t.get("compression"), kw.get("compression"))]
    dims = {table_dims[t["name"]] for t in open_}
    if len(dims) == 1 and len(open_) == len(tables):
        kw["dim"] = dims.pop()
    elif dims:
        kw["tables"] = [{**t, "dim": table_dims[t["name"]]} if t in open_ else t
                        for t in tables]
    return kw


def safe_load_yaml(text: str, source: str, kind: str = "config") -> Any:
    """`yaml.safe_load(text)` for every YAML (and JSON) file the product reads: a syntax
    error, a key given twice in one mapping (YAML keeps the last silently) or absurd
    nesting is a ConfigError naming `source` (and the line) and what a `kind` file should
    be."""
    import yaml  # lazy: keeps `import autoembed.config` torch- and yaml-free

    try:
        return yaml.load(text, Loader=_unique_key_loader())  # noqa: S506 - a SafeLoader
    except _DuplicateKey as e:
        raise ConfigError(f"{source}: {e}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(
            f"{source}:{where} is not valid YAML/JSON: {getattr(e, 'problem', e)}"
        ) from None
    except RecursionError:  # PyYAML's composer recurses once per nesting level
        raise ConfigError(f"{source}: nested too deeply to be a {kind}; a {kind} is a "
                          "mapping a few levels deep") from None


class _DuplicateKey(Exception):
    """A mapping that gives one key twice (the message names it and both lines)."""


# A number with an exponent and no dot (`1e-3`, JSON's `2e-05`): a float in JSON and YAML
# 1.2, a string to PyYAML's YAML 1.1 resolver, which needs a dot
_EXPONENT_FLOAT = r"^[-+]?(?:[0-9][0-9_]*)[eE][-+]?[0-9]+$"


@functools.lru_cache(maxsize=1)
def _unique_key_loader() -> type:
    """yaml.SafeLoader that refuses a key given twice in one mapping (a `<<` merge may
    still be overridden: that is what a merge is for) and reads `1e-3` as a float, as
    JSON does (a JSON export's `2e-05` was a string)."""
    import re

    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key, line = self.construct_object(key_node, deep=True), key_node.start_mark.line
                try:
                    if key in seen:
                        raise _DuplicateKey(
                            f"line {line + 1}: key '{key}' is given twice in one mapping "
                            f"(first on line {seen[key] + 1}); keep one")
                    seen[key] = line
                except TypeError:  # an unhashable key: the base class says so
                    continue
            return super().construct_mapping(node, deep=deep)

    UniqueKeyLoader.add_implicit_resolver(  # tried after SafeLoader's own resolvers
        "tag:yaml.org,2002:float", re.compile(_EXPONENT_FLOAT), list("-+0123456789"))
    return UniqueKeyLoader


def parse_config_text(text: str, source: str,
                      table_dims: Mapping[str, int] | None = None) -> EmbeddingConfig:
    raw = safe_load_yaml(text, source)
    if isinstance(raw, Mapping) and "members" in raw and "study" in raw:  # pareto.json's
        runs = Path(source).parent.parent  # <runs-dir>/<study>/pareto.json
        where = "" if runs == Path("runs") else f" --runs-dir {runs}"
        raise ConfigError(
            f"'{source}' is the Pareto front of search '{raw['study']}', not a config; export "
            f"one of its members: autoembed export --study {raw['study']}{where} --out "
            "best.yaml (--pick chooses which)")
    if isinstance(raw, Mapping) and "config" not in raw and any(
            k in raw for k in ("params", "embedding", "user")):  # a search space's sections
        raise ConfigError(
            f"'{source}' is a search space, not a config; search it (autoembed search "
            f"--space {source} --budget ...), then export its pick")
    if isinstance(raw, Mapping) and "config" in raw and isinstance(raw["config"], Mapping):
        raw = raw["config"]  # exported files wrap the config with provenance
    try:
        return config_from_dict(raw, source, table_dims)
    except RecursionError:
        raise ConfigError(f"{source}: a value is nested too deeply; a config is a mapping a "
                          "few levels deep") from None


def load_config(path: str | Path,
                table_dims: Mapping[str, int] | None = None) -> EmbeddingConfig:
    """Read a YAML or JSON config file (exported or hand-written) and validate it
    (`table_dims`: as `config_from_dict`'s)."""
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise ConfigError(
            f"config file '{p}' does not exist; give the path of a YAML file"
        ) from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"config file '{p}' cannot be read: {e}") from None
    return parse_config_text(text, str(p), table_dims)


def as_config(value: Any, what: str = "config",
              table_dims: Mapping[str, int] | None = None) -> EmbeddingConfig:
    """An EmbeddingConfig from the forms the public functions take: a config, a dict of its
    keys, or the path of a YAML/JSON config file; anything else is a ConfigError.
    `table_dims`: the dims of tables a dict or file leaves without one (`config_from_dict`)."""
    import os

    if isinstance(value, EmbeddingConfig):
        return value
    if isinstance(value, Mapping):
        return config_from_dict(value, table_dims=table_dims)
    if isinstance(value, (str, os.PathLike)):
        return load_config(Path(value), table_dims)
    raise ConfigError(f"{what} = {type(value).__name__}: give an EmbeddingConfig, a dict of "
                      "config keys, or the path of a config file such as best.yaml")


def config_text(config: EmbeddingConfig, fmt: str,
                extra: Mapping[str, Any] | None = None) -> str:
    """A config file's text, `fmt` "json" or "yaml": `{config: ..., **extra}`."""
    body: dict[str, Any] = {"config": config.to_dict()}
    if extra:
        body.update(plain(extra))
    if fmt == "json":
        return json.dumps(body, indent=2)
    import yaml

    return str(yaml.safe_dump(body, sort_keys=False))


def save_config(
    config: EmbeddingConfig, path: str | Path, extra: Mapping[str, Any] | None = None
) -> Path:
    """Write the config as YAML (or JSON when the suffix is .json), atomically, with the
    user's umask (`files.atomic_write_text`)."""
    from autoembed.files import atomic_write_text

    p = Path(path)
    return atomic_write_text(p, config_text(config, "json" if p.suffix == ".json" else "yaml",
                                            extra))
