"""The module `autoembed export --format python` writes for a search over the user's model:
it rebuilds the chosen trial's model in the user's code — their `build(params)` with the
trial's params, then `autoembed.apply` with the exported config (the priced layout)."""

from __future__ import annotations

import pprint
from collections.abc import Mapping
from typing import Any

from autoembed.errors import ConfigError
from autoembed.user.functions import FunctionRef

__all__ = ["python_module"]

_RESERVED = ("Path", "autoembed", "CONFIG", "PARAMS", "build_model")


def python_module(build: FunctionRef, params: Mapping[str, Any], config_file: str, *,
                  study: str, trial: int) -> str:
    """The module's text. `config_file`: the exported YAML, relative to the module's folder
    (or absolute)."""
    top = build.qualname.split(".")[0]
    if not all(p.isidentifier() for p in (*build.module.split("."), *build.qualname.split("."))):
        raise ConfigError(f"model {build.spec}: not an importable name")
    alias = f"user_{top}" if top in _RESERVED else top
    call = ".".join([alias, *build.qualname.split(".")[1:]])
    plain = pprint.pformat(dict(params), indent=4, width=92, sort_dicts=False)
    return f'''"""Trial {trial} of study '{study}': its model, rebuilt for your own code.

Written by `autoembed export --format python`. `build_model()` calls your
{build.spec} with the trial's params, then rewrites its embeddings to the exported
config ({config_file}): exactly the layout autoembed priced.

    from this_module import PARAMS, build_model
    model = build_model()   # train it in your own loop with PARAMS
"""

from pathlib import Path

import autoembed
from {build.module} import {top}{f" as {alias}" if alias != top else ""}

CONFIG = Path(__file__).resolve().parent / {config_file!r}
PARAMS = {plain}


def build_model():
    model = {call}({"PARAMS" if build.takes_params else ""})
    applied = autoembed.apply(model, autoembed.load_config(CONFIG))
    return model if applied is None else applied
'''
