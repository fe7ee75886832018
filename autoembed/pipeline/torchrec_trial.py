"""A sharded TorchRec trial on Ray: `ray_sharded(payload)` runs
`autoembed.pipeline.sharded_runner.worker` on N Ray Train workers (gloo on CPU, NCCL with one
GPU per worker) and returns each rank's plain result, as `run_sharded` does.

The calling Tune trial holds no CPU; each worker asks `cpus_per_worker` (default 0.5) and
runs one torch thread, so a 2-rank trial fits one core. Results are gathered to rank 0
(`all_gather_object`) and handed back through a Ray queue (no shared file system needed).
Workers die with the driver. On a cluster gloo needs GLOO_SOCKET_IFNAME (NCCL:
NCCL_SOCKET_IFNAME) in the workers' `runtime_env`; `pipeline.sharded_runner.MEASURE_ENV` is
set there too.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["ray_sharded"]

ANSWER_TIMEOUT_S = 600  # rank 0 waits this long for the driver's answer to an evaluation


def _loop(config: dict[str, Any]) -> None:
    import torch
    import torch.distributed as dist
    from ray import train

    from autoembed.pipeline.sharded_runner import worker

    torch.set_num_threads(1)
    rank = train.get_context().get_world_rank()

    def ask(ev: dict[str, Any]) -> bool:  # rank 0's evaluation to the driver, its answer back
        config["evals"].put(ev)
        return bool(config["answers"].get(timeout=ANSWER_TIMEOUT_S))

    mine = worker(rank, config["payload"], ask if rank == 0 else None)
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, mine)
    if rank == 0:
        config["queue"].put(json.dumps(gathered))


def ray_sharded(payload: Mapping[str, Any], channel: Callable[[Any], bool] | None = None, *,
                cpus_per_worker: float = 0.5) -> list[Any]:
    """Run the trial on `topology.world_size` Ray Train workers; each rank's result, rank
    order. `channel` as `run_sharded`'s: rank 0's evaluations reach it through a Ray queue
    (served in this thread while the trainer runs), its answer goes back through a second."""
    import threading

    from ray.train import ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer
    from ray.util.queue import Empty, Queue

    from autoembed.pipeline.sharded_runner import decide

    topo = payload["topology"]
    gpu = topo.get("compute_device") == "cuda"
    queue, evals, answers = (Queue(actor_options={"num_cpus": 0}) for _ in range(3))
    trainer = TorchTrainer(
        _loop, train_loop_config={"payload": dict(payload), "queue": queue, "evals": evals,
                                  "answers": answers},
        torch_config=TorchConfig(backend="nccl" if gpu else "gloo"),
        scaling_config=ScalingConfig(
            num_workers=int(topo["world_size"]), use_gpu=gpu,
            resources_per_worker={"CPU": cpus_per_worker, **({"GPU": 1} if gpu else {})}))
    done: dict[str, Any] = {}
    fit = threading.Thread(target=lambda: done.update(result=trainer.fit()), daemon=True)
    fit.start()
    try:
        while fit.is_alive():
            try:
                ev = evals.get(timeout=1.0)
            except Empty:
                continue
            answers.put(decide(channel, ev))
        fit.join()
        if "result" not in done:
            raise RuntimeError("sharded trial failed on Ray: the trainer raised")
        result = done["result"]
        if result.error is not None:
            raise RuntimeError(f"sharded trial failed on Ray: {type(result.error).__name__}: "
                               f"{str(result.error).strip().splitlines()[0]}")
        return list(json.loads(queue.get(timeout=60)))
    finally:
        for q in (queue, evals, answers):
            q.shutdown()
