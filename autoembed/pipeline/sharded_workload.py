"""A TorchRec model's part of the user workload (a space with `topology:`): a proposal priced
per rank on TorchRec's plan, and its trial run as one process per rank (the topology's keys,
how a proposal is priced and judged, how a trial runs: docs/torchrec.md). `Sharded.of` reads
the topology and refuses a plan device that cannot train, more CUDA ranks than the trials'
GPUs, TorchRec missing, and functions a rank process could not find by name;
`Sharded.price` prices every rank (`torchrec.estimate_sharded`); `run_local_trial` and
`run_ray_trial` run a trial.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from autoembed.errors import ConfigError
from autoembed.pipeline.workload import HOST_BASE_BYTES, Invalid, Launch, Priced, final_report

if TYPE_CHECKING:
    from autoembed.space import SearchSpace
    from autoembed.user.functions import FunctionRef
    from autoembed.user.run import UserCode

__all__ = ["Sharded", "run_local_trial", "run_ray_trial", "sharded_result", "export_pick",
           "TRIAL_KEY", "TOPOLOGY_KEY"]

TRIAL_KEY = "torchrec"  # the payload's key holding the sharded trial's settings
TOPOLOGY_KEY = "torchrec_topology"  # the study meta's key: the topology planned on
# the interface gloo / NCCL bind to on a cluster: passed on to the Train workers when set here
INTERFACE_ENV = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")


@dataclass(frozen=True)
class Sharded:
    """How a TorchRec model's proposals are planned: `topology` (`RankTopology`'s fields
    but the batch, which is the example's)."""

    topology: Mapping[str, Any]

    @classmethod
    def of(cls, space: SearchSpace, budget_bytes: int, device: str,
           records: Mapping[str, FunctionRef], gpus: int | None = None) -> Sharded | None:
        """None for a space without `topology:`; ConfigError for one a search cannot run
        here (see the module docstring). `gpus`: the GPUs its trials see (None: unknown, a
        cluster's): a CUDA plan of more ranks is refused (a rank trains on its own GPU,
        priced against the whole per-GPU budget)."""
        if space.topology is None:
            return None
        from autoembed.torchrec.lib import require
        from autoembed.user.functions import check_findable
        from autoembed.user.space import check_plan_device

        require()
        topo = {"hbm": budget_bytes, "compute_device": device, **space.topology}
        if topo["compute_device"] == "cuda" and device != "cuda":
            raise ConfigError(f"search space '{space.source}': key 'topology.compute_device' "
                              f"= 'cuda': the trials run on this machine's {device} (--device "
                              f"{device}); plan for cpu, or search where GPUs are")
        ranks = int(topo.get("world_size", 1))
        if topo["compute_device"] == "cuda" and gpus is not None and ranks > gpus:
            raise ConfigError(f"search space '{space.source}': key 'topology.world_size' = "
                              f"{ranks}: each rank trains on its own GPU, priced against the "
                              f"whole per-GPU budget, and this search's trials see {gpus}; give "
                              f"world_size <= {gpus}, or search a Ray cluster (--ray-address)")
        check_plan_device(space, str(topo["compute_device"]))
        check_findable(records, "each rank's process", script=False)
        return cls(topo)

    def price(self, space: SearchSpace, code: UserCode, values: Mapping[str, Any],
              probe: Any, example: Any,
              launch_payload: Callable[[Mapping[str, Any], Any], dict[str, Any]],
              seeded: Callable[[Any], Any] = lambda c: c) -> Priced | Invalid:
        """Price `values` (see the module docstring). `probe`: the model built on the meta
        device; `launch_payload(params, config)`: the user workload's trial payload;
        `seeded(config)`: the config with the trial's seed (each rank seeds with it)."""
        from autoembed.torchrec.planner import NoPlanError
        from autoembed.torchrec.settings import RankTopology
        from autoembed.torchrec.sharded import estimate_sharded
        from autoembed.torchrec.unsharded import batch_of
        from autoembed.user.guard import priced_inputs
        from autoembed.user.rank_guard import jagged_inputs
        from autoembed.user.run import built_module
        from autoembed.user.space import params_for

        items, config = _settings(space, values, probe)
        config = seeded(config)
        topo = RankTopology(batch_size=batch_of(example), **self.topology)
        params = params_for(space, values)
        try:
            est = estimate_sharded(lambda: built_module(code.build(params)), example, topo,
                                   items, loss=code.loss, dense_optimizer=config.dense_optimizer,
                                   lr=config.lr)
        except NoPlanError as e:
            return Invalid(str(e), config)
        ranks = [r.to_dict() for r in est.ranks]
        inputs = priced_inputs(example, jagged_inputs)  # each rank's loop is held to them
        cpu = topo.compute_device == "cpu"
        host = sum(HOST_BASE_BYTES + r.host_bytes + (r.allocated_peak if cpu else 0)
                   for r in est.ranks)

        def launch(number: int) -> Launch:
            del number
            payload = launch_payload(params, config)
            payload[TRIAL_KEY] = {"tables": items, "topology": asdict(topo), "lr": config.lr,
                                  "dense_optimizer": config.dense_optimizer,
                                  "priced_inputs": inputs, "estimate": ranks}
            return Launch(payload, host, space.early_stop)

        return Priced(config, est.memory_estimate(), launch)

    def ray_options(self, base: Mapping[str, Any]) -> dict[str, Any]:
        """The Ray options for sharded trials: the Tune trial holds no CPU or GPU, the
        workers' environment carries MEASURE_ENV and this process's INTERFACE_ENV, nodes
        need TorchRec."""
        import os

        from autoembed.pipeline.sharded_runner import MEASURE_ENV

        env = dict(base.get("runtime_env") or {})
        ifnames = {k: os.environ[k] for k in INTERFACE_ENV if os.environ.get(k)}
        env["env_vars"] = {**MEASURE_ENV, **ifnames, **dict(env.get("env_vars") or {})}
        return {**base, "runtime_env": env, "packages": (*base.get("packages", ()),
                                                         "torchrec"),
                "trial_cpus": 0, "trial_gpus": 0}


def _settings(space: SearchSpace, values: Mapping[str, Any], probe: Any
              ) -> tuple[list[dict[str, Any]], Any]:
    """The proposal's TorchRec settings of each table of the built model `probe` that a
    rule selects (`user.space.table_settings_for`), and the trial record's config."""
    from autoembed.torchrec.model import tables as torchrec_tables
    from autoembed.user.space import table_settings_for, torchrec_config

    tables = [{"name": t.name, "vocab_size": t.vocab_size, "dim": t.dim}
              for t in torchrec_tables(probe)]
    settings = table_settings_for(space, values, [t["name"] for t in tables])
    items = [{"name": t["name"], **s} for t, s in zip(tables, settings, strict=True) if s]
    return items, torchrec_config(space, values, tables, settings)


def export_pick(space: SearchSpace, refs: Mapping[str, FunctionRef],
                topology: Mapping[str, Any], optuna_params: Mapping[str, Any],
                module_name: str, *, seed: int) -> str:
    """A TorchRec study's trial as the text of the module `module_name` (nothing written):
    the user's model built with the trial's params, its tables set as the trial set them,
    planned on the study's `topology` (`torchrec.torchrec_code`); `seed`: the trial's
    (`config.seed`), the module's SEED, as the ranks seeded with it (`sharded_runner._seed`)."""
    from autoembed.torchrec.export_code import torchrec_code
    from autoembed.torchrec.settings import RankTopology
    from autoembed.torchrec.unsharded import batch_of
    from autoembed.user.functions import resolve_function
    from autoembed.user.run import built_module
    from autoembed.user.space import params_for

    values = space.values_from_optuna(optuna_params)
    params = params_for(space, values)
    build = resolve_function(refs["model"].spec, "--model")
    example = resolve_function(refs["example"].spec, "--example")
    model = built_module(build(params))
    items, config = _settings(space, values, model)
    topo = RankTopology(batch_size=batch_of(example(params)), **topology)
    return torchrec_code(model, items, topo, module_name, lr=config.lr, seed=seed)


def _rank_payload(payload: Mapping[str, Any], refs: Mapping[str, FunctionRef]
                  ) -> dict[str, Any]:
    """What every rank runs (`pipeline.sharded_runner.worker`'s payload): the user's functions by
    name, the trial's params, seed, tables, topology, dense optimizer, priced inputs (what
    each rank's loop is held to) and per-rank estimates; no deadline."""
    trial = payload[TRIAL_KEY]
    return {"build": refs["model"].spec, "example": refs["example"].spec,
            "train": refs["train"].spec, "params": dict(payload["params"]),
            "seed": int(payload["config"].get("seed", 0)),
            "tables": trial["tables"], "topology": trial["topology"], "lr": trial["lr"],
            "dense_optimizer": trial["dense_optimizer"], "estimate": trial["estimate"],
            "priced_inputs": trial.get("priced_inputs"),
            "metrics": list(payload.get("metrics") or ()),
            "threads": int(payload.get("threads") or 1), "timeout_s": None}


def _run(payload: Mapping[str, Any], channel: Callable[[Any], bool] | None, where: str,
         checked: bool, ranks_of: Callable[..., list[Any]]) -> dict[str, Any]:
    from autoembed.user.functions import FunctionRef
    from autoembed.user.run import ROLES
    from autoembed.user.trainer import checked_functions

    refs = ({r: FunctionRef.from_dict(payload["functions"][r]) for r in ROLES} if checked
            else checked_functions(payload, where))
    t0 = time.perf_counter()
    ranks = ranks_of(_rank_payload(payload, refs), channel)
    return final_report(sharded_result(payload, ranks, time.perf_counter() - t0))


def run_local_trial(payload: Mapping[str, Any], channel: Callable[[Any], bool] | None = None,
                    where: str = "this node", code: UserCode | None = None,
                    **_: Any) -> dict[str, Any]:
    """One sharded trial as local processes (`run_sharded`); `code`: the searching
    process's own functions (its modules need no check)."""
    from autoembed.pipeline.sharded_runner import run_sharded

    return _run(payload, channel, where, code is not None, run_sharded)


def run_ray_trial(payload: Mapping[str, Any], channel: Callable[[Any], bool] | None = None,
                  where: str = "this node", **_: Any) -> dict[str, Any]:
    """One sharded trial inside a Tune trial, on Ray Train workers (`ray_sharded`)."""
    from autoembed.pipeline.torchrec_trial import ray_sharded

    return _run(payload, channel, where, False, ray_sharded)


def sharded_result(payload: Mapping[str, Any], ranks: list[Mapping[str, Any]],
                   seconds: float) -> Any:
    """The trial's `TrialResult`: rank 0's loop (every rank stopped at the same step), each
    rank's measured peak beside its estimate (`ranks`), on CUDA the largest rank's peaks."""
    from autoembed.config import config_from_dict
    from autoembed.trial import Evaluation, rank_entry
    from autoembed.user.run import user_result

    first = ranks[0]
    cuda = payload[TRIAL_KEY]["topology"].get("compute_device") == "cuda"
    extra: dict[str, Any] = {"ranks": tuple(
        rank_entry(int(r["rank"]), r.get("estimate") or {}, r) for r in ranks)}
    if cuda:
        extra["measured_allocated_peak"] = max(int(r["max_memory_allocated"]) for r in ranks
                                               if "max_memory_allocated" in r)
        extra["measured_reserved_peak"] = max(int(r["max_memory_reserved"]) for r in ranks
                                              if "max_memory_reserved" in r)
    config = config_from_dict(payload["config"], f"trial {payload.get('number')} config")
    return user_result(
        config, str(first.get("status", "complete")), first.get("message") or None,
        dict(first.get("values") or {}), tuple(Evaluation(**e) for e in first.get("curve") or ()),
        throughput=first.get("throughput"), target=payload.get("target"), estimate=None,
        train_seconds=seconds, wall_seconds=seconds, eval_seconds=0.0,
        device="cuda" if cuda else "cpu", **extra)
