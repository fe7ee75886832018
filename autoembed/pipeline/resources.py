"""Ray custom resources a trial asks for (`--trial-resources`): parsed and checked here,
without importing Ray (the request checks them before anything starts)."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from autoembed.errors import ConfigError

__all__ = ["parse_trial_resources", "OWN_RESOURCES", "TRIAL_RESOURCES_HELP"]

# Resources autoembed sizes itself (per trial); --trial-resources names custom ones only.
OWN_RESOURCES = ("CPU", "GPU", "memory", "object_store_memory")
RESOURCE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]{0,127}$")
TRIAL_RESOURCES_HELP = ("use NAME=AMOUNT[,NAME=AMOUNT], e.g. --trial-resources node_a=1 "
                        "--trial-resources node_b=1 for nodes started with "
                        "--resources '{\"node_a\": 1}' and '{\"node_b\": 1}'")


def parse_trial_resources(specs: Sequence[str]) -> tuple[dict[str, float], ...]:
    """`["node_a=1", "node_b=1,ssd=1"]` -> ({"node_a": 1.0}, {"node_b": 1.0, "ssd": 1.0})."""
    out = []
    for spec in specs:
        one: dict[str, float] = {}
        for part in (p.strip() for p in str(spec).split(",")):
            name, sep, amount = part.partition("=")
            name = name.strip()
            try:
                value = float(amount) if sep else math.nan
            except ValueError:
                value = math.nan
            if not RESOURCE_NAME.match(name) or not math.isfinite(value) or value <= 0:
                raise ConfigError(f"--trial-resources '{spec}': '{part}' is not NAME=AMOUNT "
                                  f"with AMOUNT > 0; {TRIAL_RESOURCES_HELP}")
            if name in OWN_RESOURCES:
                raise ConfigError(
                    f"--trial-resources '{spec}': {name} is sized by autoembed itself "
                    "(--workers, --device); name custom node resources only")
            one[name] = value
        out.append(one)
    return tuple(out)


