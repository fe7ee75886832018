"""What the CLI prints for an estimate (`price.Priced`): rich tables or one JSON object, and
the does-not-fit line; and the consoles every command prints to."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from autoembed.budget import Budget, below_overhead, format_bytes
from autoembed.memory import MemoryEstimate
from autoembed.memory.types import (
    BYTE_FIGURES,
    CUBLAS_WORKSPACE_BYTES,
    CUDA_CONTEXT_BYTES,
    overhead_bytes,
)
from autoembed.pricing.price import Priced

if TYPE_CHECKING:
    from autoembed.pricing.suggest import Suggestion

__all__ = ["console", "print_estimate", "estimate_json", "does_not_fit", "overhead_line"]

# the JSON object's keys, in order (the contract's figures first: docs/contracts.md#memory-figures)
_JSON_KEYS = ("method", *BYTE_FIGURES, "tables", "budget", "fits", "peak_phase", "gpus",
              "sharding", "per_gpu", "host_bytes", "host_budget", "host_fits", "cache")


def console(stderr: bool = False) -> Any:
    """A rich console that does not wrap tables in pipes and CI logs."""
    from rich.console import Console

    con = Console(stderr=stderr, highlight=False)
    if not con.is_terminal:
        con.width = max(con.width, 120)
    return con


def print_estimate(priced: Priced, as_json: bool,
                   suggestions: Sequence[Suggestion] | None = None) -> None:
    """The estimate as one JSON object, or as tables (and the per-module breakdown of the
    user's own model); `suggestions` (None: not asked): the changes that fit the budget."""
    if as_json:
        d = estimate_json(priced)
        if suggestions is not None:
            d["suggestions"] = [s.to_dict() for s in suggestions]
        print(json.dumps(d))
        return
    _render_estimate(priced.estimate, priced.budget)
    if priced.user:
        _render_modules(priced.estimate)
    if suggestions is not None and priced.budget is not None:
        _render_suggestions(suggestions, priced)


def estimate_json(priced: Priced) -> dict[str, Any]:
    d = priced.estimate.to_dict()
    return {k: d[k] for k in (*_JSON_KEYS, *(("modules",) if priced.user else ()))}


def does_not_fit(priced: Priced, suggested: bool = False) -> str:
    """The stderr line of an estimate over its budget (exit 3); `suggested`: changes that
    fit were printed."""
    est, bud = priced.estimate, priced.budget
    if bud is not None and not bud.admits(est.overhead):  # no smaller config helps
        return "autoembed: does not fit: " + below_overhead(
            bud, est.overhead, "CUDA context, cuBLAS workspace, --reserve", est.device_total,
            "this config")
    fix = ("make one of the changes listed under 'What would fit'" if suggested
           else "choose a smaller config")
    return (f"autoembed: does not fit: device total {format_bytes(est.device_total)} is over "
            f"the budget {bud.text if bud else '?'} = {format_bytes(est.budget or 0)}; "
            f"raise --budget or {fix}")


def overhead_line(est: MemoryEstimate) -> str:
    """What the fixed overhead is, and the flag that sets its variable part."""
    reserve = est.overhead - overhead_bytes(0)
    return (f"overhead {format_bytes(est.overhead)} = CUDA context "
            f"{format_bytes(CUDA_CONTEXT_BYTES)} + cuBLAS workspace "
            f"{format_bytes(CUBLAS_WORKSPACE_BYTES)} (fixed per process) + --reserve "
            f"{format_bytes(reserve)} (the rest of your process: set it with --reserve)")


def _render_suggestions(suggestions: Sequence[Suggestion], priced: Priced) -> None:
    from rich.markup import escape
    from rich.table import Table

    assert priced.budget is not None
    budget = priced.budget
    over = priced.estimate.fits is False
    how = "by tracing your model" if priced.user else "by the analytic model"
    title = (f"{'What would fit' if over else 'What fits'} the budget {budget.text}"
             f"{'' if over else ' beyond this'} (changes to the flags given, each priced on "
             f"its own {how})")
    if not suggestions:
        why = (f": the fixed overhead alone, {format_bytes(priced.estimate.overhead)}, is over "
               "it" if priced.estimate.overhead >= budget.bytes else "")
        console().print(f"{title}: no single change or pair of changes tried fits{why}",
                        markup=False, soft_wrap=True)
        return
    t = Table(title=escape(title))
    for col in ("change", "flags to add", "device total", "of budget"):
        t.add_column(col, justify="right" if col in ("device total", "of budget") else "left")
    for s in suggestions:
        t.add_row(escape(s.kind), escape(s.command_line), format_bytes(s.device_total),
                  f"{100 * s.device_total / budget.bytes:.1f}%")
    console().print(t)


def _render_estimate(est: MemoryEstimate, budget: Budget | None) -> None:
    from rich.markup import escape
    from rich.table import Table

    con = console()
    total = est.device_total
    t = Table(title=f"Memory for one training step ({est.method}, peak in {est.peak_phase})")
    for col in ("category", "bytes", "size", "of total", *(("of budget",) if budget else ())):
        t.add_column(col, justify="left" if col == "category" else "right")
    for name, b in (
            ("parameters", est.parameters), ("gradients", est.gradients),
            ("optimizer state", est.optimizer_state), ("activations", est.activations),
            ("temporaries", est.temporaries), ("allocated peak", est.allocated_peak),
            ("reserved peak", est.reserved_peak),
            ("overhead (context, workspace, reserve)", est.overhead),
            ("device total", est.device_total), ("serving bytes", est.serving_bytes)):
        cells = [name, f"{b:,}", format_bytes(b), f"{100 * b / total:.1f}%"]
        if budget is not None:
            cells.append(f"{100 * b / budget.bytes:.1f}%")
        style = "bold" if name in ("allocated peak", "device total") else None
        t.add_row(*cells, style=style)
    con.print(t)
    tt = Table(title="Per table")
    for col in ("table", "rows", "dim", "parameters", "gradients", "optimizer state", "serving"):
        tt.add_column(col, justify="left" if col == "table" else "right")
    for r in est.tables:
        tt.add_row(escape(r.name), f"{r.rows:,}", str(r.dim), *(format_bytes(b) for b in (
            r.parameters, r.gradients, r.optimizer_state, r.serving_bytes)))
    con.print(tt)
    if est.per_gpu:
        gt = Table(title=f"Per GPU ({est.gpus} GPUs, {est.sharding}-wise sharding)")
        for col in ("gpu", "tables", "allocated peak", "device total"):
            gt.add_column(col)
        for g in est.per_gpu:
            gt.add_row(str(g.gpu), escape(",".join(g.tables)) or "-",
                       format_bytes(g.allocated_peak), format_bytes(g.device_total))
        con.print(gt)
    if est.cache:
        ct = Table(title="Host-cached tables (device cache of host rows)")
        for col in ("table", "host rows", "cached rows", "host bytes", "bookkeeping",
                    "zipf s", "miss rate", "moved/step"):
            ct.add_column(col, justify="left" if col == "table" else "right")
        for c in est.cache:
            ct.add_row(c.name, f"{c.rows:,}", f"{c.cache_rows:,}", format_bytes(c.host_bytes),
                       format_bytes(c.device_bookkeeping), f"{c.zipf_exponent:.2f}",
                       f"{100 * c.miss_rate:.1f}%", format_bytes(c.transfer_bytes_per_step))
        con.print(ct)
        con.print(f"host memory {format_bytes(est.host_bytes)} (not in the device figures)")
    if est.overhead:
        con.print(overhead_line(est), markup=False, soft_wrap=True)
    if budget is not None:
        verdict = "[green]fits[/green]" if est.fits else "[red]does NOT fit[/red]"
        con.print(f"device total {format_bytes(est.device_total)} {verdict} the budget "
                  f"{escape(budget.text)} = {format_bytes(budget.bytes)}")


def _render_modules(est: MemoryEstimate) -> None:
    """The breakdown by module path (tables, top-level modules, the step's own tensors)."""
    from rich.markup import escape
    from rich.table import Table

    t = Table(title="Per module (bytes live at the peak)")
    cols = ("module", "kind", "parameters", "gradients", "optimizer state", "activations",
            "temporaries")
    for col in cols:
        t.add_column(col, justify="left" if col in ("module", "kind") else "right")
    for m in est.modules:
        t.add_row(escape(m.name), m.kind, *(format_bytes(b) for b in (
            m.parameters, m.gradients, m.optimizer_state, m.activations, m.temporaries)))
    console().print(t)
