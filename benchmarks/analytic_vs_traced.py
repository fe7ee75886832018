"""Analytic against traced: allocated_peak and reserved_peak on randomized configs.

The search prices every proposal analytically and checks the budget against device_total
(reserved_peak + overhead), so the analytic figures should never be below the traced step,
which replays every allocation through the caching-allocator model (trace/tracker.py).
Configs are drawn at random (seeded) in two sizes: small CTR/text configs (tens of MB) and
large ones (hundreds of MB to GBs, where a budget binds); fake tensors make size cheap.

    nice -n 19 .venv/bin/python benchmarks/analytic_vs_traced.py [--small 150] [--large 60]
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    RESULTS,
    markdown_table,
    read_jsonl,
    stamp,
    write_jsonl,
    write_result,
)

from autoembed.config import EmbeddingConfig, TableConfig  # noqa: E402
from autoembed.trace import estimate  # noqa: E402

OPTIMIZERS = ["adam", "adamw", "adagrad", "sgd", "momentum", "rowwise_adagrad", "sparse_adam"]
PRECISIONS = ["fp32", "fp32", "bf16_master", "fp16", "bf16", "amp_bf16"]
COMPRESSIONS = ["none", "none", "hash", "qr", "mixed_dim"]
# the same configs again by the traced reserved figure: where a budget binds, the GBs
BANDS = [("all, under 100 MB", 0, 10**8), ("all, 100 MB - 1 GB", 10**8, 10**9),
         ("all, 1 GB and more", 10**9, 2**63)]


def small_config(r: random.Random) -> dict[str, Any]:
    """A small CTR (60%) or text config: vocabularies 1e2-3e5, batch 32-4096."""
    comp = r.choice(COMPRESSIONS)
    kw: dict[str, Any]
    if r.random() < 0.6:
        tables = tuple(TableConfig(f"f{i}", int(10 ** r.uniform(2, 5.5)),
                                   r.choice([1.0, 1.0, 2.0, 4.0]))
                       for i in range(r.randint(1, 8)))
        kw = dict(task="ctr", tables=tables, interaction=r.choice(["concat", "dot"]))
    else:
        kw = dict(task="text", tables=(TableConfig("tokens", int(10 ** r.uniform(3, 5.5))),),
                  seq_len=r.choice([16, 64, 128]), num_classes=r.choice([2, 4]),
                  pooling=r.choice(["mean", "naive"]))
    kw.update(dim=r.choice([8, 16, 32, 64]), batch_size=r.choice([32, 128, 256, 1024, 4096]),
              dense_layers=r.choice([(), (64,), (64, 32), (256, 64)]),
              table_optimizer=r.choice(OPTIMIZERS),
              dense_optimizer=r.choice(["adam", "adagrad", "sgd", "momentum"]),
              precision=r.choice(PRECISIONS), compression=comp)
    if comp == "hash":
        kw["hash_buckets"] = r.choice([0.1, 0.25, 0.5])
    elif comp == "qr":
        kw["qr_collisions"] = r.choice([2, 4, 8])
    elif comp == "mixed_dim":
        kw["mixed_dim_alpha"] = 0.3
    return kw


def large_config(r: random.Random) -> dict[str, Any]:
    """A small config scaled up: vocabularies 1e4-3e7 (text 1e5-1e7), dim 16-128, wide
    towers, batch 1024-65536 (text 256-4096)."""
    kw = small_config(r)
    if kw["task"] == "ctr":
        kw["tables"] = tuple(TableConfig(t.name, int(10 ** r.uniform(4, 7.5)), t.pooling_factor)
                             for t in kw["tables"])
        kw["batch_size"] = r.choice([1024, 4096, 16384, 65536])
    else:
        kw["tables"] = (TableConfig("tokens", int(10 ** r.uniform(5, 7))),)
        kw["batch_size"] = r.choice([256, 1024, 4096])
    kw["dim"] = r.choice([16, 32, 64, 128])
    kw["dense_layers"] = r.choice([(256, 64), (1024, 256), (512,)])
    return kw


def measure(size: str, draw: Callable[[random.Random], dict[str, Any]], n: int,
            seed: int) -> list[dict[str, Any]]:
    """n configs the traced estimate can trace, each priced both ways."""
    r = random.Random(seed)
    out: list[dict[str, Any]] = []
    while len(out) < n:
        kw = draw(r)
        try:
            config = EmbeddingConfig(**kw).resolve()
        except Exception as e:  # a draw the config rejects (e.g. qr on a tiny table)
            print("skip", type(e).__name__, str(e)[:100], file=sys.stderr)
            continue
        a, t = estimate(config), estimate(config, method="traced")
        if t.method != "traced":
            continue
        out.append(dict(
            size=size, seed=seed, index=len(out),
            config={k: [vars(x) for x in v] if k == "tables" else v for k, v in kw.items()},
            analytic_allocated=a.allocated_peak, traced_allocated=t.allocated_peak,
            analytic_reserved=a.reserved_peak, traced_reserved=t.reserved_peak,
            analytic_phase=a.peak_phase, traced_phase=t.peak_phase,
        ))
    return out


def ratio(rec: dict[str, Any], figure: str) -> float:
    return rec[f"analytic_{figure}"] / rec[f"traced_{figure}"]


def distribution(recs: Sequence[dict[str, Any]], figure: str) -> list[object]:
    xs = sorted(ratio(r, figure) for r in recs)

    def q(p: float) -> str:
        return f"{xs[min(len(xs) - 1, int(p * len(xs)))]:.3f}"

    mb = sorted(r[f"traced_{figure}"] / 1e6 for r in recs)
    return [len(xs), f"{mb[0]:.0f}-{mb[-1]:.0f}", sum(x < 1 for x in xs), f"{xs[0]:.3f}",
            q(0.1), q(0.5), q(0.9), f"{xs[-1]:.3f}"]


def describe(rec: dict[str, Any]) -> str:
    c = rec["config"]
    tables = "+".join(str(t["vocab_size"]) for t in c["tables"])
    return (f"{c['task']} V={tables} d={c['dim']} b={c['batch_size']} {c['precision']} "
            f"{c['table_optimizer']}/{c['dense_optimizer']} {c['compression']} "
            f"tower={tuple(c['dense_layers'])}")


def report(recs: list[dict[str, Any]], command: str) -> str:
    bands = [(f"{size} configs", lambda r, s=size: r["size"] == s) for size in ("small", "large")]
    bands += [(name, lambda r, lo=lo, hi=hi: lo <= r["traced_reserved"] < hi)
              for name, lo, hi in BANDS]
    rows = [[name, figure, *distribution(sub, figure)]
            for name, keep in bands if (sub := [r for r in recs if keep(r)])
            for figure in ("allocated", "reserved")]
    body = [f"Measured: {recs[0]['stamp']}", "",
            "Ratio analytic / traced per config (1.000: equal; below 1: the analytic figure is "
            "under the traced step, which the budget check must never be).", "",
            markdown_table(["configs (traced reserved)", "figure", "n", "traced MB", "under",
                            "min", "p10", "median", "p90", "max"], rows), ""]
    for figure in ("allocated", "reserved"):
        worst = sorted(recs, key=lambda r: ratio(r, figure))[:5]
        body += [f"Lowest {figure} ratios:", "", markdown_table(
            ["ratio", "analytic MB", "traced MB", "config"],
            [[f"{ratio(r, figure):.3f}", f"{r[f'analytic_{figure}'] / 1e6:.1f}",
              f"{r[f'traced_{figure}'] / 1e6:.1f}", describe(r)] for r in worst]), ""]
    loose = sorted((r for r in recs if r["size"] == "large"), key=lambda r: -ratio(r, "reserved"))
    body += ["Loosest reserved ratios on large configs:", "", markdown_table(
        ["ratio", "analytic MB", "traced MB", "config"],
        [[f"{ratio(r, 'reserved'):.3f}", f"{r['analytic_reserved'] / 1e6:.1f}",
          f"{r['traced_reserved'] / 1e6:.1f}", describe(r)] for r in loose[:5]]), ""]
    body.append(f"Every config: `{command}` writes results/analytic_vs_traced.jsonl.gz.")
    return "\n".join(body)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", type=int, default=150, help="small configs (default 150)")
    ap.add_argument("--large", type=int, default=60, help="large configs (default 60)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--report-only", action="store_true",
                    help="rewrite the .md from the .jsonl on file, measuring nothing")
    args = ap.parse_args()
    store = RESULTS / "analytic_vs_traced.jsonl.gz"
    if args.report_only:
        recs = read_jsonl(store)
    else:
        recs = measure("small", small_config, args.small, args.seed)
        recs += measure("large", large_config, args.large, args.seed)
        line = stamp()
        recs = [{**rec, "stamp": line} for rec in recs]
        RESULTS.mkdir(parents=True, exist_ok=True)
        write_jsonl(store, recs)
    command = (f"nice -n 19 python benchmarks/analytic_vs_traced.py --small {args.small} "
               f"--large {args.large} --seed {args.seed}")
    write_result("analytic_vs_traced", "Analytic against traced peaks (randomized configs)",
                 report(recs, command), command)


if __name__ == "__main__":
    main()
