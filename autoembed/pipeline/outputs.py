"""A search's files under `<runs-dir>/<study>/`, each written atomically, pareto.json last (a
reader that finds it finds the others complete): trials.csv (every trial: status, reason,
metrics, estimate, params, `config_json`), pareto.png (the front; 2-D projections for 3+
objectives), best.yaml (the pick, resolved, with its data spec), pareto.json (study, budget,
objectives, members, best, picks, environment).
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping, Sequence
from itertools import combinations
from pathlib import Path
from typing import Any

from autoembed.files import atomic_write_text
from autoembed.trial import TrialRow, csv_header, encode_csv_row, plain

__all__ = ["write_trials_csv", "write_pareto_json", "write_best_yaml", "write_pareto_png",
           "pareto_figure", "label_points"]


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


def write_pareto_json(body: Mapping[str, Any], path: Path) -> Path:
    return atomic_write_text(path, json.dumps(plain(body), indent=2, default=str) + "\n")


def write_best_yaml(row: TrialRow, path: Path, body: Mapping[str, Any]) -> Path:
    """The pick's record `body` (`config` and the workload's keys), with the training length
    its trial was judged at (`training.training_of`: what `autoembed train --config` reruns)."""
    import yaml

    from autoembed.training import TRAIN_KEY, training_of

    length = training_of(row.metrics)
    out = {**body, **({TRAIN_KEY: length} if length else {})}
    return atomic_write_text(path, yaml.safe_dump(plain(out), sort_keys=False))


_LABELS = {"quality": "quality (AUC / accuracy)", "memory": "memory objective",
           "throughput": "throughput (samples/s)", "latency": "latency p50 b1 (ms)",
           "steps_to_target": "steps to target"}


def _axis(name: str, v: float | None) -> float:
    if v is None or not math.isfinite(v):
        return math.nan
    return v / 1e9 if name == "memory" else v


def _axis_scale(ax: Any, name: str, axis: str) -> None:
    """Memory spans kB to GB across a front: a log axis keeps the small members apart; its
    ticks read as bytes ("10 MB"), in plain text (no mathtext to typeset)."""
    if name != "memory":
        return
    from matplotlib.ticker import LogFormatter

    class _Bytes(LogFormatter):
        def _num_to_string(self, x: float, vmin: float, vmax: float) -> str:
            return _bytes_label(x * 1e9)

    (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
    which = ax.xaxis if axis == "x" else ax.yaxis
    which.set_major_formatter(_Bytes(10))
    which.set_minor_formatter(_Bytes(10, labelOnlyBase=False))


def _bytes_label(b: float) -> str:
    """A tick's bytes, decimal units: 1 kB, 20 MB, 1.5 GB."""
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if b >= size * (1 - 1e-6):  # a tick at 1e-6 GB is 999.9999... bytes
            return f"{b / size:.3g} {unit}"
    return f"{b:.3g} B"


# Where a front member's number may go, in points from its marker: nearest first, then
# further out in eight directions (a label moved away gets a thin line to its marker).
_LABEL_OFFSETS = [(3, 3)] + [(round(r * dx), round(r * dy)) for r in (10, 18, 28, 40, 55, 75)
                             for dx, dy in ((1, 1), (1, -1), (-1, 1), (-1, -1), (1, 0),
                                            (-1, 0), (0, 1), (0, -1))]


def label_points(ax: Any, points: Sequence[tuple[float, float, str]]) -> list[Any]:
    """Annotate each (x, y, text) with no two labels overlapping: points within a few pixels
    of each other share one label ("3, 7"), and each label takes the first offset in
    `_LABEL_OFFSETS` whose box overlaps no label placed before it (none free: the group's
    text joins the nearest placed label's). Returns the annotations."""
    fig = ax.figure
    renderer = fig.canvas.get_renderer()
    groups: list[tuple[float, float, list[str], Any]] = []  # x, y, texts, display xy
    for x, y, text in points:
        if not (math.isfinite(x) and math.isfinite(y)):
            continue
        disp = ax.transData.transform((x, y))
        near = next((g for g in groups if abs(g[3][0] - disp[0]) < 6
                     and abs(g[3][1] - disp[1]) < 6), None)
        if near is None:
            groups.append((x, y, [text], disp))
        else:
            near[2].append(text)
    placed: list[tuple[Any, Any]] = []  # (annotation, its box in display pixels)
    for x, y, texts, disp in groups:
        label = ", ".join(texts)
        for dx, dy in _LABEL_OFFSETS:
            ann = ax.annotate(label, (x, y), xytext=(dx, dy), textcoords="offset points",
                              fontsize=7, arrowprops=None if (dx, dy) == (3, 3) else
                              {"arrowstyle": "-", "lw": 0.4, "color": "0.5"})
            box = ann.get_window_extent(renderer)
            if not any(box.overlaps(b) for _, b in placed):
                placed.append((ann, box))
                break
            ann.remove()
        else:  # crowded out everywhere: join the nearest label
            ann, box = min(placed, key=lambda p: (p[1].x0 - disp[0]) ** 2
                           + (p[1].y0 - disp[1]) ** 2)
            ann.set_text(f"{ann.get_text()}, {label}")
            placed[[a for a, _ in placed].index(ann)] = (ann, ann.get_window_extent(renderer))
    return [a for a, _ in placed]


def pareto_figure(rows: Sequence[TrialRow], front: Sequence[TrialRow], best: TrialRow | None,
                  objectives: Sequence[tuple[str, str]], title: str,
                  budget_bytes: int | None = None, labels: Mapping[str, str] | None = None) -> Any:
    """The front in objective space as a matplotlib Figure: one panel per pair of
    objectives (at most 6), memory on a log axis, front members numbered. `labels`: the
    legend's text for the `budget` line and the `best` marker (what the budget judges), and
    an objective's axis label by its name. Drawn on its own Agg canvas: neither pyplot (its
    import and figure registry) nor the caller's backend is touched."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.layout_engine import TightLayoutEngine

    names = [n for n, _ in objectives]
    pairs = list(combinations(names, 2)) or [(names[0], names[0])]
    pairs = pairs[:6]
    cols = min(3, len(pairs))
    nrows = math.ceil(len(pairs) / cols)
    fig = Figure(figsize=(5 * cols, 4.2 * nrows))
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, cols, squeeze=False)
    done = [r for r in rows if r.status == "complete" and r.feasible]
    pruned = [r for r in rows if r.status == "pruned"]
    front_ids = {r.number for r in front}
    for ax, (x, y) in zip(axes.flat, pairs, strict=False):
        def xy(rs: Sequence[TrialRow], x: str = x, y: str = y) -> tuple[list[float], ...]:
            return ([_axis(x, r.metrics.get(x)) for r in rs],
                    [_axis(y, r.metrics.get(y)) for r in rs])

        _axis_scale(ax, x, "x")
        _axis_scale(ax, y, "y")
        others = [r for r in done if r.number not in front_ids]
        ax.scatter(*xy(others), s=18, c="0.65", label="complete")
        if pruned and x != "throughput" and y != "throughput":
            ax.scatter(*xy(pruned), s=14, marker="x", c="0.8", label="pruned")
        fr = sorted(front, key=lambda r: _axis(x, r.metrics.get(x)))
        ax.scatter(*xy(fr), s=36, c="tab:blue", label="Pareto front (all objectives)")
        if best is not None:
            ax.scatter(*xy([best]), s=140, marker="*", c="tab:red", label=(labels or {}).get(
                "best", f"best (trial {best.number})"))
        if budget_bytes is not None and "memory" in (x, y):
            line = ax.axvline if x == "memory" else ax.axhline
            line(budget_bytes / 1e9, color="tab:red", lw=0.8, ls="--",
                 label=(labels or {}).get("budget", "budget"))
        ax.set_xlabel((labels or {}).get(x, _LABELS.get(x, x)))
        ax.set_ylabel((labels or {}).get(y, _LABELS.get(y, y)))
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(pairs):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7, loc="best")
    fig.suptitle(title, fontsize=10)
    # tight margins, applied once (fig.tight_layout() would leave a layout engine on the
    # figure, for which savefig lays it out again)
    TightLayoutEngine().execute(fig)
    fig.draw_without_rendering()  # limits and layout fixed: labels placed in final pixels
    for ax, (x, y) in zip(axes.flat, pairs, strict=False):
        xs, ys = ([_axis(n, r.metrics.get(n)) for r in front] for n in (x, y))
        label_points(ax, [(a, b, str(r.number)) for a, b, r in zip(xs, ys, front,
                                                                      strict=True)])
    return fig


def write_pareto_png(rows: Sequence[TrialRow], front: Sequence[TrialRow], best: TrialRow | None,
                     objectives: Sequence[tuple[str, str]], path: Path, title: str,
                     budget_bytes: int | None = None, labels: Mapping[str, str] | None = None
                     ) -> Path:
    """`pareto_figure` saved as a PNG, atomically."""
    from autoembed.files import atomic_write

    fig = pareto_figure(rows, front, best, objectives, title, budget_bytes, labels)
    return atomic_write(path, lambda fh: fig.savefig(fh, dpi=110, format="png"))
