"""What a user space's sections mean for the user's model and functions.

The file is read by the one space loader (`autoembed.space.load_space`: a space with
`embedding:` and `user:` sections is a `SearchSpace` of kind "user", its values checked by
the same keys, rules and messages as a built-in space's params):

```yaml
embedding:                      # applied by autoembed to the built model (autoembed.apply)
  precision: {choices: [fp32, bf16_master]}
  table_optimizer: rowwise_adagrad
  tables:                       # rules: a module path, or a glob over module paths
    "*":
      compression: {choices: [none, hash]}
      hash_buckets: {choices: [0.05, 0.25], when: {compression: hash}}
user:                           # passed to build, example and train as params[name]
  dim: {type: int, low: 16, high: 128, log: true, multiple_of: 16}
  lr: {low: 0.001, high: 0.1, log: true}
  batch_size: 64
metrics: [loss]                 # names report(...) may log besides quality
objectives: [quality, memory, throughput]
early_stop: {max_steps: 2000, eval_every: 200}   # optional: stop trials that cannot reach the front
trials: 20
```

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

from autoembed.config import EmbeddingConfig, config_from_dict
from autoembed.errors import ConfigError, did_you_mean
from autoembed.space import EMBEDDING, SearchSpace, load_space, parse_space

__all__ = ["params_for", "config_for", "user_record", "load_user_space", "parse_user_space",
           "EMBEDDING"]


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


def config_for(space: SearchSpace, values: Mapping[str, Any],
               tables: Sequence[Mapping[str, Any]]) -> EmbeddingConfig:
    """The embedding config for the built model's `tables` (config table entries: name =
    module path, vocab_size, ...). ConfigError when a rule matches no table."""
    got = _all(space, values)
    names = [str(t["name"]) for t in tables]
    rules = [r.with_values(got) for r in space.tables]
    for r in rules:
        if not any(r.selects(n, 0) for n in names):
            raise ConfigError(
                f"search space '{space.source}': embedding.tables '{r.label}' names no "
                f"embedding module of the built model{did_you_mean(r.label, names)}; its "
                f"embedding modules: {', '.join(names) or 'none'}")
    rows = []
    for t in tables:
        row = dict(t)
        for r in rules:
            if r.selects(row["name"], 0):
                row.update(r.settings)
        rows.append(row)
    emb = space.sections.get("embedding", {})
    raw = {k: got[q] for k, q in emb.items() if q in got}
    return config_from_dict({**raw, "tables": rows}, f"search space '{space.source}'")


def user_record(space: SearchSpace, config: EmbeddingConfig,
                optuna_params: Mapping[str, Any]) -> dict[str, Any]:
    """What a trial of a user search is, and nothing it is not (best.yaml, export): the
    embedding settings the space names (config-wide keys, and each table's rows, dim and
    own settings) and the params the user's functions received."""
    params = params_for(space, space.values_from_optuna(optuna_params))
    keys = space.sections.get("embedding", {})
    cfg: dict[str, Any] = {k: getattr(config, k) for k in keys}
    cfg["tables"] = [{"name": t.name, "vocab_size": t.vocab_size, "dim": t.dim, **t.overrides}
                     for t in config.tables]
    return {"config": cfg, "params": params}


def load_user_space(path: str | Path) -> SearchSpace:
    """`autoembed.space.load_space(path, kind="user")`."""
    return load_space(path, "user")


def parse_user_space(raw: Any, source: str, text: str = "") -> SearchSpace:
    """`autoembed.space.parse_space(raw, source, text, kind="user")`."""
    return parse_space(raw, source, text, "user")
