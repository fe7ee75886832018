"""`autoembed train`: full training of a (usually exported) config with the trial runner;
what it writes (checkpoints, `model.pt` and `metrics.json` published as one unit), resumes,
refuses and skips as already complete: docs/training.md. Every option is checked before
anything is created; one `train` at a time holds a directory (`.lock`).
"""

from __future__ import annotations

import functools
import json
import os
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from autoembed.config import EmbeddingConfig
from autoembed.data.vocab import KEYS_RULE, OLD_KEYS, keyed_by_this_rule
from autoembed.errors import ConfigError, DataError
from autoembed.files import atomic_write, publish, sweep
from autoembed.rules import Integer, Is, Positive
from autoembed.runner import RunSettings, TrialResult, check_run, resolve_for_data, run_trial

P = ParamSpec("P")
R = TypeVar("R")

__all__ = ["train", "CHECKPOINT", "load_checkpoint", "stored_steps", "TRAIN_KEY", "TRAINED_ON_KEY",
           "MEASURE_KEYS", "training_of", "measured_with", "trained_on", "source_block",
           "TrainingPlan",
           "plan_training", "plain_line", "check_device", "refuse_user_record", "USER_RECORD_FIX",
           "check_lengths"]

CHECKPOINT = "checkpoint.pt"
RESULT_FILES = ("model.pt", "metrics.json")  # one finished run, published as one unit
LOCK = ".lock"  # held (flock) by the one `train` writing the directory
FORMAT_VERSION = 1
DEFAULT_STEPS = 1000  # a config that carries no training length
TRAIN_KEY = "train"  # a config file's training length: {max_steps: N}
TRAINED_ON_KEY = "trained_on"  # what a search trial's figures were measured on
# The `RunSettings` fields that decide a trial's figures beyond its config and data (how many
# validation and test batches were scored, torch's threads) or its timing (warm-up steps)
MEASURE_KEYS = ("eval_every", "eval_batches", "test_batches", "warmup_steps", "threads")


def _device_total(device: Any) -> tuple[int, str]:
    """(bytes, what) of the memory `device` trains in: the GPU's, or on a CPU the host's RAM."""
    import torch

    if device.type == "cuda" and torch.cuda.is_available():
        index = device.index if device.index is not None else torch.cuda.current_device()
        return int(torch.cuda.get_device_properties(index).total_memory), f"GPU {device}"
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "this host's RAM"


def check_lengths(flags: bool = False, **given: Any) -> None:
    """Each of `train`'s max_steps, epochs and checkpoint_every given (not None): an integer
    > 0, named as the keyword, or with `flags` as the CLI's option (--max-steps)."""
    for key, value in given.items():
        if value is not None:
            Positive().check_argument("--" + key.replace("_", "-") if flags else key, value)


def check_device(device: Any) -> Any:
    """`device` as the torch.device to train on: a CPU or a GPU present, by the index as
    given (torch wraps cuda:4096 to cuda:0), or "auto" as search reads it (a GPU where one
    is visible, else the CPU); bad input (exit 2) otherwise, naming the GPUs present.
    `autoembed train --dry-run` and `autoembed search` check it too."""
    import torch

    if str(device).strip() == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    from autoembed.models.embedding_model import as_device, typed_index

    index = typed_index(device)
    if str(device).split(":")[0].strip() == "cuda":  # before torch reads (and wraps) the index
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if n == 0:
            raise ConfigError(f"device '{device}': no GPU is visible here; use --device cpu")
        if index is not None and index >= n:
            raise ConfigError(f"device '{device}': {n} GPU(s) visible here, cuda:0 to "
                              f"cuda:{n - 1}; use one of them or --device cpu")
    dev = as_device(device)
    if dev.type not in ("cpu", "cuda"):
        raise ConfigError(f"device '{dev}': train on cpu or cuda[:N]")
    return dev


def check_fits_device(config: EmbeddingConfig, device: Any) -> None:
    """Refuse (exit 3), before anything is allocated, a config whose analytic allocated peak
    exceeds the device's whole memory (not its free memory: only an impossible config)."""
    from autoembed.budget import format_bytes
    from autoembed.errors import DoesNotFitError
    from autoembed.trace import estimate

    dev = check_device(device)
    total, what = _device_total(dev)
    need = estimate(config).allocated_peak
    if need > total:
        raise DoesNotFitError(
            f"config needs {format_bytes(need)} to train (analytic allocated_peak) but "
            f"{what} is {format_bytes(total)} in all; shrink it (autoembed estimate --config "
            "prices it) or search one under a budget")


def _atomic_torch_save(obj: Any, path: Path) -> None:
    import torch

    atomic_write(path, lambda fh: torch.save(obj, fh))


def _state(trainer: Any, step: int, config: EmbeddingConfig,
           length: Mapping[str, Any], data_sha256: str | None = None) -> dict[str, Any]:
    st: dict[str, Any] = {
        "data_sha256": data_sha256,  # the data file's bytes the run trains on (None: built-in)
        "data_keys": KEYS_RULE,  # the rule its categorical cells became ids by
        "format": FORMAT_VERSION,
        "step": step,
        "trained_for": dict(length),  # the run's length: `max_steps` or `epochs`
        "config_json": config.to_json(),
        "model": trainer.model.state_dict(),
        "optimizers": trainer.optimizers.state_dict()}
    if trainer.masters is not None:
        st["masters"] = {k: v.detach() for k, v in trainer.masters.items()}
    if trainer.scaler is not None:
        st["scaler"] = trainer.scaler.state_dict()
    return st


def _read_checkpoint(path: Path, device: Any, config: EmbeddingConfig) -> dict[str, Any]:
    """The checkpoint's state (weights_only=True); an unreadable file, or one of another
    config, is a ConfigError."""
    import torch

    try:
        st = dict(torch.load(path, map_location=device, weights_only=True))
    except Exception as e:  # noqa: BLE001 - a corrupt file is bad input, said in one line
        raise ConfigError(f"checkpoint '{path}' cannot be read ({type(e).__name__}); delete it "
                          "or train into a new --out directory") from None
    if st.get("format") != FORMAT_VERSION or st.get("config_json") != config.to_json():
        raise ConfigError(f"checkpoint '{path}' was written for another config; use a new --out "
                          "directory or --no-resume")
    return st


def interrupted_note(out: str | Path, restart: str | None = None) -> str:
    """What a run interrupted (Ctrl-C) in `out` kept and how to go on: the checkpoint's step
    (read memory-mapped, weights_only) and that the same command resumes from it (given
    `restart`, the flag it was run with that starts from step 0, --force or --no-resume:
    the command without it), else that none was written yet."""
    import torch

    ckpt = Path(out).resolve() / CHECKPOINT
    try:
        step = int(torch.load(ckpt, map_location="cpu", weights_only=True, mmap=True)["step"])
    except Exception:  # noqa: BLE001 - none yet, or unreadable: the rerun says which
        return f"training stopped before a checkpoint was written to {ckpt.parent}; the same " \
               "command starts it again"
    how = f"the same command without {restart}" if restart else "the same command"
    return f"training stopped; {ckpt} holds step {step:,}: {how} resumes from it"


def load_checkpoint(path: Path, trainer: Any, config: EmbeddingConfig) -> int:
    """Restore `trainer` from `path` (weights_only=True); returns the step it was saved at."""
    return _restore(_read_checkpoint(path, trainer.device, config), trainer)


def _restore(st: dict[str, Any], trainer: Any) -> int:
    """Load a checkpoint's state into `trainer`; returns its step."""
    import torch

    trainer.model.load_state_dict(st["model"])
    trainer.optimizers.load_state_dict(st["optimizers"])
    if trainer.config.placement == "host_cached":  # the loaded state must move with the rows
        from autoembed.models.host_cached_table import host_cached_tables

        for _, table in host_cached_tables(trainer.model):
            table.bind_optimizer(trainer.optimizers.table_for(table.cache_weight))
    if trainer.masters is not None and "masters" in st:
        with torch.no_grad():
            for k, m in trainer.masters.items():
                m.copy_(st["masters"][k])
    if trainer.scaler is not None and "scaler" in st:
        trainer.scaler.load_state_dict(st["scaler"])
    return int(st["step"])


def _held_result(out: Path) -> dict[str, Any] | None:
    """The finished result `out` publishes (its metrics.json), {} when it cannot be read,
    None when there is none."""
    metrics = out / "metrics.json"
    if not metrics.exists():
        return None
    try:
        held = json.loads(metrics.read_text())
    except (OSError, ValueError):
        return {}
    return held if isinstance(held, dict) else {}


def _length_words(length: Mapping[str, Any]) -> str:
    if "epochs" in length:
        return f"{length['epochs']} epochs"
    steps = length.get("max_steps")
    return "an unrecorded length" if steps is None else f"{steps} steps"


def _finished_length(held: Mapping[str, Any]) -> dict[str, Any]:
    """What a finished result was trained for: its `trained_for`, else (written before it
    was recorded) its steps."""
    env = held.get("env")
    got = env.get("trained_for") if isinstance(env, Mapping) else None
    return dict(got) if isinstance(got, Mapping) else {"max_steps": held.get("steps")}


def _check_finished_result(out: Path, config: EmbeddingConfig, force: bool,
                           length: Mapping[str, Any], data_sha256: str | None = None,
                           ) -> TrialResult | None:
    """What `out`'s finished result means for a run of `config` for `length` on the data
    file of digest `data_sha256`: None (train); the result itself when it is this config's,
    trained for this length on these bytes (a no-op); a ConfigError when it is of another
    config, of other bytes of the data file, unreadable, or this config's of a longer run
    (unless `force`: then train from scratch)."""
    from autoembed.trial import decode_result

    held = None if force else _held_result(out)
    if held is None:
        return None
    as_json = json.loads(json.dumps(config.to_dict(), default=str))  # as metrics.json has it
    if held.get("config") != as_json:
        raise ConfigError(
            f"--out '{out}' holds a finished result of another config (metrics.json, "
            "model.pt); train into a new --out directory, or pass --force to replace it "
            "once this run completes")
    env = held.get("env")
    was = env.get("data_sha256") if isinstance(env, Mapping) else None
    _check_same_bytes(was, data_sha256, f"--out '{out}' holds this config's finished run",
                      "pass --force to retrain on the file as it is")
    done = _finished_length(held)
    if done == dict(length):
        result = decode_result(held)
        return replace(result, env={**result.env, "already_complete": True})
    steps, asked = done.get("max_steps"), length.get("max_steps")
    if isinstance(steps, int) and isinstance(asked, int) and asked < steps:
        raise ConfigError(
            f"--out '{out}' holds this config's finished run of {steps} steps; --max-steps "
            f"{asked} is fewer: train into a new --out directory, or pass --force to retrain")
    return None


def _check_same_bytes(was: Any, now: str | None, what: str, fix: str) -> None:
    """Refuse (ConfigError) to mix runs on two versions of one data file: `what` (a finished
    run, a checkpoint) was trained on the bytes of digest `was`, this run reads `now`
    (either unknown: nothing to compare)."""
    from autoembed.data.digest import digests

    if isinstance(was, str) and now is not None and was != now:
        raise ConfigError(f"{what} on other bytes of its data file ({digests(was, now)}); "
                          f"{fix}, or train into a new --out directory")


def _publish(out: Path, trainer: Any, result: TrialResult) -> None:
    """`model.pt` and `metrics.json` of this run, published as one unit (files.publish)."""
    import torch

    state = trainer.model.state_dict()
    text = json.dumps(result.to_dict(), indent=2, default=str).encode("utf-8")
    publish(out, {"model.pt": lambda fh: torch.save(state, fh),
                  "metrics.json": lambda fh: fh.write(text)})


@contextmanager
def _holding(out: Path) -> Iterator[None]:
    """Hold `out` for one `train` (flock on `.lock`): a second one is refused."""
    import fcntl

    out.mkdir(parents=True, exist_ok=True)
    fd = os.open(out / LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigError(f"--out '{out}' is being written by another `autoembed train`; "
                              "wait for it, or train into a new --out directory") from None
        yield
    finally:
        os.close(fd)


def _check_resumable(ckpt: Path, st: Mapping[str, Any], length: Mapping[str, Any]) -> None:
    """A checkpoint resumes a run of `length` when it lies on that run's way: for
    `max_steps` N, one at step <= N of a run by steps (it ends with a straight N-step run's
    weights); for `epochs`, one of the same epochs. Otherwise ConfigError with the fixes."""
    step, was = int(st["step"]), st.get("trained_for")
    was = dict(was) if isinstance(was, Mapping) else {"max_steps": None}  # before it was kept
    asked = length.get("max_steps")
    if asked is not None and "max_steps" in was and step <= asked:
        return
    if asked is None and was == dict(length):
        return
    raise ConfigError(
        f"checkpoint '{ckpt}' is at step {step} of a run of {_length_words(was)}, not on "
        f"the way to {_length_words(length)}: pass --no-resume to train from step 0 (its "
        "checkpoints replace it), give the length it was started with, or train into a new "
        "--out directory")


def training_of(metrics: Mapping[str, Any]) -> dict[str, int]:
    """A file's `train` mapping: `max_steps`, the step of the evaluation the trial's quality
    is of (`best_step`), so `autoembed train --config` reruns that trial; empty when the
    source did not record it."""
    import math

    step = metrics.get("best_step")
    if isinstance(step, bool) or not isinstance(step, (int, float)) or not math.isfinite(step) \
            or step < 1:
        return {}
    return {"max_steps": int(step)}


def measured_with(run: Mapping[str, Any]) -> dict[str, Any]:
    """The MEASURE_KEYS of a search's trial run settings (`SearchPlan.run_settings()`), each
    as the trials ran it (`RunSettings`'s default where the space sets none)."""
    from dataclasses import fields

    known = {f.name for f in fields(RunSettings)}
    settings = RunSettings(**{k: v for k, v in run.items() if k in known})
    return {k: getattr(settings, k) for k in MEASURE_KEYS}


def trained_on(config: Any, run: Any, stand_in: Any, data_sha256: Any = None,
               data_keys: Any = None) -> dict[str, Any] | None:
    """The `trained_on` block of a search's best.yaml or an exported file: `config`, the
    config the trial trained (resolved on the data it trained on, whose spec it carries);
    `run`, the settings it was measured with (MEASURE_KEYS); `stand_in`, whether that data
    was a scaled-down copy of the priced tables; `data_sha256`, its data file's digest, and
    `data_keys`, the rule its values were keyed by (`KEYS_RULE`; data files only, a study of
    an earlier version recorded none). None when the trained config is unknown."""
    if not isinstance(config, Mapping):
        return None
    measure = {k: v for k, v in run.items() if k in MEASURE_KEYS} \
        if isinstance(run, Mapping) else {}
    block = {"stand_in": bool(stand_in), "config": dict(config), "run": measure}
    if not isinstance(data_sha256, str):
        return block
    keys = {"data_keys": data_keys} if isinstance(data_keys, int) else {}
    return block | {"data_sha256": data_sha256} | keys


def source_block(study: str, trial: int | None, pick: str, metrics: Mapping[str, Any],
                 memory: Mapping[str, Any] | None, *, run_id: str | None = None,
                 budget: Any = None, budget_bytes: Any = None,
                 trained_on: Any = None) -> dict[str, Any]:
    """The `source` block of a search's best.yaml and of an exported file, one shape for
    both (docs/searching.md): `study`, `trial`, `pick`, `run_id` (an export of an MLflow
    run), `budget` and `budget_bytes` (the search's), `metrics` (those with a value),
    `memory` (`memory.objective.judged`) and `trained_on` (the data spec the trials
    trained on, as pareto.json has it). A key whose value is unknown is left out."""
    block: dict[str, Any] = {"study": study, "trial": trial, "pick": pick, "run_id": run_id,
                             "budget": budget, "budget_bytes": budget_bytes}
    block = {k: v for k, v in block.items() if v is not None or k == "trial"}
    block["metrics"] = {k: v for k, v in metrics.items() if isinstance(v, (int, float, str))}
    if memory is not None:
        block["memory"] = dict(memory)
    if trained_on is not None:
        block["trained_on"] = trained_on
    return block


def _data_changed(block: Mapping[str, Any], data: Mapping[str, Any] | None) -> list[str]:
    """A line saying the data file changed since the trial read it (its digest differs from
    `trained_on.data_sha256`), or that the trial keyed its values by another rule
    (`trained_on.data_keys`), so a rerun's figures can differ from the trial's; else none."""
    from autoembed.data.digest import data_file_digest, digests

    was = block.get("data_sha256")
    if not isinstance(was, str) or not data:
        return []
    if not keyed_by_this_rule(block.get("data_keys")):
        return [f"the trial read data file '{data.get('name')}' {OLD_KEYS}: this run's "
                "figures can differ from the trial's"]
    try:
        now = data_file_digest(data)
    except (OSError, ConfigError):
        return []  # a missing or unnamed file: loading the data says so in its own words
    if now is None or now == was:
        return []
    return [f"data file '{data.get('name')}' changed since the search ({digests(was, now)}): "
            "this run's figures can differ from the trial's"]


def _read_file(path: str | Path) -> dict[str, Any]:
    """A config file as plain data (the config itself is read by `config.load_config`)."""
    from autoembed.config import safe_load_yaml

    try:
        raw = safe_load_yaml(Path(path).read_text(), str(path))
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"config file '{path}' cannot be read: {e}") from None
    return raw if isinstance(raw, dict) else {}


_TRAIN_ENTRY = Is(lambda e: isinstance(e, dict) and Integer(1).ok(e.get("max_steps")),
                  "{max_steps: N} with N an integer >= 1; fix it, or pass --max-steps / --epochs")


def _steps_of(raw: Mapping[str, Any], path: str | Path) -> int | None:
    entry = raw.get(TRAIN_KEY)
    if entry is None:
        return None
    _TRAIN_ENTRY.check(TRAIN_KEY, entry, f"'{path}': key")
    return int(entry["max_steps"])


def stored_steps(path: str | Path) -> int | None:
    """The training length an exported config file carries (`train: {max_steps: N}`, the
    step of the evaluation its trial was judged by); None when it has none. The config
    itself is read by `config.load_config`; a malformed `train` entry is a ConfigError."""
    return _steps_of(_read_file(path), path)


@dataclass(frozen=True)
class TrainingPlan:
    """What `autoembed train --config FILE` trains (`plan_training`): `config` on its own
    data spec (or `data`) for `max_steps` or `epochs`, measured with `measure` (RunSettings
    fields; empty: `train`'s own), `lines` to say before it starts, and `expect`, the
    source trial's figures that a rerun reproduces (empty when it is not a rerun)."""

    config: EmbeddingConfig
    max_steps: int | None
    epochs: int | None
    measure: Mapping[str, Any] = field(default_factory=dict)
    lines: tuple[str, ...] = ()
    expect: Mapping[str, float] = field(default_factory=dict)
    rerun: bool = False


def _measure_of(block: Mapping[str, Any], path: str | Path) -> dict[str, Any]:
    """A file's `trained_on.run` settings, each checked against its RunSettings rule."""
    run = block.get("run")
    if run is None:
        return {}
    where = f"config file '{path}'"
    Is(Mapping, f"a mapping of {', '.join(MEASURE_KEYS)}").check(
        f"{TRAINED_ON_KEY}.run", run, f"{where}: key")
    check_run(run, where, f"{TRAINED_ON_KEY}.run.", MEASURE_KEYS)
    return dict(run)


def _source(raw: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """("trial N of study 'S'", its metrics) from an exported file's `source` or a search's
    best.yaml `search` block."""
    src = raw.get("source") if isinstance(raw.get("source"), Mapping) else raw.get("search")
    src = src if isinstance(src, Mapping) else {}
    metrics = src.get("metrics")
    what = f"trial {src.get('trial')} of study '{src.get('study')}'" if src else "the config"
    return what, dict(metrics) if isinstance(metrics, Mapping) else {}


def _data_words(spec: Mapping[str, Any] | None, tables: Any) -> str:
    name = (spec or {}).get("name", "its data")
    rows = sum(t.vocab_size for t in tables)
    return f"{name}, {rows:,} table rows"


def _duration(seconds: float) -> str:
    if seconds < 1:
        return "under a second"
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def _full_size_lines(config: EmbeddingConfig, steps: int | None, metrics: Mapping[str, Any],
                     stand_in: bool, data: Any = None) -> tuple[str, ...]:
    """What training the priced config at full size (on `data`, else its own) costs: the
    analytic estimate, and the time `steps` take at the trial's measured throughput."""
    from autoembed.budget import format_bytes
    from autoembed.trace import estimate

    est = estimate(config)
    spec = config.data if data is None else {"name": str(data)}
    lines = [f"full size: the priced config on {_data_words(spec, config.tables)}: "
             f"estimated device_total {format_bytes(est.device_total)} (allocated_peak "
             f"{format_bytes(est.allocated_peak)}, parameters {format_bytes(est.parameters)})"]
    thr = metrics.get("throughput")
    if steps and isinstance(thr, (int, float)) and thr > 0:
        samples = steps * config.batch_size * config.grad_accum_steps
        took = _duration(samples / thr)
        took = took if took.startswith("under") else f"about {took}"
        lines.append(f"{took} for {steps:,} steps at the trial's "
                     f"{thr:,.0f} samples/s" + (", measured on its stand-in (full-size tables "
                                                "usually train slower)" if stand_in else ""))
    return tuple(lines)


NO_DATA = ("the config carries no data spec; pass --data (a built-in name or a CSV/Parquet "
           "file) or export the config from a search")


def plan_training(path: str | Path, *, full_size: bool = False, data: Any = None,
                  max_steps: int | None = None, epochs: int | None = None) -> TrainingPlan:
    """What `autoembed train --config path` trains.

    A file a search wrote (runs/<study>/best.yaml, or `autoembed export`'s) carries
    `trained_on`: by default the trial is rerun exactly as it was measured (the config it
    trained, on its data, with its settings, for `train.max_steps`), so the figures are the
    trial's. `full_size` (or `data`, or a file without `trained_on`) trains the file's
    `config` (the priced one: full-size tables) on its own data spec (or `data`), with
    `train`'s settings; under `full_size` the lines say what that costs first.
    `max_steps` / `epochs` change the length either way."""
    from autoembed.config import config_from_dict, load_config

    if max_steps is not None and epochs is not None:
        raise ConfigError("give either --max-steps or --epochs, not both")
    config = load_config(path)  # first: its messages for a missing or broken file
    if isinstance(data, str):  # a bad --data is said before anything, --dry-run included
        _check_other_data(other_data(config.data, data))
    raw = _read_file(path)
    refuse_user_record(path, raw)
    stored = _steps_of(raw, path)
    steps = max_steps if max_steps is not None or epochs is not None else stored
    what, metrics = _source(raw)
    block = raw.get(TRAINED_ON_KEY)
    lines: list[str] = []
    if isinstance(block, Mapping) and isinstance(block.get("config"), Mapping) \
            and not full_size and data is None:
        cfg = config_from_dict(block["config"], f"{path}: {TRAINED_ON_KEY}.config")
        kind = "a scaled-down stand-in of the priced tables" if block.get("stand_in") \
            else "the priced data"
        length = f"{epochs} epochs" if epochs else f"{steps or DEFAULT_STEPS} steps"
        lines.append(f"rerunning {what} as it was measured: its trained config on "
                     f"{_data_words(cfg.data, cfg.tables)} ({kind}), {length}; "
                     "--full-size trains the priced config on the full data instead")
        lines.extend(_data_changed(block, cfg.data))
        expect = {k: float(metrics[k]) for k in ("quality", "test_quality")
                  if isinstance(metrics.get(k), (int, float))} if steps == stored else {}
        return TrainingPlan(cfg, steps, epochs, _measure_of(block, path), tuple(lines),
                            expect, rerun=True)
    if full_size:
        if not isinstance(block, Mapping):
            lines.append(f"{path} has no {TRAINED_ON_KEY}: its config is what trains anyway")
        lines.extend(_full_size_lines(
            config, None if epochs is not None else steps or DEFAULT_STEPS, metrics,
            isinstance(block, Mapping) and bool(block.get("stand_in")), data))
    elif isinstance(block, Mapping) and data is not None:
        lines.append(f"--data: the priced config on {data}, not a rerun of {what}")
    if stored is not None and steps == stored and not lines:
        lines.append(f"training {stored} steps: the step the search judged this config at "
                     f"({path} {TRAIN_KEY}.max_steps; --max-steps or --epochs to change it)")
    if data is None and config.data is None:  # refused before a dry run, as train refuses it
        raise ConfigError(NO_DATA)
    return TrainingPlan(config, steps, epochs, {}, tuple(lines))


def plain_line(path: str | Path, plan: TrainingPlan, data: Any) -> str:
    """What a dry run prints for a plan with no lines of its own (a config written by
    hand): the config, its data (or `data`) and its length."""
    steps, epochs = plan.max_steps, plan.epochs
    name = data if data is not None else (plan.config.data or {}).get("name")
    length = f"{epochs} epochs" if epochs else f"{steps or DEFAULT_STEPS} steps"
    return f"training the config of {path} on {name}, {length}"


# what to do instead with a user search's record, by the command refusing it
USER_RECORD_FIX = {
    "train": "train it in your own loop: autoembed export --study {study} --format python "
             "--out best_model.py (docs/own_loop.md)",
    "estimate": "its price on your model is its source.memory; price your model with "
                "autoembed estimate --model FILE:build --example FILE:example --space SPACE "
                "(docs/own_model.md)"}


def refuse_user_record(path: str | Path, raw: Mapping[str, Any] | None = None,
                       command: str = "train") -> None:
    """A search of the user's own model records `params` beside its embedding settings
    (`user.space.user_record`): autoembed's models are not what it searched, so `command`
    (train, estimate) refuses to build one from it (ConfigError), saying what to do
    instead. `raw`: the file as plain data (None: read here)."""
    raw = _read_file(path) if raw is None else raw
    if not isinstance(raw.get("params"), Mapping):
        return
    src = raw.get("source")
    study = src.get("study") if isinstance(src, Mapping) else None
    raise ConfigError(
        f"'{path}' records a search of your own model (its `params`), not a config of "
        "autoembed's models; " + USER_RECORD_FIX[command].format(study=study or "NAME"))


def _eval_every_into_measure(fn: Callable[P, R]) -> Callable[P, R]:
    """`train(eval_every=N)`, the keyword before it joined `measure`: taken as
    `measure={"eval_every": N}` for one release, with a DeprecationWarning."""
    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        if "eval_every" in kwargs:
            warnings.warn("train(eval_every=N) is deprecated; pass measure={'eval_every': N}",
                          DeprecationWarning, stacklevel=2)
            given: Any = kwargs.get("measure") or {}
            kwargs["measure"] = {**given, "eval_every": kwargs.pop("eval_every")}
        return fn(*args, **kwargs)
    return wrapper


@_eval_every_into_measure
def train(config: EmbeddingConfig, *, data: Any = None, out_dir: str | Path = "runs/train",
          max_steps: int | None = None, epochs: int | None = None, device: str = "cpu",
          checkpoint_every: int | None = None, resume: bool = True,
          on_step: Callable[[int, int], None] | None = None, force: bool = False,
          hot_sets: Mapping[str, Any] | None = None, measure: Mapping[str, Any] | None = None
          ) -> TrialResult:
    """Train `config` on its own data spec (or `data`), checkpointing into `out_dir` (the
    module docstring says what it writes and refuses).

    `measure`: RunSettings fields (MEASURE_KEYS) a search trial was measured with, so a
    rerun scores the same batches on the same threads (default: validation every tenth of
    `max_steps` on 50 batches, the whole test split); `{"eval_every": N}` sets how often
    it evaluates. `on_step(step, total)` reports progress (total 0 by epochs). A
    finished result of this config and length comes back with `env["already_complete"]`.
    `hot_sets` (table -> ids, saved beside an exported config): the hot/cold tables' hot
    sets (default: computed from the data)."""
    from autoembed.data import DataSpec, load_dataset

    check_run(measure or {}, "measure", "", MEASURE_KEYS)  # before anything is created
    check_lengths(max_steps=max_steps, epochs=epochs, checkpoint_every=checkpoint_every)
    device = str(check_device(device))  # "auto": the device it names here
    if data is None:
        if config.data is None:
            raise ConfigError(NO_DATA)
        data = DataSpec.from_dict(dict(config.data))
    elif isinstance(data, str):
        data = other_data(config.data, data)
    if max_steps is not None and epochs is not None:
        raise ConfigError("give either --max-steps or --epochs, not both")
    if max_steps is None and epochs is None:
        max_steps = DEFAULT_STEPS
    dataset = load_dataset(data) if isinstance(data, DataSpec) else data
    cfg = resolve_for_data(config, dataset)
    check_fits_device(cfg, device)  # first: a device or a size that can never train
    _check_same_tables(config, cfg)
    out = Path(out_dir).resolve()
    length = {"epochs": epochs} if epochs is not None else {"max_steps": max_steps}
    digest = _data_digest(data)
    with _holding(out):
        sweep(out, (*RESULT_FILES, CHECKPOINT))
        done = _check_finished_result(out, cfg, force, length, digest)
        if done is not None:
            return done
        result, trainer = _train_into(out, cfg, dataset, length, device=device,
                                      checkpoint_every=checkpoint_every, resume=resume,
                                      on_step=on_step, force=force,
                                      hot_sets=hot_sets, measure=measure, data_sha256=digest)
        if resized := _resized_tables(config, cfg):
            result = replace(result, env={**result.env, "resized": list(resized)})
        if result.status == "complete":
            _atomic_torch_save(_state(trainer, result.steps, cfg, length, digest),
                               out / CHECKPOINT)
            _publish(out, trainer, result)
    return result


def _data_digest(data: Any) -> str | None:
    """The sha256 of the data file a run trains on (None: built-in data, or a dataset given
    as an object), read once: its runs in one --out are of these bytes."""
    from autoembed.data import DataSpec
    from autoembed.data.digest import data_file_digest

    return data_file_digest(data.to_dict()) if isinstance(data, DataSpec) else None


# A file spec's keys that say how to read a file (its columns, label, split), carried from
# a config's own data file to the other file `--data` names
_FILE_KEYS = ("label", "categorical", "multi_hot", "separator", "text_column", "min_count",
              "split", "seed", "seq_len", "vocab_size")


def other_data(own: Mapping[str, Any] | None, name: str) -> Any:
    """The DataSpec of `name` (`--data`) for a config whose data spec is `own`: another file
    for a config searched on a file is read as that one was (its label, columns and split:
    _FILE_KEYS), its vocabularies built anew on it; anything else is `name` as it is."""
    from autoembed.data import DataSpec

    spec = DataSpec(name=name)
    if not spec.is_file or not isinstance(own, Mapping) or not own.get("name"):
        return spec
    if not DataSpec.from_dict(dict(own)).is_file:
        return spec
    return DataSpec.from_dict({"name": name, **{k: v for k, v in own.items() if k in _FILE_KEYS}})


def _check_other_data(spec: Any) -> None:
    """A `--data` file that is not there: a DataError naming it (its spec is checked)."""
    if spec.is_file and not Path(spec.name).expanduser().is_file():
        raise DataError(f"--data '{spec.name}' is not a file; give the path of a CSV/Parquet "
                        "file or a built-in data name")


def _check_same_tables(config: EmbeddingConfig, trained: EmbeddingConfig) -> None:
    """Refuse (ConfigError) data whose tables are not the config's (by name): the model
    would have other tables than the ones searched and priced. A config that leaves its
    tables at the default placeholder takes the data's."""
    from autoembed.config.value import names_tables

    own, got = [t.name for t in config.tables], [t.name for t in trained.tables]
    if names_tables(config) and sorted(own) != sorted(got):
        raise ConfigError(
            f"the data's tables ({', '.join(got)}) are not the config's ({', '.join(own)}), "
            "which were searched and priced; train on data with the config's columns, or "
            "search this data (autoembed search --data ...)")


def _resized_tables(config: EmbeddingConfig, trained: EmbeddingConfig) -> tuple[str, ...]:
    """The tables the data sized otherwise than `config` gives them ("user: 201 -> 900
    rows"): trained on other data, the config's priced bytes are not what trains."""
    given = {t.name: t.vocab_size for t in config.tables}
    return tuple(f"{t.name}: {given[t.name]:,} -> {t.vocab_size:,} rows" for t in trained.tables
                 if given.get(t.name, t.vocab_size) != t.vocab_size)


def _train_into(out: Path, cfg: EmbeddingConfig, dataset: Any, length: Mapping[str, Any], *,
                device: str, checkpoint_every: int | None, resume: bool,
                on_step: Callable[[int, int], None] | None,
                force: bool, hot_sets: Mapping[str, Any] | None,
                measure: Mapping[str, Any] | None,
                data_sha256: str | None = None) -> tuple[TrialResult, Any]:
    """Train `cfg` for `length` with checkpoints in `out`: (the result, the trainer); a
    checkpoint resumes only on the same bytes of the data file (`data_sha256`), keyed by
    this version's rule (`KEYS_RULE`)."""
    from autoembed.models import make_trainer
    from autoembed.models.hot_cold import install_hot_sets

    max_steps, epochs = length.get("max_steps"), length.get("epochs")
    ckpt = out / CHECKPOINT
    st = None  # under `force` a run starts at 0 (its own checkpoints replace the old one)
    if resume and not force and ckpt.exists():
        st = _read_checkpoint(ckpt, device, cfg)
        _check_resumable(ckpt, st, length)  # refused off the way to `length`
        _check_same_bytes(st.get("data_sha256"), data_sha256, f"checkpoint '{ckpt}' was "
                          "written", "pass --no-resume to train from step 0")
        if data_sha256 is not None and not keyed_by_this_rule(st.get("data_keys")):
            raise ConfigError(f"checkpoint '{ckpt}' was trained on its data file {OLD_KEYS}; "
                              "pass --no-resume to train from step 0, or train into a new "
                              "--out directory")
    trainer = make_trainer(cfg, device)
    install_hot_sets(trainer.model, dataset, hot_sets)  # a checkpoint restores the same set
    start = _restore(st, trainer) if st is not None else 0
    every = checkpoint_every or max(10, (max_steps or 1000) // 10)

    def save(tr: Any, step: int) -> None:
        if step % every == 0:
            _atomic_torch_save(_state(tr, step, cfg, length, data_sha256), ckpt)
        if on_step is not None:
            on_step(step, max_steps or 0)

    m = {k: v for k, v in (measure or {}).items() if k in MEASURE_KEYS}
    settings = RunSettings(
        max_steps=max_steps or 1,
        epochs=epochs,
        device=device,
        eval_every=m.get("eval_every") or max(1, (max_steps or 1000) // 10),
        test_batches=m.get("test_batches"),  # None: the whole test split
        eval_batches=m.get("eval_batches", 50),
        warmup_steps=m.get("warmup_steps", RunSettings.warmup_steps),
        threads=m.get("threads"))
    if epochs is not None:
        settings = replace(settings, max_steps=10**12)
    result = run_trial(cfg, dataset, settings, on_step=save, trainer=trainer, start_step=start)
    env = {**result.env, "resumed_from": start, "trained_for": dict(length)}
    if data_sha256 is not None:
        env["data_sha256"] = data_sha256
    return replace(result, env=env), trainer
