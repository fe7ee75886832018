"""Text pooling on BBC News: the built-in text model's test accuracy under mean and idf
pooling, seeds paired, against TF-IDF + logistic regression on the same split (issue 15).

Each run is `run_trial` as a search's trial runs it on real data (`fit_to_data`: 20 epochs,
about 8 validation evaluations, the best one's weights scored on the whole test split), on
the search's split (`--data bbcnews`: data seed 0, 80/10/10, documents truncated to 256
tokens). The config is what a derived text space proposes without compression: no dense
layers, Adam, lr 0.01, batch 32; `dim` from --dims.

    python benchmarks/text_pooling.py [--seeds 0 1 2] [--dims 64] [--poolings mean idf]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import markdown_table, write_result  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--dims", type=int, nargs="+", default=[64])
    ap.add_argument("--poolings", nargs="+", default=["mean", "idf"])
    args = ap.parse_args()
    import torch

    from autoembed.baselines import fit_baseline
    from autoembed.config import EmbeddingConfig
    from autoembed.data import DataSpec, load_dataset
    from autoembed.runner import RunSettings, run_trial

    torch.set_num_threads(1)
    data = load_dataset(DataSpec(name="bbcnews"))
    base = fit_baseline(data)
    settings = RunSettings(fit_to_data=True, eval_batches=8, test_batches=None,
                           measure_latency=False)
    rows = []
    for dim in args.dims:
        for pooling in args.poolings:
            tests = []
            for seed in args.seeds:
                cfg = EmbeddingConfig(task="text", dense_layers=(), dim=dim, lr=0.01,
                                      batch_size=32, pooling=pooling, seed=seed)
                r = run_trial(cfg, data, settings)
                assert r.test_quality is not None, r.error
                tests.append(r.test_quality)
                print(f"dim {dim} {pooling} seed {seed}: valid {r.valid_quality:.4f} "
                      f"test {r.test_quality:.4f}", flush=True)
            rows.append([dim, pooling, " / ".join(f"{t:.4f}" for t in tests),
                         f"{statistics.mean(tests):.4f}",
                         f"{statistics.mean(tests) - base.test:+.4f}"])
    body = (f"The same split's {base.describe()}; {data.num_rows('test')} test documents.\n\n"
            + markdown_table(["dim", "pooling", "test per seed", "mean", "mean - baseline"],
                             rows))
    cmd = "python benchmarks/text_pooling.py " + " ".join(sys.argv[1:])
    write_result("text_pooling", "Text pooling on BBC News: mean vs idf vs TF-IDF + LR",
                 body, cmd.strip())


if __name__ == "__main__":
    main()
