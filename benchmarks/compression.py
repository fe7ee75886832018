"""Compression methods compared (issue 16): test quality against table memory at about 10x
and 100x (1000x where the table is large enough) less table memory than the full table.

Methods: hash (hashing trick), qr (quotient-remainder, mult), robe (ROBE-Z, block 8), tt
(tensor-train, the largest rank that fits), hot_cold (half the rows for the most frequent
ids, half hashed buckets; the hot-id array counted in the memory), int8 / int4 (the full
table trained (the full run's best model), then served row-quantized: their ratio is fixed
by the format). Each workload's tables with at least `MIN_ROWS` rows are compressed, so that
the whole table memory (smaller tables stay full and count in it) is 1/ratio of the full
one. Every run: the same model (dim 16, tower 64, concat), Adam on every parameter (dense
gradients for every method: one optimizer, one rule), the same steps and batch; the learning
rate is picked from `--lrs` by validation AUC, and the test AUC of that run is reported.
Throughput is training samples/s of that run (plain-torch TT builds every row from its
cores: it is slow on a CPU, and reported as is).

Part 2 (`--trained`, MovieLens): the full model is trained, then each method at 10x is
initialised from its trained tables (`autoembed.models.compress_init`: hash bucket means,
QR least squares, TT-SVD, ROBE least squares, hot rows copied and cold buckets averaged,
int8/int4 quantised) with the trained tower; test AUC right after initialisation, after a
short fine-tune (`--finetune` steps), and of the same compressed model trained from scratch
for those steps.

    python benchmarks/compression.py [--workloads synthetic,movielens,flights]
        [--steps 600] [--lrs 0.003,0.01] [--ratios 10,100,1000] [--trained]

Writes benchmarks/results/compression.md and compression.png.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, markdown_table, write_result  # noqa: E402

DIM, BATCH, MIN_ROWS, ROBE_BLOCK = 16, 512, 200, 8
METHODS = ("hash", "qr", "robe", "tt", "hot_cold")
SERVED = ("int8", "int4")
EVAL_BATCHES = 40  # validation / test batches of BATCH rows


@dataclass(frozen=True)
class Workload:
    name: str
    spec: dict[str, Any]


WORKLOADS = {
    # the planted signal spread over 10^5 ids per field (head_size), not a 100-id head
    "synthetic": Workload("synthetic", {
        "name": "synthetic-ctr", "vocab_sizes": [150_000, 100_000, 5_000],
        "head_size": 100_000, "rows": [200_000, 20_000, 20_000]}),
    "movielens": Workload("movielens", {"name": "movielens"}),
    "flights": Workload("flights", {"name": "flights"}),
}


@dataclass
class Run:
    workload: str
    method: str
    ratio_target: float
    table_bytes: int
    full_bytes: int
    lr: float
    valid_auc: float
    test_auc: float
    samples_per_s: float
    note: str = ""


# ------------------------------------------------------------------------------ tables
def _table(method: str, t: Any, ratio: float, spec: Any, hot: Callable[[str, int], Any],
           seed: int) -> tuple[Any, str]:
    """A compressed table for field `t` at about 1/ratio of its full bytes, and a note."""
    import torch

    from autoembed.compression import tt_shapes
    from autoembed.models.embedding import PlainTable, QRTable
    from autoembed.models.hot_cold import HotColdTable
    from autoembed.models.robe import RobeTable
    from autoembed.models.tt import TTTable

    v = t.vocab_size
    target = v * DIM / ratio  # values
    if method in ("none", *SERVED) or v < MIN_ROWS:
        return PlainTable(v, DIM, DIM, spec), ""
    if method == "hash":
        rows = max(1, int(target // DIM))
        return PlainTable(rows, DIM, DIM, spec, buckets=rows, seed=seed), f"{rows} buckets"
    if method == "qr":
        best = None
        for m in range(2, v):
            rows = -(-v // m) + m
            if rows * DIM <= target and (best is None or rows > best[1]):
                best = (m, rows)
            if m * DIM > target:
                break
        if best is None:
            return None, "cannot reach: ceil(V/m) + m >= 2 sqrt(V) rows"
        return QRTable(v, best[0], DIM, "mult", spec), f"m={best[0]}"
    if method == "robe":
        size = max(ROBE_BLOCK, int(target))
        return RobeTable(size, ROBE_BLOCK, (DIM,), spec, seed=seed), f"M={size}"
    if method == "tt":
        rank = 0
        while sum(math.prod(s) for _, s in tt_shapes(v, DIM, rank + 1)) <= target:
            rank += 1
        if rank == 0:
            return None, "cannot reach: rank 1 is larger"
        return TTTable(v, DIM, rank, spec), f"rank {rank}"
    if method == "hot_cold":
        # 8 B per hot id = 1/8 of a 16 x fp32 row
        rows = int(target // DIM)
        n_hot = max(1, int(rows / 2 / (1 + 8 / (DIM * 4))))
        cold = max(1, rows - n_hot - math.ceil(n_hot * 8 / (DIM * 4)))
        ids = torch.as_tensor(hot(t.name, n_hot), dtype=torch.int64)
        return HotColdTable(v, DIM, ids, cold, spec, seed=seed), f"{n_hot} hot, {cold} cold"
    raise ValueError(method)


def _bytes(model: Any, served: str = "none") -> int:
    """Table bytes: parameters and buffers of the table modules (served: packed rows)."""
    if served != "none":
        from autoembed.models.quantize import quantize

        model = quantize(model, served)
    total = 0
    for m in model.tables.values():
        total += sum(p.nbytes for p in m.parameters()) + sum(b.nbytes for b in m.buffers())
    return total


# --------------------------------------------------------------------------- training
def _auc(model: Any, data: Any, split: str) -> float:
    import numpy as np
    import torch

    from autoembed.data.metrics import roc_auc

    scores, labels = [], []
    with torch.no_grad():
        for i, b in enumerate(data.batches(split, BATCH, shuffle=False)):
            if i >= EVAL_BATCHES:
                break
            scores.append(model(b).float().numpy())
            labels.append(b.labels.numpy())
    return roc_auc(np.concatenate(scores), np.concatenate(labels))


def _train(model: Any, data: Any, steps: int, lr: float) -> float:
    """`steps` Adam steps on shuffled train batches; training samples/s."""
    import torch

    opt = torch.optim.Adam(model.parameters(), lr=lr, foreach=True)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    done, epoch, seen, t0 = 0, 0, 0, time.perf_counter()
    model.train()
    while done < steps:
        for b in data.batches("train", BATCH, seed=epoch, drop_last=True):
            loss = loss_fn(model(b), b.labels)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            done += 1
            seen += b.labels.shape[0]
            if done >= steps:
                break
        epoch += 1
    model.eval()
    return seen / (time.perf_counter() - t0)


class Bench:
    def __init__(self, workload: Workload) -> None:
        import numpy as np

        from autoembed.config import EmbeddingConfig
        from autoembed.data import DataSpec, load_dataset

        self.workload = workload
        self.data = load_dataset(DataSpec.from_dict(workload.spec))
        vals = self.data.config_values()
        self.config = replace(
            EmbeddingConfig(dim=DIM, dense_layers=(64,), batch_size=BATCH), **vals
        )
        self._counts: dict[str, Any] = {}
        self.full_model: Any = None
        self.full_sps = self.full_lr = 0.0
        self._np = np

    def hot(self, field: str, count: int) -> Any:
        """The hot set: the generator's for synthetic data, train id counts otherwise."""
        from autoembed.models.hot_cold import hot_ids_from_counts

        if hasattr(self.data, "hot_ids"):
            return self.data.hot_ids(field, count)
        if field not in self._counts:
            np = self._np
            t = next(t for t in self.config.tables if t.name == field)
            counts = np.zeros(t.vocab_size, dtype=np.int64)
            for b in self.data.batches("train", 8192, shuffle=False):
                ids = b.features[field].numpy().reshape(-1)
                counts += np.bincount(ids[ids >= 0], minlength=t.vocab_size)
            self._counts[field] = counts
        return hot_ids_from_counts(self._counts[field], count)

    def model(self, method: str, ratio: float, seed: int = 0) -> tuple[Any, str]:
        import torch

        from autoembed.models import build_model
        from autoembed.models.embedding import LookupSpec

        torch.manual_seed(seed)
        model = build_model(self.config)
        spec = LookupSpec(self.config.pooling, False, False)
        # the whole table memory shrinks `ratio` times: small tables stay full, so the large
        # ones shrink by (their rows) / (what the budget leaves them)
        small = sum(t.vocab_size for t in self.config.tables if t.vocab_size < MIN_ROWS)
        large = sum(t.vocab_size for t in self.config.tables) - small
        left = (small + large) / ratio - small
        if left <= 0:
            return None, f"cannot reach: the tables under {MIN_ROWS} rows alone exceed it"
        notes = []
        for t in self.config.tables:
            table, note = _table(method, t, large / left, spec, self.hot, self.config.hash_seed)
            if table is None:
                return None, note
            model.tables[t.name] = table
            if note:
                notes.append(f"{t.name}: {note}")
        return model, "; ".join(notes)

    def run(self, method: str, ratio: float, steps: int, lrs: list[float]) -> Run | None:
        """The best run over `lrs` (by validation AUC). int8/int4 serve the best full model
        (trained once, by `run("none", ...)`, which keeps it)."""
        from autoembed.models.quantize import quantize

        full = _bytes(self.model("none", 1)[0])
        best: Run | None = None
        for lr in lrs:
            if method in SERVED:
                model, note, sps, lr = self.full_model, "", self.full_sps, self.full_lr
            else:
                model, note = self.model(method, ratio)
                if model is None:
                    print(f"{self.workload.name} {method} {ratio}x: {note}", flush=True)
                    return None
                sps = _train(model, self.data, steps, lr)
            served = quantize(model, method) if method in SERVED else model
            r = Run(self.workload.name, method, ratio, _bytes(model, method if method in SERVED
                                                                else "none"),
                    full, lr, _auc(served, self.data, "valid"), _auc(served, self.data, "test"),
                    sps, note)
            print(f"{r.workload} {method} {ratio}x lr={lr}: {full / r.table_bytes:.1f}x "
                  f"valid {r.valid_auc:.4f} test {r.test_auc:.4f} {sps:.0f}/s {note}", flush=True)
            if best is None or r.valid_auc > best.valid_auc:
                best = r
                if method == "none":
                    self.full_model, self.full_sps, self.full_lr = model, sps, lr
            if method in SERVED:
                break
        return best


# ------------------------------------------------------------------ compress a trained model
def trained_part(steps: int, finetune: int, lr: float) -> tuple[str, list[tuple[Any, ...]]]:
    import torch

    from autoembed.models.compress_init import (
        hash_init,
        hot_cold_init,
        qr_init,
        robe_init,
        tt_svd,
    )
    from autoembed.models.embedding import PlainTable, QRTable
    from autoembed.models.hot_cold import HotColdTable
    from autoembed.models.quantize import quantize
    from autoembed.models.robe import RobeTable
    from autoembed.models.tt import TTTable

    bench = Bench(WORKLOADS["movielens"])
    trained, _ = bench.model("none", 1)
    _train(trained, bench.data, steps, lr)
    full_auc = _auc(trained, bench.data, "test")
    rows: list[tuple[Any, ...]] = [("full table", "-", f"{full_auc:.4f}", "-", "-")]
    for method in (*METHODS, *SERVED):
        model, _ = bench.model("none" if method in SERVED else method, 10)
        if model is None:
            continue
        model.tower.load_state_dict(trained.tower.state_dict())
        with torch.no_grad():
            for name, table in model.tables.items():
                w = trained.tables[name].weight.detach()
                if isinstance(table, TTTable):
                    for p, c in zip((table.core0, table.core1, table.core2), tt_svd(w, table.rank),
                                    strict=True):
                        p.copy_(c)
                elif isinstance(table, RobeTable):
                    pos = table.positions(torch.arange(w.shape[0]))
                    table.weight.copy_(robe_init(w, pos, table.size))
                elif isinstance(table, HotColdTable):
                    table.weight.copy_(hot_cold_init(w, table.hot_ids, table.cold, table.seed))
                elif isinstance(table, QRTable):
                    q, r = qr_init(w, table.collisions, table.operation)
                    table.q_weight.copy_(q)
                    table.r_weight.copy_(r)
                elif isinstance(table, PlainTable) and table.buckets is not None:
                    table.weight.copy_(hash_init(w, table.buckets, table.seed))
                else:
                    table.weight.copy_(w)
        served = quantize(model, method) if method in SERVED else model
        init_auc = _auc(served, bench.data, "test")
        if method in SERVED:  # quantized serving: nothing to fine-tune
            rows.append((method, f"{_bytes(model) / _bytes(model, method):.1f}x",
                         f"{init_auc:.4f}", "-", "-"))
            continue
        _train(model, bench.data, finetune, lr)
        tuned = _auc(model, bench.data, "test")
        scratch, _ = bench.model(method, 10, seed=1)
        _train(scratch, bench.data, finetune, lr)
        rows.append((method, f"{_bytes(trained) / _bytes(model):.1f}x", f"{init_auc:.4f}",
                     f"{tuned:.4f}", f"{_auc(scratch, bench.data, 'test'):.4f}"))
        print(rows[-1], flush=True)
    header = f"MovieLens: full model trained {steps} steps (lr {lr}); fine-tune {finetune} steps"
    return header, rows


# ------------------------------------------------------------------------------- report
def _plot(runs: list[Run], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = sorted({r.workload for r in runs})
    fig, axes = plt.subplots(1, len(names), figsize=(5 * len(names), 4), squeeze=False)
    for ax, w in zip(axes[0], names, strict=True):
        for m in ("none", *METHODS, *SERVED):
            pts = sorted((r.table_bytes, r.test_auc) for r in runs if r.workload == w
                         and r.method == m)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=m)
        ax.set_xscale("log")
        ax.set_xlabel("table bytes")
        ax.set_ylabel("test AUC")
        ax.set_title(w)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def _winners(runs: list[Run]) -> list[tuple[Any, ...]]:
    out = []
    for w in sorted({r.workload for r in runs}):
        full = next(r for r in runs if r.workload == w and r.method == "none")
        for ratio in sorted({r.ratio_target for r in runs if r.method in METHODS}):
            cands = [r for r in runs if r.workload == w and r.ratio_target == ratio
                     and r.method in METHODS]
            if cands:
                best = max(cands, key=lambda r: r.valid_auc)
                out.append((w, f"{ratio:g}x", best.method, f"{best.test_auc:.4f}",
                            f"{best.test_auc - full.test_auc:+.4f}"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default="synthetic,movielens,flights")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--lrs", default="0.003,0.01")
    ap.add_argument("--ratios", default="10,100,1000")
    ap.add_argument("--trained", action="store_true", help="also part 2 (MovieLens)")
    ap.add_argument("--finetune", type=int, default=150)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    lrs = [float(x) for x in args.lrs.split(",")]
    runs: list[Run] = []
    for name in args.workloads.split(","):
        bench = Bench(WORKLOADS[name])
        largest = max(t.vocab_size for t in bench.config.tables)
        full = bench.run("none", 1, args.steps, lrs)
        assert full is not None
        runs.append(full)
        for method in SERVED:
            r = bench.run(method, 1, args.steps, lrs)
            if r is not None:
                runs.append(replace(r, ratio_target=full.table_bytes / r.table_bytes))
        for ratio in (float(x) for x in args.ratios.split(",")):
            if largest / ratio < 50:  # fewer than 50 rows' worth: not a meaningful table
                continue
            for method in METHODS:
                r = bench.run(method, ratio, args.steps, lrs)
                if r is not None:
                    runs.append(r)
    rows = [
        (r.workload, r.method, f"{r.ratio_target:g}x", f"{r.full_bytes / r.table_bytes:.1f}x",
         f"{r.table_bytes:,}", r.lr, f"{r.valid_auc:.4f}", f"{r.test_auc:.4f}",
         f"{r.samples_per_s:,.0f}", r.note)
        for r in runs
    ]
    body = markdown_table(
        ("workload", "method", "target", "measured ratio", "table bytes", "lr", "valid AUC",
         "test AUC", "train samples/s", "sizes"), rows)
    body += "\n\nBest method per ratio (picked on validation AUC; test AUC and its gap to the "
    body += "full table):\n\n" + markdown_table(
        ("workload", "ratio", "best", "test AUC", "vs full"), _winners(runs))
    if args.trained:
        header, trows = trained_part(args.steps, args.finetune, lrs[-1])
        body += f"\n\n## Compressing a trained model\n\n{header}\n\n" + markdown_table(
            ("method", "ratio", "test AUC at init", "after fine-tune", "from scratch"), trows)
    RESULTS.mkdir(parents=True, exist_ok=True)
    _plot(runs, RESULTS / "compression.png")
    body += "\n\n![test AUC against table bytes](compression.png)"
    write_result("compression", "Compression methods: quality against table memory", body,
                 "python benchmarks/compression.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
