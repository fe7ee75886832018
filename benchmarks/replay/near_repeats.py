"""Do `ehvi`'s model turns pay again for outcomes already known? (benchmarks/results/
ehvi_pick_rules_replay.md, "Near-repeats"). Replays a method (compare.py's harness and
yardstick, one worker, start points off) and prints, per seed, over the trials trained
until `best` (the first trial within the noise unit of the table's best quality, included):

* how many snapped to a row this replay had already trained (the harness's repeat: the
  whole trial paid again, at another of the row's seeds), by turn (start-up, model, random);
* of the model turns, how many were near-repeats in the sampler's own terms
  (`variants.near_tried` at each `--near` f: every categorical equal, every number within f
  of its (log) range, against the trials trained or running when it was asked), and how
  many of the harness's repeats that test catches; the snapping distance of the repeats.

    nice -n 5 .venv/bin/python benchmarks/replay/near_repeats.py default --seeds 0 \
        --methods ehvi-front ehvi-n10-front
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import compare  # noqa: E402
import variant_replays  # noqa: E402
import variants  # noqa: E402
from harness import Method, Replay, table_workload  # noqa: E402
from table import Table  # noqa: E402

from autoembed.pipeline.interleave import is_random  # noqa: E402


def _watched(method: Method, studies: list[Any]) -> Method:
    """`method` with its sampler noting the study it samples for (its trials' params)."""
    def make(seed: int, workload: Any) -> Any:
        sampler = (variants.build(seed) if method.sampler == "ehvi"
                   else method.sampler(seed, workload))  # type: ignore[operator]
        before = sampler.before_trial

        def noted(study: Any, trial: Any) -> None:
            if not studies or studies[-1] is not study:
                studies.append(study)
            before(study, trial)

        sampler.before_trial = noted  # type: ignore[method-assign]
        return sampler

    return Method(method.name, make, front_rule=method.front_rule)


def turn(number: int, startup: int = 5) -> str:
    if number < startup:
        return "start-up"
    return "random" if is_random(number, startup, 4) else "model"


def until_best(result: Any, stick: compare.Yardstick) -> list[Any]:
    """The trials trained (complete or pruned) until the one that reached `best` (all of
    them when none did), in the order they ended."""
    trained = sorted((t for t in result.trials if t.status in ("complete", "pruned")),
                     key=lambda t: t.end)
    out = []
    for t in trained:
        out.append(t)
        if t.status == "complete" and t.quality >= stick.q_best - stick.noise:
            break
    return out


def diagnose(table: Table, stick: compare.Yardstick, method: Method, seed: int,
             nears: Sequence[float], real: Any) -> dict[str, Any]:
    studies: list[Any] = []
    result = Replay(table, seed=seed, budget_s=stick.budget_s, real=real).run(
        _watched(method, studies))
    trials = {t.number: t for t in studies[-1].get_trials(deepcopy=False)}
    mine = until_best(result, stick)
    out: dict[str, Any] = {"trials": len(mine), "repeats": sum(t.repeat for t in mine),
                           "best": stick.times(result, "compute")["best"]}
    for kind in ("start-up", "model", "random"):
        ts = [t for t in mine if turn(t.number) == kind]
        out[kind] = (len(ts), sum(t.repeat for t in ts))
    model = [t for t in mine if turn(t.number) == "model"]
    out["repeat_distance"] = statistics.median(
        [t.distance for t in mine if t.repeat] or [0.0])
    # each model-turn repeat against the tried trials before it: the fewest categoricals
    # that differ (0, 1, 2 or more)
    diffs = [min((_categoricals_apart(trials[t.number], trials[n]) for n in trials
                  if n < t.number), default=9) for t in model if t.repeat]
    out["categoricals_apart"] = tuple(sum(min(d, 2) == k for d in diffs) for k in (0, 1, 2))
    untrained = {x.number for x in result.trials if x.status == "infeasible"}
    for f in nears:
        near = []
        for t in model:  # one worker: the trials before it had ended when it was asked
            tried = [trials[n] for n in trials if n < t.number and n not in untrained]
            near.append(bool(variants.near_tried([trials[t.number].params], tried, f)[0]))
        out[f"near{f}"] = (sum(near), sum(n and t.repeat for n, t in zip(near, model,
                                                                         strict=True)))
    return out


def _categoricals_apart(a: Any, b: Any) -> int:
    """How many categorical params of trial `a` differ from `b`'s (absent counts)."""
    from optuna.distributions import CategoricalDistribution

    names = {n for t in (a, b) for n, d in t.distributions.items()
             if isinstance(d, CategoricalDistribution)}
    return sum(a.params.get(n, "<none>") != b.params.get(n, "<none>") for n in names)


def main(argv: Sequence[str] | None = None) -> int:
    import optuna

    compare.METHODS.update(variant_replays.VARIANTS)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("table")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--methods", nargs="+", default=["ehvi-front"])
    ap.add_argument("--near", nargs="+", type=float, default=[0.05, 0.1, 0.2])
    args = ap.parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    table = Table.load(HERE / "tables" / f"{args.table}.jsonl.gz")
    stick, real = compare.Yardstick(table), table_workload(table)
    for name in args.methods:
        for seed in args.seeds:
            d = diagnose(table, stick, compare.METHODS[name], seed, args.near, real)
            model_n, model_rep = d["model"]
            nears = ", ".join(f"f={f}: {d[f'near{f}'][0]} near ({d[f'near{f}'][1]} of "
                              f"the {model_rep} repeats)" for f in args.near)
            print(f"{args.table} {name} seed {seed}: best at {d['best']}; "
                  f"{d['repeats']} of {d['trials']} trials until best repeat a row "
                  f"(start-up {d['start-up'][1]}/{d['start-up'][0]}, model "
                  f"{model_rep}/{model_n}, random {d['random'][1]}/{d['random'][0]}; "
                  f"median snap distance {d['repeat_distance']:.2f}; model repeats with "
                  f"0 / 1 / 2+ categoricals apart from the nearest tried trial: "
                  f"{'/'.join(map(str, d['categoricals_apart']))}); model turns near a "
                  f"tried trial: {nears}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
