"""What the CLI prints for an estimate (`price.Priced`): rich tables or one JSON object, and
the does-not-fit line; and the consoles every command prints to."""

from __future__ import annotations

import json
from typing import Any

from autoembed.budget import Budget, format_bytes
from autoembed.memory import MemoryEstimate
from autoembed.memory.types import BYTE_FIGURES
from autoembed.price import Priced

__all__ = ["console", "print_estimate", "estimate_json", "does_not_fit"]

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


def print_estimate(priced: Priced, as_json: bool) -> None:
    """The estimate as one JSON object, or as tables (and the per-module breakdown of the
    user's own model)."""
    if as_json:
        print(json.dumps(estimate_json(priced)))
        return
    _render_estimate(priced.estimate, priced.budget)
    if priced.user:
        _render_modules(priced.estimate)


def estimate_json(priced: Priced) -> dict[str, Any]:
    d = priced.estimate.to_dict()
    return {k: d[k] for k in (*_JSON_KEYS, *(("modules",) if priced.user else ()))}


def does_not_fit(priced: Priced) -> str:
    """The stderr line of an estimate over its budget (exit 3)."""
    est, bud = priced.estimate, priced.budget
    return (f"autoembed: does not fit: device total {format_bytes(est.device_total)} is over "
            f"the budget {bud.text if bud else '?'} = {format_bytes(est.budget or 0)}; "
            "raise --budget or choose a smaller config")


def _render_estimate(est: MemoryEstimate, budget: Budget | None) -> None:
    from rich.markup import escape
    from rich.table import Table

    con = console()
    total = est.device_total
    t = Table(title=f"Memory for one training step ({est.method}, peak in {est.peak_phase})")
    t.add_column("category")
    t.add_column("bytes", justify="right")
    t.add_column("size", justify="right")
    t.add_column("of total", justify="right")
    if budget is not None:
        t.add_column("of budget", justify="right")
    rows = [
        ("parameters", est.parameters),
        ("gradients", est.gradients),
        ("optimizer state", est.optimizer_state),
        ("activations", est.activations),
        ("temporaries", est.temporaries),
        ("allocated peak", est.allocated_peak),
        ("reserved peak", est.reserved_peak),
        ("overhead (context, workspace, reserve)", est.overhead),
        ("device total", est.device_total),
        ("serving bytes", est.serving_bytes),
    ]
    for name, b in rows:
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
        tt.add_row(
            escape(r.name),  # a user's name, not rich markup ("[/bold]" would raise)
            f"{r.rows:,}",
            str(r.dim),
            format_bytes(r.parameters),
            format_bytes(r.gradients),
            format_bytes(r.optimizer_state),
            format_bytes(r.serving_bytes),
        )
    con.print(tt)
    if est.per_gpu:
        gt = Table(title=f"Per GPU ({est.gpus} GPUs, {est.sharding}-wise sharding)")
        for col in ("gpu", "tables", "allocated peak", "device total"):
            gt.add_column(col)
        for g in est.per_gpu:
            gt.add_row(
                str(g.gpu),
                escape(",".join(g.tables)) or "-",
                format_bytes(g.allocated_peak),
                format_bytes(g.device_total),
            )
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
    if budget is not None:
        verdict = "[green]fits[/green]" if est.fits else "[red]does NOT fit[/red]"
        con.print(
            f"device total {format_bytes(est.device_total)} {verdict} the budget "
            f"{escape(budget.text)} = {format_bytes(budget.bytes)}"
        )


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
