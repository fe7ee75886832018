"""What a search of autoembed's own models prices and what it trains (`PricedData`).

The priced data are the space's `data` (full-size tables). With a `stand_in`, trials train a
scaled-down copy of synthetic data (counts times `vocab_scale`, so every compression keeps
its ratio; a hot set keeps its share of lookups), so a trial takes seconds on a CPU: quality
and throughput are of that copy, memory is the full-size estimate. Without one, priced and
trained data are the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from autoembed.compression import hot_share_at_scale
from autoembed.config import (
    EmbeddingConfig,
    map_bucket_counts,
    resolved_tables,
    storage_rows,
    with_data_tables,
)
from autoembed.data.spec import DataSpec
from autoembed.errors import ConfigError, did_you_mean
from autoembed.space import SearchSpace, StandIn, TableRule, apply_table_rules, table_rules_of
from autoembed.space._messages import space_error

__all__ = ["PricedData", "build_priced_data", "data_spec_for", "given_spec"]


def data_spec_for(space: SearchSpace, data: str | None = None, label: str | None = None,
                  categorical: tuple[str, ...] | None = None, text_column: str | None = None,
                  ) -> tuple[DataSpec, StandIn | None]:
    """The priced data spec: the space's `data`, or `data` (a built-in name or a file) with
    the column options. A stand-in applies to the space's own synthetic data only."""
    if data is None:
        if label is not None or categorical is not None or text_column is not None:
            raise ConfigError(
                "--label, --categorical and --text-column describe a --data file; give --data")
        return DataSpec.from_dict(space.data, f"search space '{space.source}': data"), \
            space.stand_in
    spec = given_spec(data, label, categorical, text_column)
    if spec.name == space.data.get("name") and spec.name in ("synthetic-ctr", "synthetic-text"):
        # the same synthetic generator: keep the space's parameters and stand-in
        return DataSpec.from_dict(space.data, "--data"), space.stand_in
    return spec, None


def given_spec(data: str, label: str | None = None,
               categorical: tuple[str, ...] | None = None,
               text_column: str | None = None) -> DataSpec:
    """The spec of `--data` (a built-in name or a file) with its column options."""
    columns = {"label": label, "categorical": categorical, "text_column": text_column}
    return DataSpec.from_dict({"name": data, **{k: v for k, v in columns.items() if v is not None}},
                              "--data")


def _scaled(v: int, scale: float, minimum: int) -> int:
    return max(minimum, int(round(v * scale)))


@dataclass(frozen=True)
class PricedData:
    """The priced data (loaded, for table sizes) and the data each trial trains on (the
    spec travels to the Ray workers; the loaded copy sizes each trial's host memory)."""

    spec: DataSpec
    train_spec: DataSpec
    scale: float = 1.0
    dataset: Any = field(default=None, compare=False, repr=False)
    train_dataset: Any = field(default=None, compare=False, repr=False)
    tables: tuple[TableRule, ...] = ()  # the space's per-table settings

    @property
    def stand_in(self) -> bool:
        return self.train_spec != self.spec

    def fits_length(self, run: Mapping[str, Any], given: bool) -> bool:
        """Whether trials train for a length fitted to the data (runner.fit_settings): real
        data at full size, given with --data or derived from, or named by a space whose `run`
        sets no `max_steps` or `epochs` (a space's `run` length is for its own data)."""
        if self.stand_in or self.spec.name.startswith("synthetic-"):
            return False
        return given or not ({"max_steps", "epochs"} & set(run))

    def priced(self, config: EmbeddingConfig) -> EmbeddingConfig:
        """The config resolved against the full-size data, with the space's per-table
        settings (what the budget sees)."""
        from autoembed.runner import resolve_for_data

        rules = table_rules_of(config, self.tables)
        cfg = resolve_for_data(config, self.dataset)
        return apply_table_rules(rules, cfg).resolve()

    def trained(self, config: EmbeddingConfig) -> EmbeddingConfig:
        """The config a trial trains (the runner resolves it against `train_spec`).

        A host_cached stand-in keeps its cache_load_factor unless the scaled-down tables
        would cache fewer rows than one batch looks up: then it takes the smallest factor
        that holds a batch (the stand-in's hit rate is then higher than at full size)."""
        config = self._per_table(config)
        if not self.stand_in:
            return config
        config = map_bucket_counts(config, lambda n: _scaled(n, self.scale, 1))
        if config.placement == "host_cached" and self.train_dataset is not None:
            config = replace(config, cache_load_factor=_stand_in_factor(
                config, self.train_dataset.tables))
        return config

    def _per_table(self, config: EmbeddingConfig) -> EmbeddingConfig:
        """The trained per-table settings: the proposal's table rules as they select the
        full-size tables (a rule "min_rows: 1M" picks the same tables as when priced); on a
        stand-in also a robe array given as a count scaled like the rows, and each hot/cold
        table's `hot_share` set so its hot set takes the same share of lookups as at full
        size (`compression.hot_share_at_scale`), not the same share of rows."""
        rules = table_rules_of(config, self.tables)
        if self.dataset is None or (not rules and not self.stand_in):
            return config
        full = replace(config, tables=with_data_tables(config, self.dataset.tables))
        full = apply_table_rules(rules, full)
        if not self.stand_in or self.train_dataset is None:
            return full
        methods = {ts.name: ts for ts in resolved_tables(full)
                   if ts.compression in ("robe", "hot_cold")}
        if not rules and not methods:
            return config
        small = {t.name: t.vocab_size for t in self.train_dataset.tables}
        names = [t.name for t in self.dataset.tables]
        exps = self.spec.exponents()  # synthetic data's Zipf exponents (text: one table)
        exponents = dict(zip(names, exps[:len(names)] if len(exps) >= len(names)
                             else (exps[0],) * len(names), strict=True))
        tables = []
        for t in full.tables:
            ts = methods.get(t.name)
            if ts is not None and ts.compression == "hot_cold":
                t = replace(t, hot_share=hot_share_at_scale(
                    ts.hot_share, t.vocab_size, small[t.name], exponents[t.name]))
            elif ts is not None and isinstance(t.robe_size, int):
                t = replace(t, robe_size=_scaled(t.robe_size, self.scale, 1))
            tables.append(t)
        robe = full.robe_size
        if isinstance(robe, int):
            robe = _scaled(robe, self.scale, 1)
        return replace(full, tables=tuple(tables), robe_size=robe)


def _stand_in_factor(config: EmbeddingConfig, tables: Any) -> float:
    import math

    factor = config.cache_load_factor
    for t in with_data_tables(config, tables):
        rows = storage_rows(config, t)
        per_batch = config.batch_size * math.ceil(config.lookups_per_sample(t))
        factor = max(factor, min(1.0, min(rows, per_batch) / rows))
    return factor


def build_priced_data(
    spec: DataSpec, stand_in: StandIn | None, tables: tuple[TableRule, ...] = (),
    source: str = "",
) -> PricedData:
    """Load the priced data (synthetic data cost nothing to load; files are read once).
    A rule of `tables` (the space's, `source` its file) that names no table of the data is
    bad input (ConfigError)."""
    from autoembed.data import load_dataset

    dataset = load_dataset(spec)
    _check_table_names(tables, [t.name for t in dataset.tables], source)
    if stand_in is None or (stand_in.vocab_scale == 1.0 and stand_in.rows is None):
        return PricedData(spec, spec, 1.0, dataset, dataset, tables)
    s = stand_in.vocab_scale
    kw: dict[str, Any] = {}
    if spec.name == "synthetic-ctr":
        kw["vocab_sizes"] = tuple(_scaled(v, s, 1) for v in spec.vocab_sizes)
    elif spec.name == "synthetic-text":
        vocab = spec.vocab_size or dataset.tables[0].vocab_size
        kw["vocab_size"] = _scaled(vocab, s, 3)
    if stand_in.rows is not None:
        kw["rows"] = stand_in.rows
    train = replace(spec, **kw)
    return PricedData(spec, train, s, dataset, load_dataset(train), tables)


def _check_table_names(rules: tuple[TableRule, ...], names: list[str], source: str) -> None:
    """Each rule selecting a table by `name` names one of `names` (else it would set
    nothing, silently)."""
    for i, rule in enumerate(rules):
        if rule.name is not None and rule.pattern is None and rule.name not in names:
            raise space_error(source, f"tables[{i}].name", rule.name,
                              f"names no table of the data{did_you_mean(rule.name, names)}; "
                              f"its tables: {', '.join(names)}")
