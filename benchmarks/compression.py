"""Compression methods compared (issue 16): test quality against table memory at about 10x
and 100x (1000x where the table is large enough) less table memory than the full table.

Methods: hash (hashing trick), qr (quotient-remainder, mult), robe (ROBE-Z, block 8, one
array per table, sized like the other methods' tables), robe_shared (ROBE-Z as in the paper:
one array for all the compressed tables, each field hashing with its own seed), tt
(tensor-train, the largest rank that fits), hot_cold (half the budget for rows of the most
frequent ids, half hashed buckets; the hot-id array, 8 B per hot id, counted in the memory),
int8 / int4 (the full table trained, then served row-quantized: their ratio is fixed by the
format). Memory: the whole table memory is 1/ratio of the full
one. Tables under `MIN_ROWS` rows stay full and count in it; the budget left is split over
the others in proportion to their rows, except that a table whose method cannot go that small
(QR needs about 2 sqrt(V) rows) takes its smallest size and the rest share what remains.
Where the small tables alone exceed 1/ratio, the large tables alone are compressed `ratio`
times (noted; the measured column gives the whole memory's ratio). A ratio is run where
the largest table keeps at least `MIN_KEPT` rows' worth.

Every run: the same model (dim 16, tower 64, concat), Adam on every parameter (dense
gradients for every method: one optimizer, one rule), the same steps and batch; the learning
rate is picked from `--lrs` by validation AUC (a pick at the edge of the grid is flagged),
and the test AUC of that run is reported. AUC over the whole validation / test split.
Throughput is training samples/s of that run, on a shared machine (the load is stamped):
plain-torch TT builds every row from its cores with two batched matmuls per lookup and is
slow on a CPU; it is reported as measured.

Part 2 (`--trained`, MovieLens): the full model is trained (`--steps`, its lr picked in part
1), then each method at 10x is initialised from the trained tables
(`autoembed.models.compress_init`: hash bucket means, QR least squares, TT-SVD, ROBE least
squares, hot rows copied and cold buckets averaged, int8/int4 quantised; the tower copied):
test AUC right after initialisation, after a short fine-tune (`--finetune` steps), and of the
same compressed model trained from scratch for those steps (both lrs picked on validation).

Part 3 (`--throughput ROUNDS`): every method trained 30 steps in turn (after 3 warm-up
steps), ROUNDS times, so machine load hits them alike; the median samples/s per method.

Resumable: every finished run is appended as one JSON line to `--store`
(default results/compression_runs.jsonl.gz), keyed by its settings (part, workload, method,
ratio, lr, steps, fine-tune steps); a rerun skips the keys already there and writes the
report from the lines. `--report-only` writes the report from the store without training.

    python benchmarks/compression.py [--workloads synthetic,movielens,flights]
        [--steps 600] [--lrs 0.001,0.003,0.01,0.03] [--ratios 10,100,1000] [--trained]
        [--throughput 3] [--store results/compression_runs.jsonl.gz] [--report-only]

Writes benchmarks/results/compression.md and compression.png.
"""

from __future__ import annotations

import argparse
import copy
import math
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, append_jsonl, markdown_table, read_jsonl, write_result  # noqa: E402

DIM, BATCH, MIN_ROWS, ROBE_BLOCK = 16, 512, 200, 8
MIN_KEPT = 32  # a ratio runs where the largest table keeps this many rows' worth
HOT_ID_VALUES = 2  # a hot id's int64 is the bytes of 2 fp32 values
METHODS = ("hash", "qr", "robe", "robe_shared", "tt", "hot_cold")
SERVED = ("int8", "int4")
ORDER = ("none", *SERVED, *METHODS)  # the report's row order
TRAINED_RATIO = 10.0


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


# ------------------------------------------------------------------------------ store
class Store:
    """Finished runs, one JSON object a line; `key` fields identify a run."""

    KEY = ("part", "workload", "method", "ratio", "lr", "steps", "finetune", "full_lr")

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines: list[dict[str, Any]] = []
        if path.exists():
            self.lines = read_jsonl(path)
        self._keys = {self.key(x) for x in self.lines}

    @classmethod
    def key(cls, line: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(line.get(k) for k in cls.KEY)

    def has(self, **key: Any) -> bool:
        return self.key(key) in self._keys

    def add(self, line: dict[str, Any]) -> None:
        append_jsonl(self.path, line)
        self.lines.append(line)
        self._keys.add(self.key(line))
        auc = line.get("test_auc")
        print(" ".join(f"{k}={line[k]}" for k in ("part", "workload", "method", "ratio", "lr")
                       if line.get(k) is not None),
              f"test {auc:.4f}" if auc is not None else "", line.get("note", ""), flush=True)

    def select(self, **where: Any) -> list[dict[str, Any]]:
        return [x for x in self.lines if all(x.get(k) == v for k, v in where.items())]


# ------------------------------------------------------------------------------ tables
def _qr_rows(v: int, m: int) -> int:
    return -(-v // m) + m


def _tt_values(v: int, rank: int) -> int:
    from autoembed.compression import tt_shapes

    return sum(math.prod(s) for _, s in tt_shapes(v, DIM, rank))


def _min_values(method: str, v: int) -> int:
    """fp32 values of the smallest table `method` builds for `v` ids."""
    if method == "qr":
        s = math.isqrt(v)
        return DIM * min(_qr_rows(v, m) for m in range(max(2, s - 1), s + 3))
    return {"hash": DIM, "robe": ROBE_BLOCK, "tt": _tt_values(v, 1),
            "hot_cold": 2 * DIM + HOT_ID_VALUES}[method]


def budgets(method: str, vocabs: list[int], total: float) -> list[float] | None:
    """Values per table summing to at most `total`: shares in proportion to rows, except a
    table whose smallest size exceeds its share takes that size (None: the smallest sizes
    alone exceed `total`)."""
    fixed: dict[int, float] = {}
    while True:
        free = [i for i in range(len(vocabs)) if i not in fixed]
        left = total - sum(fixed.values())
        if left < 0 or (free and left <= 0):
            return None
        weight = sum(vocabs[i] for i in free)
        share = {i: left * vocabs[i] / weight for i in free}
        low = [i for i in free if _min_values(method, vocabs[i]) > share[i]]
        if not low:
            return [fixed[i] if i in fixed else share[i] for i in range(len(vocabs))]
        for i in low:
            fixed[i] = _min_values(method, vocabs[i])


def _table(method: str, v: int, budget: float, spec: Any, hot: Callable[[int], Any],
           seed: int) -> tuple[Any, str]:
    """The largest `method` table for `v` ids within `budget` fp32 values, and a note."""
    import torch

    from autoembed.models.embedding import PlainTable, QRTable
    from autoembed.models.hot_cold import HotColdTable
    from autoembed.models.robe import RobeTable
    from autoembed.models.tt import TTTable

    if method == "hash":
        rows = max(1, int(budget // DIM))
        return PlainTable(rows, DIM, DIM, spec, buckets=rows, seed=seed), f"{rows} buckets"
    if method == "qr":  # the most rows that fit (ties: the smaller m)
        fits = [m for m in range(2, min(v, int(budget // DIM)) + 1)
                if _qr_rows(v, m) * DIM <= budget]
        m = max(fits, key=lambda m: (_qr_rows(v, m), -m))
        return QRTable(v, m, DIM, "mult", spec), f"m={m}"
    if method == "robe":
        size = max(ROBE_BLOCK, int(budget))
        return RobeTable(size, ROBE_BLOCK, (DIM,), spec, seed=seed), f"M={size}"
    if method == "tt":
        rank = 1
        while _tt_values(v, rank + 1) <= budget:
            rank += 1
        return TTTable(v, DIM, rank, spec), f"rank {rank}"
    if method == "hot_cold":  # half the budget to hot rows (and their ids), half to cold
        n_hot = max(1, min(v - 1, int(budget / 2 // (DIM + HOT_ID_VALUES))))
        cold = max(1, int((budget - n_hot * (DIM + HOT_ID_VALUES)) // DIM))
        ids = torch.as_tensor(hot(n_hot), dtype=torch.int64)
        return HotColdTable(v, DIM, ids, cold, spec, seed=seed), f"{n_hot} hot, {cold} cold"
    raise ValueError(method)


def _bytes(model: Any, served: str = "none") -> int:
    """Table bytes: parameters and buffers of the table modules (served: packed rows)."""
    if served != "none":
        from autoembed.models.quantize import quantize

        model = quantize(model, served)
    seen = {id(t): t.nbytes for m in model.tables.values()  # a shared array counts once
            for t in (*m.parameters(), *m.buffers())}
    return sum(seen.values())


# --------------------------------------------------------------------------- training
def _auc(model: Any, data: Any, split: str) -> float:
    """AUC over the whole split."""
    import numpy as np
    import torch

    from autoembed.data.metrics import roc_auc

    scores, labels = [], []
    with torch.no_grad():
        for b in data.batches(split, 4096, shuffle=False):
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


class SharedField(nn.Module):
    """Field `field` of a RobeTable that serves several fields (one array for all)."""

    def __init__(self, robe: Any, field: int) -> None:
        super().__init__()
        self.robe, self.field = robe, field

    def forward(self, ids: Any) -> Any:
        idx, valid = self.robe._masked(ids)
        return self.robe._pooled(idx, valid, self.field)


class Bench:
    """One workload's data, config and model builder."""

    def __init__(self, workload: Workload) -> None:
        from autoembed.config import EmbeddingConfig
        from autoembed.data import DataSpec, load_dataset

        self.workload = workload
        self.data = load_dataset(DataSpec.from_dict(workload.spec))
        self.config = replace(EmbeddingConfig(dim=DIM, dense_layers=(64,), batch_size=BATCH),
                              **self.data.config_values())
        self._hot: dict[str, Any] = {}

    @property
    def largest(self) -> int:
        return max(t.vocab_size for t in self.config.tables)

    def hot(self, field: str, count: int) -> Any:
        """The hot set: the generator's for synthetic data, train id counts otherwise."""
        from autoembed.models.hot_cold import hot_ids_from_counts, train_id_counts

        if hasattr(self.data, "hot_ids"):
            return self.data.hot_ids(field, count)
        if field not in self._hot:
            v = next(t.vocab_size for t in self.config.tables if t.name == field)
            self._hot[field] = train_id_counts(self.data, field, v)
        return hot_ids_from_counts(self._hot[field], count)

    def model(self, method: str, ratio: float, seed: int = 0) -> tuple[Any, str]:
        """The model with `method` tables at 1/ratio of the table memory (None: cannot)."""
        import torch

        from autoembed.models import build_model
        from autoembed.models.embedding import LookupSpec

        torch.manual_seed(seed)
        model = build_model(self.config)
        if method == "none":
            return model, ""
        spec = LookupSpec(self.config.pooling, False, False)
        large = [t for t in self.config.tables if t.vocab_size >= MIN_ROWS]
        small = sum(t.vocab_size for t in self.config.tables) - sum(t.vocab_size for t in large)
        total = (small + sum(t.vocab_size for t in large)) * DIM / ratio - small * DIM
        notes = []
        if total <= 0:  # the small tables alone exceed it: compress the large ones alone
            total = sum(t.vocab_size for t in large) * DIM / ratio
            notes.append(f"tables >= {MIN_ROWS} rows at {ratio:g}x, the rest full")
        if method == "robe_shared":
            from autoembed.models.robe import RobeTable

            size = int(total)
            robe = RobeTable(size, ROBE_BLOCK, (DIM,) * len(large), spec,
                             seed=self.config.hash_seed)
            for f, t in enumerate(large):
                model.tables[t.name] = SharedField(robe, f)
            return model, "; ".join([*notes, f"one array M={size} for {len(large)} tables"])
        shares = budgets(method, [t.vocab_size for t in large], total)
        if shares is None:
            return None, "cannot reach: the method's smallest tables exceed the budget"
        for t, budget in zip(large, shares, strict=True):
            table, note = _table(method, t.vocab_size, budget, spec,
                                 partial(self.hot, t.name), self.config.hash_seed)
            model.tables[t.name] = table
            notes.append(f"{t.name}: {note}")
        return model, "; ".join(notes)


# ------------------------------------------------------------------------ part 1: methods
def _line(part: str, bench: Bench, method: str, ratio: float, lr: float, steps: int,
          **fields: Any) -> dict[str, Any]:
    return {"part": part, "workload": bench.workload.name, "method": method, "ratio": ratio,
            "lr": lr, "steps": steps, "finetune": None, **fields}


def _measure(model: Any, bench: Bench, served: str = "none") -> dict[str, Any]:
    from autoembed.models.quantize import quantize

    m = quantize(model, served) if served != "none" else model
    return {"table_bytes": _bytes(model, served), "valid_auc": _auc(m, bench.data, "valid"),
            "test_auc": _auc(m, bench.data, "test")}


def ratios_for(bench: Bench, ratios: list[float]) -> list[float]:
    return [r for r in ratios if bench.largest / r >= MIN_KEPT]


def _run_one(bench: Bench, store: Store, method: str, ratio: float, lr: float, steps: int,
             full: int) -> None:
    """One part-1 run unless `store` has it ("none" also serves its model int8/int4)."""
    if store.has(part="methods", workload=bench.workload.name, method=method, ratio=ratio,
                 lr=lr, steps=steps):
        return
    model, note = bench.model(method, ratio)
    if model is None:
        store.add(_line("methods", bench, method, ratio, lr, steps, full_bytes=full, note=note))
        return
    sps = _train(model, bench.data, steps, lr)
    if method == "none":
        for served in SERVED:  # before "none": a stop in between redoes all three
            store.add(_line("methods", bench, served, ratio, lr, steps, full_bytes=full,
                            samples_per_s=sps, note="the full run served " + served,
                            **_measure(model, bench, served)))
    store.add(_line("methods", bench, method, ratio, lr, steps, full_bytes=full,
                    samples_per_s=sps, note=note, **_measure(model, bench)))


def run_methods(bench: Bench, store: Store, steps: int, lrs: list[float],
                ratios: list[float], extend: int = 0,
                methods: tuple[str, ...] = METHODS) -> None:
    """Every (method, ratio, lr) of part 1 not in `store` yet; with `extend`, up to that many
    more lrs per (method, ratio) while its pick (on validation) is at an end of those tried,
    each a grid step (lrs[1] / lrs[0]) beyond it."""
    full = _bytes(bench.model("none", 1)[0])
    step = lrs[1] / lrs[0] if len(lrs) > 1 else 3.0
    groups = [("none", 1.0)] + [(m, r) for r in ratios_for(bench, ratios) for m in methods]
    for method, ratio in groups:
        for lr in lrs:
            _run_one(bench, store, method, ratio, lr, steps, full)
        for _ in range(extend):
            lines = store.select(part="methods", workload=bench.workload.name, method=method,
                                 ratio=ratio, steps=steps)
            best, tried = _best(lines), sorted({x["lr"] for x in lines})
            if best is None or best["lr"] not in (tried[0], tried[-1]):
                break
            nxt = tried[0] / step if best["lr"] == tried[0] else tried[-1] * step
            _run_one(bench, store, method, ratio, float(f"{nxt:.3g}"), steps, full)


# ------------------------------------------------------------ part 2: a trained model
def init_from(model: Any, trained: Any) -> None:
    """`model`'s tables fitted to `trained`'s full tables (compress_init), its tower copied."""
    import torch

    from autoembed.models.compress_init import hash_init, hot_cold_init, qr_init, robe_init, tt_svd
    from autoembed.models.embedding import PlainTable, QRTable
    from autoembed.models.hot_cold import HotColdTable
    from autoembed.models.robe import RobeTable
    from autoembed.models.tt import TTTable

    model.tower.load_state_dict(trained.tower.state_dict())
    shared = [(n, t) for n, t in model.tables.items() if isinstance(t, SharedField)]
    with torch.no_grad():
        if shared:  # every (field, id, column) reads one value: the mean of all reading it
            robe = shared[0][1].robe
            w = torch.cat([trained.tables[n].weight.detach() for n, _ in shared])
            pos = torch.cat([robe.positions(torch.arange(trained.tables[n].weight.shape[0]),
                                            t.field) for n, t in shared])
            robe.weight.copy_(robe_init(w, pos, robe.size))
        for name, table in model.tables.items():
            if isinstance(table, SharedField):
                continue
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


def _best_lr(store: Store, workload: str, method: str, ratio: float, steps: int) -> float | None:
    got = [x for x in store.select(part="methods", workload=workload, method=method,
                                   ratio=ratio, steps=steps) if x.get("valid_auc") is not None]
    return max(got, key=lambda x: x["valid_auc"])["lr"] if got else None


def run_trained(store: Store, steps: int, finetune: int, lrs: list[float]) -> None:
    """Part 2 on MovieLens: every line not in `store` yet (the full model retrained, the
    same by its seeds, when any is missing)."""
    bench = Bench(WORKLOADS["movielens"])
    name = bench.workload.name
    lr0 = _best_lr(store, name, "none", 1.0, steps) or lrs[len(lrs) // 2]
    key = {"part": "trained", "workload": name, "steps": steps, "finetune": finetune,
           "full_lr": lr0}
    todo = [("full", None), *((m, None) for m in (*METHODS, *SERVED)),
            *((f"{k}:{m}", lr) for m in METHODS for k in ("finetune", "scratch") for lr in lrs)]
    if all(store.has(**key, method=m, ratio=TRAINED_RATIO, lr=lr) for m, lr in todo):
        return
    trained, _ = bench.model("none", 1)
    _train(trained, bench.data, steps, lr0)
    full = _bytes(trained)

    def add(method: str, lr: float | None, model: Any, served: str = "none", **extra: Any) -> None:
        if not store.has(**key, method=method, ratio=TRAINED_RATIO, lr=lr):
            store.add({**key, "method": method, "ratio": TRAINED_RATIO, "lr": lr,
                       "full_bytes": full, **_measure(model, bench, served),
                       **extra})

    add("full", None, trained)
    for served in SERVED:
        add(served, None, trained, served)
    for method in METHODS:
        done = [store.has(**key, method=m, ratio=TRAINED_RATIO, lr=lr) for m, lr in todo
                if m.endswith(":" + method) or m == method]
        if all(done):
            continue
        init, note = bench.model(method, TRAINED_RATIO)
        init_from(init, trained)
        add(method, None, init, note=note)
        for lr in lrs:
            if not store.has(**key, method=f"finetune:{method}", ratio=TRAINED_RATIO, lr=lr):
                tuned = copy.deepcopy(init)
                sps = _train(tuned, bench.data, finetune, lr)
                add(f"finetune:{method}", lr, tuned, samples_per_s=sps)
            if not store.has(**key, method=f"scratch:{method}", ratio=TRAINED_RATIO, lr=lr):
                scratch, _ = bench.model(method, TRAINED_RATIO, seed=1)
                sps = _train(scratch, bench.data, finetune, lr)
                add(f"scratch:{method}", lr, scratch, samples_per_s=sps)


# ------------------------------------------------------------- part 3: throughput side by side
def run_throughput(store: Store, workload: str, ratios: list[float], steps: int,
                   rounds: int) -> None:
    """Training samples/s per method, every method once per round (after 3 warm-up steps),
    so machine load hits all alike; a line per (method, ratio, round)."""
    bench = Bench(WORKLOADS[workload])
    for rnd in range(rounds):
        for ratio in ratios_for(bench, ratios):
            for method in ("none", *METHODS):
                key = {"part": "throughput", "workload": workload, "method": method,
                       "ratio": ratio, "lr": None, "steps": steps, "finetune": rnd}
                if store.has(**key):
                    continue
                model, note = bench.model(method, 1.0 if method == "none" else ratio)
                if model is None:
                    store.add({**key, "note": note})
                    continue
                _train(model, bench.data, 3, 0.003)
                store.add({**key, "samples_per_s": _train(model, bench.data, steps, 0.003),
                           "note": note})


def throughput_side_report(store: Store) -> str:
    """Median samples/s per (workload, ratio, method) over the rounds, and its ratio to the
    full table's median."""
    import statistics

    lines = [x for x in store.select(part="throughput") if x.get("samples_per_s")]
    rows = []
    for w, ratio, steps in sorted({(x["workload"], x["ratio"], x["steps"]) for x in lines}):
        got = [x for x in lines if x["workload"] == w and x["ratio"] == ratio
               and x["steps"] == steps]
        full = statistics.median(x["samples_per_s"] for x in got if x["method"] == "none")
        for m in ("none", *METHODS):
            sps = [x["samples_per_s"] for x in got if x["method"] == m]
            if sps:
                med = statistics.median(sps)
                rows.append((w, f"{ratio:g}x", m, len(sps), f"{med:,.0f}",
                             f"{med / full:.2f}"))
    if not rows:
        return ""
    return markdown_table(("workload", "ratio", "method", "rounds", "median samples/s",
                           "/ full table"), rows)


# ------------------------------------------------------------------------------- report
def _best(lines: list[dict[str, Any]]) -> dict[str, Any] | None:
    got = [x for x in lines if x.get("valid_auc") is not None]
    return max(got, key=lambda x: x["valid_auc"]) if got else None


def _edge(best: dict[str, Any], lrs: list[float]) -> str:
    return " (edge)" if len(lrs) > 1 and best["lr"] in (min(lrs), max(lrs)) else ""


def picked(store: Store, workload: str, steps: int) -> Iterator[dict[str, Any]]:
    """Per (method, ratio) of part 1: the run picked on validation AUC, with `lrs` tried, or
    the line saying it cannot be reached."""
    lines = store.select(part="methods", workload=workload, steps=steps)
    for method, ratio in sorted({(x["method"], x["ratio"]) for x in lines},
                                key=lambda k: (k[1], ORDER.index(k[0]))):
        group = [x for x in lines if x["method"] == method and x["ratio"] == ratio]
        best = _best(group)
        yield {**(best or group[0]), "lrs": sorted({x["lr"] for x in group})}


def setup_report(store: Store, workloads: list[str], steps: int) -> str:
    """A line per workload: its data, steps and the lrs its runs tried."""
    out = []
    for w in workloads:
        lines = store.select(part="methods", workload=w, steps=steps)
        lrs = ", ".join(f"{x:g}" for x in sorted({x["lr"] for x in lines}))
        spec = ", ".join(f"{k} {v}" for k, v in WORKLOADS[w].spec.items())
        out.append(f"* {w} ({spec}): {steps} steps of {BATCH}; lrs tried {lrs}; "
                   f"{len(lines)} runs.")
    return "\n".join(out) + (
        "\n\n\"(edge)\" marks an lr picked at the end of the grid tried. \"target\" is the "
        "ratio asked for, \"measured ratio\" the whole table memory's (full bytes / bytes); "
        f"where the sizes say \"tables >= {MIN_ROWS} rows at Nx, the rest full\", N applies to "
        "the large tables only (the small ones alone exceed 1/N of the memory).")


def methods_report(store: Store, workloads: list[str], steps: int) -> tuple[str, list[Any]]:
    rows, winners, chosen = [], [], []
    matrix: dict[str, dict[str, str]] = {}
    acceptance = ""
    for w in workloads:
        runs = list(picked(store, w, steps))
        chosen += runs
        full = next((r for r in runs if r["method"] == "none"), None)
        if full is None:
            continue
        for r in runs:
            if r.get("test_auc") is None:
                rows.append((w, r["method"], f"{r['ratio']:g}x", "-", "-", "-", "-", "-", "-",
                             r["note"]))
                continue
            measured = r["full_bytes"] / r["table_bytes"]
            rows.append((w, r["method"], f"{r['ratio']:g}x", f"{measured:.1f}x",
                         f"{r['table_bytes']:,}", f"{r['lr']:g}{_edge(r, r['lrs'])}",
                         f"{r['valid_auc']:.4f}", f"{r['test_auc']:.4f}",
                         f"{r['samples_per_s']:,.0f}", r["note"]))
        for ratio in sorted({r["ratio"] for r in runs if r["method"] in METHODS}):
            cands = [r for r in runs if r["ratio"] == ratio and r["method"] in METHODS
                     and r.get("valid_auc") is not None]
            if not cands:
                continue
            best = max(cands, key=lambda r: r["valid_auc"])
            top = max(cands, key=lambda r: r["test_auc"])
            gap = best["test_auc"] - full["test_auc"]
            winners.append((w, f"{ratio:g}x", best["method"], f"{best['test_auc']:.4f}",
                            f"{gap:+.4f} ({100 * gap / full['test_auc']:+.2f}%)",
                            f"{top['method']} {top['test_auc']:.4f}"))
            matrix.setdefault(f"{ratio:g}x", {})[w] = f"{best['method']} ({gap:+.4f})"
            if w == "synthetic" and ratio == 100.0:
                ok = abs(gap) <= 0.01 or gap > 0
                rel = 100 * gap / full["test_auc"]
                acceptance = (
                    f"**Acceptance (synthetic, 100x): best method {best['method']} test AUC "
                    f"{best['test_auc']:.4f} vs full table {full['test_auc']:.4f}: "
                    f"{gap:+.4f} ({rel:+.2f}%): {'PASS' if ok else 'FAIL'}** (within 1% AUC: "
                    f"0.01 absolute; {'within' if rel >= -1 else 'outside'} 1% relative).")
    body = markdown_table(
        ("workload", "method", "target", "measured ratio", "table bytes", "lr (picked)",
         "valid AUC", "test AUC", "train samples/s", "sizes"), rows)
    body += ("\n\nBest method per workload and ratio (picked on validation AUC; its test AUC "
             "and gap to the full table; the best test AUC for comparison):\n\n")
    body += markdown_table(("workload", "ratio", "best (valid)", "test AUC", "vs full",
                            "best on test"), winners)
    ws = [w for w in workloads if any(w in v for v in matrix.values())]
    body += "\n\nWinner by ratio (as in the VLDB 2024 comparison; gap to the full table):\n\n"
    body += markdown_table(("ratio", *ws), [(k, *(v.get(w, "-") for w in ws))
                                            for k, v in sorted(matrix.items(),
                                                               key=lambda kv: float(kv[0][:-1]))])
    if acceptance:
        body += "\n\n" + acceptance
    return body, chosen


def throughput_report(chosen: list[dict[str, Any]]) -> str:
    """Samples/s of the picked runs per method (median over the workload's ratios)."""
    import statistics

    rows = []
    for w in sorted({r["workload"] for r in chosen}):
        full = next(r for r in chosen if r["workload"] == w and r["method"] == "none")
        for m in METHODS:
            sps = [r["samples_per_s"] for r in chosen if r["workload"] == w
                   and r["method"] == m and r.get("samples_per_s")]
            if sps:
                per = ", ".join(f"{r['ratio']:g}x {r['samples_per_s']:,.0f}" for r in chosen
                                if r["workload"] == w and r["method"] == m
                                and r.get("samples_per_s"))
                med = statistics.median(sps)
                rows.append((w, m, per, f"{med / full['samples_per_s']:.2f}"))
        rows.append((w, "none (full)", f"{full['samples_per_s']:,.0f}", "1.00"))
    return markdown_table(("workload", "method", "train samples/s by ratio",
                           "median / full table"), rows)


def trained_report(store: Store, steps: int, finetune: int) -> str:
    key = {"part": "trained", "workload": "movielens", "steps": steps, "finetune": finetune}
    fulls = store.select(**key, method="full")
    if not fulls:
        return ""
    full = fulls[-1]  # the latest trained model's lines
    key["full_lr"] = full["full_lr"]
    rows: list[tuple[Any, ...]] = [("full table", "1.0x", "-", f"{full['test_auc']:.4f}",
                                    "-", "-")]
    for served in SERVED:
        s = next(iter(store.select(**key, method=served)), None)
        if s:
            rows.append((served, f"{full['full_bytes'] / s['table_bytes']:.1f}x", "-",
                         f"{s['test_auc']:.4f}", "- (served as quantised)", "-"))
    for m in METHODS:
        init = next(iter(store.select(**key, method=m)), None)
        tuned = _best(store.select(**key, method=f"finetune:{m}"))
        scratch = _best(store.select(**key, method=f"scratch:{m}"))
        if init is None or tuned is None or scratch is None:
            continue
        rows.append((m, f"{full['full_bytes'] / init['table_bytes']:.1f}x", init.get("note", ""),
                     f"{init['test_auc']:.4f}",
                     f"{tuned['test_auc']:.4f} (lr {tuned['lr']:g})",
                     f"{scratch['test_auc']:.4f} (lr {scratch['lr']:g})"))
    head = (f"MovieLens: the full model trained {steps} steps (lr {full['full_lr']:g}: part 1's "
            f"pick when part 2 ran), each method at {TRAINED_RATIO:g}x initialised from it "
            "(compress_init; the tower copied), then fine-tuned "
            f"{finetune} steps; against the same compressed model trained from scratch for "
            f"{finetune} steps (fine-tune and scratch lrs each picked on validation). int8/int4: "
            "the trained full table quantised (2x/4x by their format), no fine-tune.\n\n")
    return head + markdown_table(("method", "ratio", "sizes", "test AUC at init",
                                  "after fine-tune", "from scratch"), rows)


def _plot(chosen: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    names = sorted({r["workload"] for r in chosen})
    fig, axes = plt.subplots(1, len(names), figsize=(5 * len(names), 4), squeeze=False)
    for ax, w in zip(axes[0], names, strict=True):
        for m in (*METHODS, *SERVED):
            pts = sorted((r["table_bytes"], r["test_auc"]) for r in chosen if r["workload"] == w
                         and r["method"] == m and r.get("test_auc") is not None)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=m)
        full = next(r for r in chosen if r["workload"] == w and r["method"] == "none")
        ax.axhline(full["test_auc"], color="k", ls="--", lw=1, label="full table")
        ax.plot([full["table_bytes"]], [full["test_auc"]], "ks")
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())  # decade labels only
        ax.set_xlabel("table bytes")
        ax.set_ylabel("test AUC")
        ax.set_title(w)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def report(store: Store, workloads: list[str], steps: int, finetune: int, trained: bool,
           command: str, name: str = "compression") -> None:
    body, chosen = methods_report(store, workloads, steps)
    body = setup_report(store, workloads, steps) + "\n\n" + body
    body += "\n\nTraining throughput of the picked runs (samples/s on the shared machine; "
    body += "plain-torch TT is slow on a CPU):\n\n" + throughput_report(chosen)
    side = throughput_side_report(store)
    if side:
        body += ("\n\nThroughput side by side (`--throughput`: each method trained "
                 "a few steps in turn, rounds repeated, so load hits all alike; the full table "
                 "here is dense Adam over every row, what makes it slow on the synthetic "
                 "tables):\n\n" + side)
    if trained:
        body += "\n\n## Compressing a trained model\n\n" + trained_report(store, steps, finetune)
    RESULTS.mkdir(parents=True, exist_ok=True)
    _plot(chosen, RESULTS / f"{name}.png")
    body += f"\n\n![test AUC against table bytes]({name}.png)"
    write_result(name, "Compression methods: quality against table memory", body, command)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default="synthetic,movielens,flights")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--lrs", default="0.001,0.003,0.01,0.03")
    ap.add_argument("--ratios", default="10,100,1000")
    ap.add_argument("--trained", action="store_true", help="also part 2 (MovieLens)")
    ap.add_argument("--finetune", type=int, default=150)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--store", type=Path, default=RESULTS / "compression_runs.jsonl.gz")
    ap.add_argument("--throughput", type=int, default=0, metavar="ROUNDS",
                    help="also train every method 30 steps in turn, ROUNDS times, per workload")
    ap.add_argument("--extend-edges", type=int, default=0, metavar="N",
                    help="up to N more lrs per method and ratio while the pick is at an end")
    ap.add_argument("--methods", default=",".join(METHODS),
                    help="the compressions to run (the full table always runs)")
    ap.add_argument("--name", default="compression",
                    help="results file stem: results/NAME.md and NAME.png")
    ap.add_argument("--report-only", action="store_true", help="no training: report the store")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    lrs = [float(x) for x in args.lrs.split(",")]
    ratios = [float(x) for x in args.ratios.split(",")]
    workloads = args.workloads.split(",")
    store = Store(args.store)
    if not args.report_only:
        for name in workloads:  # part 2 right after MovieLens' part 1 (it reads its lr)
            run_methods(Bench(WORKLOADS[name]), store, args.steps, lrs, ratios,
                        args.extend_edges, tuple(args.methods.split(",")))
            if args.trained and name == "movielens":
                run_trained(store, args.steps, args.finetune, lrs)
            if args.throughput:
                run_throughput(store, name, ratios, 30, args.throughput)
    report(store, workloads, args.steps, args.finetune, args.trained,
           "python benchmarks/compression.py " + " ".join(sys.argv[1:]), args.name)


if __name__ == "__main__":
    main()
