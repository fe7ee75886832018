"""The user's own model, example and training loop: the user `Workload` of the search (its
stages: docs/ARCHITECTURE.md). A proposal is priced by `estimate_model` of
`UserCode.model_for(params, config)` (`build`, then the user's `apply` or `autoembed.apply`)
on `example(params)` (and `loss`); a trial runs the user's `train` on the same model
(`user.trainer.run_payload`, here or in a Ray worker that finds the functions by name).

The user's code failing while a proposal is priced is a ConfigError naming the function: bad
input on the space's first corner (`check_fits`, before the study is made) or the study's
first proposal, that proposal's failure afterwards.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from autoembed.config import EmbeddingConfig, model_key
from autoembed.errors import ConfigError
from autoembed.pipeline.records import params_key
from autoembed.pipeline.request import local_gpus
from autoembed.pipeline.sharded_workload import TOPOLOGY_KEY, Sharded
from autoembed.pipeline.study import check_same
from autoembed.pipeline.workload import (
    HOST_BASE_BYTES,
    Invalid,
    Launch,
    NothingFitsError,
    Priced,
    TrialRunner,
)
from autoembed.space import SearchSpace, load_space, parse_space
from autoembed.trial import AS_WRITTEN, ENQUEUED
from autoembed.user.functions import FunctionRef, check_findable, check_unchanged
from autoembed.user.guard import priced_inputs
from autoembed.user.run import TRIAL_ROLES, UserCode, built_module, trial_seed
from autoembed.user.space import (
    as_written_config,
    as_written_values,
    config_for,
    enqueue_values,
    params_for,
    user_record,
)

if TYPE_CHECKING:
    from torch import nn

    from autoembed.budget import Budget
    from autoembed.pipeline.request import SearchRequest
    from autoembed.selection import NoiseMeasure, ValidScores
    from autoembed.space.start import StartPoint
    from autoembed.trial import TrialRow

__all__ = ["UserWorkload", "FUNCTIONS_KEY", "QUEUE_KEY", "call_user", "model_tables"]

FUNCTIONS_KEY = "functions"  # the study meta key holding role -> FunctionRef dict
QUEUE_KEY = "queue"  # the study meta key: {"reference": bool, "enqueue": [values, ...]}


def _gpus_seen(request: Any) -> int | None:
    """The GPUs this search's trials run on (`pipeline.request.local_gpus`); None on a Ray
    cluster (its nodes' GPUs) or under a custom executor."""
    if request.ray_address or request.executor_kind == "custom":
        return None
    return local_gpus(request.device, request.gpu)


@dataclass(frozen=True)
class UserWorkload:
    """The user's model and loop (the `Workload` protocol; see the module docstring)."""

    kind: ClassVar[str] = "user"
    stand_in: ClassVar[bool] = False
    space: SearchSpace
    code: UserCode
    records: Mapping[str, FunctionRef]
    device: str = "cpu"
    allow_changed_code: bool = False
    sharded: Sharded | None = None  # a TorchRec model's space (`topology:`): planned per rank
    reference: bool = True  # the model as written is trained first (trial 0)
    enqueue: tuple[Mapping[str, Any], ...] = ()  # the user's configs, trained next
    seed: int = 0  # the search's seed: each trial's `trial_seed` is derived from it
    _priced: dict[str, Priced | Invalid] = field(default_factory=dict, compare=False,
                                                 repr=False)

    @classmethod
    def build(cls, request: SearchRequest, stored: Mapping[str, Any], seed: int,
              tell: Callable[[str], None]) -> UserWorkload:
        """The space (the request's, else a resumed study's stored one) and the recorded
        functions of `request`."""
        del tell
        code = request.code
        assert code is not None, "a user workload needs the user's functions"
        if isinstance(request.space, SearchSpace):
            space = request.space
        elif request.space is not None:
            space = load_space(request.space, "user")
        elif stored.get("space_text"):
            from autoembed.config import safe_load_yaml

            text = str(stored["space_text"])
            space = parse_space(safe_load_yaml(text, "stored space", "space"),
                                str(stored.get("space_source")), text, "user")
        else:
            raise ConfigError("--space missing: give the YAML file with `embedding:` and "
                              "`user:` sections")
        if stored and request.space is not None:
            check_same(stored, "space_text", space.text, f"--space {request.space_label}")
        records = code.records()
        queue = stored.get(QUEUE_KEY) or {}
        enqueue = enqueue_values(space, request.enqueue if request.enqueue is not None
                                 else queue.get("enqueue", ()))
        made = cls(space, code, records, request.device, request.allow_changed_code,
                   Sharded.of(space, request.budget.bytes, request.device, records,
                              _gpus_seen(request)),
                   reference=request.reference and bool(queue.get("reference", True)),
                   enqueue=tuple(enqueue), seed=seed)
        if made.sharded is not None and code.apply is not None:
            raise ConfigError(f"apply = {records['apply'].spec}: a space with `topology:` "
                              "rewrites TorchRec's tables by its own settings; drop apply")
        if request.executor_kind != "local":
            check_findable(made.records, "a Ray worker", script=False)
        return made

    @property
    def target(self) -> float | None:
        return self.space.target

    @property
    def use_measured(self) -> bool:
        return self.device == "cuda"

    def trains(self, values: Mapping[str, Any], priced: EmbeddingConfig) -> Hashable:
        """The priced config's `model_key` and the values: the user's functions are
        handed them all (`user.space.params_for`)."""
        return model_key(priced), params_key(values)

    @property
    def keeps_best(self) -> bool:
        """The user's loop reports its final quality itself: the last evaluation stands."""
        return False

    def price(self, values: Mapping[str, Any]) -> Priced | Invalid:
        """Price the proposal `values` on the user's model (cached by values: a sampler
        that repeats a proposal pays once)."""
        key = repr(sorted((k, repr(v)) for k, v in values.items()))
        if key not in self._priced:
            self._priced[key] = self._price(values)
        return self._priced[key]

    def _probe(self, values: Mapping[str, Any]) -> tuple[Mapping[str, Any], Any, Any]:
        """(params, the model built on the meta device, the example) of `values`."""
        from autoembed.trace.traced_model import on_meta

        params = params_for(self.space, values)
        probe = built_module(on_meta(lambda: call_user(self.code.build, "model", params)))
        return params, probe, call_user(self.code.example, "example", params)

    def _price(self, values: Mapping[str, Any]) -> Priced | Invalid:
        from autoembed.torchrec.public import is_torchrec

        code, space = self.code, self.space
        params, probe, example = self._probe(values)
        if self.sharded is not None:
            return self.sharded.price(space, code, values, probe, example, self._payload,
                                      lambda c: self._seeded(c, values))
        if is_torchrec(probe, example):
            raise ConfigError(f"model: {type(probe).__name__} holds TorchRec collections; a "
                              "search over it plans them per rank: give the space a "
                              "`topology:` (world_size, ...) and TorchRec's table keys")
        config = self._seeded(config_for(space, values, model_tables(probe)), values)
        return self._traced(params, config, functools.partial(code.model_for, params, config),
                            example)

    def price_as_written(self, values: Mapping[str, Any]) -> Priced | Invalid:
        """Price the model as `build(params)` returns it, nothing applied (trial 0): its own
        tables under the space's precision and optimizer (`as_written_config`)."""
        params, probe, example = self._probe(values)
        config = self._seeded(as_written_config(self.space, values, model_tables(probe)),
                              values)
        return self._traced(params, config, lambda: built_module(self.code.build(params)), example,
                            {"as_written": True})

    def _seeded(self, config: EmbeddingConfig, values: Mapping[str, Any]) -> EmbeddingConfig:
        """`config` with the trial's seed (`trial_seed` of the search's seed and `values`):
        what its trial seeds the generators with before build and train, recorded with the
        priced config (best.yaml, export); a space whose `embedding:` section names `seed`
        keeps its own."""
        if "seed" in self.space.sections.get("embedding", {}):
            return config
        return replace(config, seed=trial_seed(self.seed, values))

    def _traced(self, params: Mapping[str, Any], config: EmbeddingConfig, model: Any,
                example: Any, extra: Mapping[str, Any] | None = None) -> Priced:
        """`model()` priced by `estimate_model` on `example`; its launch runs the user's
        loop on the payload of `params` and `config` (with `extra`)."""
        from autoembed.torchrec.public import estimate_model

        est = estimate_model(model, example, loss=self.code.loss,  # build_optimizer's optimizers
                             optimizer=config, precision=config.precision)

        inputs = priced_inputs(example)  # the guard checks the loop's batch against them

        def launch(number: int) -> Launch:
            del number
            host = HOST_BASE_BYTES + (est.allocated_peak if self.device == "cpu" else 0)
            return Launch({**self._payload(params, config), "priced_inputs": inputs,
                           **(extra or {})}, host, self.space.early_stop)

        return Priced(config, est, launch)

    def _payload(self, params: Mapping[str, Any], config: EmbeddingConfig) -> dict[str, Any]:
        """A trial's payload (`user.trainer.make_payload`): the recorded functions, the
        proposal's params and config, what the loop may report, the target."""
        from autoembed.user.trainer import make_payload

        latency = [o.name for o in self.space.objectives if o.name == "latency"]  # an objective
        return make_payload(self.records, params, config, metrics=(*self.space.metrics, *latency),
                            target=self.space.target)

    def check_fits(self, budget: Budget) -> None:
        """One price before the study exists (each is a trace): the space's first corner,
        so the user's functions failing on it are bad input before anything is made (the
        price is kept). A budget below the fixed overhead is exit 3 at once; a search where
        nothing fits ends with exit 3 at the engine's limit."""
        from autoembed.budget import format_bytes
        from autoembed.space.corners import first_corner

        values = first_corner(self.space)
        try:
            priced = self.price(values)
        except ConfigError as e:
            raise ConfigError(f"{e} (priced before the search, at "
                              f"{self.space.describe(values)})") from None
        fixed = getattr(getattr(priced, "estimate", None), "overhead", 0)
        if fixed and not budget.admits(fixed):  # every config's device_total holds it
            raise NothingFitsError(
                f"nothing fits the budget {budget.text} = {format_bytes(budget.bytes)}: the "
                f"fixed overhead alone (CUDA context, cuBLAS workspace) is "
                f"{format_bytes(fixed)}; raise --budget above it")

    def start_points(self, cheapest: Mapping[str, Any] | None) -> tuple[StartPoint, ...]:
        """Trained before the sampler's proposals: the model as written (`reference`), then
        the user's enqueued configs, in their order (a resume skips those already tried)."""
        from autoembed.space.start import StartPoint

        del cheapest
        first = [StartPoint(AS_WRITTEN, as_written_values(self.space), AS_WRITTEN)] \
            if self.reference and self.sharded is None else []
        return (*first, *(StartPoint(f"{ENQUEUED} {i + 1}", v, ENQUEUED)
                          for i, v in enumerate(self.enqueue)))

    def runner(self, local: bool) -> TrialRunner:
        """The user's loop in one process (`run_payload`), or on every rank of a sharded
        TorchRec trial (`pipeline.sharded_workload`: local processes, or Ray Train workers)."""
        from autoembed.pipeline.sharded_workload import run_local_trial, run_ray_trial
        from autoembed.user.trainer import run_payload

        if self.sharded is not None:
            return functools.partial(run_local_trial, code=self.code) if local \
                else run_ray_trial
        return functools.partial(run_payload, code=self.code) if local else run_payload

    def ray_options(self) -> dict[str, Any]:
        from autoembed.user.ship import runtime_env

        base = {"runtime_env": runtime_env(self.records[r] for r in TRIAL_ROLES
                                           if r in self.records), "packages": ()}
        return base if self.sharded is None else self.sharded.ray_options(base)

    def meta(self) -> dict[str, Any]:
        """The functions; for a TorchRec model's space also the topology its proposals were
        planned on (`Sharded.topology`: what export plans the pick for)."""
        out: dict[str, Any] = {FUNCTIONS_KEY: {r: ref.to_dict()
                                               for r, ref in self.records.items()},
                               QUEUE_KEY: {"reference": self.reference,
                                           "enqueue": [dict(v) for v in self.enqueue]}}
        if self.sharded is not None:
            out[TOPOLOGY_KEY] = dict(self.sharded.topology)
        return out

    def check_resume(self, stored: Mapping[str, Any]) -> None:
        """A resumed study must run the code it started with (`check_unchanged`), found
        again by name (`check_findable`)."""
        funcs = stored.get(FUNCTIONS_KEY)
        if stored.get("kind") != "user" or not isinstance(funcs, Mapping):
            raise ConfigError("this study was not a search over your own model; resume it "
                              "without --model/--example/--train, or start a new --study")
        refs = {r: FunctionRef.from_dict(funcs[r]) for r in funcs}
        check_findable(refs, "a resume", script=True)
        if ("apply" in refs) != ("apply" in self.records):
            raise ConfigError("apply: the study was run " + (
                f"with apply = {refs['apply'].spec}; resume autoembed.search with "
                f"apply='{refs['apply'].spec}'" if "apply" in refs else
                "with autoembed.apply; resume without apply"))
        for role in (r for r in TRIAL_ROLES if r in refs):
            check_unchanged(refs[role], self.records[role], role, self.allow_changed_code)

    def config_of(self, params: Mapping[str, Any]) -> EmbeddingConfig | None:
        del params
        return None

    def context(self, placement: Mapping[str, Any]) -> dict[str, Any]:
        del placement
        return {"functions": {r: ref.spec for r, ref in self.records.items()}}

    def noise(self, candidates: Sequence[TrialRow],
              scores: Mapping[int, ValidScores]) -> NoiseMeasure | None:
        del candidates, scores
        return None  # the user's loop reports a quality, not the predictions it is of

    def best_record(self, row: TrialRow, context: Mapping[str, Any]) -> dict[str, Any]:
        del context
        return user_record(self.space, row.config, row.params)

    def searched(self, row: TrialRow) -> dict[str, Any]:
        """The row's values by short name; the model as written says so first."""
        values = self.space.values_from_optuna(row.params)
        mark = {"model": AS_WRITTEN} if row.origin == AS_WRITTEN else {}
        return {**mark, **{name.removeprefix("user.").removeprefix("embedding."): v
                           for name, v in values.items()}}

    def save_vocab(self) -> Callable[[Path], Any] | None:
        return None

    def tracker_params(self) -> dict[str, str]:
        return {r: ref.spec for r, ref in self.records.items()}


def call_user(fn: Callable[..., Any], role: str, *args: Any) -> Any:
    """`fn(*args)`, a raise of the user's code turned into one ConfigError line."""
    try:
        return fn(*args)
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - the user's code: any error is bad input here
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        name = getattr(fn, "__qualname__", repr(fn))
        raise ConfigError(f"{role}: {name}(params) raised {type(e).__name__}: {first}") from None


def model_tables(model: nn.Module) -> list[dict[str, Any]]:
    """The config's table entries for the model's embedding modules (name = module path)."""
    from torch import nn

    out = []
    for path, m in model.named_modules():
        if isinstance(m, (nn.Embedding, nn.EmbeddingBag)):
            out.append({"name": path, "vocab_size": int(m.num_embeddings),
                        "dim": int(m.embedding_dim)})
    if not out:
        raise ConfigError(f"model: {type(model).__name__} has no nn.Embedding or "
                          "nn.EmbeddingBag modules; autoembed searches embedding tables")
    return out

