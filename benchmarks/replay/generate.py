"""Generate the replay tables: real trials of a fixed sample of each workload's space, each
with its learning curve, memory, per-segment cost and fixed costs (issue 25, phase 1).

Workloads (WORKLOADS): `default` (search_spaces/default.yaml at 8GB: the stand-in),
`movielens`, `flights` and `bbcnews` (`--space auto` at 8GB: the space
`space_auto.auto_space` derives). Each is set up as the search sets it up: `SearchPlan.build`
of the same request (`autoembed search --budget 8GB [--data NAME --space auto] --seed 0`),
so the space, the trained data, the run settings (`plan.run_settings()`: length fitted to
the data, its target, ...) and the start points are the search's. Two deviations, both
stated in the table's header: one torch thread per trial on every machine (the search
gives a trial one core fewer than its share), and the curve's cadence (below).

Rows: the start points first (`space.start`), then configurations drawn by Optuna's
`RandomSampler(seed=SAMPLE_SEED)` through the search's own suggest code, each priced by the
search's pricing stage (`pipeline.builtin.BuiltinWorkload.price`: the analytic estimate at
full size) with its cost timed. The table's budget is the search's when that rules out at least
MIN_RULED_OUT of a pilot of PILOT sampled configs; otherwise the pilot's device_total
quantile that rules out TARGET_RULED_OUT of it (rounded up to three significant digits:
device_total carries a fixed overhead of about 570 MB, so two would move the share ruled
out by tens of percent), so that the memory axis matters. Rows are taken in sample order
until `--configs` of them fit the table's budget; those are trained, the others are priced
only. A replay uses the table's budget (the memory axis of the header).

Trials: `runner.run_trial` with the search's settings and the search's seeding (the seed is
every trial's config `seed`, as `plan._seeded` sets it); seed 0 for every fitting row, and
seeds 1 and 2 for the start points and `--seeded` sampled rows spread evenly over the
sample (every pass holds its share of them). The runner
evaluates at the search's own cadence (its curve, best-evaluation choice and test quality
are exactly a search trial's); an `on_step` hook adds validation evaluations in between, at
every multiple of `fine_every` (FINE_SHARE of the search's cadence, a divisor of it where
one is near), and the test split's quality at every evaluation; these extras are timed and
taken out of every cost. Costs are wall and thread CPU seconds (`time.thread_time`: one
torch thread computes on the calling thread; CPU time stays comparable when the machine is
loaded, wall time does not).

Order: one process works through every table, round-robin by workload and in passes
(seed 0 of the first rows, then the extra seeds of the first rows, then more rows), so a
stopped run leaves every table usable; a rerun resumes at the first missing trial. Each
record is appended as it is made (table.py: one gzip member per record).

    python benchmarks/replay/generate.py [--workloads default movielens flights bbcnews]
        [--configs 300] [--seeded 80] [--log FILE]
    python benchmarks/replay/generate.py --probe 3        # time 3 trials per workload
    python benchmarks/replay/generate.py --workloads default --configs 6 --seeded 2 \\
        --name tiny                                          # a tiny table for tests
    python benchmarks/replay/generate.py --data FILE --label COL --categorical A,B \\
        [--space auto] [--configs 100] [--out DIR]           # a table of any data

`--data` takes what `autoembed search --data` takes (a CSV/Parquet file or a built-in name,
with `--label`, `--categorical`, `--text-column`) and makes one table of it, named `data-`
and the first 12 hex digits of the data's sha256 (`--name` to choose). The header names the
data by content, not by path (`data_identity`: the file's sha256 and column options, or a
built-in's spec and package version, hashed; `table.data_identity`).
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from _common import git_commit, machine  # noqa: E402
from table import Table, append_record, columns, data_identity, repair  # noqa: E402

TABLES = HERE / "tables"
SEARCH_BUDGET = "8GB"  # the README's search budget, every workload
SAMPLE_SEED = 0  # the RandomSampler's seed: the rows' order (replays seed theirs 1000 + k)
PILOT = 1000  # sampled configs priced to choose the table's budget
MIN_RULED_OUT = 0.15  # the search's budget is the table's when it rules out this share
# (default.yaml at 8GB: 18%, the share its header calls "a large part")
TARGET_RULED_OUT = 0.4  # otherwise the budget at this share ruled out of the pilot
TRAIN_SEEDS = (0, 1, 2)
SEEDED = 80  # sampled rows also trained at seeds 1 and 2 (the start points always are)
FINE_SHARE = 1 / 3  # the curve's cadence against the search's (about 24 evaluations)
THREADS = 1
WARM_UP_STEPS = 5
SEP = "/"  # row ids in logs: workload/row/seed

WORKLOADS: dict[str, dict[str, Any]] = {
    "default": {"space": "default", "data": None},
    "movielens": {"space": "auto", "data": "movielens"},
    "flights": {"space": "auto", "data": "flights"},
    "bbcnews": {"space": "auto", "data": "bbcnews"},
}
ESTIMATE_KEYS = ("allocated_peak", "reserved_peak", "overhead", "device_total", "parameters",
                 "gradients", "optimizer_state", "activations", "temporaries", "host_bytes")


# --------------------------------------------------------------------------- clocks
def now() -> tuple[float, float]:
    """(wall, thread CPU) seconds."""
    return time.perf_counter(), time.thread_time()


def since(t0: tuple[float, float]) -> tuple[float, float]:
    t = now()
    return t[0] - t0[0], t[1] - t0[1]


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# --------------------------------------------------------------------------- workloads
@dataclass(frozen=True)
class Source:
    """What a table is made from, as a search is given it: `--space` and `--data` (a
    built-in name or a CSV/Parquet file) with the file's column options."""

    space: str | None = "auto"
    data: str | None = None
    label: str | None = None
    categorical: tuple[str, ...] | None = None
    text_column: str | None = None

    def request(self) -> dict[str, Any]:
        """`SearchRequest.parse`'s keyword arguments for this source."""
        return {"space": self.space, "data": self.data, "label": self.label,
                "categorical": self.categorical, "text_column": self.text_column}


def data_label(ident: Mapping[str, Any]) -> str | None:
    """The header's `data`: a built-in's name (None for synthetic data, as `--data` was
    not given), a file's `sha256:HEX` (its path is not the table's business)."""
    if ident["kind"] == "file":
        return f"sha256:{ident['sha256']}"
    return None if str(ident["kind"]).startswith("synthetic-") else str(ident["kind"])


@dataclass
class Workload:
    """One table's workload: the search's plan and what the generator adds to it."""

    name: str
    plan: Any  # autoembed.pipeline.plan.SearchPlan
    source: Source = field(default_factory=Source)

    @classmethod
    def build(cls, name: str, runs_dir: Path, source: Source | None = None) -> Workload:
        """The search's plan for `source` (a built-in workload's, WORKLOADS, by default)."""
        from autoembed.pipeline.plan import SearchPlan
        from autoembed.pipeline.request import SearchRequest

        src = source or Source(**WORKLOADS[name])
        req = SearchRequest.parse(SEARCH_BUDGET, **src.request(),
                                  study=f"replay-{name}", runs_dir=runs_dir, device="cpu",
                                  seed=0, workers=1, start_points=True)
        plan = SearchPlan.build(req, {}, note=lambda line: log(f"{name}: {line}"))
        return cls(name, plan, src)

    def identity(self) -> dict[str, Any]:
        return data_identity(self.plan.workload.data.spec)

    def space_text(self) -> str:
        """The space as the table stores it: a data file named by its content hash (the
        replay is told the file again: `compare.py --data FILE`)."""
        import yaml

        text = str(self.space.text)
        spec = self.plan.workload.data.spec
        raw = yaml.safe_load(text)
        if not spec.is_file or not isinstance(raw, dict) or "data" not in raw:
            return text
        ident = self.identity()
        raw["data"] = {**raw["data"], "name": f"sha256-{ident['sha256']}{ident['suffix']}"}
        return yaml.safe_dump(raw, sort_keys=False)

    @property
    def space(self) -> Any:
        return self.plan.space

    @property
    def dataset(self) -> Any:
        return self.plan.workload.data.train_dataset

    def settings(self) -> dict[str, Any]:
        """The search's run settings, at one torch thread."""
        return {**self.plan.workload.run, "device": "cpu", "threads": THREADS}

    def fitted(self, batch: int) -> tuple[int, int]:
        """(max_steps, the search's eval_every) of a trial at `batch` samples per step."""
        from autoembed.runner import RunSettings, fit_settings

        s = fit_settings(RunSettings(**self.settings()), self.dataset.num_rows("train"), batch)
        return s.max_steps, s.eval_every


def fine_every(search_every: int) -> int:
    """The curve's cadence: the largest divisor of the search's cadence at most FINE_SHARE
    of it, when that is at least half of FINE_SHARE of it (so the search's evaluations are
    on the fine grid); else FINE_SHARE of it."""
    want = max(1, int(search_every * FINE_SHARE))
    div = max(d for d in range(1, want + 1) if search_every % d == 0)
    return div if 2 * div >= want else want


# --------------------------------------------------------------------------- rows
def _quantile(xs: Sequence[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def _round_up(x: float, digits: int = 3) -> int:
    e = 10 ** (math.floor(math.log10(x)) - digits + 1)
    return int(math.ceil(x / e) * e)


def table_budget(totals: Sequence[float], search_bytes: int) -> tuple[int, str]:
    """The table's budget in bytes and why (module docstring)."""
    over = sum(1 for t in totals if t > search_bytes) / len(totals)
    if over >= MIN_RULED_OUT:
        return search_bytes, (f"the search's budget {SEARCH_BUDGET}: it rules out "
                              f"{100 * over:.0f}% of a pilot of {len(totals)} sampled configs")
    b = _round_up(_quantile(totals, 1 - TARGET_RULED_OUT))
    share = sum(1 for t in totals if t > b) / len(totals)
    return b, (f"the search's budget {SEARCH_BUDGET} rules out {100 * over:.0f}% of a pilot "
               f"of {len(totals)} sampled configs; this budget, the pilot's device_total "
               f"{100 * (1 - TARGET_RULED_OUT):.0f}th percentile rounded up, rules out "
               f"{100 * share:.0f}%")


class Pricer:
    """Suggest and price configs as the search does (the built-in workload's `price`), timed."""

    def __init__(self, w: Workload) -> None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.w = w
        self.random = optuna.create_study(sampler=optuna.samplers.RandomSampler(SAMPLE_SEED))
        self.fixed = optuna.create_study(sampler=optuna.samplers.RandomSampler(SAMPLE_SEED))

    def sampled(self) -> dict[str, Any]:
        return self._price(self.random, self.random.ask())

    def at(self, params: Mapping[str, Any]) -> dict[str, Any]:
        self.fixed.enqueue_trial(dict(params))
        return self._price(self.fixed, self.fixed.ask())

    def _price(self, study: Any, trial: Any) -> dict[str, Any]:
        from autoembed.pipeline.optuna_space import suggest_values
        from autoembed.pipeline.workload import Invalid

        t0 = now()
        priced = self.w.plan.workload.price(suggest_values(self.w.space, trial))
        wall, cpu = since(t0)
        params = dict(trial.params)
        row: dict[str, Any] = {"params": params, "price_wall_s": wall, "price_cpu_s": cpu}
        if isinstance(priced, Invalid):
            return {**row, "values": None, "invalid": priced.reason, "estimate": None}
        est = priced.estimate.to_dict()
        values = self.w.space.values_from_optuna(params)
        return {**row, "values": values, "invalid": None,
                "estimate": {k: est[k] for k in ESTIMATE_KEYS if k in est}}


def make_rows(w: Workload, configs: int, pilot_size: int = PILOT
              ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The table's rows (start points, then sampled configs until `configs` fit its budget)
    and the budget's part of its header."""
    pricer = Pricer(w)
    pilot = [pricer.sampled() for _ in range(pilot_size)]
    totals = [r["estimate"]["device_total"] for r in pilot if r["estimate"]]
    budget, why = table_budget(totals, w.plan.budget.bytes)

    def fits(r: Mapping[str, Any]) -> bool:
        return r["estimate"] is not None and r["estimate"]["device_total"] <= budget

    rows = [{**pricer.at(sp.params(w.space)), "source": "start", "start": sp.name}
            for sp in w.plan.start]
    sampled: list[dict[str, Any]] = []
    more = iter(pilot)
    while sum(fits(r) for r in sampled) < configs:
        r = next(more, None) or pricer.sampled()
        sampled.append({**r, "source": "sample"})
    rows += sampled
    for i, r in enumerate(rows):
        r.update(kind="row", row=i, fits=fits(r))
    allocated = sorted(r["estimate"]["allocated_peak"] for r in rows if fits(r))
    head = {"budget_bytes": budget, "budget_why": why, "pilot": len(pilot),
            "pilot_over_budget": sum(1 for t in totals if t > budget) / len(totals),
            "memory_axis": {
                "objective": "memory = allocated_peak (memory.objective.MEMORY_BASIS)",
                "feasibility": "device_total <= budget_bytes",
                "scale": "log", "low_bytes": allocated[0], "high_bytes": budget,
                "note": "hypervolume over log10(allocated_peak) between the cheapest "
                        "trained row and the budget: the budget rules rows out and the "
                        "axis spreads the rest"}}
    return rows, head


# --------------------------------------------------------------------------- one trial
@dataclass
class Meter:
    """What the on_step hook and the report callback measure in one trial."""

    fine: int
    search_every: int
    max_steps: int
    t_call: tuple[float, float]
    extra: list[float] = field(default_factory=lambda: [0.0, 0.0])  # hook's own work
    search_eval: list[float] = field(default_factory=lambda: [0.0, 0.0])
    steps: list[float] = field(default_factory=lambda: [0.0, 0.0])  # steps 2.. (wrapped)
    first_steps: list[list[float]] = field(default_factory=list)
    startup: tuple[float, float] | None = None  # call -> the end of step 1
    hook_end: tuple[float, float] | None = None
    last_report: tuple[float, float] | None = None
    points: dict[int, dict[str, Any]] = field(default_factory=dict)
    dataset: Any = None

    def fine_step(self, step: int) -> bool:
        return step % self.fine == 0 or step % self.search_every == 0 or step == self.max_steps

    def runner_step(self, step: int) -> bool:
        return step % self.search_every == 0 or step == self.max_steps

    def loop(self) -> tuple[float, float]:
        """Cumulative training-loop seconds since the call, evaluations taken out."""
        w, c = since(self.t_call)
        return (w - self.extra[0] - self.search_eval[0], c - self.extra[1] - self.search_eval[1])


def _add(acc: list[float], d: tuple[float, float]) -> None:
    acc[0] += d[0]
    acc[1] += d[1]


def _timed_step(m: Meter, step: Callable[[Any], float]) -> Callable[[Any], float]:
    def wrapped(batches: Any) -> float:
        t0 = now()
        loss = step(batches)
        d = since(t0)
        _add(m.steps, d)
        if len(m.first_steps) < 10:
            m.first_steps.append([d[0], d[1]])
        return loss
    return wrapped


def _hook(m: Meter, base_dataset: Any, s: Any) -> Callable[[Any, int], None]:
    from autoembed.runner import _scored, primary

    def on_step(trainer: Any, step: int) -> None:
        t0 = now()
        if m.startup is None:
            m.startup = since(m.t_call)
            trainer.step = _timed_step(m, trainer.step)
        if m.fine_step(step):
            cfg = trainer.config
            if m.dataset is None:
                m.dataset = base_dataset
                if cfg.task == "text" and cfg.seq_len != base_dataset.seq_len:
                    from autoembed.data.sequence import with_seq_len

                    m.dataset = with_seq_len(base_dataset, cfg.seq_len)
            wall, cpu = m.loop()
            point: dict[str, Any] = {"step": step, "loop_wall_s": wall, "loop_cpu_s": cpu,
                                     "steps_wall_s": m.steps[0], "steps_cpu_s": m.steps[1],
                                     "search": m.runner_step(step)}
            t1 = now()
            test, _ = _scored(trainer, m.dataset, "test", cfg.batch_size, s.test_batches,
                              cfg.task)
            point.update(test_quality=test[primary(cfg.task)], test_metrics=test)
            point["test_wall_s"], point["test_cpu_s"] = since(t1)
            if not m.runner_step(step):
                t2 = now()
                valid, _ = _scored(trainer, m.dataset, "valid", cfg.batch_size,
                                   s.eval_batches, cfg.task)
                point.update(quality=valid[primary(cfg.task)], metrics=valid)
                point["valid_wall_s"], point["valid_cpu_s"] = since(t2)
            m.points[step] = point
        _add(m.extra, since(t0))
        m.hook_end = now()
    return on_step


def _report(m: Meter) -> Callable[[Any], bool]:
    def report(ev: Any) -> bool:
        assert m.hook_end is not None
        d = since(m.hook_end)  # the runner's validation evaluation at this step
        _add(m.search_eval, d)
        p = m.points.setdefault(ev.step, {"step": ev.step, "missing_hook": True})
        p.update(quality=ev.quality, metrics=dict(ev.metrics), samples=ev.samples,
                 valid_wall_s=d[0], valid_cpu_s=d[1], elapsed_s=ev.elapsed_s)
        m.last_report = now()
        return True
    return report


def trained_config(w: Workload, row: Mapping[str, Any], seed: int) -> Any:
    """The config a search trial trains for `row` in a search of seed `seed`."""
    from autoembed.config import config_from_dict

    space = replace(w.space, base={**w.space.base, "seed": seed})  # plan._seeded's rule
    train = w.plan.workload.data.trained(space.config_for(row["values"])).to_dict()
    return config_from_dict(train, f"{w.name} row {row['row']}")


def warm_up(w: Workload, row: Mapping[str, Any]) -> tuple[float, float]:
    """A few untimed steps of `row`, so that no recorded trial pays this process's first
    imports and kernel set-up (a search's worker process pays them once, too); their
    seconds."""
    from autoembed.runner import RunSettings, run_trial

    t0 = now()
    s = RunSettings(**{**w.settings(), "fit_to_data": False, "epochs": None,
                       "max_steps": WARM_UP_STEPS, "eval_every": WARM_UP_STEPS})
    run_trial(trained_config(w, row, 0), w.dataset, s)
    return since(t0)


PROCESS_TRIALS = [0]  # trials this process has run (a replay may drop the first ones)


def run_one(w: Workload, row: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """Train one row at one seed as a search trial would; the table's trial record."""
    from autoembed.runner import RunSettings, run_trial

    config = trained_config(w, row, seed)
    s = RunSettings(**w.settings())
    PROCESS_TRIALS[0] += 1
    max_steps, every = w.fitted(config.batch_size * config.grad_accum_steps)
    m = Meter(fine_every(every), every, max_steps, now())
    load0 = load()
    try:
        result = run_trial(config, w.dataset, s, _report(m), on_step=_hook(m, w.dataset, s))
    except Exception as e:  # noqa: BLE001 - bad input for this config: the trial's record
        return {"kind": "trial", "row": row["row"], "seed": seed, "status": "failed",
                "error": f"{type(e).__name__}: {e}", "load": [load0, load()]}
    total = since(m.t_call)
    final = since(m.last_report) if m.last_report else (0.0, 0.0)
    r = result
    curve = [m.points[k] for k in sorted(m.points)]
    samples_per_step = config.batch_size * config.grad_accum_steps
    for p in curve:
        p.setdefault("samples", p["step"] * samples_per_step)
    step1 = r.train_seconds - m.steps[0]
    return {
        "kind": "trial", "row": row["row"], "seed": seed, "status": r.status,
        "error": r.error, "steps": r.steps, "samples": r.samples,
        "max_steps": max_steps, "search_eval_every": every, "fine_every": m.fine,
        "batch_size": config.batch_size, "samples_per_step": samples_per_step,
        "valid_quality": r.valid_quality, "test_quality": r.test_quality,
        "best_step": r.best_step, "metrics": r.metrics, "latency_ms": r.latency_ms,
        "serving_bytes": r.serving_bytes, "throughput": r.throughput,
        "steps_to_target": r.steps_to_target, "target": r.target,
        "curve": curve,
        "cost": {
            "total_wall_s": total[0] - m.extra[0], "total_cpu_s": total[1] - m.extra[1],
            "startup_wall_s": (m.startup or (0, 0))[0], "startup_cpu_s": (m.startup or (0, 0))[1],
            "step1_wall_s": step1,
            "final_wall_s": final[0], "final_cpu_s": final[1],
            "steps_wall_s": m.steps[0], "steps_cpu_s": m.steps[1],
            "search_evals_wall_s": m.search_eval[0], "search_evals_cpu_s": m.search_eval[1],
            "extra_wall_s": m.extra[0], "extra_cpu_s": m.extra[1],
            "first_steps": m.first_steps,
        },
        "runner": {"wall_seconds": r.wall_seconds, "train_seconds": r.train_seconds,
                   "data_seconds": r.data_seconds, "eval_seconds": r.eval_seconds,
                   "rss_peak": r.rss_peak},
        "load": [load0, load()], "commit": COMMIT, "threads": THREADS,
        "process_trial": PROCESS_TRIALS[0], "pid": os.getpid(),
        "maxrss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }


# --------------------------------------------------------------------------- tables
COMMIT = git_commit()


def rounded(x: Any, digits: int = 6) -> Any:
    """`x` with every float at `digits` significant digits (the tables' size)."""
    if isinstance(x, float):
        return float(f"{x:.{digits}g}") if math.isfinite(x) else x
    if isinstance(x, dict):
        return {k: rounded(v, digits) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [rounded(v, digits) for v in x]
    return x


def log(line: str) -> None:
    print(time.strftime("%H:%M:%S"), line, flush=True)


def open_table(name: str, w: Workload, configs: int, out: Path, pilot: int = PILOT) -> Table:
    """The table at `out`, created (header and every row) when it does not exist; one made
    from another workload or other data is refused (ConfigError)."""
    from autoembed.errors import ConfigError

    if out.exists():
        t = Table.of(repair(out), str(out))
        if t.header["workload"] != w.name:
            raise ConfigError(f"{out} holds workload {t.header['workload']}, not {w.name}: "
                              "give --name or --out for a table of its own")
        held = t.header.get("data_identity", {}).get("sha256")
        if held is not None and held != w.identity()["sha256"]:
            raise ConfigError(f"{out} was made from other data (sha256 {held}): give "
                              "--name or --out for a table of this data")
        return t
    t0 = now()
    rows, budget = make_rows(w, configs, pilot)
    ident, baseline = w.identity(), w.plan.workload.baseline
    header = {
        "kind": "table", "name": name, "workload": w.name, "space": w.source.space,
        "data": data_label(ident), "data_identity": ident,
        "search_budget": SEARCH_BUDGET, "search_budget_bytes": w.plan.budget.bytes,
        "space_source": w.space.source, "space_text": w.space_text(),
        "objectives": [list(o) for o in w.plan.objective_pairs],
        "run_settings": w.settings(), "threads": THREADS,
        "deviations": [f"threads {THREADS} (the search: trial_threads of its share)",
                       "validation added between the search's evaluations (fine_every) "
                       "and the test split at every evaluation, timed and taken out"],
        "sample": {"sampler": "optuna RandomSampler", "seed": SAMPLE_SEED,
                   "configs": configs, "start_points": [sp.name for sp in w.plan.start]},
        "baseline": None if baseline is None else baseline.to_dict(),
        "target": w.plan.workload.target, **budget,
        "train_rows": w.dataset.num_rows("train"),
        "commit": COMMIT, "machine": machine(), "created": time.strftime("%Y-%m-%d %H:%M:%S"),
        "load": load(), "rows_seconds": since(t0),
    }
    append_record(out, header)
    rows = [rounded(r) for r in rows]
    for r in rows:
        append_record(out, r)
    return Table.of([header, *rows], str(out))


def tasks(t: Table, seeded: int, chunk: int) -> list[tuple[int, int]]:
    """(row, seed) to train, in pass order: seed 0 of `chunk` rows, then the other seeds of
    the seeded rows among them, then the next rows."""
    fitting = [i for i, r in sorted(t.rows.items()) if r["fits"]]
    sampled = [i for i in fitting if t.rows[i]["source"] == "sample"]
    every = len(sampled) / seeded if seeded else 0.0  # spread over the sample: every pass
    many = {i for i in fitting if t.rows[i]["source"] == "start"} | {
        sampled[int(k * every)] for k in range(min(seeded, len(sampled)))}
    out: list[tuple[int, int]] = []
    for k in range(0, len(fitting), chunk):
        part = fitting[k:k + chunk]
        out += [(i, 0) for i in part]
        out += [(i, s) for i in part if i in many for s in TRAIN_SEEDS[1:]]
    return out


def interleave(queues: Mapping[str, list[Any]]) -> Iterator[tuple[str, Any]]:
    """Round-robin over the queues until all are empty."""
    its = {k: iter(v) for k, v in queues.items()}
    while its:
        for k in list(its):
            item = next(its[k], None)
            if item is None:
                del its[k]
            else:
                yield k, item


def _workloads(a: argparse.Namespace, tmp: Path) -> dict[str, Workload]:
    """The workloads to tabulate: `--data` (with `--space`, auto by default) or the
    built-in ones named by `--workloads`; a table made from `--data` is named `--name` or
    `data-` and the first 12 hex digits of its data's sha256."""
    if a.data is None:
        return {n: Workload.build(n, tmp) for n in a.workloads}
    src = Source(a.space, a.data, a.label, columns(a.categorical), a.text_column)
    w = Workload.build(a.name or "data", tmp, src)
    if a.name is None:
        w.name = f"data-{w.identity()['sha256'][:12]}"
    return {w.name: w}


def _bad_input(a: argparse.Namespace, ap: argparse.ArgumentParser) -> None:
    """One line and exit 2 for options that do not go together."""
    if a.data is None:
        given = [o for o, v in (("--label", a.label), ("--categorical", a.categorical),
                                ("--text-column", a.text_column), ("--space", a.space))
                 if v is not None]
        if given:
            ap.error(f"{', '.join(given)} describe(s) --data: give --data FILE (or a "
                     "built-in data name)")
    elif a.workloads is not None:
        ap.error(f"--workloads {' '.join(a.workloads)} with --data {a.data}: give one of "
                 "them (--data makes one table of its own)")
    if a.configs < 1 or a.pilot < 1:
        ap.error(f"--configs {a.configs} --pilot {a.pilot}: both must be at least 1")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", nargs="+", default=None, choices=list(WORKLOADS),
                    help=f"built-in workloads (default: all of {', '.join(WORKLOADS)})")
    ap.add_argument("--data", default=None,
                    help="a CSV/Parquet file or a built-in data name, as `autoembed search "
                         "--data` takes it: one table of that data")
    ap.add_argument("--label", default=None, help="--data's label column")
    ap.add_argument("--categorical", nargs="+", default=None,
                    help="--data's id columns (user,item or user item)")
    ap.add_argument("--text-column", default=None, help="--data's text column")
    ap.add_argument("--space", default=None,
                    help="with --data: the search space (default: auto, derived from it)")
    ap.add_argument("--pilot", type=int, default=PILOT,
                    help="sampled configs priced to choose the table's budget")
    ap.add_argument("--configs", type=int, default=300, help="rows trained per table")
    ap.add_argument("--seeded", type=int, default=SEEDED,
                    help="sampled rows also trained at seeds 1 and 2 (start points always)")
    ap.add_argument("--chunk", type=int, default=20, help="rows per pass")
    ap.add_argument("--name", default=None, help="table name (default: the workload's)")
    ap.add_argument("--out", type=Path, default=TABLES)
    ap.add_argument("--probe", type=int, default=0,
                    help="time this many trials per workload (no table) and estimate the total")
    ap.add_argument("--max-trials", type=int, default=None, help="stop after this many")
    a = ap.parse_args(argv)
    _bad_input(a, ap)
    if a.data is None:
        a.workloads = a.workloads or list(WORKLOADS)
    elif a.space is None:
        a.space = "auto"
    import torch

    from autoembed.errors import ConfigError

    torch.set_num_threads(THREADS)
    log(f"replay tables: {a.data or a.workloads}, commit {COMMIT}, pid {os.getpid()}, "
        f"load {load()}")
    with tempfile.TemporaryDirectory(prefix="replay-") as tmp:
        name = a.name if a.data is None else None  # a --data workload is named already
        try:
            ws = _workloads(a, Path(tmp))
            if a.probe:
                return probe(ws, a.probe, a.configs, a.seeded)
            tables = {n: open_table(name or n, ws[n], a.configs,
                                    a.out / f"{name or n}.jsonl.gz", a.pilot) for n in ws}
        except ConfigError as e:
            print(f"generate.py: {e}", file=sys.stderr)
            return 2
        queues = {n: [ts for ts in tasks(t, a.seeded, a.chunk) if ts not in t.trials]
                  for n, t in tables.items()}
        for n, q in queues.items():
            log(f"{n}: {len(tables[n].trials)} trials done, {len(q)} to go")
            if q:
                wall, cpu = warm_up(ws[n], tables[n].rows[q[0][0]])
                log(f"{n}: warmed up in {cpu:.1f} CPU-s ({wall:.1f} s)")
        done = 0
        for n, (row, seed) in interleave(queues):
            rec = run_one(ws[n], tables[n].rows[row], seed)
            append_record(a.out / f"{name or n}.jsonl.gz", rounded(rec))
            c = rec.get("cost", {})
            log(f"{n}{SEP}{row}{SEP}{seed} {rec['status']} test {rec.get('test_quality')} "
                f"cpu {c.get('total_cpu_s', 0):.1f}s (+{c.get('extra_cpu_s', 0):.1f}s extra) "
                f"wall {c.get('total_wall_s', 0):.1f}s load {rec['load'][1][0]} "
                f"maxrss {rec.get('maxrss_bytes', 0) / 2**30:.2f} GiB")
            done += 1
            if a.max_trials is not None and done >= a.max_trials:
                break
    log("done")
    return 0


def probe(ws: Mapping[str, Workload], n: int, configs: int, seeded: int) -> int:
    """Train `n` sampled rows per workload; print CPU seconds and the whole set's estimate."""
    total = 0.0
    for name, w in ws.items():
        pricer = Pricer(w)
        rows: list[dict[str, Any]] = []
        while len(rows) < n:
            r = pricer.sampled()
            if r["estimate"] is not None and r["estimate"]["device_total"] <= w.plan.budget.bytes:
                rows.append({**r, "row": len(rows)})
        warm_up(w, rows[0])
        cpus, extras = [], []
        for r in rows:
            rec = run_one(w, r, 0)
            c = rec.get("cost", {})
            cpus.append(c.get("total_cpu_s", 0.0))
            extras.append(c.get("extra_cpu_s", 0.0))
            log(f"probe {name} {r['values']}: {rec['status']} steps {rec.get('steps')} "
                f"cpu {cpus[-1]:.1f}s + extra {extras[-1]:.1f}s, wall "
                f"{c.get('total_wall_s', 0):.1f}s, evals {len(rec.get('curve', []))}")
        per = (sum(cpus) + sum(extras)) / len(cpus)
        trials = configs + 2 * (seeded + len(w.plan.start))
        total += per * trials
        log(f"probe {name}: {per:.1f} CPU-s per trial with extras -> {trials} trials "
            f"{per * trials / 3600:.1f} CPU-h")
    log(f"probe: all tables {total / 3600:.1f} CPU-h")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
