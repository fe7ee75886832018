"""How much of the default search space fits a budget: price N random proposals.

Draws N configs from `search_spaces/default.yaml` with Optuna's RandomSampler (seeded),
prices each with the analytic estimate at full size (no training) and counts how many fit
`--budget`, overall and by compression. Seconds of CPU.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import markdown_table, write_result  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--proposals", type=int, default=400)
    ap.add_argument("--budget", default="8GB")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    import optuna

    from autoembed.budget import parse_size
    from autoembed.data.spec import DataSpec
    from autoembed.pipeline.optuna_space import suggest
    from autoembed.pipeline.priced_data import build_priced_data
    from autoembed.space import builtin_space_path, load_space
    from autoembed.trace import estimate

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space = load_space(builtin_space_path("default"))
    budget = parse_size(args.budget, "--budget")
    assert space.data is not None
    # the driver's pricing: the proposal resolved on the full-size data
    workload = build_priced_data(DataSpec.from_dict(dict(space.data), "default.yaml"),
                                 space.stand_in)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=args.seed))
    total: Counter[str] = Counter()
    fit: Counter[str] = Counter()
    for _ in range(args.proposals):
        trial = study.ask()
        cfg = workload.priced(suggest(space, trial))
        ok = estimate(cfg).device_total <= budget
        study.tell(trial, 0.0)
        for key in ("all", cfg.compression):
            total[key] += 1
            fit[key] += ok
    rows = [[k, total[k], fit[k], f"{fit[k] / total[k]:.0%}"]
            for k in ["all", *sorted(k for k in total if k != "all")]]
    body = (f"{args.proposals} proposals from default.yaml (RandomSampler seed {args.seed}), "
            f"each priced by the analytic estimate (device_total) at full size against "
            f"{args.budget} = {budget:,} bytes.\n\n"
            + markdown_table(["compression", "proposals", "fit", "share that fits"], rows))
    write_result("space_fit", "How much of the default space fits the budget", body,
                 f"python benchmarks/space_fit.py --proposals {args.proposals} "
                 f"--budget {args.budget} --seed {args.seed}")


if __name__ == "__main__":
    main()
