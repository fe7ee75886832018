"""What `autoembed search` shows: live progress on stderr (a rich Live panel on a terminal,
one line per finished trial otherwise), then the Pareto table and the files on stdout (also
`SearchResult.show`; `result` below is a `driver.SearchResult`, read by its fields)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from autoembed.budget import format_bytes
from autoembed.memory.objective import judged_text, memory_note
from autoembed.pareto import DEFAULT_PICK
from autoembed.pipeline.engine import SearchStatus
from autoembed.pipeline.plan import TIME_BOXED_TRIALS
from autoembed.pipeline.records import TrialRow

__all__ = ["SearchProgress", "render_result", "result_json"]

_SHOWN_COUNTS = ("complete", "infeasible", "pruned", "failed", "timeout", "interrupted")


def _q(v: float | None, fmt: str = "{:.4f}") -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else fmt.format(v)


class SearchProgress:
    """Progress display; `update` is the search's progress callback."""

    def __init__(self, console: Any, enabled: bool = True) -> None:
        self.console = console
        self.enabled = enabled
        self.live: Any = None
        self.last: SearchStatus | None = None

    def __enter__(self) -> SearchProgress:
        if self.enabled and self.console.is_terminal:
            from rich.live import Live

            self.live = Live(self._panel(None), console=self.console, refresh_per_second=4,
                             transient=False)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.__exit__(*exc)

    def note(self, text: str) -> None:
        # e.g. what a resume recovered: stderr, even with --json; one line, never wrapped
        self.console.print(text, soft_wrap=True, markup=False, highlight=False)

    def _panel(self, s: SearchStatus | None) -> Any:
        from rich.panel import Panel

        if s is None:
            return Panel("starting: pricing the space, starting Ray ...", title="autoembed search")
        best = _q(s.best_quality)
        text = (f"trained {_trained(s)}   running {s.running}   complete {s.complete}"
                f"   over budget (never trained) {s.infeasible}   pruned {s.pruned}   failed "
                f"{s.failed}\nPareto front {s.front}   best quality so far {best}   elapsed "
                f"{s.elapsed_s:.0f} s")
        if s.last is not None:
            text += f"\nlast: {_line(s.last, s.budget_bytes)}"
        return Panel(text, title="autoembed search")

    def update(self, s: SearchStatus) -> None:
        self.last = s
        if not self.enabled:
            return
        if self.live is not None:
            self.live.update(self._panel(s))
        elif s.last is not None and s.last.status != "running":
            # one whole line in a log (never wrapped at the console's width); the text is
            # the trial's, not rich markup
            self.console.print(f"[{s.elapsed_s:5.0f} s] {_trained(s)} trained, "
                               f"{s.infeasible} over budget, front {s.front}: "
                               f"{_line(s.last, s.budget_bytes)}",
                               soft_wrap=True, markup=False, highlight=False)


def _trained(s: SearchStatus) -> str:
    """Trials trained, out of the count when the search has one (not a time-boxed one's)."""
    return f"{s.trained}/{s.target}" if s.target < TIME_BOXED_TRIALS else str(s.trained)


def _line(r: TrialRow, budget_bytes: int | None = None) -> str:
    m = r.metrics
    judged = judged_text(r.device_total, budget_bytes)
    if r.status == "infeasible":
        return f"trial {r.number} over budget ({judged})"
    if r.status == "complete":
        return (f"trial {r.number} complete: quality {_q(m.get('quality'))}, memory "
                f"{format_bytes(m.get('memory') or 0)}, {judged}, "
                f"{_q(m.get('throughput'), '{:,.0f}')} samples/s")
    if r.status == "running":
        return f"trial {r.number} started ({judged})"
    return f"trial {r.number} {r.status}: {r.reason_line}"[:160]


def _short(v: Any) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, int):
        if abs(v) >= 10**6:
            return f"{v / 10**6:.3g}M"
        return f"{v / 10**3:.3g}k" if abs(v) >= 10**4 else str(v)
    if isinstance(v, float):
        return f"{v:.3g}"
    if isinstance(v, tuple):
        return "x".join(map(str, v)) or "-"
    return str(v)


def searched(values: Mapping[str, Any]) -> str:
    """The values the search chose for a trial (`Workload.searched`), compactly."""
    return " ".join(f"{n}={_short(v)}" for n, v in values.items())


def render_result(console: Any, result: Any) -> None:
    from rich.table import Table

    objs = [o.name for o in result.objectives]
    shown = objs + ([] if "memory" in objs else ["memory"])
    t = Table(title=f"Pareto front of study '{result.study}': {len(result.front)} members "
                    f"(budget {format_bytes(result.budget_bytes)}; * = best by {result.pick})")
    t.add_column("trial", justify="right", no_wrap=True)
    for o in shown:
        t.add_column({"memory": "memory", "throughput": "samples/s",
                      "latency": "latency ms"}.get(o, o), justify="right", no_wrap=True)
    t.add_column("device total (of budget)", justify="right", no_wrap=True)
    t.add_column("searched values")
    for r in sorted(result.front, key=lambda r: -(r.metrics.get("quality") or 0.0)):
        cells = [f"{r.number}{' *' if r.number == result.best.number else ''}"]
        for o in shown:
            v = r.metrics.get(o)
            if o == "memory":  # above the fixed overhead: KB on small tables, GB on big
                cells.append("-" if v is None else format_bytes(int(v)))
            elif o == "throughput":
                cells.append(_q(v, "{:,.0f}"))
            elif o == "latency":
                cells.append(_q(v, "{:.3f}"))
            elif o == "steps_to_target":
                cells.append(_q(v, "{:.0f}"))
            else:
                cells.append(_q(v))
        # `897.58 MB (89.8%)`: the device total the budget judged, and its share
        cells.append(judged_text(r.device_total, result.budget_bytes)
                     .removeprefix("device total ").replace(" of the budget", ""))
        cells.append(searched(result.searched.get(r.number, {})))
        t.add_row(*cells)
    console.print(t)
    console.print(memory_note(result.extra.get("memory_basis")), markup=False)
    b = result.best
    console.print(f"the pick, trial {b.number}: memory {format_bytes(b.metrics.get('memory') or 0)}"
                  f", {judged_text(b.device_total, result.budget_bytes)}", markup=False)
    c = {s: result.count(s) for s in _SHOWN_COUNTS}
    late = f", {c['timeout']} past their time limit" if c["timeout"] else ""
    if c["interrupted"]:
        late += f", {c['interrupted']} interrupted (not counted)"
    console.print(
        f"{len(result.rows)} trials: {c['complete']} complete, {c['infeasible']} over budget "
        f"(priced, never trained), {c['pruned']} stopped early, {c['failed']} failed{late}; "
        f"{result.wall_seconds:.0f} s ({result.stop_reason})")
    for line in comparison(result):
        console.print(line, markup=False)
    if result.recovered:
        console.print(f"recovered: {result.recovered}")
    for name, path in result.files.items():
        console.print(f"{name:12s} {path}", markup=False)  # a path may hold '[' and ']'


def no_noise(workload: str) -> str:
    """The line of a within-noise pick without a measured noise: its slack is 0."""
    why = ("your loop reports a quality, not the validation rows it scored" if workload == "user"
           else "the validation split cannot give one")
    return (f"within-noise: no standard error was measured ({why}), so the pick is the best "
            "quality, the cheapest on ties")


def comparison(result: Any) -> list[str]:
    """The pick against the baseline on the same split, and the pick's noise."""
    out = []
    base, noise = result.extra.get("baseline"), result.extra.get("noise")
    if base is not None:
        m = result.best.metrics
        valid, test = m.get("quality"), m.get("test_quality")
        gain = "" if test is None else f" ({test - base.test:+.4f} test)"
        out.append(f"{base.describe()}; the pick, trial {result.best.number}: validation "
                   f"{_q(valid, '{:.4f}')}, test {_q(test, '{:.4f}')}{gain}")
    if noise is not None:
        out.append(noise.describe())
    elif result.pick == DEFAULT_PICK:
        out.append(no_noise(result.workload))
    written = against_as_written(result.rows, result.best)
    if written is not None:
        out.append(written)
    lead = _unclear_lead(result.best.metrics.get("quality"), base, noise)
    if lead is not None:
        how = (f"is below the baseline on validation ({lead:+.4f}): no member beats it"
               if lead < 0 else
               f"leads the baseline on validation by {lead:+.4f}, less than one standard "
               f"error ({noise.floor_noise:.4f}): no member clearly beats it")
        out.append(f"the pick {how}; a longer search (--time-budget, --trials) may find one")
    return out


def against_as_written(rows: Any, pick: TrialRow) -> str | None:
    """The pick against the user's model as written (`TrialRow.origin`), in one line: its
    quality and device total beside the pick's (None: no such trial)."""
    from autoembed.trial import AS_WRITTEN

    ref = next((r for r in rows if r.origin == AS_WRITTEN), None)
    if ref is None:
        return None
    name = f"the model as written (trial {ref.number})"
    if ref.number == pick.number:
        return f"the pick is {name}: no config the search tried beats it"
    mine = f"device total {format_bytes(pick.device_total)}"
    if ref.status != "complete":
        return (f"the pick, trial {pick.number}: quality {_q(pick.metrics.get('quality'))}, "
                f"{mine}; {name} did not complete ({ref.status}, device total "
                f"{format_bytes(ref.device_total)})")
    q, q0 = pick.metrics.get("quality"), ref.metrics.get("quality")
    gain = f" ({q - q0:+.4f})" if isinstance(q, float) and isinstance(q0, float) else ""
    share = (f" ({pick.device_total / ref.device_total - 1:+.0%})" if ref.device_total
             else "")
    return (f"the pick, trial {pick.number}, against {name}: quality {_q(q, '{:.4f}')} vs "
            f"{_q(q0, '{:.4f}')}{gain}, {mine} vs {format_bytes(ref.device_total)}{share}")


def _unclear_lead(valid: Any, base: Any, noise: Any) -> float | None:
    """The pick's validation lead over the baseline where it is under one standard error
    (the noise's `floor_noise`) on the same metric, else None."""
    if base is None or noise is None or not isinstance(valid, (int, float)):
        return None
    from autoembed.pareto import clears_floor

    if base.metric != noise.metric or clears_floor(float(valid), base.valid, noise.floor_noise):
        return None
    return float(valid) - base.valid


def result_json(result: Any) -> dict[str, Any]:
    def member(r: TrialRow) -> Mapping[str, Any]:
        return {"trial": r.number, "metrics": dict(r.metrics), "params": dict(r.params),
                "device_total": r.device_total,
                "budget_share": round(r.device_total / result.budget_bytes, 4)}

    return {
        "study": result.study, "out_dir": str(result.out_dir),
        "budget_bytes": result.budget_bytes,
        "objectives": [o.to_dict() for o in result.objectives], "best": result.best.number,
        "memory_note": memory_note(result.extra.get("memory_basis")), "pick": result.pick,
        "picks": dict(result.picks), "front": [member(r) for r in result.front],
        "counts": {s: result.count(s) for s in _SHOWN_COUNTS}, "trials": len(result.rows),
        "stop_reason": result.stop_reason, "recovered": result.recovered,
        "wall_seconds": round(result.wall_seconds, 2),
        "files": {k: str(v) for k, v in result.files.items()},
        **{k: (None if v is None else v.to_dict())
           for k, v in result.extra.items() if k in ("baseline", "noise")}}
