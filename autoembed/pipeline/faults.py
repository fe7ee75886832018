"""Fault injection for testing a search's fault handling on any machine (no GPU needed).

`AUTOEMBED_FAULTS="1:raise,2:nan,3:oom,4:kill"` (read by the driver) injects a fault into
the k-th trial to start training (launch order), after its first optimizer step, through
the runner's real paths: `raise` (a RuntimeError: `failed`), `nan` (every parameter NaN:
`diverged`), `oom` (a `torch.OutOfMemoryError` as CUDA raises it: `oom`, feeding the OOM
ceiling), `kill` (SIGKILL to the worker itself). Unset, nothing is injected.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Mapping
from typing import Any

from autoembed.errors import ConfigError

__all__ = ["ENV", "KINDS", "parse_faults", "faults_from_env", "fault_hook"]

ENV = "AUTOEMBED_FAULTS"
KINDS = ("raise", "nan", "oom", "kill")
# The message CUDA's caching allocator raises, with an injected marker.
OOM_MESSAGE = ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
               "of 8.00 GiB of which 0 bytes is free. (injected by AUTOEMBED_FAULTS)")


def parse_faults(text: str) -> dict[int, str]:
    """'1:raise,3:oom' -> {1: 'raise', 3: 'oom'}; bad text is a ConfigError naming it."""
    out: dict[int, str] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        k, sep, kind = part.partition(":")
        if not sep or not k.strip().isdigit() or int(k) < 1 or kind.strip() not in KINDS:
            raise ConfigError(
                f"{ENV} entry '{part}' is not N:KIND; use e.g. {ENV}=1:raise,2:oom with N the "
                f"trial's launch order (from 1) and KIND one of {', '.join(KINDS)}")
        out[int(k)] = kind.strip()
    return out


def faults_from_env(env: Mapping[str, str] | None = None) -> dict[int, str]:
    return parse_faults((os.environ if env is None else env).get(ENV, ""))


def fault_hook(kind: str | None) -> Callable[[Any, int], None] | None:
    """The runner's `on_step(trainer, step)` that fires `kind` after step 1 (None: no
    fault)."""
    if kind is None:
        return None
    if kind not in KINDS:
        raise ConfigError(f"fault '{kind}' is not one of {', '.join(KINDS)}")

    def hook(trainer: Any, step: int) -> None:
        if step != 1:
            return
        import torch

        if kind == "raise":
            raise RuntimeError("injected fault (AUTOEMBED_FAULTS): raise")
        if kind == "nan":
            with torch.no_grad():
                for p in trainer.model.parameters():
                    p.fill_(float("nan"))
        elif kind == "oom":
            raise torch.OutOfMemoryError(OOM_MESSAGE)
        elif kind == "kill":
            os.kill(os.getpid(), signal.SIGKILL)

    return hook
