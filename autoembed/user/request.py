"""A user search's arguments, checked once before anything runs: every fault known before
the first trial is one ConfigError line (exit 2).

Checked here: the budget; `model`/`example`/`train` import and are callable, and can be
recorded so a resume finds them; the space file; trials; the executor. Checked when the first
proposal is priced (`user.pricing`), still before any trial: a `build` that raises or
returns no module, a model without embedding modules, a space rule naming a module the model
lacks. A resumed study's recorded functions must match (`check_resume`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autoembed.budget import Budget, BudgetLike
from autoembed.errors import ConfigError
from autoembed.user.functions import FunctionRef, check_unchanged
from autoembed.user.run import ROLES, UserCode
from autoembed.user.space import UserSpace, load_user_space

__all__ = ["UserRequest", "EXECUTORS", "FUNCTIONS_KEY"]

EXECUTORS = ("ray", "local")
FUNCTIONS_KEY = "functions"  # the study meta key holding role -> FunctionRef dict


@dataclass(frozen=True)
class UserRequest:
    """The checked arguments of a search over the user's model and loop."""

    budget: Budget
    code: UserCode
    records: Mapping[str, FunctionRef]
    space: UserSpace
    trials: int
    executor: str
    allow_changed_code: bool = False

    @classmethod
    def parse(cls, budget: BudgetLike, model: Any, example: Any, train: Any,
              space: str | Path | UserSpace, *, trials: int | None = None,
              executor: str = "ray", allow_changed_code: bool = False) -> UserRequest:
        b = Budget.of(budget)
        if executor not in EXECUTORS:
            raise ConfigError(f"executor '{executor}': use ray (the default) or local (one "
                              "trial at a time in this process, for a debugger)")
        code = UserCode.resolve(model, example, train)
        records = code.records()
        sp = space if isinstance(space, UserSpace) else load_user_space(space)
        n = sp.trials if trials is None else trials
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigError(f"trials = {n!r}: must be an integer >= 1")
        return cls(b, code, records, sp, n, executor, allow_changed_code)

    def meta(self) -> dict[str, Any]:
        """What the study stores to check a resume against."""
        return {FUNCTIONS_KEY: {r: self.records[r].to_dict() for r in ROLES}}

    def check_resume(self, stored: Mapping[str, Any]) -> None:
        """A resumed study must run the code it started with (see `check_unchanged`)."""
        funcs = stored.get(FUNCTIONS_KEY)
        if not isinstance(funcs, Mapping):
            raise ConfigError("this study was not a search over your own model; resume it "
                              "without --model/--example/--train, or start a new --study")
        for role in ROLES:
            check_unchanged(FunctionRef.from_dict(funcs[role]), self.records[role], role,
                            self.allow_changed_code)
