"""Measure the peak bytes of a REAL CPU training step of a user's model, independently of the
tracer: a fresh process (so nothing earlier shows through: each measurement is a fork of one
process that has imported torch and this code and measured nothing), glibc's mmap threshold fixed at
64 KiB (`MALLOC_MMAP_THRESHOLD_`: a freed tensor leaves RSS at once), oneDNN off (its bf16
scratch buffers are library workspace, not tensors: 6-9 MB on an AMX CPU), code paths warmed by
two steps of a small twin model, the model built (and, given `apply`, rewritten by
`autoembed.apply`: the uncompressed table it replaces is freed), then /proc/self/status VmHWM
reset (``5`` into /proc/self/clear_refs) and read after two steps. The figure is the
high-water above the RSS just before the build, as `estimate_model` leaves out building.
Linux only.

The model and example come from a module with ``build_model(**size)`` and
``make_example(**size)`` (the layout of `examples/`); `apply` names a function
``model -> config dict`` as ``module:function`` (`examples._demo:compressed_config`), `loss`
the loss ``(output, example) -> scalar`` of a forward that returns no loss (default: the
module's ``loss``, if it has one).
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from typing import Any

__all__ = ["measure_cpu_peak", "MMAP_THRESHOLD"]

MMAP_THRESHOLD = 65536

# The forking process: torch, Dynamo (torch's optimizers import it at their first step) and
# the measuring code imported once; per request (a JSON line on stdin) it imports the
# request's modules, then forks a child that measures and prints one JSON line, then prints
# the child's exit status. A child starts from this state, never from an earlier child's.
_ZYGOTE = r"""
import gc, importlib, json, os, sys, traceback
import torch
torch.set_num_threads(1)
# oneDNN's bf16 kernels (CPUs with AVX-512 BF16 / AMX) keep scratch and JIT buffers that
# are not tensors (as cuBLAS' workspace on CUDA, outside allocated_peak): measure tensors only
torch.backends.mkldnn.enabled = False
import torch._dynamo
from autoembed.models.user_step import UserStep

def status(field):
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(field + " not in /proc/self/status")

def function(spec):
    where, _, fn = spec.partition(":")
    return getattr(importlib.import_module(where), fn)

def measure(args, mod, loss, config_of):
    torch.manual_seed(0)
    if config_of is not None:
        import autoembed
        from autoembed.config import config_from_dict

    def build(size):
        model = mod.build_model(**size)
        if config_of is not None:
            autoembed.apply(model, config_from_dict(config_of(model)))
        gc.collect()
        return model

    def run(model, size):
        step = UserStep.build(model, precision=args["precision"],
                              optimizer=args["optimizer"])
        example = mod.make_example(**size)
        for _ in range(2):
            step.step(example, loss)

    run(build(args["twin"]), args["twin"])  # warm code pages, thread pools, allocator paths
    gc.collect()
    base = status("VmRSS")
    model = build(args["size"])
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    run(model, args["size"])
    return {"measured": status("VmHWM") - base, "base": base}

def serve(line):
    args = json.loads(line)
    if args["path"] not in sys.path:
        sys.path.insert(0, args["path"])
    try:  # imported here, before the fork: each child finds them loaded
        mod = importlib.import_module(args["module"])
        loss = function(args["loss"]) if args["loss"] else getattr(mod, "loss", None)
        config_of = function(args["apply"]) if args["apply"] else None
    except Exception:
        return {"error": traceback.format_exc()}, None
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        try:
            out = measure(args, mod, loss, config_of)
        except BaseException:
            out = {"error": traceback.format_exc()}
        print(json.dumps(out), flush=True)
        os._exit(0)
    return None, os.waitpid(pid, 0)[1]

for line in sys.stdin:
    failed, code = serve(line)
    if failed is not None:
        print(json.dumps(failed), flush=True)
    print(json.dumps({"exit": code}), flush=True)
"""

_zygote: subprocess.Popen[bytes] | None = None


def _forker() -> subprocess.Popen[bytes]:
    """The forking process, started at the first measurement and kept to the interpreter's
    exit (its stdin closed then: it ends at EOF)."""
    global _zygote
    if _zygote is None or _zygote.poll() is not None:
        env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD)}
        _zygote = subprocess.Popen([sys.executable, "-c", _ZYGOTE], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, env=env, start_new_session=True)
        atexit.register(_stop, _zygote)
    return _zygote


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            _kill(proc)


def _answer(proc: subprocess.Popen[bytes], timeout: float) -> list[dict[str, Any]]:
    """The lines of one request, through its {"exit": status} line."""
    assert proc.stdout is not None
    fd, deadline, got = proc.stdout.fileno(), time.monotonic() + timeout, b""
    lines: list[dict[str, Any]] = []
    while not lines or "exit" not in lines[-1]:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        chunk = os.read(fd, 65536) if ready else b""
        if not chunk:
            _kill(proc)
            raise RuntimeError("the measuring process " + ("ended" if ready else
                               f"took over {timeout:.0f} s") + f"; read: {lines}")
        *whole, got = (got + chunk).split(b"\n")
        lines += [json.loads(x) for x in whole if x.startswith(b'{"')]  # not what a model prints
    return lines


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """The forking process and a child it runs (its own session)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def measure_cpu_peak(
    module: str,
    size: Mapping[str, Any],
    twin: Mapping[str, Any],
    *,
    precision: str = "fp32",
    optimizer: str = "adam",
    apply: str | None = None,
    loss: str | None = None,
    path: str = ".",
    timeout: float = 600,
) -> int:
    """Peak bytes of two real CPU training steps of `module`.build_model(**size), rewritten
    by the config that `apply` (``module:function``, model -> config dict) gives it, with
    the `loss` (``module:function``) where the forward returns no loss."""
    args = {"module": module, "size": dict(size), "twin": dict(twin), "precision": precision,
            "optimizer": optimizer, "apply": apply, "loss": loss,
            "path": os.path.abspath(path)}
    proc = _forker()
    assert proc.stdin is not None
    proc.stdin.write((json.dumps(args) + "\n").encode())
    proc.stdin.flush()
    lines = _answer(proc, timeout)
    results = [x for x in lines if "measured" in x or "error" in x]
    if lines[-1]["exit"] != 0 or len(results) != 1 or "error" in results[0]:
        err = results[0].get("error", "") if results else ""
        raise RuntimeError(f"measuring {module} {precision} {optimizer} failed (status "
                           f"{lines[-1]['exit']}): {err.strip()[-1500:]}")
    return int(results[0]["measured"])
