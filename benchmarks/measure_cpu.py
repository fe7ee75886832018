"""Measure the peak bytes of a REAL CPU training step of a user's model, independently of the
tracer: a fresh process (so nothing earlier shows through), glibc's mmap threshold fixed at
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

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

__all__ = ["measure_cpu_peak", "MMAP_THRESHOLD"]

MMAP_THRESHOLD = 65536

_CHILD = r"""
import gc, importlib, json, sys
import torch
torch.set_num_threads(1)
# oneDNN's bf16 kernels (CPUs with AVX-512 BF16 / AMX) keep scratch and JIT buffers that
# are not tensors (as cuBLAS' workspace on CUDA, outside allocated_peak): measure tensors only
torch.backends.mkldnn.enabled = False
from autoembed.models.user_step import UserStep

def status(field):
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(field + " not in /proc/self/status")

args = json.loads(sys.argv[1])
sys.path.insert(0, args["path"])
mod = importlib.import_module(args["module"])
torch.manual_seed(0)
config_of = None
loss = getattr(mod, "loss", None)
if args["loss"]:
    where, _, fn = args["loss"].partition(":")
    loss = getattr(importlib.import_module(where), fn)
if args["apply"]:
    import autoembed
    from autoembed.config import config_from_dict
    where, _, fn = args["apply"].partition(":")
    config_of = getattr(importlib.import_module(where), fn)

def build(size):
    model = mod.build_model(**size)
    if config_of is not None:
        autoembed.apply(model, config_from_dict(config_of(model)))
    gc.collect()
    return model

def run(model, size):
    step = UserStep.build(model, precision=args["precision"], optimizer=args["optimizer"])
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
print(json.dumps({"measured": status("VmHWM") - base, "base": base}))
"""


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
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD)}
    r = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(args)], capture_output=True,
                       text=True, timeout=timeout, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"measuring {module} {precision} {optimizer} failed: "
                           f"{r.stderr.strip()[-1500:]}")
    return int(json.loads(r.stdout.strip().splitlines()[-1])["measured"])
