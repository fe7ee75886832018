"""pareto.png: the memory axis is logarithmic (a front spans kB to GB) and the members'
numbers never overlap, however close the members lie (they used to pile up at zero)."""

from __future__ import annotations

from itertools import combinations

import pytest

from autoembed.config import EmbeddingConfig
from autoembed.pipeline.outputs import write_pareto_png
from autoembed.trial import TrialRow

OBJECTIVES = [("quality", "maximize"), ("memory", "minimize"), ("throughput", "maximize")]


def _row(n: int, quality: float, memory: float, throughput: float) -> TrialRow:
    return TrialRow(n, "complete", EmbeddingConfig(), {"device_total": int(memory)},
                    metrics={"quality": quality, "memory": memory, "throughput": throughput})


def _front() -> list[TrialRow]:
    # members from 1 kB to 10 MB, and a cluster of five nearly on top of each other
    rows = [_row(0, 0.70, 1e3, 5e4), _row(1, 0.74, 2e4, 4e4), _row(2, 0.78, 3e5, 3e4),
            _row(3, 0.80, 1e7, 1e4)]
    rows += [_row(4 + i, 0.7600 + 0.0001 * i, 1.2e5 * (1 + 0.001 * i), 2.0e4 + 10 * i)
             for i in range(5)]
    return rows


@pytest.fixture()
def figure(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    """The figure pareto.png is saved from, caught as write_pareto_png saves it."""
    from matplotlib.figure import Figure

    saved = []
    real = Figure.savefig

    def keep(self, *args, **kw):  # type: ignore[no-untyped-def]
        saved.append(self)
        return real(self, *args, **kw)

    monkeypatch.setattr(Figure, "savefig", keep)
    front = _front()
    write_pareto_png(front, front, front[3], OBJECTIVES, tmp_path / "pareto.png", "t",
                     8 * 10**9)
    assert len(saved) == 1
    return saved[0], front


def test_memory_axis_is_logarithmic(figure) -> None:  # type: ignore[no-untyped-def]
    fig, _ = figure
    panels = [ax for ax in fig.axes if ax.get_xlabel() or ax.get_ylabel()]
    assert len(panels) == 3  # quality-memory, quality-throughput, memory-throughput
    for ax in panels:
        for label, scale in ((ax.get_xlabel(), ax.get_xscale()),
                             (ax.get_ylabel(), ax.get_yscale())):
            assert scale == ("log" if label.startswith("memory") else "linear"), (label, scale)


def test_memory_ticks_read_as_bytes(figure) -> None:  # type: ignore[no-untyped-def]
    """The members span 1 kB to 10 MB (and the budget line 8 GB): the memory axis's labelled
    ticks are decades in decimal byte units, plain text."""
    fig, _ = figure
    ax = next(a for a in fig.axes if a.get_ylabel().startswith("memory"))
    shown = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert {"1 kB", "1 MB", "1 GB"} <= set(shown), shown
    assert not any("$" in t for t in shown), shown  # no mathtext


@pytest.mark.parametrize("b, text", [(999.0, "999 B"), (1e3, "1 kB"), (2e7, "20 MB"),
                                     (1.5e9, "1.5 GB"), (3e12, "3 TB")])
def test_bytes_label(b: float, text: str) -> None:
    from autoembed.pipeline.outputs import _bytes_label

    assert _bytes_label(b) == text


def test_member_labels_do_not_overlap_and_none_is_lost(figure) -> None:  # type: ignore[no-untyped-def]
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig, front = figure
    FigureCanvasAgg(fig).draw()  # the saved figure is closed: draw it on a canvas again
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        if not (ax.get_xlabel() or ax.get_ylabel()):
            continue
        labels = [t for t in ax.texts if t.get_text()]
        boxes = [t.get_window_extent(renderer) for t in labels]
        for (i, a), (j, b) in combinations(enumerate(boxes), 2):
            assert not a.overlaps(b), (ax.get_xlabel(), labels[i].get_text(),
                                       labels[j].get_text())
        named = {int(n) for t in labels for n in t.get_text().split(", ")}
        assert named == {r.number for r in front}, ax.get_xlabel()


def test_written_png(tmp_path) -> None:  # type: ignore[no-untyped-def]
    front = _front()
    path = write_pareto_png(front, front, front[3], OBJECTIVES, tmp_path / "pareto.png", "t",
                            8 * 10**9)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_saving_draws_the_figure_once(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """fig.tight_layout() left a layout engine on the figure, for which savefig drew it a
    second time (every tick and label laid out again, at every search's end)."""
    from matplotlib.figure import Figure

    real_save, real_draw = Figure.savefig, Figure.draw
    saving, draws = [False], []

    def save(self, *args, **kw):  # type: ignore[no-untyped-def]
        saving[0] = True
        try:
            return real_save(self, *args, **kw)
        finally:
            saving[0] = False

    def draw(self, renderer):  # type: ignore[no-untyped-def]
        draws.extend([1] if saving[0] else [])
        return real_draw(self, renderer)

    monkeypatch.setattr(Figure, "savefig", save)
    monkeypatch.setattr(Figure, "draw", draw)
    front = _front()
    write_pareto_png(front, front, front[3], OBJECTIVES, tmp_path / "pareto.png", "t", None)
    assert len(draws) == 1
