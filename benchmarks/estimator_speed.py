"""How fast is pricing? Analytic per config, traced for a 100M x 128 table, whole CLI process.

Goals (issue 2): analytic under 1 ms per config; traced at most 3 s and under 1 GB RSS for a
100M x 128 table; the whole `autoembed estimate` process (start-up included) under 2 s.

    .venv/bin/python benchmarks/estimator_speed.py
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import markdown_table, write_result  # noqa: E402

TRACE_100M = r"""
import json, resource, sys, time
t0 = time.perf_counter()
from autoembed.config import EmbeddingConfig, TableConfig
from autoembed.trace import estimate
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
cfg = EmbeddingConfig(tables=(TableConfig("big", 100_000_000),), dim=128, batch_size=4096,
                      dense_layers=(256, 64), table_optimizer=sys.argv[1],
                      dense_optimizer="adam")
t1 = time.perf_counter()
est = estimate(cfg, method="traced")
t2 = time.perf_counter()
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"trace_s": t2 - t1, "process_s": t2 - t0, "rss": rss,
                  "peak": est.allocated_peak}))
"""


# estimate_model of a user's factory with a 100M x 128 table (issue 14: <= 5 s, <= 1 GB RSS
# for the whole process, start-up included)
USER_100M = r"""
import json, time
t0 = time.perf_counter()
import torch
from torch import nn
from autoembed import estimate_model

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.table = nn.EmbeddingBag(100_000_000, 128, mode="sum")
        self.head = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 1))

    def forward(self, ids, y):
        out = self.head(self.table(ids)).squeeze(1)
        return nn.functional.binary_cross_entropy_with_logits(out, y)

example = (torch.randint(0, 100_000_000, (4096, 8)), torch.rand(4096))
t1 = time.perf_counter()
est = estimate_model(Model, example)
t2 = time.perf_counter()
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM")][0]
print(json.dumps({"trace_s": t2 - t1, "process_s": t2 - t0, "rss": int(hwm.split()[1]) * 1024,
                  "peak": est.allocated_peak}))
"""


def main() -> None:
    from autoembed.config import EmbeddingConfig, TableConfig
    from autoembed.trace import estimate

    rows = []
    configs = {
        "seed text (1M x 300, adam)": EmbeddingConfig(
            task="text",
            tables=(TableConfig("tokens", 1_000_000),),
            dim=300,
            seq_len=512,
            batch_size=64,
            num_classes=4,
            dense_layers=(),
        ),
        "ctr 26 tables, qr, bf16_master": EmbeddingConfig(
            tables=tuple(TableConfig(f"f{i}", 10 ** (3 + i % 6)) for i in range(26)),
            dim=64,
            compression="qr",
            precision="bf16_master",
            table_optimizer="rowwise_adagrad",
            dense_optimizer="adagrad",
            dense_layers=(512, 256),
        ),
    }
    for name, cfg in configs.items():
        estimate(cfg)
        times = []
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(200):
                estimate(cfg)
            times.append((time.perf_counter() - t) / 200)
        ms = statistics.median(times) * 1e3
        rows.append([f"analytic: {name}", f"{ms:.3f} ms", "-", "< 1 ms", "yes" if ms < 1 else "NO"])
    for opt in ("adam", "rowwise_adagrad"):
        r = subprocess.run(
            [sys.executable, "-c", TRACE_100M, opt], capture_output=True, text=True, check=True
        )
        d = json.loads(r.stdout.strip().splitlines()[-1])
        ok = d["trace_s"] <= 3 and d["rss"] < 1e9
        rows.append(
            [
                f"traced: 100M x 128 table, {opt}",
                f"{d['trace_s']:.2f} s",
                f"{d['rss'] / 1e6:.0f} MB",
                "<= 3 s, < 1 GB RSS",
                "yes" if ok else "NO",
            ]
        )
    r = subprocess.run([sys.executable, "-c", USER_100M], capture_output=True, text=True,
                       check=True)
    d = json.loads(r.stdout.strip().splitlines()[-1])
    ok = d["process_s"] <= 5 and d["rss"] <= 1e9
    rows.append([
        "estimate_model: a factory with a 100M x 128 table (whole process)",
        f"{d['process_s']:.2f} s (trace {d['trace_s']:.2f} s)",
        f"{d['rss'] / 1e6:.0f} MB",
        "<= 5 s, <= 1 GB RSS",
        "yes" if ok else "NO",
    ])
    exe = [sys.executable, "-m", "autoembed", "estimate", "--budget", "8GB", "--json"]
    times = []
    for _ in range(5):
        t = time.perf_counter()
        subprocess.run(exe, capture_output=True, check=True)
        times.append(time.perf_counter() - t)
    s = statistics.median(times)
    rows.append(
        [
            "`autoembed estimate --budget 8GB --json` process",
            f"{s:.2f} s",
            "-",
            "< 2 s",
            "yes" if s < 2 else "NO",
        ]
    )
    table = markdown_table(["what", "time", "peak RSS", "goal", "met"], rows)
    write_result(
        "estimator_speed",
        "Estimator speed",
        table,
        ".venv/bin/python benchmarks/estimator_speed.py",
    )


if __name__ == "__main__":
    main()
