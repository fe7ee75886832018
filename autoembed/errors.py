"""Error types shared by every stage; the CLI maps them to the exit codes
(docs/contracts.md#exit-status)."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["AutoembedError", "ConfigError", "BudgetError", "DataError", "UnsupportedError",
           "DoesNotFitError", "TrialTimeout", "Interrupted", "did_you_mean", "first_line"]


def did_you_mean(given: object, valid: Iterable[str]) -> str:
    """" (did you mean 'x'?)" naming the closest of `valid` to `given`, or "" (the one
    suggestion format every "unknown key/name" message uses)."""
    import difflib

    close = difflib.get_close_matches(str(given), list(valid), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def first_line(e: BaseException) -> str:
    """The first line of `e`'s message (its type's name when it has none): how a message
    quotes a library's error."""
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


class AutoembedError(Exception):
    """Base class: a message meant for a human, one line, naming the value and the fix."""

    exit_code = 1


class ConfigError(AutoembedError, ValueError):
    """A config, search space or command-line value breaks a rule (exit status 2)."""

    exit_code = 2


class BudgetError(ConfigError):
    """A budget string cannot be parsed or resolved (exit status 2)."""


class DataError(ConfigError):
    """Input data are missing, unreadable or malformed (exit status 2)."""


class UnsupportedError(AutoembedError):
    """The device cannot run what the config asks for (e.g. bf16 on an old GPU)."""

    exit_code = 1


class DoesNotFitError(AutoembedError):
    """A config needs more memory than the device it would train on has (exit status 3)."""

    exit_code = 3


class TrialTimeout(BaseException):  # noqa: N818 - named for what happened, as TimeoutError
    """Raised inside a trial that runs in the searching process when it passes its time
    limit. A BaseException, so that a training loop's `except Exception` does not swallow
    it; the executor records the trial `timeout`."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C ended a search; the message says what was kept and how to resume (exit
    status 130)."""

    exit_code = 130
