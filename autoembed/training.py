"""`autoembed train`: full training of a (usually exported) config with the trial runner,
periodic checkpoints, resume, and a final metrics file.

Outputs under `out_dir`: `checkpoint.pt` (model, optimizers, masters, scaler, step; written
atomically every `checkpoint_every` steps and loaded back with `weights_only=True`),
`model.pt` (final weights) and `metrics.json` (the TrialResult) — the last two only when
training completes, so nothing half-written looks like a finished result.

A finished result is never lost to a run that has not finished: a run writes `model.pt` and
`metrics.json` under temporary names and renames them over the old ones only on completion
(`metrics.json`, the mark of a finished result, last). A directory whose `metrics.json` is of
another config is refused (ConfigError) unless `force`; a forced run still replaces the old
result only when it completes (its checkpoints do replace the old `checkpoint.pt`).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from autoembed.config import EmbeddingConfig
from autoembed.errors import ConfigError
from autoembed.runner import RunSettings, TrialResult, resolve_for_data, run_trial

__all__ = ["train", "CHECKPOINT", "load_checkpoint", "stored_steps"]

CHECKPOINT = "checkpoint.pt"
FORMAT_VERSION = 1


def _device_total(device: Any) -> tuple[int, str]:
    """(bytes, what) of the memory `device` trains in: the GPU's, or on a CPU the host's RAM."""
    import torch

    if device.type == "cuda" and torch.cuda.is_available():
        index = device.index if device.index is not None else torch.cuda.current_device()
        return int(torch.cuda.get_device_properties(index).total_memory), f"GPU {device}"
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "this host's RAM"


def _check_device(dev: Any) -> None:
    """A device to train on must be a CPU or a visible GPU (bad input, exit 2, otherwise)."""
    import torch

    if dev.type == "cuda":
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if n == 0:
            raise ConfigError(f"device '{dev}': no GPU is visible here; use --device cpu")
        if dev.index is not None and dev.index >= n:
            raise ConfigError(f"device '{dev}': {n} GPU(s) visible, cuda:0 to cuda:{n - 1}")
    elif dev.type != "cpu":
        raise ConfigError(f"device '{dev}': train on cpu or cuda[:N]")


def check_fits_device(config: EmbeddingConfig, device: Any) -> None:
    """Refuse, before anything is allocated, a config whose tables alone (parameters,
    gradients, optimizer state: the analytic estimate's allocated peak) exceed the whole
    memory of the device, so an absurd size is a clear exit 3, not an allocator crash or the
    host's OOM killer. Only an impossible config is refused: the check is against the total,
    not the free, memory."""
    from autoembed.budget import format_bytes
    from autoembed.errors import DoesNotFitError
    from autoembed.memory import estimate
    from autoembed.models.model import as_device

    dev = as_device(device)
    _check_device(dev)
    total, what = _device_total(dev)
    need = estimate(config).allocated_peak
    if need > total:
        raise DoesNotFitError(
            f"config needs {format_bytes(need)} to train (analytic allocated_peak) but "
            f"{what} is {format_bytes(total)} in all; shrink it (autoembed estimate --config "
            "prices it) or search one under a budget"
        )


def _atomic_torch_save(obj: Any, path: Path) -> None:
    import torch

    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.close(fd)
    try:
        torch.save(obj, tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _state(trainer: Any, step: int, config: EmbeddingConfig) -> dict[str, Any]:
    st: dict[str, Any] = {
        "format": FORMAT_VERSION,
        "step": step,
        "config_json": config.to_json(),
        "model": trainer.model.state_dict(),
        "optimizers": trainer.optimizers.state_dict(),
    }
    if trainer.masters is not None:
        st["masters"] = {k: v.detach() for k, v in trainer.masters.items()}
    if trainer.scaler is not None:
        st["scaler"] = trainer.scaler.state_dict()
    return st


def _read_checkpoint(path: Path, device: Any) -> dict[str, Any]:
    """The checkpoint's state (weights_only=True); an unreadable file is a ConfigError."""
    import torch

    try:
        st = torch.load(path, map_location=device, weights_only=True)
    except Exception as e:  # noqa: BLE001 - a corrupt file is bad input, said in one line
        raise ConfigError(
            f"checkpoint '{path}' cannot be read ({type(e).__name__}); delete it "
            "or train into a new --out directory"
        ) from None
    return dict(st)


def _is_of(st: dict[str, Any], config: EmbeddingConfig) -> bool:
    return st.get("format") == FORMAT_VERSION and st.get("config_json") == config.to_json()


def load_checkpoint(path: Path, trainer: Any, config: EmbeddingConfig) -> int:
    """Restore `trainer` from `path` (weights_only=True); returns the step it was saved at."""
    st = _read_checkpoint(path, trainer.device)
    if not _is_of(st, config):
        raise ConfigError(
            f"checkpoint '{path}' was written for another config; use a new --out "
            "directory or --no-resume"
        )
    return _restore(st, trainer)


def _restore(st: dict[str, Any], trainer: Any) -> int:
    """Load a checkpoint's state into `trainer`; returns its step."""
    import torch

    trainer.model.load_state_dict(st["model"])
    trainer.optimizers.load_state_dict(st["optimizers"])
    if trainer.config.placement == "host_cached":  # the loaded state must move with the rows
        from autoembed.models.host_cache import host_cached_tables

        for _, table in host_cached_tables(trainer.model):
            table.bind_optimizer(trainer.optimizers.table_for(table.cache_weight))
    if trainer.masters is not None and "masters" in st:
        with torch.no_grad():
            for k, m in trainer.masters.items():
                m.copy_(st["masters"][k])
    if trainer.scaler is not None and "scaler" in st:
        trainer.scaler.load_state_dict(st["scaler"])
    return int(st["step"])


def _json_form(config: EmbeddingConfig) -> Any:
    """The config as `metrics.json` holds it (tuples as lists, as JSON reads them back)."""
    return json.loads(json.dumps(config.to_dict(), default=str))


def _check_finished_result(out: Path, config: EmbeddingConfig, force: bool) -> None:
    """Refuse to train into `out` when it holds a finished result (`metrics.json`) of another
    config, or one that cannot be read, unless `force`."""
    metrics = out / "metrics.json"
    if force or not metrics.exists():
        return
    try:
        held = json.loads(metrics.read_text()).get("config")
    except (OSError, ValueError, AttributeError):
        held = None
    if held != _json_form(config):
        raise ConfigError(
            f"--out '{out}' holds a finished result of another config (metrics.json, "
            "model.pt); train into a new --out directory, or pass --force to replace it "
            "once this run completes"
        )


def _publish(out: Path, trainer: Any, result: TrialResult) -> None:
    """Write `model.pt`, then `metrics.json`, each under a temporary name first, so the old
    finished result stands until the new one is whole."""
    _atomic_torch_save(trainer.model.state_dict(), out / "model.pt")
    fd, tmp = tempfile.mkstemp(dir=out, prefix=".metrics.json.")
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(result.to_dict(), fh, indent=2, default=str)
        os.replace(tmp, out / "metrics.json")
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _start_step(ckpt: Path, trainer: Any, config: EmbeddingConfig, force: bool) -> int:
    """The step to resume from: the checkpoint's if it is of `config`; a checkpoint of
    another config is refused, or under `force` ignored (the run's own checkpoints replace
    it)."""
    if not ckpt.exists():
        return 0
    if not force:
        return load_checkpoint(ckpt, trainer, config)
    st = _read_checkpoint(ckpt, trainer.device)
    return _restore(st, trainer) if _is_of(st, config) else 0


def stored_steps(path: str | Path) -> int | None:
    """The training length an exported config file carries (`train: {max_steps: N}`, the
    step of the evaluation its trial was judged by); None when it has none. The config
    itself is read by `config.load_config`; a malformed `train` entry is a ConfigError."""
    from autoembed.config import safe_load_yaml
    from autoembed.export import TRAIN_KEY

    raw = safe_load_yaml(Path(path).read_text(), str(path))
    entry = raw.get(TRAIN_KEY) if isinstance(raw, dict) else None
    if entry is None:
        return None
    steps = entry.get("max_steps") if isinstance(entry, dict) else None
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ConfigError(f"'{path}': {TRAIN_KEY} = {entry!r} must be {{max_steps: N}} with N "
                          "an integer >= 1; fix it, or pass --max-steps / --epochs")
    return steps


def train(
    config: EmbeddingConfig,
    *,
    data: Any = None,
    out_dir: str | Path = "runs/train",
    max_steps: int | None = None,
    epochs: int | None = None,
    device: str = "cpu",
    checkpoint_every: int | None = None,
    resume: bool = True,
    eval_every: int | None = None,
    on_step: Callable[[int, int], None] | None = None,
    force: bool = False,
) -> TrialResult:
    """Train `config` on its own data spec (or `data`), checkpointing into `out_dir`.

    `on_step(step, total)` reports progress (total is None when training by epochs).
    Raises ConfigError, before training, if `out_dir` holds a finished result of another
    config and not `force`; the old result is replaced only when this run completes.
    """
    from autoembed.data import DataSpec, load_dataset
    from autoembed.models import make_trainer
    from autoembed.models.hot_cold import install_hot_sets

    if data is None:
        if config.data is None:
            raise ConfigError(
                "the config carries no data spec; pass --data (a built-in name or "
                "a CSV/Parquet file) or export the config from a search"
            )
        data = DataSpec.from_dict(dict(config.data))
    elif isinstance(data, str):
        data = DataSpec(name=data)
    if max_steps is not None and epochs is not None:
        raise ConfigError("give either --max-steps or --epochs, not both")
    if max_steps is None and epochs is None:
        max_steps = 1000
    dataset = load_dataset(data) if isinstance(data, DataSpec) else data
    cfg = resolve_for_data(config, dataset)
    check_fits_device(cfg, device)
    out = Path(out_dir).resolve()
    _check_finished_result(out, cfg, force)
    out.mkdir(parents=True, exist_ok=True)
    trainer = make_trainer(cfg, device)
    install_hot_sets(trainer.model, dataset)  # a resumed checkpoint restores the same set
    ckpt = out / CHECKPOINT
    start = _start_step(ckpt, trainer, cfg, force) if resume else 0
    every = checkpoint_every or max(10, (max_steps or 1000) // 10)
    total = max_steps

    def save(tr: Any, step: int) -> None:
        if step % every == 0:
            _atomic_torch_save(_state(tr, step, cfg), ckpt)
        if on_step is not None:
            on_step(step, total or 0)

    settings = RunSettings(
        max_steps=max_steps or 1,
        epochs=epochs,
        device=device,
        eval_every=eval_every or max(1, (max_steps or 1000) // 10),
        test_batches=None,
        eval_batches=50,
    )
    if epochs is not None:
        settings = replace(settings, max_steps=10**12)
    result = run_trial(cfg, dataset, settings, on_step=save, trainer=trainer, start_step=start)
    result = replace(result, env={**result.env, "resumed_from": start})
    if result.status == "complete":
        _atomic_torch_save(_state(trainer, result.steps, cfg), ckpt)
        _publish(out, trainer, result)
    return result
