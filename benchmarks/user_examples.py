"""The two user-search examples, run from a fresh state as a user would, then their picks
retrained by the user's own loop.

For each example (examples/text_search.py, examples/movielens_search.py; with --only bert,
examples/bert_search.py) in a new runs dir:
`autoembed.search(model=build, example=example, train=train, space=<its space>)` in process
with MLflow on (the default embedded store), then what came of it: trials by status, the
proposals over budget (priced, never trained), the front, the MLflow runs; then
`export --format python` (the pick's config and params), `autoembed.apply` of the exported
config to
the user's `build(params)` at seeds 0, 1 and 2, and the user's `train` on each: the pick's
validation quality in the search against those three.

    nice -n 10 python benchmarks/user_examples.py [--only text|movielens|bert]

Writes benchmarks/results/user_examples.md (with --only: user_examples_<name>.md).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import ROOT, markdown_table, write_result  # noqa: E402

EXAMPLES = {  # name -> (module, space file, budget)
    "text": ("examples.text_search", "examples/text_space.yaml", "800MB"),
    "movielens": ("examples.movielens_search", "examples/movielens_space.yaml", "600MB"),
    "bert": ("examples.bert_search", "examples/bert_search_space.yaml", "1300MB"),
}
DEFAULT = ("text", "movielens")  # the two README examples; bert with --only bert
SEEDS = (0, 1, 2)


def mlflow_runs(runs: Path, study: str) -> tuple[int, int]:
    """(trial runs, of which with a `valid_quality` curve) in the study's experiment."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{runs / 'mlflow.db'}")
    exp = client.get_experiment_by_name(study)
    if exp is None:
        return 0, 0
    trials = [r for r in client.search_runs([exp.experiment_id])
              if r.data.tags.get("autoembed.role") == "trial"]
    curves = sum(1 for r in trials
                 if len(client.get_metric_history(r.info.run_id, "valid_quality")) > 1)
    return len(trials), curves


def run_example(name: str) -> dict[str, Any]:
    import autoembed

    module, space, budget = EXAMPLES[name]
    mod = importlib.import_module(module)
    work = Path(tempfile.mkdtemp(prefix=f"ae-user-{name}-"))
    t0 = time.monotonic()
    res = autoembed.search(budget=budget, model=mod.build, example=mod.example, train=mod.train,
                           space=str(ROOT / space), executor="local", study=name,
                           runs_dir=work / "runs")
    search_s = time.monotonic() - t0
    over = [r for r in res.rows if r.status == "infeasible"]
    retrained, params, trial = retrain(name, work / "runs", work)
    best = res.best
    assert best is not None and best.number == trial
    return {"res": res, "over": over, "search_s": search_s, "mlflow": mlflow_runs(
        work / "runs", name), "best": best, "params": params,
        "retrained": retrained, "budget": budget, "space": space, "module": module}


def retrain(name: str, runs: Path, work: Path) -> tuple[list[float], dict[str, Any], int]:
    """Export the study's pick (`export --format python`), apply its config to the user's
    `build(params)` at each seed and run the user's `train`: (qualities, params, trial)."""
    import autoembed
    from autoembed.export import export_config
    from autoembed.user.report import Report

    mod = importlib.import_module(EXAMPLES[name][0])
    done = export_config(name, work / "best_model.py", fmt="python", runs_dir=runs,
                         force=True)
    module_file, cfg, trial = done.path, done.path.with_suffix(".yaml"), done.trial
    spec = importlib.util.spec_from_file_location(f"best_{name}", module_file)
    assert spec is not None and spec.loader is not None
    exported = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(exported)
    config = autoembed.load_config(cfg)
    out = []
    for seed in SEEDS:
        params = {**exported.PARAMS, "seed": seed}
        model = mod.build(params)
        applied = autoembed.apply(model, config)
        model = model if applied is None else applied
        out.append(float(mod.train(model, params, Report(("loss",)))["quality"]))
    return out, dict(exported.PARAMS), trial


def stored_example(name: str, runs: Path) -> dict[str, Any]:
    """What a search of `name` left in `runs` (finished or not), without a retrain: the
    rows the study recorded, its front and knee pick over the complete ones."""
    import optuna

    from autoembed.budget import Budget
    from autoembed.pareto import parse_pick
    from autoembed.pipeline.search_report import SearchReport
    from autoembed.pipeline.study import load_rows
    from autoembed.user.space import load_user_space

    module, space, budget = EXAMPLES[name]
    sp = load_user_space(ROOT / space)
    rows = list(load_rows(optuna.load_study(study_name=name,
                                            storage=f"sqlite:///{runs / 'optuna.db'}")).values())
    rep = SearchReport.build(rows, sp.objectives, parse_pick("knee"), Budget.parse(budget), name)

    class Res:
        front, best = rep.front, rep.best

        @staticmethod
        def count(status: str) -> int:
            return sum(1 for r in rows if r.status == status)

    best = rep.best
    params = sp.params_for(sp.values_from_optuna(best.params)) if best else {}
    return {"res": Res, "over": [r for r in rows if r.status == "infeasible"],
            "search_s": float("nan"), "mlflow": mlflow_runs(runs, name), "best": best,
            "params": params, "retrained": [], "budget": budget, "space": space,
            "module": module, "running": sum(1 for r in rows if r.status == "running")}


def section(name: str, m: dict[str, Any]) -> str:
    res, best, q = m["res"], m["best"], m["retrained"]
    counts = {s: res.count(s) for s in ("complete", "infeasible", "pruned", "failed",
                                        "diverged") if res.count(s)}
    never = all(r.result is None for r in m["over"])
    over = ", ".join(f"trial {r.number} ({r.device_total / 1e6:,.0f} MB)" for r in m["over"])
    pick_q = float(best.metrics["quality"])
    lo, hi = (min(q), max(q)) if q else (pick_q, pick_q)
    within = lo <= pick_q <= hi
    user = {k: v for k, v in m["params"].items() if k != "embedding"}
    rows = [
        ["search", f"`{m['module']}`, space `{m['space']}`, budget {m['budget']}"
                   + (f", {m['search_s']:.0f} s" if m["search_s"] == m["search_s"] else "")],
        ["trials", ", ".join(f"{n} {s}" for s, n in counts.items())],
        ["over budget (priced, never trained)", f"{over or 'none'}; never trained: {never}"],
        ["front", ", ".join(f"trial {r.number}" for r in res.front)],
        ["MLflow trial runs (with a curve)", f"{m['mlflow'][0]} ({m['mlflow'][1]})"],
        ["pick (knee)", f"trial {best.number}: {user}, embedding {m['params']['embedding']}, "
                        f"device_total {best.device_total / 1e6:,.0f} MB"],
        ["pick's validation quality in the search", f"{pick_q:.4f}"],
    ]
    if q:
        rows += [["export -> apply -> your train, seeds 0/1/2",
                  " / ".join(f"{x:.4f}" for x in q) + f" (mean {statistics.mean(q):.4f}, "
                  f"spread {hi - lo:.4f})"],
                 ["search's quality within the 3 seeds' range", "yes" if within else
                  f"no ({pick_q - (hi if pick_q > hi else lo):+.4f} outside)"]]
    else:
        rows += [["export -> apply -> your train", "not run in this summary of the stored "
                  f"study (--from-runs without --retrain); {m.get('running', 0)} trial(s) "
                  "were still running"]]
    return f"## {name}\n\n" + markdown_table(["what", "measured"], rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", choices=sorted(EXAMPLES))
    ap.add_argument("--from-runs", type=Path, help="with --only: summarise the study a run "
                    "of it left in this runs dir (stopped or not), no retrain")
    ap.add_argument("--retrain", action="store_true", help="with --from-runs: also export "
                    "the pick and retrain it at 3 seeds")
    a = ap.parse_args(argv)
    names = [a.only] if a.only else list(DEFAULT)
    if a.from_runs is not None:
        if not a.only:
            ap.error("--from-runs needs --only")
        m = stored_example(a.only, a.from_runs)
        if a.retrain:
            m["retrained"] = retrain(a.only, a.from_runs, Path(tempfile.mkdtemp()))[0]
        body = section(a.only, m)
    else:
        body = "\n\n".join(section(n, run_example(n)) for n in names)
    write_result("user_examples" + (f"_{a.only}" if a.only else ""),
                 "The user-search examples, from a fresh state", body,
                 "nice -n 10 python benchmarks/user_examples.py"
                 + (f" --only {a.only}" if a.only else "")
                 + (f" --from-runs {a.from_runs}" if a.from_runs else "")
                 + (" --retrain" if a.retrain else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
