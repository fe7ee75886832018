"""Search objectives: the metrics a search may optimise, each with its one direction, and
the rule that checks a list of them (written once; the CLI, the Python API and space files
all read it)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from autoembed.errors import ConfigError, did_you_mean
from autoembed.rules import Each
from autoembed.space._messages import check_value, known_keys, space_error

__all__ = ["OBJECTIVES", "DEFAULT_OBJECTIVES", "MEASURED", "TIMING", "Objective", "check_objective",
           "parse_objectives"]

# Objective name -> the direction that makes sense for it (the only one accepted).
OBJECTIVES: dict[str, str] = {
    "quality": "maximize",  # AUC (ctr) or accuracy (text) on the test split
    "memory": "minimize",  # device_total in bytes (estimate, or measured on a GPU)
    "throughput": "maximize",  # training samples per second
    "latency": "minimize",  # p50 inference latency at batch 1, milliseconds
    "steps_to_target": "minimize",  # optimizer steps until validation quality >= target
}
NAMES = Each(None, "a non-empty list of objective names", filled=True, seq=(list,))
DEFAULT_OBJECTIVES = ("quality", "memory", "throughput")
# Objectives autoembed measures itself: a user's loop may not report them.
MEASURED = ("memory", "throughput", "steps_to_target")
# Objectives measured in wall-clock time: they differ from run to run of the same trial, so a
# repeatable search never lets them steer its proposals.
TIMING = ("throughput", "latency")


@dataclass(frozen=True)
class Objective:
    """One objective: a metric name and its direction ("maximize" or "minimize")."""

    name: str
    direction: str

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "direction": self.direction}


def check_objective(name: Any, where: str) -> None:
    """The objectives rule: `name` must be a known objective. `where` prefixes the message
    ("--objectives: ", or a space file's key)."""
    if name not in OBJECTIVES:
        raise ConfigError(f"{where}unknown objective '{name}'{did_you_mean(name, OBJECTIVES)}; "
                          f"use {', '.join(OBJECTIVES)}")


def parse_objectives(raw: Any, source: str) -> tuple[Objective, ...]:
    """Objectives from a list of names or {name, direction} mappings, or a comma string."""
    if isinstance(raw, str):
        raw = [s.strip() for s in raw.split(",") if s.strip()]
    check_value(source, "objectives", raw, NAMES)
    out: list[Objective] = []
    for i, item in enumerate(raw):
        key = f"objectives[{i}]"
        if isinstance(item, Mapping):
            known_keys(source, key, item, ("name", "direction"))
            name, direction = item.get("name"), item.get("direction")
        else:
            name, direction = item, None
        check_objective(name, f"search space '{source}': key '{key}.name' = {name!r}: ")
        name = str(name)
        natural = OBJECTIVES[name]
        if direction is not None and direction != natural:
            raise space_error(source, f"{key}.direction", direction,
                        f"objective '{name}' can only be '{natural}'")
        if any(o.name == name for o in out):
            raise space_error(source, key, name, "each objective may appear once")
        out.append(Objective(name, natural))
    return tuple(out)
