"""The seam between the search pipeline and what it searches: `Workload` (its parts:
docs/ARCHITECTURE.md). The pipeline exists once; a workload says what differs: its space, how
a proposal is priced, how a trial runs (`runner(local)`: a module-level ``run(payload,
channel) -> final report``; evaluations stream out through ``channel(evaluation) -> bool``),
what a study stores for a resume and what the report writes. Two implementations:
`pipeline.builtin.BuiltinWorkload` and `pipeline.user_workload.UserWorkload`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from autoembed.config import EmbeddingConfig
from autoembed.errors import AutoembedError
from autoembed.trial import Evaluation

if TYPE_CHECKING:
    from autoembed.budget import Budget
    from autoembed.memory.types import MemoryEstimate
    from autoembed.selection import NoiseMeasure, ValidScores
    from autoembed.space import SearchSpace
    from autoembed.space.start import StartPoint
    from autoembed.trial import TrialResult, TrialRow

__all__ = ["Workload", "Priced", "Launch", "Invalid", "Channel", "TrialRunner", "WORKLOADS",
           "HOST_BASE_BYTES", "NothingFitsError", "final_report", "evaluation_report", "CostClock",
           "failed_report"]

WORKLOADS = ("builtin", "user")  # Workload.kind; a study stores it (meta "kind")
# Host memory of a trial process besides its tensors (Python, torch, a Ray worker; measured
# 0.56 GB, rounded up)
HOST_BASE_BYTES = 768 * 2**20

# A running trial's channel to the search: one evaluation out, the decision back (True:
# go on; False: stop now, the trial is `pruned`).
Channel = Callable[[Evaluation], bool]
# A workload's trial runner: payload (plain data) and channel -> the final report.
TrialRunner = Callable[[Mapping[str, Any], Channel], Mapping[str, Any]]


class NothingFitsError(AutoembedError):
    """Not even the cheapest config of the space fits the budget (exit status 3)."""

    exit_code = 3


@dataclass(frozen=True)
class Launch:
    """What a feasible proposal runs with: the runner's plain-data `payload`, the host
    memory its process needs (`host_bytes`, reserved on Ray), and its `length` (max_steps,
    eval_every) for early stopping (None: never stopped early)."""

    payload: Mapping[str, Any]
    host_bytes: int
    length: tuple[int, int] | None = None


@dataclass(frozen=True)
class Priced:
    """A proposal priced: the config whose estimate the budget judges (resolved, at full
    size), the estimate, and `launch(number)`, called only for one that fits."""

    config: EmbeddingConfig
    estimate: MemoryEstimate
    launch: Callable[[int], Launch]


@dataclass(frozen=True)
class Invalid:
    """A proposal that cannot be priced: recorded `failed` with `reason`, never trained
    (`config`: the placeholder its row carries)."""

    reason: str
    config: EmbeddingConfig


class Workload(Protocol):
    """What is searched (see the module docstring)."""

    @property
    def kind(self) -> str:
        """One of WORKLOADS."""

    @property
    def space(self) -> SearchSpace: ...

    @property
    def target(self) -> float | None:
        """The quality steps_to_target counts to (None: none, or the data's own)."""

    @property
    def use_measured(self) -> bool:
        """Whether a GPU's measured peak stands for the priced memory."""

    @property
    def stand_in(self) -> bool:
        """Whether trials train a scaled-down copy of what is priced."""

    @property
    def keeps_best(self) -> bool:
        """Whether a trial's quality is its best evaluation's (validation selection), so
        the best it has shown is reached already (the front rule reads it)."""

    def trains(self, values: Mapping[str, Any], priced: EmbeddingConfig) -> Hashable:
        """What a trial of `values` (priced to `priced`) trains, as a key: trials with equal
        keys train one model, so a search trains it once. The priced config as the model
        reads it (`config.model_key`), and what else reaches the trial (a stand-in's
        scaled-down config; the params a user's functions are handed): equal keys have
        equal priced model keys (the proposer relies on it)."""

    def price(self, values: Mapping[str, Any]) -> Priced | Invalid:
        """Price a proposal (the space's values). Raises ConfigError for bad input that
        must stop the search before any trial (the user's code failing on the first one)."""

    def check_fits(self, budget: Budget) -> Mapping[str, Any] | None:
        """The cheapest values of the space, where they can be found cheaply (None
        otherwise); NothingFitsError (exit 3) when even they do not fit `budget`."""

    def start_points(self, cheapest: Mapping[str, Any] | None) -> tuple[StartPoint, ...]:
        """Known-good values a search trains first (`space.start`; none for a user's model)."""

    def runner(self, local: bool) -> TrialRunner:
        """The trial runner: `local` for this process (it may use objects held here)."""

    def ray_options(self) -> Mapping[str, Any]:
        """What Ray needs for this workload's trials: `runtime_env` (code to ship),
        `data_file` (bytes for the object store), `packages` each node must have, and
        `trial_cpus` / `trial_gpus` where a trial's own resources differ from the plan's."""

    def meta(self) -> dict[str, Any]:
        """The workload's part of the study's stored settings (read back on resume)."""

    def check_resume(self, stored: Mapping[str, Any]) -> None:
        """Refuse (ConfigError) a resume whose stored settings this workload cannot
        continue."""

    def config_of(self, params: Mapping[str, Any]) -> EmbeddingConfig | None:
        """The priced config of a trial's stored Optuna params, where it is cheap to rebuild
        (a recovered trial's row); None otherwise."""

    def context(self, placement: Mapping[str, Any]) -> dict[str, Any]:
        """The workload's fields of pareto.json (data, trained_on, stand_in, ...);
        `placement`: how each trial ran (device, threads)."""

    def noise(self, candidates: Sequence[TrialRow],
              scores: Mapping[int, ValidScores]) -> NoiseMeasure | None:
        """The within-noise pick's noise among `candidates` (None: not measurable)."""

    def best_record(self, row: TrialRow, context: Mapping[str, Any]) -> dict[str, Any]:
        """What best.yaml holds for the pick (`config`, and the workload's own keys);
        `context`: pareto.json's fields about the search."""

    def searched(self, row: TrialRow) -> dict[str, Any]:
        """The values the search chose for a trial, by name (the front table)."""

    def save_vocab(self) -> Callable[[Path], Any] | None:
        """A writer of the data's vocabulary maps into a directory (None: nothing to save)."""

    def tracker_params(self) -> dict[str, str]:
        """The workload's parameters on the search's MLflow run."""


def final_report(result: TrialResult, **extra: Any) -> dict[str, Any]:
    """A trial's last report (what `engine.finish` reads): its result, and beside it its
    packed validation scores (for the pick; stored with the trial)."""
    scores = result.valid_scores
    return {"status": result.status, "result": result.to_dict(), "error": None,
            "valid_scores": None if scores is None else scores.pack(), **extra}


def failed_report(e: BaseException, where: str = "") -> dict[str, Any]:
    """The final report of a trial that raised `e` (a `sys.exit` included)."""
    what = (f"SystemExit: the trial called sys.exit({e.code!r})" if isinstance(e, SystemExit)
            else f"{type(e).__name__}: {e}")
    return {"status": "failed", "result": None, "error": what + where}


def evaluation_report(ev: Evaluation) -> dict[str, Any]:
    """What a trial reports of one evaluation (what `engine.observe` reads); `train_s`: its
    optimizer seconds so far (a user's loop: the loop's), what it costs if stopped here."""
    return {"quality": float(ev.quality), "step": ev.step, "samples": ev.samples,
            "elapsed_s": ev.elapsed_s,
            "train_s": ev.elapsed_s if ev.train_s is None else ev.train_s}


class CostClock:
    """A trial's wall and CPU seconds (its process's, the driver's too in process) since the
    executor started it; every report carries `stamp()` (the final one under `cost`)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter,
                 cpu_clock: Callable[[], float] = time.process_time) -> None:
        self.clock, self.cpu_clock = clock, cpu_clock
        self.t0, self.c0 = clock(), cpu_clock()

    def stamp(self) -> dict[str, float]:
        """{"wall_s": ..., "cpu_s": ...} so far."""
        return {"wall_s": self.clock() - self.t0, "cpu_s": self.cpu_clock() - self.c0}
