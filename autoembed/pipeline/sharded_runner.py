"""Run one sharded trial: N processes, each a rank of `DistributedModelParallel` over gloo
(CPU) or NCCL (one GPU per rank), with the plan the trial was priced on.

Input and output are plain data, so an executor can ship them anywhere (`run_sharded`
locally, `worker` inside a Ray Train worker); docs/torchrec.md ("Sharded trials") lists the
payload's keys and each rank's figures. ``step_peak`` is measured: the tensors live after a
warm-up step plus the RSS high-water above them over the measured steps (or persistent bytes
plus the high-water over the user's loop), VmHWM reset through /proc/self/clear_refs, with
glibc's arena count 1 and mmap threshold 64 KiB so that freed tensors leave RSS. Rank 0's
evaluations go to `channel` in the driver, whose answer (False: stop) every rank's `report`
receives at the same step. Each rank's loop is held to what the rank was priced with
(`user.rank_guard`): a refusal on any rank ends every rank `failed` at the same point.
Local ranks die with the driver (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import ctypes
import importlib
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from autoembed.errors import ConfigError

if TYPE_CHECKING:
    from autoembed.user.rank_guard import RankRefusals

__all__ = ["run_sharded", "worker", "decide", "tensor_storages", "table_state_bytes", "MEASURE_ENV"]

# glibc: one arena, and blocks of 64 KiB and more from mmap (freed at once)
MEASURE_ENV = {"MALLOC_ARENA_MAX": "1", "MALLOC_MMAP_THRESHOLD_": "65536",
               "OMP_NUM_THREADS": "1"}


def _resolve(ref: str | None, path: str | None) -> Callable[..., Any] | None:
    if not ref:
        return None
    if path and path not in sys.path:
        sys.path.insert(0, path)
    mod, _, fn = ref.partition(":")
    try:
        found: Callable[..., Any] = getattr(importlib.import_module(mod), fn)
        return found
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"'{ref}' cannot be found ({type(e).__name__}: {e}); give "
                          "module:function importable from the trial's path") from None


def _status(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def _reset_hwm() -> int:
    """Reset VmHWM to the current RSS; returns that RSS."""
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    return _status("VmRSS")


def _modules(model: Any) -> list[Any]:
    """Every module, with the sharded collections' lookups (TorchRec keeps them in lists
    that named_modules does not walk) and their FBGEMM kernels."""
    out, todo, seen = [], [model], set()
    while todo:
        m = todo.pop()
        if id(m) in seen:
            continue
        seen.add(id(m))
        out.append(m)
        todo.extend(m.children())
        for attr in ("_lookups", "_emb_modules"):
            todo.extend(x for x in (getattr(m, attr, None) or []) if hasattr(x, "children"))
        emb = getattr(m, "_emb_module", None)
        if emb is not None and hasattr(emb, "children"):
            todo.append(emb)
    return out


def tensor_storages(model: Any, optimizers: tuple[Any, ...] = ()) -> int:
    """Bytes of the distinct storages of every parameter, buffer and optimizer state tensor
    (each storage once)."""
    import torch

    seen: dict[int, int] = {}

    def add(t: Any) -> None:
        if isinstance(t, torch.Tensor) and t.layout == torch.strided and t.device.type != "meta":
            s = t.untyped_storage()
            seen.setdefault(s.data_ptr() or id(s), s.nbytes())

    for m in _modules(model):
        for t in [*m.parameters(recurse=False), *m.buffers(recurse=False)]:
            add(t)
    for opt in optimizers:
        for st in opt.state.values():
            for v in st.values():
                add(v)
    return sum(seen.values())


def table_state_bytes(model: Any) -> int:
    """Bytes of every FBGEMM table kernel's weights and optimizer state (each storage once)."""
    seen: dict[int, int] = {}
    for m in _modules(model):
        get = getattr(m, "split_optimizer_states", None)
        if get is None or not hasattr(m, "weights_offsets"):
            continue
        for name in ("weights_host", "weights_dev", "weights_uvm", "lxu_cache_weights"):
            t = getattr(m, name, None)
            if t is not None and t.numel() > 0:
                s = t.untyped_storage()
                seen.setdefault(s.data_ptr(), s.nbytes())
        for states in get():
            for t in states:
                s = t.untyped_storage()
                seen.setdefault(s.data_ptr(), s.nbytes())
    return sum(seen.values())


def _die_with_parent(parent: int) -> None:
    """SIGKILL this process when `parent` (the driver that started it) dies (Linux); if it
    died before this ran, exit now."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass
    if os.getppid() != parent:
        os._exit(1)


def _dense_optimizer(model: Any, name: str, lr: float) -> Any:
    import torch

    from autoembed.models.user_step import pin_foreach

    params = [p for p in model.parameters()
              if p.requires_grad and not hasattr(p, "_in_backward_optimizers")]
    classes = {"sgd": torch.optim.SGD, "adagrad": torch.optim.Adagrad,
               "adam": torch.optim.Adam}
    if name not in classes:
        raise ConfigError(f"dense_optimizer = {name!r}: must be one of {', '.join(classes)}")
    return pin_foreach(classes[name](params, lr=lr))


def _rank_channel(ask: Callable[[dict[str, Any]], bool] | None,
                  refusals: RankRefusals) -> Callable[[Any], bool]:
    """The stop channel every rank's `report` calls at the same step (the loop is SPMD): a
    guard's refusal on any rank ends the trial there on every rank (`refusals.agree`), else
    rank 0 asks `ask` (the driver's channel) and the answer is broadcast to every rank, so
    all ranks stop together."""
    from dataclasses import asdict

    import torch.distributed as dist

    def channel(ev: Any) -> bool:
        refusals.agree()
        box = [ask(asdict(ev)) if ask is not None and dist.get_rank() == 0 else True]
        dist.broadcast_object_list(box, src=0)
        return bool(box[0])

    return channel


def worker(rank: int, payload: Mapping[str, Any],
           ask: Callable[[dict[str, Any]], bool] | None = None) -> dict[str, Any]:
    """One rank of the trial (the process group already initialised): build, rewrite, plan,
    shard, then the user's loop or the measured steps. Returns this rank's plain result.
    `ask` (rank 0): an evaluation as a dict -> False to stop the trial on every rank."""
    import torch
    import torch.distributed as dist

    from autoembed.torchrec.lib import require

    require()
    from torchrec.distributed import DistributedModelParallel

    from autoembed.torchrec.model import apply
    from autoembed.torchrec.planner import plan_model, sharders
    from autoembed.torchrec.settings import RankTopology

    topo = RankTopology(**payload["topology"])
    params = dict(payload.get("params") or {})
    path = payload.get("path")
    build = _resolve(payload["build"], path)
    assert build is not None
    device = torch.device("cuda", rank % max(1, torch.cuda.device_count())) \
        if topo.compute_device == "cuda" else torch.device("cpu")
    _seed(payload)  # the trial's initial weights, on every rank, as a user trial's
    model = apply(build(params), payload.get("tables") or (), lr=payload.get("lr", 0.01),
                  compute_device=topo.compute_device)
    plan, _ = plan_model(model, topo, payload.get("tables") or (), dist.GroupMember.WORLD)
    dmp = DistributedModelParallel(model, device=device, plan=plan, sharders=sharders())
    persistent = tensor_storages(dmp)
    tables = table_state_bytes(dmp)
    out: dict[str, Any] = {"rank": rank, "persistent_bytes": persistent, "table_bytes": tables}
    train = _resolve(payload.get("train"), path)
    if train is not None:
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        _seed(payload)  # train's draws, whatever build and the sharding drew
        out.update(_user_loop(train, dmp, params, payload, ask))
        out["step_peak"] = persistent + out.pop("hwm_above_base")
        if device.type == "cuda":  # the device's own figures
            out.update(max_memory_allocated=int(torch.cuda.max_memory_allocated(device)),
                       max_memory_reserved=int(torch.cuda.max_memory_reserved(device)))
    else:
        out.update(_measured_steps(dmp, payload, params, rank, path))
    if payload.get("estimate"):
        out["estimate"] = payload["estimate"][rank]
    return out


def _seed(payload: Mapping[str, Any]) -> None:
    """Seed the generators with the trial's seed (`user.run.seed_generators`), where the
    payload carries one (a search's trial does)."""
    if "seed" in payload:
        from autoembed.user.run import seed_generators

        seed_generators(int(payload["seed"]))


def _user_loop(train: Callable[..., Any], dmp: Any, params: dict[str, Any],
                payload: Mapping[str, Any], ask: Any) -> dict[str, Any]:
    """The user's `train(model, params, report)` with autoembed's `Report` (statuses,
    throughput, the stop channel shared by the ranks), watched against what the rank was
    priced with (`user.rank_guard.watch_rank`: the payload's `dense_optimizer` and
    `priced_inputs`; a refusal on any rank ends every rank's loop `failed` at the same
    point): status, curve, values, throughput."""
    from dataclasses import asdict

    from autoembed.user.rank_guard import RankRefusals, agreement_group, watch_rank
    from autoembed.user.report import Diverged, Report, ReportError, TrialStopped

    report = Report(payload.get("metrics") or ())
    refusals = RankRefusals(report, agreement_group())
    report.channel = _rank_channel(ask, refusals)
    base = _reset_hwm()
    report.start()
    status, message, values = "complete", "", {}
    try:
        with watch_rank(dmp, payload.get("dense_optimizer", "adagrad"), refusals,
                        payload.get("priced_inputs")):
            returned = train(dmp, params, report)
            refusals.agree()  # one noted after the last forward (its optimizer step)
        values = report.final(returned)
    except (TrialStopped, Diverged, ReportError) as e:
        status, message = (report.ending.status, report.ending.message) if report.ending \
            else ("failed", str(e))
    return {"status": status, "message": message, "values": values,
            "curve": [asdict(ev) for ev in report.curve], "throughput": report.throughput,
            "hwm_above_base": _status("VmHWM") - base}


def _measured_steps(dmp: Any, payload: Mapping[str, Any], params: dict[str, Any],
                    rank: int, path: str | None) -> dict[str, Any]:
    """A warm-up step of the same shapes, then VmHWM reset and `steps` measured steps."""
    import gc

    make = _resolve(payload["example"], path)
    loss = _resolve(payload.get("loss"), path)
    assert make is not None
    example = make({**params, "seed": int(params.get("seed", 0)) * 1009 + rank})
    opt = _dense_optimizer(dmp, payload.get("dense_optimizer", "adagrad"),
                           float(payload.get("lr", 0.01)))

    def step() -> None:  # gradients freed before the forward, as the dense part is priced
        opt.zero_grad(set_to_none=True)
        out = dmp(example)
        value = loss(out, example) if loss is not None else out
        value.backward()
        opt.step()
        del out, value

    import torch

    cuda = torch.cuda.is_available() and next(dmp.parameters()).is_cuda
    step()
    gc.collect()
    live = tensor_storages(dmp, (opt,))
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    base = _reset_hwm()
    t0 = time.perf_counter()
    for _ in range(int(payload.get("steps", 1))):
        step()
    out = {"step_peak": live + _status("VmHWM") - base, "live_after_warmup": live,
           "step_s": (time.perf_counter() - t0) / int(payload.get("steps", 1))}
    if cuda:  # the device's own figures (the host RSS one is then host memory)
        torch.cuda.synchronize()
        out.update(max_memory_allocated=int(torch.cuda.max_memory_allocated()),
                   max_memory_reserved=int(torch.cuda.max_memory_reserved()))
    return out


def decide(channel: Callable[[Any], bool] | None, ev: dict[str, Any]) -> bool:
    """The channel's answer to an evaluation sent as a dict (no channel: continue)."""
    from autoembed.trial import Evaluation

    return True if channel is None else channel(Evaluation(**ev)) is not False


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spawned(rank: int, world: int, port: int, payload: Mapping[str, Any], conn: Any,
             parent: int) -> None:
    _die_with_parent(parent)
    import torch
    import torch.distributed as dist

    torch.set_num_threads(int(payload.get("threads", 1)))
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    try:
        backend = "nccl" if payload["topology"].get("compute_device") == "cuda" else "gloo"
        dist.init_process_group(backend, rank=rank, world_size=world)

        def ask(ev: dict[str, Any]) -> bool:
            conn.send(("eval", ev))
            return bool(conn.recv())

        try:
            conn.send(("ok", worker(rank, payload, ask if rank == 0 else None)))
        finally:
            dist.destroy_process_group()
    except BaseException as e:  # noqa: BLE001 - reported to the driver in one line
        text = str(e).strip().splitlines()
        conn.send(("error", f"rank {rank}: {type(e).__name__}: {text[0] if text else ''}"))
    finally:
        conn.close()


def run_sharded(payload: Mapping[str, Any],
                channel: Callable[[Any], bool] | None = None) -> list[dict[str, Any]]:
    """Run the trial as `topology.world_size` local processes (torch.multiprocessing, spawn);
    returns each rank's result, rank order. `channel`: each evaluation rank 0's `report`
    makes (an `autoembed.trial.Evaluation`) -> False to stop the trial (every rank's loop
    then raises TrialStopped: status "pruned"). A rank's failure is a RuntimeError naming
    it; bad input a ConfigError."""
    world = int(payload["topology"]["world_size"])
    procs, conns = _spawn_ranks(payload, world)
    results: dict[int, Any] = {}
    try:
        _gather(conns, procs, channel, payload.get("timeout_s", 600), results)
    finally:
        for p in procs:
            p.join(timeout=5 if all(r[0] == "ok" for r in results.values()) else 0.1)
            if p.is_alive():
                p.kill()
                p.join()
    errors = [r[1] for r in results.values() if r[0] == "error"]
    if errors:
        if errors[0].split(": ", 1)[-1].startswith("ConfigError"):
            raise ConfigError(errors[0].split("ConfigError: ", 1)[-1])
        raise RuntimeError(errors[0])
    return [results[r][1] for r in range(world)]


def _spawn_ranks(payload: Mapping[str, Any], world: int) -> tuple[list[Any], list[Any]]:
    """Start the `world` rank processes (spawn, MEASURE_ENV in their environment): the
    processes and the parent's end of each one's pipe, rank order."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    saved = {k: os.environ.get(k) for k in MEASURE_ENV}
    os.environ.update(MEASURE_ENV)  # the children read these at start
    port = _free_port()
    procs, conns = [], []
    try:
        for rank in range(world):
            recv, send = ctx.Pipe(duplex=True)
            p = ctx.Process(target=_spawned, daemon=True,
                            args=(rank, world, port, dict(payload), send, os.getpid()))
            p.start()
            send.close()
            procs.append(p)
            conns.append(recv)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return procs, conns


def _gather(conns: Sequence[Any], procs: Sequence[Any], channel: Callable[[Any], bool] | None,
            timeout: float | None, results: dict[int, Any]) -> None:
    """Each rank's last message into `results` (rank -> ("ok", result) or ("error", why)),
    answering rank 0's evaluations (`decide`) meanwhile; stops at the first error. A
    RuntimeError after `timeout` seconds (None: none)."""
    import multiprocessing.connection as mpc

    deadline = time.monotonic() + (float("inf") if timeout is None else float(timeout))
    pending = list(conns)
    while pending:
        left = deadline - time.monotonic()
        if left <= 0:
            raise RuntimeError(f"sharded trial timed out after {timeout} s")
        for c in mpc.wait(pending, timeout=min(left, 5.0)):
            assert isinstance(c, mpc.Connection)
            rank = conns.index(c)
            try:
                msg = c.recv()
                if msg[0] == "eval":  # rank 0's report: continue (True) or stop
                    c.send(decide(channel, msg[1]))
                    continue
                results[rank] = msg
            except EOFError:
                results[rank] = ("error", f"rank {rank}: the process died "
                                 f"(exit {procs[rank].exitcode})")
            pending.remove(c)
            if results[rank][0] == "error":
                return
