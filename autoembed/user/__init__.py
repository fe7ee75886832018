"""Search over the user's own model and training loop.

Stages, each its own module: `space` (the `embedding:` / `user:` space file), `functions`
(recording and resolving the user's functions), `pricing` (a proposal priced on the user's
model before it trains), `report` (what the user's loop tells autoembed, and the stop it
receives), `run` (one trial of the user's loop as the trial record).
"""

from __future__ import annotations

from autoembed.user.functions import FunctionRef, check_unchanged, record_function, resolve_function
from autoembed.user.report import Diverged, Report, ReportError, TrialStopped

__all__ = ["FunctionRef", "record_function", "resolve_function", "check_unchanged", "Report",
           "TrialStopped", "Diverged", "ReportError"]
