"""A search's files under `<runs-dir>/<study>/`, each written atomically (a temporary file
in the same directory, then `os.replace`), pareto.json last: a reader that finds it finds
the other files complete.

* trials.csv — every trial (infeasible ones too): status, reason, objective metrics, the
  estimate's byte figures, the Optuna params and the priced config as JSON (`config_json`).
* pareto.png — the front in objective space (2-D projections for 3+ objectives).
* best.yaml — `save_config` of the picked config (resolved, with its data spec).
* pareto.json — study, budget, objectives, members, best, picks, environment.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import tempfile
from collections.abc import Mapping, Sequence
from itertools import combinations
from pathlib import Path
from typing import Any

from autoembed.trial import (
    ESTIMATE_COLUMNS,
    METRIC_COLUMNS,
    TrialRow,
    csv_header,
    encode_csv_row,
    encode_member,
    plain,
)

__all__ = ["atomic_write_text", "write_trials_csv", "write_pareto_json", "write_best_yaml",
           "write_pareto_png", "member_dict", "ESTIMATE_COLUMNS", "METRIC_COLUMNS"]



def _readable(path: str | Path) -> None:
    """mkstemp makes 0600 files; give them the mode a plain open() would (0666 - umask)."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, 0o666 & ~mask)


def atomic_write_text(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", newline="") as fh:
            fh.write(text)
        _readable(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_trials_csv(rows: Sequence[TrialRow], path: Path, front: Sequence[int] = ()) -> Path:
    """Every row through the codec's trials.csv encoding (`trial.csv_header`,
    `trial.encode_csv_row`), by trial number."""
    params = sorted({k for r in rows for k in r.params})
    on_front = set(front)
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(csv_header(params))
    for r in sorted(rows, key=lambda r: r.number):
        w.writerow(encode_csv_row(r, r.number in on_front, params))
    return atomic_write_text(path, buf.getvalue())


member_dict = encode_member  # pareto.json's form of a front member (the codec's)


def write_pareto_json(body: Mapping[str, Any], path: Path) -> Path:
    return atomic_write_text(path, json.dumps(plain(body), indent=2, default=str) + "\n")


def write_best_yaml(row: TrialRow, path: Path, body: Mapping[str, Any]) -> Path:
    """The pick's record `body` (`config`, and what the workload adds: the params a user's
    functions receive; `search`: the search's figures), with the training length its
    trial was judged at (`export.training_of`: what `autoembed train --config` reruns)."""
    import yaml

    from autoembed.export import TRAIN_KEY, training_of

    length = training_of(row.metrics)
    out = {**body, **({TRAIN_KEY: length} if length else {})}
    return atomic_write_text(path, yaml.safe_dump(plain(out), sort_keys=False))


_LABELS = {"quality": "quality (AUC / accuracy)", "memory": "memory objective (GB)",
           "throughput": "throughput (samples/s)", "latency": "latency p50 b1 (ms)",
           "steps_to_target": "steps to target"}


def _axis(name: str, v: float | None) -> float:
    if v is None or not math.isfinite(v):
        return math.nan
    return v / 1e9 if name == "memory" else v


def write_pareto_png(
    rows: Sequence[TrialRow], front: Sequence[TrialRow], best: TrialRow | None,
    objectives: Sequence[tuple[str, str]], path: Path, title: str,
    budget_bytes: int | None = None,
) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n, _ in objectives]
    pairs = list(combinations(names, 2)) or [(names[0], names[0])]
    pairs = pairs[:6]
    cols = min(3, len(pairs))
    nrows = math.ceil(len(pairs) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(5 * cols, 4.2 * nrows), squeeze=False)
    done = [r for r in rows if r.status == "complete" and r.feasible]
    pruned = [r for r in rows if r.status == "pruned"]
    front_ids = {r.number for r in front}
    for ax, (x, y) in zip(axes.flat, pairs, strict=False):
        def xy(rs: Sequence[TrialRow], x: str = x, y: str = y) -> tuple[list[float], ...]:
            return ([_axis(x, r.metrics.get(x)) for r in rs],
                    [_axis(y, r.metrics.get(y)) for r in rs])

        others = [r for r in done if r.number not in front_ids]
        ax.scatter(*xy(others), s=18, c="0.65", label="complete")
        if pruned and x != "throughput" and y != "throughput":
            ax.scatter(*xy(pruned), s=14, marker="x", c="0.8", label="pruned")
        fr = sorted(front, key=lambda r: _axis(x, r.metrics.get(x)))
        ax.scatter(*xy(fr), s=36, c="tab:blue", label="Pareto front (all objectives)")
        for r in fr:
            ax.annotate(str(r.number), (_axis(x, r.metrics.get(x)), _axis(y, r.metrics.get(y))),
                        fontsize=7, xytext=(3, 3), textcoords="offset points")
        if best is not None:
            ax.scatter(*xy([best]), s=140, marker="*", c="tab:red", label=f"best (trial "
                       f"{best.number})")
        if budget_bytes is not None and "memory" in (x, y):
            line = ax.axvline if x == "memory" else ax.axhline
            line(budget_bytes / 1e9, color="tab:red", lw=0.8, ls="--", label="budget")
        ax.set_xlabel(_LABELS.get(x, x))
        ax.set_ylabel(_LABELS.get(y, y))
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(pairs):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7, loc="best")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".png")
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=110)
        _readable(tmp)
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        Path(tmp).unlink(missing_ok=True)
    return path
