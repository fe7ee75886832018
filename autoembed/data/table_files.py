"""Reading user tables (CSV, TSV, Parquet) into pandas, with one-line `DataError`s."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autoembed.data.spec import CSV_SUFFIXES, FILE_SUFFIXES, PARQUET_SUFFIXES, suffix_of
from autoembed.errors import DataError, first_line

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["read_table", "read_as_written"]

SEPARATORS = (",", "\t", ";", "|")  # what a delimited file's header is split on
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")  # spreadsheets' "Unicode text" starts with one
FLOAT_EXACT = 2**53  # float64 holds every integer below this, and not all above


def read_table(path: str | Path) -> pd.DataFrame:
    """The file as a DataFrame with a fresh RangeIndex, its column names stripped of
    surrounding spaces (` Item Id ` is `Item Id`); a CSV/TSV whose expected separator leaves
    one column is read with the one its header shows; text is UTF-8, or UTF-16 with its
    byte-order mark. Errors name the file and the fix."""
    import pandas as pd

    p = Path(path).expanduser()
    suffix = suffix_of(p.name)
    if not suffix:
        raise DataError(
            f"data file '{p}' has an unknown extension '{''.join(p.suffixes)}'; "
            f"use one of {', '.join(FILE_SUFFIXES)}"
        )
    if not p.exists():
        raise DataError(f"data file '{p}' does not exist; check the path")
    if not p.is_file():
        raise DataError(f"data file '{p}' is not a file; give the path of a {suffix} file")
    if p.stat().st_size == 0:
        raise DataError(f"data file '{p}' is empty (0 bytes); give a file with a header and rows")
    try:
        if suffix in PARQUET_SUFFIXES:
            frame = pd.read_parquet(p)
            big = _inexact_ints(frame)
            if big:  # an integer column with nulls, read as float64: read it as integers
                exact = pd.read_parquet(p, columns=[str(frame.columns[i]) for i in big],
                                        dtype_backend="numpy_nullable")
                for j, i in enumerate(big):
                    frame.isetitem(i, exact.iloc[:, j].astype(object))
        else:
            frame = _read_delimited(p, "," if suffix in CSV_SUFFIXES else "\t")
    except DataError:
        raise
    except pd.errors.EmptyDataError:
        raise DataError(f"data file '{p}' is empty; give a file with a header and rows") from None
    except UnicodeDecodeError as e:
        raise DataError(
            f"data file '{p}' is not UTF-8 text (it has the byte {e.object[e.start]:#04x}); "
            f"save it as UTF-8 (or UTF-16 with its byte-order mark) and give it again"
        ) from None
    except ImportError as e:
        raise DataError(
            f"data file '{p}' needs a Parquet engine: pip install pyarrow ({e})"
        ) from None
    except Exception as e:  # pyarrow, zlib, csv parser and decoding errors all land here
        kind = "Parquet" if suffix in PARQUET_SUFFIXES else "CSV"
        raise DataError(
            f"data file '{p}' cannot be read as {kind}: {first_line(e)}; "
            f"check that the file is complete and really {suffix}"
        ) from None
    if len(frame) == 0:
        raise DataError(f"data file '{p}' has a header but no data rows; add rows")
    frame.columns = [str(c).strip() for c in frame.columns]
    if frame.columns.duplicated().any():
        dup = str(frame.columns[frame.columns.duplicated()][0])
        raise DataError(f"data file '{p}' has the column '{dup}' twice; rename one")
    return frame.reset_index(drop=True)


@dataclass(frozen=True)
class _Layout:
    """How a delimited file is read: its separator, encoding and the lines before its
    header (a spreadsheet's `sep=;` line)."""

    sep: str
    encoding: str
    skip: int

    def read(self, p: Path, **kw: Any) -> pd.DataFrame:
        import pandas as pd

        return pd.read_csv(p, sep=self.sep, encoding=self.encoding, skiprows=self.skip, **kw)


def _layout(p: Path, sep: str) -> _Layout:
    """The layout of a CSV/TSV file: the expected separator `sep`, else the one its header
    shows when `sep` leaves a single column (`;`-separated CSV, a tab-separated `.csv`), or
    the one a first line `sep=;` names (a spreadsheet's hint line, then skipped)."""
    with p.open("rb") as f:  # a compressed file starts with its format's magic, not a BOM
        start = f.read(4096)
    encoding = "utf-16" if start[:2] in UTF16_BOMS else "utf-8"
    # the first line decoded whole (a UTF-16 line ends in two bytes: b'\n\0')
    first = start.decode(encoding, "replace").lstrip("\ufeff").split("\n", 1)[0].strip()
    # a spreadsheet's 'sep=;' line (Excel writes and reads it) names the separator
    skip = int(len(first) == 5 and first.startswith("sep=") and first[4] in SEPARATORS)
    layout = _Layout(first[4] if skip else sep, encoding, skip)
    columns = layout.read(p, nrows=0).columns
    if len(columns) == 1:
        header = str(columns[0])
        found = [(header.count(s), s) for s in SEPARATORS if s != layout.sep and s in header]
        if found:
            return _Layout(max(found)[1], encoding, skip)
    return layout


def _read_delimited(p: Path, sep: str) -> pd.DataFrame:
    """A CSV/TSV file (`_layout` says how it is read), its values typed as pandas infers
    them."""
    import warnings

    import pandas as pd

    layout = _layout(p, sep)
    with warnings.catch_warnings():  # a row with a field more than the header names
        warnings.filterwarnings("error", "Length of header", pd.errors.ParserWarning)
        try:  # (pandas took the first field as the index, shifting every column)
            frame = layout.read(p, low_memory=False, index_col=False)
        except pd.errors.ParserWarning:
            names = len(layout.read(p, nrows=0).columns)
            raise DataError(
                f"data file '{p}' has rows with more fields than the {names} names of its "
                f"header; name every column in the header, or quote the values that hold "
                f"the separator '{layout.sep}'") from None
    # the header as written: pandas renames a repeated name ('user', 'user.1'), which
    # read_table refuses instead; an empty name keeps pandas' 'Unnamed: N'
    head = layout.read(p, header=None, nrows=1, dtype=str, keep_default_na=False).iloc[0]
    if len(head) == frame.shape[1]:
        frame.columns = [h if h.strip() else c
                         for h, c in zip(head.tolist(), frame.columns, strict=True)]
    # integers beyond 2**53 as written: the digits are the keys (`vocab.cell_key`)
    _as_text(p, layout, frame, _inexact_ints(frame))
    return frame


def read_as_written(path: str | Path, frame: pd.DataFrame, columns: Sequence[str]) -> None:
    """Replace `columns` of `frame` (read_table's reading of the CSV/TSV file `path`) by
    their cells' text as written (strings; missing cells stay missing), where pandas read
    numbers or booleans: a categorical value is a label, so '007' stays '007' (a zip
    code), not the number 7. A Parquet file's columns keep the types it stores."""
    p = Path(path).expanduser()
    suffix = suffix_of(p.name)
    if suffix in PARQUET_SUFFIXES:
        return
    from pandas.api import types as ptypes

    typed = [frame.columns.get_loc(c) for c in columns
             if c in frame.columns and not ptypes.is_string_dtype(frame[c])]
    if typed:
        _as_text(p, _layout(p, "," if suffix in CSV_SUFFIXES else "\t"), frame, typed)


def _as_text(p: Path, layout: _Layout, frame: pd.DataFrame, positions: list[int]) -> None:
    """The columns at `positions` of `frame` replaced by their cells as written (str)."""
    if positions:
        text = layout.read(p, usecols=positions, dtype=str, low_memory=False)
        for j, i in enumerate(sorted(positions)):
            frame.isetitem(i, text.iloc[:, j])


def _inexact_ints(frame: pd.DataFrame) -> list[int]:
    """Positions of the columns of whole numbers that float64 cannot hold exactly (beyond
    2**53, e.g. 64-bit hashed ids): what a reader gives an integer column with missing
    values, where distinct ids would round to one."""
    import numpy as np

    found = []
    for i in range(frame.shape[1]):
        s = frame.iloc[:, i]
        if s.dtype == np.float64 and s.isna().any():
            present = s.dropna().to_numpy()
            if (present.size and np.abs(present).max() >= FLOAT_EXACT
                    and np.all(np.mod(present, 1) == 0)):
                found.append(i)
    return found
