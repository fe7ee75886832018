"""One trial of the user's loop: `train(model, params, report)` on a built, applied model,
and what came of it as the one trial record (`TrialResult`).

Faults in the user's code are the trial's, never the search's: each ends the trial with the
status docs/user_search.md ("Statuses", "The loop trains what was priced") gives it; a trial
whose loop gave no quality at all is `failed` (the search cannot rank it). The objective
quality is the last one the loop gave: `train`'s return value, else its last report. On
CUDA the real peak around build and `train` is measured.
"""

from __future__ import annotations

import math
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autoembed.config import EmbeddingConfig
from autoembed.errors import ConfigError
from autoembed.runner import environment, is_oom
from autoembed.trial import Evaluation, TrialResult
from autoembed.user.functions import FunctionRef, record_function, resolve_function, with_params
from autoembed.user.guard import watch_loop
from autoembed.user.report import Diverged, Report, ReportError, TrialStopped

if TYPE_CHECKING:
    from torch import nn

__all__ = ["UserCode", "run_user_trial", "user_result", "user_traceback", "trial_seed",
           "seed_generators", "ROLES", "TRIAL_ROLES"]

ROLES = ("model", "example", "train")  # the CLI flags --model, --example, --train
TRIAL_ROLES = (*ROLES, "apply")  # what a trial runs (`apply` when given), shipped to workers
MAX_TRACEBACK_FRAMES = 30


@dataclass(frozen=True)
class UserCode:
    """The user's functions: build(params) -> nn.Module; example(params) -> one batch as
    the forward takes it (either may take no argument: `resolve` wraps it);
    train(model, params, report) -> None, a quality or a mapping;
    loss(output, example) -> a scalar tensor, for pricing a model whose forward does not
    return its loss (None: the output is the loss, or the stated stand-in is priced);
    apply(model, config) -> the rewritten model, or None having rewritten it in place
    (None: `autoembed.apply`)."""

    build: Callable[[Mapping[str, Any]], Any]
    example: Callable[[Mapping[str, Any]], Any]
    train: Callable[..., Any]
    loss: Callable[..., Any] | None = None
    apply: Callable[..., Any] | None = None

    @classmethod
    def resolve(cls, model: Any, example: Any, train: Any, loss: Any = None,
                apply: Any = None) -> UserCode:
        """From functions or "pkg.module:name" strings (ConfigError naming the flag)."""
        given = {"model": model, "example": example, "train": train, "loss": loss,
                 "apply": apply}
        got = {r: resolve_function(v, f"--{r}") if isinstance(v, str) else v
               for r, v in given.items() if v is not None or r in ROLES}
        for role, fn in got.items():
            if not callable(fn):
                raise ConfigError(f"{role} = {fn!r}: must be a function")
        for role in ("model", "example"):  # build() / example() too
            got[role] = with_params(got[role])
        return cls(got["model"], got["example"], got["train"], got.get("loss"),
                   got.get("apply"))

    def records(self) -> dict[str, FunctionRef]:
        """role -> FunctionRef (`loss` and `apply` only when given)."""
        fns = {"model": self.build, "example": self.example, "train": self.train,
               "loss": self.loss, "apply": self.apply}
        return {r: record_function(fn, r) for r, fn in fns.items() if fn is not None}

    def model_for(self, params: Mapping[str, Any], config: Any) -> nn.Module:
        """The model a proposal is priced on and its trial trains, the one way both make
        it: `build(params)`, then `apply` (the user's, else `autoembed.apply`) with the
        proposal's `config`. ConfigError when either returns something not a module."""
        from autoembed.torchrec.public import apply as default_apply

        built = built_module(self.build(params))
        out = (self.apply or default_apply)(built, config)
        return built if out is None else built_module(out, "apply(model, config)")


def trial_seed(seed: int, values: Mapping[str, Any]) -> int:
    """The seed of a trial of the search seeded `seed` whose proposal is `values` (searched
    param -> value): a 32-bit number from sha256 of both, so one trial's is the same in every
    process, resume and export, and two trials' differ."""
    import hashlib

    text = repr((int(seed), sorted((str(k), repr(v)) for k, v in values.items())))
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big")


def seed_generators(seed: int) -> None:
    """Seed python's `random`, numpy's global generator and torch's (CPU and every CUDA
    device) with `seed`: what a trial does before the user's build and again before train,
    and the exported module's `build_model()` before build (`module_text`)."""
    import random

    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def built_module(obj: Any, call: str = "build(params)") -> nn.Module:
    """What `call` (the user's build, or apply) returned, which must be an nn.Module
    (ConfigError otherwise)."""
    from torch import nn

    if not isinstance(obj, nn.Module):
        raise ConfigError(f"model: {call} returned {type(obj).__name__}, not an "
                          "nn.Module; return the model")
    return obj


def user_traceback(e: BaseException) -> str:
    """'Type: message' and the traceback from the user's frames on (the first frame is
    autoembed's call site)."""
    te = traceback.TracebackException.from_exception(e)
    frames = te.stack[1:][-MAX_TRACEBACK_FRAMES:]
    head = "".join(te.format_exception_only()).strip()
    body = "".join(traceback.StackSummary.from_list(frames).format())
    return f"{head}\nTraceback (most recent call last):\n{body}".rstrip()


def run_user_trial(
    code: UserCode,
    params: Mapping[str, Any],
    config: EmbeddingConfig,
    report: Report,
    *,
    estimate: Mapping[str, Any] | None = None,
    target: float | None = None,
    device: str = "cpu",
    clock: Callable[[], float] = time.perf_counter,
    as_written: bool = False,
    priced_inputs: Sequence[Mapping[str, Any]] | None = None,
) -> TrialResult:
    """Build the model as it was priced (`code.model_for(params, config)`; `as_written`:
    `build(params)` alone, nothing applied), run `train` with `report` and return the
    trial's record. The generators are seeded with `config.seed` (`seed_generators`)
    before the build and again before `train`. `priced_inputs`: the priced example's inputs
    (`guard.priced_inputs`). Never raises for faults in the user's code."""
    wall0 = clock()
    cuda = device.startswith("cuda")
    if cuda:
        import torch

        torch.cuda.reset_peak_memory_stats()
    status, error, final, t_train = _run_loop(code, params, config, report, clock, wall0,
                                              as_written, priced_inputs)
    train_s = clock() - t_train
    extra: dict[str, Any] = {}
    if cuda:
        import torch

        extra["measured_allocated_peak"] = int(torch.cuda.max_memory_allocated())
        extra["measured_reserved_peak"] = int(torch.cuda.max_memory_reserved())
    return user_result(
        config, status, error, final, tuple(report.curve), throughput=report.throughput,
        target=target, estimate=estimate, train_seconds=train_s,
        wall_seconds=clock() - wall0, eval_seconds=report.eval_seconds, device=device,
        **extra)


def _run_loop(code: UserCode, params: Mapping[str, Any], config: EmbeddingConfig,
              report: Report, clock: Callable[[], float], t_train: float, as_written: bool,
              priced_inputs: Sequence[Mapping[str, Any]] | None,
              ) -> tuple[str, str | None, dict[str, float], float]:
    """Build the model and run the user's loop on it: (status, error, the final figures,
    the clock when training began; `t_train` if it never did). A fault of the user's code
    is the status it ends with (pruned, diverged, failed, oom), its traceback the error."""
    final: dict[str, float] = {}
    status, error = "complete", None
    try:
        seed_generators(config.seed)  # the trial's initial weights, as export rebuilds them
        built = (built_module(code.build(params)) if as_written
                 else code.model_for(params, config))
        seed_generators(config.seed)  # train's draws, whatever build drew
        report.start()
        t_train = clock()
        with watch_loop(built, config, report, priced_inputs):  # it trains what was priced
            final = report.final(code.train(built, params, report))
    except TrialStopped as e:
        status, error = "pruned", str(e)
    except Diverged as e:
        status, error = "diverged", str(e)
    except ReportError as e:
        status, error = "failed", str(e)
    except KeyboardInterrupt:
        raise
    except Exception as e:  # noqa: BLE001 - the user's fault is the trial's result
        status = "oom" if is_oom(e) else "failed"
        error = user_traceback(e)
    if report.ending is not None:  # the loop swallowed what report raised
        status, error = report.ending.status, report.ending.message
    return status, error, final, t_train


def user_result(config: EmbeddingConfig, status: str, error: str | None,
                final: Mapping[str, float], curve: tuple[Evaluation, ...], *,
                target: float | None, estimate: Mapping[str, Any] | None, device: str,
                **extra: Any) -> TrialResult:
    """The record of a run of the user's loop: `status` and `error` as it ended, `final`
    (what `train` returned, checked), the `curve` of its reports. The objective quality is
    `final`'s, else the last report's; a complete trial without one is `failed`. `extra`:
    the other TrialResult fields (throughput, timings, measured peaks) as they are."""
    final = dict(final) if status == "complete" else {}
    last_ev = curve[-1] if curve else None
    quality = final.pop("quality", None)
    if quality is None and last_ev is not None and not math.isnan(last_ev.quality):
        quality = last_ev.quality
    if status == "complete" and quality is None:  # nothing to rank: never on a front
        status, error = "failed", (
            "the trial reported no quality: train must call report(step=, samples=, "
            "quality=) after each validation, or return the quality")
    metrics = {**(last_ev.metrics if last_ev else {}), **final}
    reached = next((e for e in curve if target is not None and e.quality >= target), None)
    return TrialResult(
        status=status, config=config, valid_quality=quality, metrics=metrics,
        curve=curve, steps=last_ev.step if last_ev else 0,
        samples=last_ev.samples if last_ev else 0,
        steps_to_target=reached.step if reached else None,
        samples_to_target=reached.samples if reached else None, target=target,
        estimate=dict(estimate or {}), error=error, env=environment(device), **extra)
