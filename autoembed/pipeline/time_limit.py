"""How long a trial may run: `TrialTimeLimit`, given or derived from the workload and the
trials completed so far (the rule and what its executor does past it: docs/searching.md,
"Every trial ends")."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["TrialTimeLimit", "FLOOR_S", "STEP_S", "USER_FIRST_S", "FACTOR"]

FLOOR_S = 600.0  # the least a derived limit gives a trial
STEP_S = 1.0  # built-in trials: seconds per optimizer step on top of FLOOR_S
USER_FIRST_S = 6 * 3600.0  # a user's loop before any trial completed: its length is unknown
FACTOR = 10.0  # a derived limit: this many times the longest completed trial


def _words(seconds: float) -> str:
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


@dataclass(frozen=True)
class TrialTimeLimit:
    """`seconds`: the given limit (None: derived by the constants above); `user`:
    whether the trials run the user's loop (no step count to derive from)."""

    seconds: float | None = None
    user: bool = False

    def for_trial(self, steps: int | None, completed: Iterable[float]) -> float:
        """The limit of a trial that runs `steps` optimizer steps (None: unknown), given
        the wall times of the study's completed trials."""
        if self.seconds is not None:
            return float(self.seconds)
        longest = max(completed, default=None)
        if longest is not None:
            return max(FLOOR_S, FACTOR * float(longest))
        if self.user or steps is None:
            return USER_FIRST_S if self.user else FLOOR_S
        return FLOOR_S + STEP_S * steps

    def describe(self) -> str:
        """The line a search prints before its first trial."""
        if self.seconds is not None:
            return (f"trial time limit: {_words(self.seconds)} a trial (a trial past it ends "
                    "as timeout)")
        first = (f"{_words(USER_FIRST_S)} (your loop's length is unknown)" if self.user
                 else f"{_words(FLOOR_S)} + {STEP_S:g} s per step")
        return (f"trial time limit: {first} until a trial completes, then {FACTOR:g}x the "
                f"longest completed trial, at least {_words(FLOOR_S)} (the default; "
                "--trial-time-limit or the space's trial_time_limit sets it)")
