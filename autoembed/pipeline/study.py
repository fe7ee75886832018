"""The Optuna side of a search: storage, samplers, study metadata and crash recovery.

One SQLite file per runs directory (`<runs-dir>/optuna.db`) by default, or any database
Optuna's RDBStorage takes (`--storage postgresql://...` for a team: see docs/clusters.md);
one study per `--study` name. Only the driver process calls these functions
(docs/contracts.md#who-writes-each-store-and-file).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autoembed.errors import ConfigError, first_line
from autoembed.pipeline.records import ATTR, TrialRow

if TYPE_CHECKING:
    import optuna

    from autoembed.selection import ValidScores

__all__ = ["SAMPLERS", "check_sampler", "warm_sampler", "import_sampler", "HEAVY_SAMPLERS",
           "DEFAULT_SAMPLER", "STUDY_NAME_RULE", "check_study_name", "storage_url", "storage_label",
           "open_storage", "find_study", "study_exists", "make_sampler", "tpe_settings",
           "MOVED_SAMPLERS", "Recovery", "recover", "load_rows", "scores_attrs", "load_scores",
           "SCORES_ATTR", "NSGA2_POPULATION", "StoredStudy", "check_same"]

SAMPLERS: tuple[str, ...] = ("tpe-mix", "tpe", "nsga2", "random", "grid", "ehvi")
# kinds the benchmarks measured and left out of the product: benchmarks/samplers.py has them
MOVED_SAMPLERS = ("gp", "tpe-plain", "tpe-s4", "tpe-cost", "tpe-mix-cost")
# The default: on four replayed tables of real trials `ehvi` reached 95% of the reference
# front in the least compute on each (docs/benchmarks.md, benchmarks/replay/compare.py).
DEFAULT_SAMPLER = "ehvi"
STUDY_NAME_RULE = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
# NSGA-II's default population (50) is pure random sampling in a 10-30 trial search
NSGA2_POPULATION = 8
# TPE: random proposals (infeasible ones included) before the model is used
TPE_STARTUP = 8
MIX_EVERY = 2  # tpe-mix: every MIX_EVERY-th trial after the start-up is random
# tpe-mix's TPE draws from its own stream (its start-up never repeats the random share's)
MIX_MODEL_SEED_OFFSET = 104_729
SQLITE_TIMEOUT_S = 60  # wait this long for a lock instead of failing at once


def check_study_name(name: str) -> None:
    if not STUDY_NAME_RULE.match(name) or name in (".", "..") or ".." in name:
        raise ConfigError(
            f"study name '{name}' is not allowed; use 1-128 letters, digits, '_', '-' or '.' "
            "(no '..'), e.g. --study ctr-8gb")


def storage_url(runs_dir: Path, url: str | None = None) -> str:
    """The Optuna storage URL: `url` as given, else `<runs_dir>/optuna.db`."""
    return url.strip() if url else f"sqlite:///{runs_dir / 'optuna.db'}"


STORAGE_SCHEMES = ("sqlite", "postgresql", "mysql")  # Optuna's RDBStorage; others refused
CONNECT_TIMEOUT_S = 10  # a team server that does not answer fails in seconds


def storage_label(runs_dir: Path, url: str | None = None) -> str:
    """The storage for messages, with any password masked."""
    return re.sub(r"(://[^:/@]+:)[^/]*@", r"\1***@", storage_url(runs_dir, url))


def open_storage(runs_dir: Path, url: str | None = None) -> optuna.storages.RDBStorage:
    """The study storage: `<runs_dir>/optuna.db`, or the database at `url` (e.g.
    postgresql://user:pw@host/db, which needs the `team` extra's driver)."""
    import fcntl

    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    runs_dir.mkdir(parents=True, exist_ok=True)
    full = storage_url(runs_dir, url)
    label = storage_label(runs_dir, url)
    scheme = full.split("://", 1)[0].split("+", 1)[0].lower() if "://" in full else ""
    if scheme not in STORAGE_SCHEMES:
        raise ConfigError(f"--storage '{label}' is not a database URL Optuna takes; use e.g. "
                          "postgresql://user:password@host:5432/optuna, or drop --storage for "
                          f"{runs_dir / 'optuna.db'}")
    connect_args: dict[str, Any] = (
        {"timeout": SQLITE_TIMEOUT_S} if scheme == "sqlite"
        else {"connect_timeout": CONNECT_TIMEOUT_S} if scheme == "postgresql" else {})
    try:
        if scheme != "sqlite" or url:
            return optuna.storages.RDBStorage(full, engine_kwargs={"connect_args": connect_args})
        # two searches starting at once on one runs dir: one creates the schema, one waits
        with (runs_dir / "optuna.db.init-lock").open("a") as guard:
            fcntl.flock(guard.fileno(), fcntl.LOCK_EX)
            return optuna.storages.RDBStorage(full, engine_kwargs={"connect_args": connect_args})
    except ImportError:  # Optuna re-raises the driver's ModuleNotFoundError as this
        raise ConfigError(
            f"--storage '{label}': the database driver for '{scheme}' is not installed; "
            "pip install 'autoembed[team]' (psycopg for PostgreSQL)") from None
    except Exception as e:  # noqa: BLE001 - SQLAlchemy's errors: a bad URL or server
        raise ConfigError(
            f"--storage '{label}': cannot open the study storage ({type(e).__name__}: "
            f"{first_line(e)[:300]}); check the URL, that the server runs and that the database "
            "exists (createdb), or drop --storage") from None


def study_exists(storage: optuna.storages.BaseStorage, name: str) -> bool:
    """One lookup by name (not a read of every study's settings, which a team database
    holds many of)."""
    try:
        storage.get_study_id_from_name(name)
    except KeyError:
        return False
    return True


def find_study(storage: optuna.storages.BaseStorage, name: str) -> optuna.Study | None:
    import optuna

    if not study_exists(storage, name):
        return None
    return optuna.load_study(study_name=name, storage=storage)


HEAVY_SAMPLERS = ("ehvi",)  # samplers whose first ask imports heavy modules (import_sampler)


def warm_sampler(kind: str, trials: int | None = None) -> None:
    """Import what sampler `kind` needs (`import_sampler`) on a non-daemon thread, while Ray
    starts; a failure is left to the sampler's first ask to raise. `trials`: a new study's
    trial count (None: unknown, or a resumed study). `ehvi` fits its model only at an ask
    after STARTUP trials have finished (priced_ehvi.STARTUP), so a new study of at most that
    many never imports it: nothing is warmed (about 2 CPU s of scikit-learn saved)."""
    if kind not in HEAVY_SAMPLERS:
        return
    from autoembed.pipeline.priced_ehvi import STARTUP

    if trials is not None and trials <= STARTUP:
        return
    import threading

    def work() -> None:
        try:
            import_sampler(kind)
        except Exception:  # noqa: BLE001, S110 - the sampler imports it again and raises there
            pass

    threading.Thread(target=work, name="autoembed-sampler-warm").start()


def import_sampler(kind: str) -> None:
    """Import, here and now, what sampler `kind`'s first ask imports (`ehvi`: scikit-learn's
    trees; nothing for the others)."""
    if kind not in HEAVY_SAMPLERS:
        return
    import importlib

    from autoembed.pipeline.priced_ehvi import HEAVY_IMPORTS

    for name in HEAVY_IMPORTS:
        importlib.import_module(name)


def make_sampler(kind: str, seed: int) -> optuna.samplers.BaseSampler:
    """A seeded sampler. `grid` is random sampling here: the driver enqueues grid points."""
    import optuna

    check_sampler(kind)
    if kind == "tpe":
        return _multivariate_tpe(seed)
    if kind == "tpe-mix":
        from autoembed.pipeline.interleave import InterleavedSampler

        return InterleavedSampler(_multivariate_tpe((seed + MIX_MODEL_SEED_OFFSET) % 2**32),
                                  optuna.samplers.RandomSampler(seed=seed), TPE_STARTUP,
                                  MIX_EVERY)
    if kind == "nsga2":
        return optuna.samplers.NSGAIISampler(population_size=NSGA2_POPULATION, seed=seed)
    if kind in ("random", "grid"):
        return optuna.samplers.RandomSampler(seed=seed)
    if kind == "ehvi":  # candidates priced before proposing: pipeline/priced_ehvi.py
        from autoembed.pipeline.priced_ehvi import PricedEHVI

        return PricedEHVI(seed=seed)  # its own start-up: priced_ehvi.STARTUP
    raise AssertionError(f"sampler '{kind}' is in SAMPLERS but has no maker here")


def check_sampler(kind: str) -> None:
    """ConfigError unless `kind` is one of SAMPLERS (a moved experiment's says where it went)."""
    if kind in SAMPLERS:
        return
    use = f"use one of {', '.join(SAMPLERS)}"
    if kind in MOVED_SAMPLERS:
        raise ConfigError(f"sampler '{kind}' was an experiment, now in benchmarks/ "
                          f"(benchmarks/samplers.py); {use}")
    raise ConfigError(f"sampler '{kind}' is not known; {use}")


def tpe_settings(seed: int, startup: int = TPE_STARTUP) -> dict[str, Any]:
    """TPESampler's arguments for `tpe` and `tpe-mix`'s model: multivariate + group (joint
    and conditional params modelled together), constant liar, `startup` random proposals."""
    return {"seed": seed, "multivariate": True, "group": True, "constant_liar": True,
            "n_startup_trials": startup}


def _multivariate_tpe(seed: int) -> optuna.samplers.TPESampler:
    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(**tpe_settings(seed))


def load_rows(study: optuna.Study) -> dict[int, TrialRow]:
    """Every trial's recorded row, by trial number (trials without one are skipped)."""
    rows = {}
    for t in study.get_trials(deepcopy=False):
        raw = t.user_attrs.get(ATTR)
        if isinstance(raw, Mapping):
            rows[t.number] = TrialRow.from_attr(t.number, raw)
    return rows


# A trial's packed validation scores: attributes `<SCORES_ATTR>.0`, `.1`, ... of at most
# SCORES_CHUNK characters each (a MySQL TEXT holds 64 KiB)
SCORES_ATTR = "autoembed.valid_scores"
SCORES_CHUNK = 60_000


def scores_attrs(scores: ValidScores) -> dict[str, str]:
    """The user attributes that store `scores` with their trial (`load_scores` reads them)."""
    text = scores.pack()
    return {f"{SCORES_ATTR}.{i // SCORES_CHUNK}": text[i:i + SCORES_CHUNK]
            for i in range(0, len(text), SCORES_CHUNK)}


def load_scores(study: optuna.Study) -> dict[int, ValidScores]:
    """Every trial's stored validation scores, by trial number."""
    from autoembed.selection import ValidScores

    out = {}
    for t in study.get_trials(deepcopy=False):
        parts, i = [], 0
        while isinstance(part := t.user_attrs.get(f"{SCORES_ATTR}.{i}"), str):
            parts.append(part)
            i += 1
        scores = ValidScores.unpack("".join(parts)) if parts else None
        if scores is not None:
            out[t.number] = scores
    return out


@dataclass(frozen=True)
class Recovery:
    """What `recover` did: the trials found RUNNING (now FAIL, their rows `interrupted`);
    of them, those re-queued, those stopped in their ask before any value was drawn, and
    those that were a retry already (not re-queued again)."""

    interrupted: tuple[int, ...]
    requeued: tuple[int, ...]
    in_ask: tuple[int, ...] = ()
    retried: tuple[int, ...] = ()

    def describe(self) -> str:
        if not self.interrupted:
            return "nothing was left running"
        parts = [f"{len(self.interrupted)} trial(s) left running by the stopped driver "
                 f"({_numbers(self.interrupted)}) recorded as interrupted (not counted)"]
        if self.requeued:
            parts.append(f"re-queued {len(self.requeued)} of them once (trial "
                         f"{_numbers(self.requeued)})")
        if self.in_ask:
            parts.append(f"trial {_numbers(self.in_ask)} stopped in its ask before any value "
                         "was drawn (the next ask replaces it)")
        if self.retried:
            parts.append(f"trial {_numbers(self.retried)} was a retry already (not "
                         "re-queued again)")
        return "; ".join(parts)


def _numbers(numbers: Sequence[int]) -> str:
    return ", ".join(map(str, numbers))


IN_ASK = ("interrupted: the driver stopped while this trial was asked and priced (it never "
          "trained)")


def recover(study: optuna.Study, storage: optuna.storages.BaseStorage, reason: str,
            config_for: Callable[[Mapping[str, Any]], Any] | None = None) -> Recovery:
    """Mark trials left RUNNING as FAIL in Optuna and `interrupted` in their rows (with
    `reason`; not counted), and enqueue each one's params once more (not a retry that
    trained; nothing for one stopped before any param was drawn). A trial stopped in its
    ask gets a row here, so every trial keeps one: its config rebuilt by `config_for`, else
    the study's first recorded config standing in (its params are what was drawn)."""
    from optuna.trial import TrialState

    study_id = storage.get_study_id_from_name(study.study_name)
    rows = load_rows(study)
    stand_in = next((rows[n].config for n in sorted(rows)), None)
    done: dict[str, list[int]] = {"interrupted": [], "requeued": [], "in_ask": [],
                                  "retried": []}
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, t.number)
        raw = dict(t.user_attrs.get(ATTR) or {})
        retry_of = raw.get("retry_of", t.user_attrs.get("retry_of"))
        in_ask = not raw
        # what was drawn, or what a re-queued trial stopped in its ask was given
        params = dict(t.params) or dict(t.system_attrs.get("fixed_params") or {})
        if in_ask:
            raw = _ask_row(params, retry_of, config_for, stand_in)
        # the row first: a finished trial can no longer be updated
        raw.update(status="interrupted", reason=IN_ASK if in_ask else reason,
                   interrupted=True)
        storage.set_trial_user_attr(trial_id, ATTR, raw)
        storage.set_trial_state_values(trial_id, TrialState.FAIL)
        done["interrupted"].append(t.number)
        if not params:
            done["in_ask"].append(t.number)
        elif retry_of is not None and not in_ask:  # a retry that trained: not again
            done["retried"].append(t.number)
        else:  # a trial, or a retry that never trained
            study.enqueue_trial(params, user_attrs={
                "retry_of": t.number if retry_of is None else retry_of},
                skip_if_exists=False)
            done["requeued"].append(t.number)
    return Recovery(**{k: tuple(v) for k, v in done.items()})


def _ask_row(params: Mapping[str, Any], retry_of: Any,
             config_for: Callable[[Mapping[str, Any]], Any] | None,
             stand_in: Any) -> dict[str, Any]:
    """The row of a trial stopped in its ask (see `recover`)."""
    from autoembed.config import EmbeddingConfig

    cfg = None
    if config_for is not None:
        try:
            cfg = config_for(params)
        except Exception:  # noqa: BLE001, S110 - not rebuildable: the stand-in below
            pass
    cfg = cfg or stand_in or EmbeddingConfig()
    return {"config": cfg.to_dict(), "params": dict(params), "estimate": {},
            "retry_of": retry_of}


@dataclass(frozen=True)
class StoredStudy:
    """A study's storage and the study of that name if it exists (`meta`: its stored
    settings, empty for a new study): opened, and loaded, once per search."""

    storage: Any  # optuna.storages.RDBStorage
    name: str
    where: str  # the storage for messages (password masked)
    existing: Any  # optuna.Study | None
    meta: dict[str, Any]

    @classmethod
    def open(cls, runs_dir: Path, url: str | None, name: str, resume: bool,
             flag: str = "--resume",
             fix: str = "drop --resume to start it, or give the --runs-dir or --storage it "
             "ran in") -> StoredStudy:
        """Open the storage; refuse a new search of an existing study, and a `resume` of one
        that does not exist (the message names `flag`, the option that needs it, and `fix`)."""
        where = storage_label(runs_dir, url)
        storage = open_storage(runs_dir, url)
        existing = find_study(storage, name)
        meta = existing.user_attrs.get(ATTR) if existing is not None else None
        meta = dict(meta) if isinstance(meta, Mapping) else {}
        if existing is not None and not resume:
            state = "finished" if meta.get("finished") else "unfinished"
            raise ConfigError(
                f"study '{name}' already exists in {where} ({state}, "
                f"{len(existing.trials)} trials); pass --resume to continue it, or choose "
                "another --study name")
        if resume and existing is None:
            known = sorted(s.study_name for s in storage.get_all_studies())
            raise ConfigError(
                f"{flag}: there is no study '{name}' in {where}"
                + (f" (studies there: {', '.join(known)})" if known else "")
                + f"; {fix}")
        return cls(storage, name, where, existing, meta)

    def resumed(self, sampler: optuna.samplers.BaseSampler) -> optuna.Study:
        """The existing study, as `open` loaded it, proposing with `sampler`."""
        assert self.existing is not None, "resumed() of a new study"
        self.existing.sampler = sampler
        return self.existing

    def check_still_new(self) -> None:
        """A new study: refuse if another search created it since `open` (under the lock)."""
        if self.existing is None and study_exists(self.storage, self.name):
            raise ConfigError(f"study '{self.name}' was just created by another search; pass "
                              "--resume to continue it, or choose another --study name")


def check_same(stored: Mapping[str, Any], key: str, now: Any, flag: str,
               fix: str = "drop the option") -> None:
    """A resumed study keeps what it was started with: refuse an option that changes it,
    naming `fix` (an option the command requires cannot be dropped: give the study's)."""
    if key in stored and stored[key] != now:
        raise ConfigError(
            f"{flag} differs from what study was started with ({key} = {stored[key]!r}); a "
            f"resumed search keeps its budget, space, objectives and data: {fix} or "
            "start a new --study")
