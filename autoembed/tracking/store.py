"""Where runs are recorded: resolving a tracking URI and checking a server answers, with no
MLflow import (a wrong URI fails in seconds, before Ray or MLflow load).

* default: the embedded store `sqlite:///<runs-dir>/mlflow.db`, artifacts in
  `<runs-dir>/mlartifacts/<study>/` (also for a database URI);
* `--tracking-uri URI` (or env MLFLOW_TRACKING_URI): an http(s) server is probed at
  `<uri>/health` (3 s; unreachable: `TrackingUnreachableError`, exit 2); a database URI
  (postgresql://, mysql://) is connected to once with a 10 s timeout;
* `none`: record nothing.
"""

from __future__ import annotations

import os
import re
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from autoembed.errors import AutoembedError, ConfigError

__all__ = ["DB_FILE", "ARTIFACT_DIR", "HEALTH_TIMEOUT_S", "TrackingStore",
           "TrackingUnreachableError", "TrackingError", "resolve_store", "default_store_uri",
           "check_reachable", "check_database", "DATABASE_SCHEMES", "masked"]

DB_FILE = "mlflow.db"
ARTIFACT_DIR = "mlartifacts"
HEALTH_TIMEOUT_S = 3.0
# Database URIs MLflow's SQLAlchemy store takes besides SQLite (a team's shared store).
DATABASE_SCHEMES = ("postgresql", "mysql", "mssql")
DB_CONNECT_TIMEOUT_S = 10  # seconds for one connection attempt to a team database


class TrackingUnreachableError(ConfigError):
    """The tracking server named by the user does not answer (exit status 2)."""


class TrackingError(AutoembedError):
    """The tracking store answered but failed, e.g. a corrupt database (exit status 1)."""


@dataclass(frozen=True)
class TrackingStore:
    """A resolved tracking destination. kind: "none", "embedded" (a SQLite file), "http"
    (an MLflow server) or "other" (any other MLflow URI, e.g. PostgreSQL); artifact_root:
    where artifacts go (None: the server or the URI decides)."""

    uri: str
    kind: str
    artifact_root: Path | None = None

    @property
    def is_database(self) -> bool:
        """A database server (PostgreSQL, MySQL, SQL Server): a team's shared store."""
        scheme = self.uri.split("://", 1)[0].split("+", 1)[0].lower()
        return self.kind == "other" and scheme in DATABASE_SCHEMES

    @property
    def db_path(self) -> Path | None:
        """The SQLite file of an embedded store."""
        if self.kind != "embedded":
            return None
        return Path(self.uri.removeprefix("sqlite:///"))


def default_store_uri(runs_dir: Path) -> str:
    return f"sqlite:///{Path(runs_dir).absolute() / DB_FILE}"


def resolve_store(tracking_uri: str | None, runs_dir: Path) -> TrackingStore:
    """The store for `tracking_uri`: None/"" means env MLFLOW_TRACKING_URI, else the default
    embedded store under `runs_dir`; "none" records nothing."""
    uri = (tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or "").strip()
    runs = Path(runs_dir).absolute()
    if uri == "":
        return TrackingStore(default_store_uri(runs), "embedded", runs / ARTIFACT_DIR)
    if uri.lower() == "none":
        return TrackingStore("none", "none")
    scheme = uri.split("://", 1)[0].lower() if "://" in uri else ""
    if scheme == "sqlite" and uri.startswith("sqlite:///") and ":memory:" not in uri:
        # any SQLite file: artifacts beside it, never in the working directory
        db = Path(uri.removeprefix("sqlite:///")).absolute()
        return TrackingStore(f"sqlite:///{db}", "embedded", db.parent / ARTIFACT_DIR)
    if scheme in ("http", "https"):
        return TrackingStore(uri.rstrip("/"), "http")
    if scheme.split("+", 1)[0] in DATABASE_SCHEMES:
        # artifacts beside the driver's runs, never in whatever directory it was started from
        return TrackingStore(uri, "other", runs / ARTIFACT_DIR)
    if scheme in ("", "file") and os.environ.get("MLFLOW_ALLOW_FILE_STORE", "").lower() not in (
        "true", "1",
    ):
        path = Path(uri.removeprefix("file://")).absolute()
        raise ConfigError(
            f"tracking URI '{uri}' is an MLflow file store, which MLflow 3 refuses unless "
            f"MLFLOW_ALLOW_FILE_STORE=true; use a database such as "
            f"sqlite:///{path / DB_FILE}, an http(s) server, or 'none'")
    return TrackingStore(uri, "other")


def check_reachable(uri: str, timeout: float = HEALTH_TIMEOUT_S, *,
                    optional: bool = True) -> None:
    """Raise `TrackingUnreachableError` unless the MLflow server at `uri` answers `/health`
    within `timeout` seconds; a 4xx answer counts as reachable (MLflow will say more).
    `optional`: the caller can do without a store, so `--tracking-uri none` is a fix."""
    url = f"{uri.rstrip('/')}/health"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - http(s) only
            resp.read(64)
        return
    except urllib.error.HTTPError as e:
        if e.code < 500:
            return
        cause = f"HTTP {e.code} {e.reason}"
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        cause = str(reason) or type(reason).__name__
    raise TrackingUnreachableError(
        f"MLflow tracking server '{uri}' is not reachable ({url}: {cause}, timeout "
        f"{timeout:g} s); start it (e.g. `mlflow server --host 127.0.0.1 --port 5000`)"
        + (", fix --tracking-uri / MLFLOW_TRACKING_URI, or pass --tracking-uri none"
           if optional else " or fix --tracking-uri / MLFLOW_TRACKING_URI"))


def masked(uri: str) -> str:
    """`uri` with any password replaced by ***."""
    return re.sub(r"(://[^:/@]+:)[^/]*@", r"\1***@", uri)


def check_database(uri: str, timeout: int = DB_CONNECT_TIMEOUT_S) -> None:
    """Connect once to a database tracking store: a missing driver or a server that does
    not answer is one clear line (exit status 2) in seconds, with the password masked."""
    scheme = uri.split("://", 1)[0].split("+", 1)[0].lower()
    import sqlalchemy

    args = {"connect_timeout": timeout} if scheme in ("postgresql", "mysql") else {}
    try:
        engine = sqlalchemy.create_engine(uri, connect_args=args)
    except ImportError:
        raise ConfigError(
            f"tracking URI '{masked(uri)}': the database driver for '{scheme}' is not "
            "installed; pip install 'autoembed[team]' (psycopg for PostgreSQL)") from None
    except Exception as e:  # noqa: BLE001 - SQLAlchemy's ArgumentError etc.
        raise ConfigError(f"tracking URI '{masked(uri)}' is not a database URL SQLAlchemy "
                          f"takes ({type(e).__name__}); use e.g. "
                          "postgresql://user:password@host:5432/mlflow") from None
    try:
        with engine.connect():
            pass
    except Exception as e:  # noqa: BLE001 - any connection fault is one clear line
        first = (str(getattr(e, "orig", None) or e).strip().splitlines() or [""])[0]
        raise TrackingUnreachableError(
            f"MLflow database '{masked(uri)}' cannot be reached ({first[:200]}); check the "
            "URL, that the server runs and the database exists (createdb), or pass "
            "--tracking-uri none") from None
    finally:
        engine.dispose()
