"""`autoembed export --format python` for a search over the user's model: a short module that
rebuilds the chosen trial's model in the user's code — their `build(params)` with the
trial's params, then `autoembed.apply` with the exported config (the priced layout)."""

from __future__ import annotations

import pprint
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autoembed.errors import ConfigError
from autoembed.user.functions import FunctionRef

__all__ = ["python_module", "export_python"]

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
    model = {call}(PARAMS)
    applied = autoembed.apply(model, autoembed.load_config(CONFIG))
    return model if applied is None else applied
'''


def export_python(study: str, out: str | Path, *, runs_dir: str | Path = "runs",
                  pick: str | None = None, force: bool = False) -> tuple[Path, Path, int]:
    """Write the picked trial of a user search as `out` (the module) and its config beside
    it (`<out stem>.yaml`); (module, config, trial)."""
    from autoembed.config import safe_load_yaml, save_config
    from autoembed.pareto import parse_pick
    from autoembed.search import study as studies
    from autoembed.search.report import SearchReport
    from autoembed.space import Objective
    from autoembed.user.space import parse_user_space

    out = Path(out)
    cfg_path = out.with_suffix(".yaml")
    for p in (out, cfg_path):
        if p.exists() and not force:
            raise ConfigError(f"output file '{p}' exists; pass --force to overwrite it")
    runs = Path(runs_dir).absolute()
    if not (runs / "optuna.db").is_file():
        raise ConfigError(f"--study '{study}': no search has run under {runs} (no optuna.db); "
                          f"run `autoembed search --study {study} ...` first or pass --runs-dir")
    stored = studies.StoredStudy.open(runs, None, study, resume=True, flag="--study")
    meta = stored.meta
    if meta.get("kind") != "user":
        raise ConfigError(f"study '{study}' is not a search over your own model; export it "
                          "with --format yaml")
    space = parse_user_space(safe_load_yaml(meta["space_text"], "stored space", "space"),
                             str(meta["space_source"]))
    objectives = [Objective(o["name"], o["direction"]) for o in meta["objectives"]]
    from autoembed.budget import Budget

    report = SearchReport.build(list(studies.load_rows(stored.existing).values()), objectives,
                                parse_pick(pick or "knee"), Budget.parse(meta["budget"]),
                                study)
    if report.best is None:
        raise ConfigError(f"study '{study}' has no complete trial within its budget to export")
    row = report.best
    params = space.params_for(space.values_from_optuna(row.params))
    build = FunctionRef.from_dict(meta["functions"]["model"])
    save_config(row.config, cfg_path)
    out.write_text(python_module(build, params, cfg_path.name, study=study, trial=row.number))
    return out, cfg_path, row.number
