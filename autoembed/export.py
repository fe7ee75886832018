"""Export one trial's config, resolved, for `autoembed train --config` and `load_config`: its
sources (`--pick`, `trial:N`, `--run-id`), the file's keys and the neighbours copied beside
it, named by their content: docs/training.md. Every file is written atomically; bad input
(unknown study, trial or run id, unreachable tracking URI, an existing output) is a
`ConfigError`: exit 2.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from autoembed.config import EmbeddingConfig, config_from_dict, parse_config_text, resolved_tables
from autoembed.errors import ConfigError
from autoembed.pareto import DEFAULT_PICK, parse_pick
from autoembed.rules import Each, Integer, Is
from autoembed.training import TRAIN_KEY, TRAINED_ON_KEY, source_block, trained_on, training_of
from autoembed.trial import AS_WRITTEN, config_from_flat, csv_float, decode_csv_row

__all__ = ["TRAINED_ON_KEY", "trained_on", "TRAIN_KEY", "training_of", "FORMATS", "format_of",
           "Exported", "pick_member", "config_from_flat", "export_config"]

# python: a module that rebuilds a search over the user's own model (autoembed.user.module_text)
FORMATS = ("yaml", "json", "python")
VOCAB_DIR = "vocab"
# knee without objectives in pareto.json: quality against memory
_DEFAULT_OBJECTIVES = (("quality", "maximize"), ("memory", "minimize"))


@dataclass(frozen=True)
class Exported:
    """What `export_config` wrote."""

    path: Path
    config: EmbeddingConfig
    study: str | None
    trial: int | None
    pick: str
    run_id: str | None = None
    vocab: Path | None = None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Member:
    """A pareto.json member as a `pareto.Candidate` (missing metric values are NaN)."""

    number: int
    values: Mapping[str, float]
    raw: Mapping[str, Any]


def _trial_of(member: Mapping[str, Any]) -> int:
    return int(member.get("trial", member.get("number", -1)))


def _as_float(v: Any) -> float:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    return math.nan


def pick_member(members: Sequence[Mapping[str, Any]], rule: str,
                objectives: Sequence[Mapping[str, Any]] = (),
                noise: Mapping[str, Any] | None = None, floor: float | None = None
                ) -> Mapping[str, Any]:
    """The pareto.json member a rule picks, by `autoembed.pareto.pick` (the same rules as
    `search --pick`): within-noise, knee, max-quality, min-memory, max-throughput or
    trial:N. `noise`: pareto.json's record of how the search measured it (None: 0);
    `floor`: its `floor` (the quality a pick other than trial:N clears by the
    noise's `floor_noise`; None: none)."""
    from autoembed.pareto import pick
    from autoembed.selection import NoiseMeasure

    objs = [(str(o["name"]), str(o.get("direction", "maximize"))) for o in objectives
            if "name" in o] or list(_DEFAULT_OBJECTIVES)
    cands = [
        _Member(_trial_of(m), {k: _as_float(v) for k, v in (m.get("metrics") or {}).items()}, m)
        for m in members]
    if not cands:
        raise ConfigError("the Pareto front has no members: no trial completed; nothing to pick")
    measure = NoiseMeasure.from_dict(noise) if noise else None
    slack = None if measure is None else measure.pick_noise(
        {c.number: c.values.get("quality", math.nan) for c in cands})
    chosen = pick(cands, rule, objs, slack, _as_float(floor) if floor is not None else None,
                  0.0 if measure is None else measure.floor_noise)
    assert isinstance(chosen, _Member)
    return chosen.raw


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"'{path}' cannot be read as JSON: {e}") from None
    except RecursionError:  # json's decoder recurses once per nested [ or {
        raise ConfigError(f"'{path}' cannot be read as JSON: nested too deeply") from None
    if not isinstance(data, dict):
        raise ConfigError(f"'{path}' must hold a JSON object, got {type(data).__name__}")
    return data


def _member_ok(m: Any) -> bool:
    return (isinstance(m, Mapping) and isinstance(m.get("config"), Mapping)
            and Integer(0).ok(m.get("trial", m.get("number")))
            and isinstance(m.get("metrics") or {}, Mapping))


_MEMBERS = Each(Is(_member_ok, "a pareto member"), "a list of mappings, each with an integer "
                "'trial', a 'config' mapping and a 'metrics' mapping", seq=(list,))


def _check_pareto(pareto: Mapping[str, Any], path: Path) -> None:
    """Refuse a pareto.json whose shape the picks cannot use (hand-edited or damaged)."""
    def bad(what: str) -> ConfigError:
        return ConfigError(f"'{path}' is malformed: {what}; re-run the search, or export "
                           "with --pick trial:N (from trials.csv) or --run-id")

    members = pareto.get("members")
    if members is not None and not _MEMBERS.ok(members):
        raise bad(f"'members' {_MEMBERS.text}")
    objectives = pareto.get("objectives")
    if objectives is not None and not (isinstance(objectives, list) and all(
            isinstance(o, Mapping) and isinstance(o.get("name"), str)
            and o.get("direction", "maximize") in ("maximize", "minimize")
            for o in objectives)):
        raise bad(f"'objectives' = {objectives!r} must list {{name, direction}} mappings")


def _studies(runs_dir: Path) -> list[str]:
    if not runs_dir.is_dir():
        return []
    return sorted(p.parent.name for p in runs_dir.glob("*/pareto.json"))


def _study_dir(runs_dir: Path, study: str) -> Path:
    d = runs_dir / study
    if not d.is_dir():
        known = _studies(runs_dir)
        hint = f"studies there: {', '.join(known)}" if known else "it holds no finished search"
        raise ConfigError(
            f"unknown study '{study}': no directory {d} ({hint}); run `autoembed search "
            f"--study {study}` first or pass --runs-dir")
    return d


def _csv_rows(path: Path) -> dict[int, dict[str, str]]:
    """A trials.csv's rows by trial number ({} when there is no file)."""
    if not path.is_file():
        return {}
    with path.open(newline="") as fh:
        return {int(n): row for row in csv.DictReader(fh)
                if (n := (row.get("trial") or row.get("number") or "").strip()).isdigit()}


def _refuse_infeasible(status: str | None, what: str) -> None:
    if status == "infeasible":
        raise ConfigError(
            f"{what} is infeasible: its estimate does not fit the budget and it never "
            "trained; pick a feasible trial (see trials.csv or --pick)")


@dataclass(frozen=True)
class _Chosen:
    """A config picked for export, as plain data, and where it came from."""

    raw: dict[str, Any]
    study: str
    trial: int | None
    pick: str
    metrics: Mapping[str, Any]
    vocab: Path | None
    run_id: str | None = None
    data: Any = None  # pareto.json's data spec, for configs that lack one
    notes: tuple[str, ...] = ()
    params: Mapping[str, Any] | None = None  # the trial's Optuna params, where recorded
    trained_on: Mapping[str, Any] | None = None  # the `trained_on` block (None: unknown)
    memory: Mapping[str, Any] | None = None  # `source.memory` (None: not recorded)
    origin: str | None = None  # the member's `origin` (trial.AS_WRITTEN: nothing applied)
    search: Mapping[str, Any] = field(default_factory=dict)  # pareto.json (budget, trained_on)


def _open_store(tracking_uri: str | None, runs_dir: Path, need: str) -> tuple[Any, Any]:
    """(store, MlflowClient) or a ConfigError saying why there is none."""
    from autoembed.tracking.store import check_reachable, resolve_store

    store = resolve_store(tracking_uri, runs_dir)
    if store.kind == "none":
        raise ConfigError(f"{need} needs an MLflow store, and --tracking-uri is 'none'")
    if store.db_path is not None and not store.db_path.is_file():
        raise ConfigError(
            f"{need} needs an MLflow store, and there is none at {store.db_path} (no search "
            "recorded under this runs directory); pass --runs-dir or --tracking-uri")
    if store.kind == "http":
        check_reachable(store.uri, optional=False)  # seconds, before importing MLflow
    from autoembed.tracking.mlflow_store import open_client

    return store, open_client(store)


def _artifacts(client: Any, run_id: str) -> set[str]:
    return {f.path for f in client.list_artifacts(run_id)}


def _from_run(
    client: Any, uri: str, run_id: str, study: str | None, runs_dir: Path, tmp: Path, pick: str
) -> _Chosen:
    try:
        run = client.get_run(run_id)
    except Exception as e:  # noqa: BLE001 - MlflowException for unknown / malformed ids
        code = str(getattr(e, "error_code", ""))
        if code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE", "NOT_FOUND"):
            raise ConfigError(
                f"run id '{run_id}' is not in the MLflow store {uri}; copy a trial run's id "
                "from the UI or use --pick trial:N") from None
        raise
    tags = run.data.tags
    role = tags.get("autoembed.role")
    if role != "trial":
        what = {"search": "a search's parent run", "infeasible-group": "a grouping run"}.get(
            str(role), "not an autoembed trial run")
        raise ConfigError(f"run id '{run_id}' is {what}; give the run id of one trial")
    _refuse_infeasible(tags.get("status"), f"run '{run_id}' (trial {tags.get('trial')})")
    run_study = tags.get("autoembed.study") or study or ""
    if study is not None and run_study != study:
        raise ConfigError(
            f"run id '{run_id}' belongs to study '{run_study}', not '{study}'; drop --study "
            "or give a run of that study")
    if "config.yaml" not in _artifacts(client, run_id):
        raise ConfigError(f"run id '{run_id}' has no config.yaml artifact to export")
    text = Path(client.download_artifacts(run_id, "config.yaml", str(tmp))).read_text()
    raw = parse_config_text(text, f"run {run_id} config.yaml").to_dict()
    vocab = runs_dir / run_study / VOCAB_DIR if run_study else None
    if vocab is None or not vocab.is_dir():  # the copy on the search's parent run
        parent = tags.get("mlflow.parentRunId")
        vocab = None
        if parent and VOCAB_DIR in _artifacts(client, parent):
            vocab = Path(client.download_artifacts(parent, VOCAB_DIR, str(tmp)))
    trial = tags.get("trial", "")
    notes = () if tags.get("status") == "complete" else (f"the trial ended '{tags.get('status')}'",)
    metrics, search = dict(run.data.metrics), _search_of(client, tags.get("mlflow.parentRunId"))
    estimate = {k: metrics.get(f"estimate_{k}") for k in ("device_total", "allocated_peak")}
    memory = None if None in estimate.values() else _memory(estimate, search)
    return _Chosen(
        raw, run_study, int(trial) if trial.isdigit() else None, pick, metrics,
        vocab, run_id=run_id, notes=notes, search=search, memory=memory)


def _search_of(client: Any, parent: str | None) -> dict[str, Any]:
    """The search's figures its run (a trial run's parent) holds, as pareto.json names
    them: `budget`, `budget_bytes` and `memory_basis` (`plan.tracker_params`); those it
    lacks are left out (all where the run is gone)."""
    try:
        params = client.get_run(parent).data.params if parent else {}
    except Exception:  # noqa: BLE001 - MlflowException: a deleted parent; the config stands
        return {}
    out: dict[str, Any] = {k: params[k] for k in ("budget", "memory_basis") if params.get(k)}
    if str(params.get("budget_bytes", "")).isdigit():
        out["budget_bytes"] = int(params["budget_bytes"])
    return out


def _choose_from_study(
    study: str, pick: str | None, tracking_uri: str | None, runs_dir: Path, tmp: Path
) -> _Chosen:
    """The trial `pick` names in a study: a pareto.json member, else (trial:N) a row of
    trials.csv, else the trial's run in the tracking store."""
    sdir = _study_dir(runs_dir, study)
    vocab = sdir / VOCAB_DIR if (sdir / VOCAB_DIR).is_dir() else None
    pareto_path = sdir / "pareto.json"
    pareto = _read_json(pareto_path) if pareto_path.is_file() else {}
    _check_pareto(pareto, pareto_path)
    members = list(pareto.get("members") or [])
    rule, number, label = _rule_of(pick, pareto)
    if rule != "trial":
        if not pareto:
            raise ConfigError(f"study '{study}' has no pareto.json in {sdir} (search unfinished?); "
                              "use --pick trial:N or --run-id")
        member: Mapping[str, Any] | None = pick_member(
            members, rule, pareto.get("objectives") or (), pareto.get("noise"),
            pareto.get("floor"))
    else:
        member = next((m for m in members if _trial_of(m) == number), None)
    if member is not None:
        return _Chosen(dict(member["config"]), study, _trial_of(member), label,
                       member.get("metrics") or {}, vocab, data=pareto.get("data"),
                       params=member.get("params"), memory=_memory(member, pareto),
                       origin=member.get("origin"), search=pareto,
                       trained_on=trained_on(member.get("trained_config"), pareto.get("run"),
                                             pareto.get("stand_in"), pareto.get("data_sha256"),
                                             pareto.get("data_keys")))
    assert number is not None
    return _off_front(study, number, label, members, pareto, vocab, tracking_uri, runs_dir,
                      tmp)


def _rule_of(pick: str | None, pareto: Mapping[str, Any]) -> tuple[str, int | None, str]:
    """(rule, trial number, label) of `--pick` (None: the search's own pick, itself a
    trial:N where pareto.json names it, else DEFAULT_PICK)."""
    if pick:
        parsed = parse_pick(pick, "--pick")
        rule, number, label = parsed.rule, parsed.trial, str(parsed)
    else:
        rule, number, label = "best", None, ""
    if rule != "best":
        return rule, number, label
    best = pareto.get("best")  # its trial may be off the front: trial:N
    if isinstance(best, int) and not isinstance(best, bool):
        how = str(pareto.get("pick") or "")
        label = f"search pick {how} = trial:{best}" if how and how != f"trial:{best}" \
            else f"search pick trial:{best}"
        return "trial", best, label
    return DEFAULT_PICK, None, DEFAULT_PICK


def _off_front(study: str, number: int, label: str, members: Sequence[Mapping[str, Any]],
               pareto: Mapping[str, Any], vocab: Path | None, tracking_uri: str | None,
               runs_dir: Path, tmp: Path) -> _Chosen:
    """Trial `number`, not a pareto.json member: its trials.csv row (through the trial
    codec; metrics without a value left out; its memory from the row's estimate), else its
    run in the tracking store; an unknown trial is a ConfigError listing the known ones."""
    csv_path = _study_dir(runs_dir, study) / "trials.csv"
    data = pareto.get("data")
    row = _csv_rows(csv_path).get(number)
    if row is not None:
        _, status, raw, values = decode_csv_row(row, f"{csv_path} trial {number}")
        metrics = {k: v for k, v in values.items() if v is not None}
        _refuse_infeasible(status, f"trial {number}")
        notes = () if status in ("", "complete") else (f"trial {number} ended '{status}'",)
        estimate = {k: _as_float(csv_float(row.get(f"estimate_{k}")))
                    for k in ("device_total", "allocated_peak")}
        memory = None if any(map(math.isnan, estimate.values())) else _memory(estimate, pareto)
        return _Chosen(raw, study, number, label, metrics, vocab, data=data, notes=notes,
                       memory=memory, search=pareto)
    from autoembed.tracking.store import resolve_store

    store = resolve_store(tracking_uri, runs_dir)
    if store.kind != "none" and (store.db_path is None or store.db_path.is_file()):
        _, client = _open_store(tracking_uri, runs_dir, f"--pick trial:{number}")
        from autoembed.tracking.mlflow_store import trial_runs

        exp = client.get_experiment_by_name(study)
        run = trial_runs(client, exp.experiment_id).get(number) if exp is not None else None
        if run is not None:
            got = _from_run(client, store.uri, run.info.run_id, study, runs_dir, tmp, label)
            return replace(got, study=study, trial=number, data=data, search=pareto)
    known = sorted({*(_trial_of(m) for m in members), *_csv_rows(csv_path)})
    listed = ", ".join(map(str, known[:30])) or "none recorded"
    raise ConfigError(f"unknown trial {number} in study '{study}' (known trials: {listed}); "
                      "see trials.csv for the numbers")


def _memory(member: Mapping[str, Any], pareto: Mapping[str, Any]) -> dict[str, Any] | None:
    """The member's memory as the search's best.yaml holds it (`memory.objective.judged`);
    None where pareto.json has no device total for it (an older file)."""
    from autoembed.memory.objective import judged

    if not member.get("device_total"):
        return None
    return judged(member, pareto.get("budget_bytes"), pareto.get("budget"),
                  pareto.get("memory_basis"))


_SUFFIX_FORMATS = {".json": "json", ".py": "python"}  # any other suffix: yaml


def format_of(out: Path, fmt: str | None) -> str:
    """The export format: `fmt` (any case) checked against FORMATS, else from out's suffix
    (.json, .py, else yaml). A python module must be a .py file: its record is written
    beside it as <stem>.yaml, which another suffix would make the module's own path."""
    f = _SUFFIX_FORMATS.get(out.suffix.lower(), "yaml") if fmt is None else fmt.strip().lower()
    if f not in FORMATS:
        raise ConfigError(f"--format '{fmt}' is not a format; use one of {', '.join(FORMATS)}")
    if f == "python" and out.suffix != ".py":
        raise ConfigError(f"--format python writes a Python module, and --out '{out}' is not a "
                          f".py file; give --out {out.with_suffix('.py')}")
    return f


def _tree_digest(root: Path) -> str:
    """The first 16 hex digits of the SHA-256 of a folder's files (relative paths and
    bytes, in path order)."""
    h = hashlib.sha256()
    for f in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(f"{f.relative_to(root).as_posix()}\0{f.stat().st_size}\0".encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _copy_vocab(src: Path, directory: Path) -> Path:
    """`src` copied to `directory/vocab-HASH/` (named by its content); a copy already
    there (the same content) is kept."""
    from autoembed.files import copy_tree_new

    digest = _tree_digest(src)
    dst = directory / f"{VOCAB_DIR}-{digest}"
    if dst.is_dir() and _tree_digest(dst) == digest:
        return dst
    if dst.exists():
        raise ConfigError(f"vocabulary directory '{dst}' differs from its name's content "
                          "(changed by hand?); remove it and export again")
    return copy_tree_new(src, dst)


def export_config(study: str | None, out: str | Path, *, pick: str | None = None,
                  run_id: str | None = None, fmt: str | None = None, force: bool = False,
                  runs_dir: str | Path = "runs", tracking_uri: str | None = None) -> Exported:
    """Write one trial's resolved config to `out` (see the module docstring)."""
    import tempfile

    out_path = Path(out)
    runs = Path(runs_dir).absolute()
    fmt_name = format_of(out_path, fmt)
    _check_request(out_path, study, pick, run_id, force)
    with tempfile.TemporaryDirectory(prefix="autoembed-export-") as tmpname:
        tmp = Path(tmpname)
        if run_id is not None:
            store, client = _open_store(tracking_uri, runs, "--run-id")
            chosen = _from_run(client, store.uri, run_id, study, runs, tmp, f"run:{run_id}")
        elif study is not None:
            chosen = _choose_from_study(study, pick, tracking_uri, runs, tmp)
        else:
            raise ConfigError("--study is required (or --run-id of one trial run)")
        own = _user_study(runs, chosen.study, fmt_name == "python")
        if own is not None:
            return _export_user(chosen, own, out_path, fmt_name, force)
        if fmt_name == "python":
            raise ConfigError(f"--format python writes a module that rebuilds a search over "
                              f"your own model; study '{chosen.study}' searched autoembed's "
                              "models: use --format yaml or json")
        return _export_builtin(chosen, out_path, fmt_name)


def _check_request(out: Path, study: str | None, pick: str | None, run_id: str | None,
                   force: bool) -> None:
    """Bad arguments, before anything is read: ConfigError."""
    if out.is_dir():
        raise ConfigError(f"--out '{out}' is a directory; give a file path such as best.yaml")
    if out.exists() and not force:
        raise ConfigError(f"output file '{out}' exists; pass --force to overwrite it")
    if run_id is not None and pick is not None:
        raise ConfigError("give --pick or --run-id, not both")
    if pick:
        parse_pick(pick, "--pick")  # a bad rule before the study is read
    if study is not None:  # a name, never a path out of the runs directory
        from autoembed.pipeline.study import check_study_name

        check_study_name(study)


def _export_builtin(chosen: _Chosen, out: Path, fmt: str) -> Exported:
    """Write a trial of autoembed's models: its config, resolved, with the file's extra
    keys (`_extra_keys`) and the neighbours it names."""
    from autoembed.config.io import config_text
    from autoembed.files import atomic_write_text

    raw, notes = dict(chosen.raw), list(chosen.notes)
    if not raw.get("data"):
        if isinstance(chosen.data, Mapping):
            raw["data"] = dict(chosen.data)
        elif isinstance(chosen.data, str):
            raw["data"] = {"name": chosen.data}
        else:
            notes.append("no data spec was recorded with this config; add a `data:` key")
    cfg = config_from_dict(raw, f"study '{chosen.study}' trial {chosen.trial}").resolve()
    extra = _extra_keys(chosen, notes)
    out.parent.mkdir(parents=True, exist_ok=True)
    vocab_dst = None
    if chosen.vocab is not None:
        vocab_dst = _copy_vocab(chosen.vocab, out.parent)
        extra["vocab"] = vocab_dst.name
    if any(t.compression == "hot_cold" for t in resolved_tables(cfg)):
        from autoembed.models.hot_cold import HOT_SETS_KEY, export_hot_sets

        hot, note = export_hot_sets(cfg, out.parent, chosen.vocab)
        if hot is not None:
            extra[HOT_SETS_KEY] = hot.name
        if note is not None:
            notes.append(note)
    atomic_write_text(out, config_text(cfg, fmt, extra))
    return Exported(out, cfg, chosen.study, chosen.trial, chosen.pick, chosen.run_id,
                    vocab_dst, tuple(notes))


def _source(chosen: _Chosen) -> dict[str, Any]:
    """An exported file's `source` block, whichever workload searched: best.yaml's shape
    (`training.source_block`), with the search's figures from its pareto.json."""
    search = chosen.search
    return source_block(chosen.study, chosen.trial, chosen.pick, chosen.metrics, chosen.memory,
                        run_id=chosen.run_id, budget=search.get("budget"),
                        budget_bytes=search.get("budget_bytes"),
                        trained_on=search.get("trained_on"))


def _extra_keys(chosen: _Chosen, notes: list[str]) -> dict[str, Any]:
    """The file's keys beside the config: `source` (study, trial, pick, run id, metrics,
    memory), the training length and the trained config (a note, appended, without it)."""
    extra: dict[str, Any] = {"source": _source(chosen)}
    length = training_of(chosen.metrics)
    if length:
        extra[TRAIN_KEY] = length
    if chosen.trained_on is not None:
        extra[TRAINED_ON_KEY] = dict(chosen.trained_on)
    else:
        notes.append(f"study '{chosen.study}' trial {chosen.trial}: its record holds no "
                     "trained config (only pareto.json's members carry one), so `autoembed "
                     "train` trains the priced config at full size, not a rerun of the trial")
    return extra


def _user_study(runs: Path, study: str, python: bool) -> tuple[Any, Any, Any] | None:
    """(space, the functions' FunctionRefs by role, the stored settings) of a study that
    searched the user's own model (its pareto.json says so; without one, or for `python`,
    its stored settings do); None otherwise."""
    from autoembed.config import safe_load_yaml
    from autoembed.pipeline import study as studies

    pareto_path = runs / study / "pareto.json"
    pareto = _read_json(pareto_path) if pareto_path.is_file() else {}
    kind = pareto.get("workload")
    if kind is None and not python:  # no pareto.json (a stopped search): the study says
        kind = _stored_kind(runs, study)
    if kind not in (None, "user"):
        return None
    from autoembed.space import parse_space
    from autoembed.user.functions import FunctionRef

    if not (runs / "optuna.db").is_file():
        raise ConfigError(f"--study '{study}': no search has run under {runs} (no optuna.db); "
                          f"run `autoembed search --study {study} ...` first or pass --runs-dir")
    stored = studies.StoredStudy.open(runs, None, study, resume=True, flag="--study",
                                      fix="give a study there, or the --runs-dir it ran in")
    meta = stored.meta
    if meta.get("kind") != "user":
        return None
    meta = {**meta, _ROWS: _stored_rows(stored.existing)}
    text = str(meta["space_text"])
    space = parse_space(safe_load_yaml(text, "stored space", "space"),
                        str(meta["space_source"]), text, "user")
    refs = {r: FunctionRef.from_dict(f) for r, f in meta["functions"].items()}
    return space, refs, meta


def _stored_kind(runs: Path, study: str) -> str:
    """The workload a study in `<runs>/optuna.db` searched ("builtin" where there is no
    such study or file: what an export of a trials.csv alone takes it for)."""
    from autoembed.pipeline import study as studies
    from autoembed.pipeline.records import ATTR

    if not (runs / "optuna.db").is_file():
        return "builtin"
    found = studies.find_study(studies.open_storage(runs), study)
    meta = found.user_attrs.get(ATTR) if found is not None else None
    return str(meta.get("kind", "builtin")) if isinstance(meta, Mapping) else "builtin"


_ROWS = "_rows"  # the stored settings' key (in export only) of the trials' records


def _stored_rows(existing: Any) -> dict[int, Mapping[str, Any]]:
    """Each trial's stored record (`TrialRow` as plain JSON: params, origin ...) by number."""
    from autoembed.pipeline.records import ATTR

    trials = existing.trials if existing is not None else []
    return {t.number: t.user_attrs[ATTR] for t in trials
            if isinstance(t.user_attrs.get(ATTR), Mapping)}


def _with_stored_params(chosen: _Chosen, rows: Mapping[int, Mapping[str, Any]]) -> _Chosen:
    """`chosen` with its params and origin from the study's own record of the trial, where
    its source (a run id, trials.csv) holds none; a ConfigError when the study has none."""
    if chosen.params is not None:
        return chosen
    row = rows.get(chosen.trial) if chosen.trial is not None else None
    if row is None or not isinstance(row.get("params"), Mapping):
        raise ConfigError(f"study '{chosen.study}' trial {chosen.trial}: its params were not "
                          "recorded; export another trial (--pick, see trials.csv)")
    return replace(chosen, params=dict(row["params"]), origin=row.get("origin"))


def _export_user(chosen: _Chosen, own: tuple[Any, Any, Any], out: Path, fmt: str,
                 force: bool) -> Exported:
    """A trial of a user search: its record (`user.space.user_record`: the embedding
    settings and params, nothing else) as YAML/JSON, and for `python` a module that
    rebuilds the model in the user's code with the record beside it (`<stem>.yaml`); for a
    TorchRec model's study (`pipeline.sharded_workload`), the pick as TorchRec code instead
    (`pipeline.sharded_workload.export_pick`)."""
    from autoembed.pipeline.sharded_workload import TOPOLOGY_KEY, export_pick
    from autoembed.user.module_text import python_module
    from autoembed.user.space import user_record

    space, refs, meta = own
    cfg = config_from_dict(chosen.raw, f"study '{chosen.study}' trial {chosen.trial}")
    chosen = _with_stored_params(chosen, meta.get(_ROWS) or {})
    params = dict(chosen.params or {})
    record = {**user_record(space, cfg, params), "source": _source(chosen)}
    cfg_path = out.with_suffix(".yaml") if fmt == "python" else out
    for p in {out, cfg_path}:
        if p.exists() and not force:
            raise ConfigError(f"output file '{p}' exists; pass --force to overwrite it")
    import yaml

    from autoembed.rules import plain

    texts = {cfg_path: (json.dumps(plain(record), indent=2) + "\n" if cfg_path.suffix == ".json"
                        else yaml.safe_dump(dict(plain(record)), sort_keys=False))}
    if fmt == "python" and TOPOLOGY_KEY in meta:
        texts[out] = export_pick(space, refs, meta[TOPOLOGY_KEY], params, out.stem,
                                 seed=cfg.seed)
    elif fmt == "python":
        texts[out] = python_module(refs["model"], record["params"], cfg_path.name,
                                   study=str(chosen.study), trial=chosen.trial or 0,
                                   apply=refs.get("apply"),
                                   as_written=chosen.origin == AS_WRITTEN, seed=cfg.seed)
    _write_all(texts)
    return Exported(out, cfg, chosen.study, chosen.trial, chosen.pick, chosen.run_id,
                    None, chosen.notes)


def _write_all(texts: Mapping[Path, str]) -> None:
    """Write every file of one export, made in full first: whole or nothing (a file this
    call created is removed again when a later one cannot be written)."""
    from autoembed.files import atomic_write_text

    made: list[Path] = []
    try:
        for path, text in texts.items():
            existed = path.exists()
            atomic_write_text(path, text)
            if not existed:
                made.append(path)
    except BaseException:
        for path in made:
            path.unlink(missing_ok=True)
        raise

