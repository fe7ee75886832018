"""The module `autoembed export --format python` writes for a search over the user's model:
it rebuilds the chosen trial's model the way the trial built it — their `build(params)` with
the trial's params, then their `apply` (else `autoembed.apply`) with the exported config (the
priced layout); the model as written (trial 0) is `build(params)` alone, nothing applied."""

from __future__ import annotations

import pprint
from collections.abc import Mapping
from typing import Any

from autoembed.errors import ConfigError
from autoembed.user.functions import FunctionRef

__all__ = ["python_module"]

_RESERVED = ("Path", "autoembed", "CONFIG", "PARAMS", "SEED", "build_model", "seed_generators",
             "sys")


def python_module(build: FunctionRef, params: Mapping[str, Any], config_file: str, *,
                  study: str, trial: int, apply: FunctionRef | None = None,
                  as_written: bool = False, seed: int = 0) -> str:
    """The module's text. `config_file`: the exported YAML, relative to the module's folder
    (or absolute); `apply`: the search's own apply (None: `autoembed.apply`); `as_written`:
    the trial trained `build(params)` alone; `seed`: the trial's, which `build_model()`
    seeds the generators with before build, as the trial did (`run.seed_generators`)."""
    imports, call = _import(build, "model", {})
    plain = pprint.pformat(dict(params), indent=4, width=92, sort_dicts=False)
    if as_written:
        how = (f"calls your\n{build.spec} with the trial's params, nothing applied: your "
               "model as written,\nas the search trained it")
        body = f"    return {call}({'PARAMS' if build.takes_params else ''})"
    else:
        rewrite = "autoembed.apply"
        if apply is not None:
            imports, rewrite = _import(apply, "apply", imports)
        how = (f"calls your\n{build.spec} with the trial's params, then rewrites its embeddings "
               f"with {apply.spec if apply else 'autoembed.apply'}\nto the exported config "
               f"({config_file}): exactly the layout autoembed priced")
        body = (f"    model = {call}({'PARAMS' if build.takes_params else ''})\n"
                f"    applied = {rewrite}(model, autoembed.load_config(CONFIG))\n"
                "    return model if applied is None else applied")
    body = "    seed_generators(SEED)  # as the trial did before build\n" + body
    roots = sorted({r.root for r in (build, apply) if r is not None and r.root is not None})
    after = "  # noqa: E402" if roots else ""  # imported once sys.path holds the roots
    lines = "\n".join(f"from {m} import {', '.join(names)}{after}"
                      for m, names in imports.items())
    if roots:  # found from anywhere, as the search imported them (a path on sys.path wins)
        lines = (f"for _root in {roots!r}:  # where the search imported your code from\n"
                 "    if _root not in sys.path:\n        sys.path.append(_root)\n" + lines)
    return f'''"""Trial {trial} of study '{study}': its model, rebuilt for your own code.

Written by `autoembed export --format python`. `build_model()` {how}.

    from this_module import PARAMS, SEED, build_model, seed_generators
    model = build_model()   # train it in your own loop with PARAMS
    seed_generators(SEED)   # before your loop, as the trial seeded its train
"""

import sys
from pathlib import Path

import autoembed
from autoembed.user.run import seed_generators
{lines}

CONFIG = Path(__file__).resolve().parent / {config_file!r}
PARAMS = {plain}
SEED = {int(seed)}  # the trial's: random, numpy and torch are seeded with it


def build_model():
{body}
'''


def _import(ref: FunctionRef, role: str, imports: dict[str, list[str]]
            ) -> tuple[dict[str, list[str]], str]:
    """`imports` (module -> "name [as alias]") with `ref`'s top-level name added, and the
    expression that calls `ref`."""
    top = ref.qualname.split(".")[0]
    if not all(p.isidentifier() for p in (*ref.module.split("."), *ref.qualname.split("."))):
        raise ConfigError(f"{role} {ref.spec}: not an importable name")
    alias = f"user_{top}" if top in _RESERVED else top
    name = f"{top} as {alias}" if alias != top else top
    got = {m: list(n) for m, n in imports.items()}
    taken = {n.split(" as ")[-1]: m for m, ns in got.items() for n in ns}
    if taken.get(alias, ref.module) != ref.module:  # the same name from two modules
        alias = f"{role}_{top}"
        name = f"{top} as {alias}"
    if name not in got.setdefault(ref.module, []):
        got[ref.module].append(name)
    return got, ".".join([alias, *ref.qualname.split(".")[1:]])
