"""The replay table's file format: one gzip-compressed JSON-lines file per workload,
appended record by record (each record its own gzip member, so a killed writer loses at
most the record it was writing, and `read_records` drops that torn tail).

Records, told apart by `kind` (benchmarks/replay/README.md describes every field):

* `table`: one, first: the workload (space text, data, the search's budget and run
  settings), the table's budget and memory axis, how rows were sampled, and the commit,
  machine and load that created it;
* `row`: one per configuration, in row order: the Optuna params and config values, the
  priced estimate (`allocated_peak`, `device_total`, ...), whether it fits the table's
  budget, and what pricing it cost;
* `trial`: one per (row, seed) trained: the learning curve at the fine cadence (validation
  and test quality at every evaluation), the cost of every segment (wall and thread CPU
  seconds), the trial's fixed costs and the runner's own result fields, with the commit and
  load it ran under.

`Table.load(path)` reads a file back for a replay: rows by id, trials by (row, seed);
`Snapper` maps a proposal's Optuna params onto the nearest trained row (README, "How a
proposal maps onto a row").
"""

from __future__ import annotations

import gzip
import json
import math
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["append_record", "read_records", "repair", "Table", "Snapper", "data_identity",
           "check_data_file", "columns"]

KINDS = ("table", "row", "trial")


def append_record(path: Path, record: Mapping[str, Any]) -> None:
    """Append one record (its own gzip member: a torn write loses only this record)."""
    if record.get("kind") not in KINDS:
        raise ValueError(f"record kind {record.get('kind')!r} is not one of {KINDS}")
    line = json.dumps(record, sort_keys=True, allow_nan=True) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "at", encoding="utf-8") as f:
        f.write(line)


def _lines(path: Path) -> Iterator[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        yield from f


def read_records(path: Path) -> tuple[list[dict[str, Any]], bool]:
    """Every whole record of `path` in order, and whether a torn tail was dropped (a
    writer killed mid-record: a truncated gzip member or a partial last line)."""
    records: list[dict[str, Any]] = []
    torn = False
    try:
        for line in _lines(path):
            if not line.endswith("\n"):
                torn = True
                break
            records.append(json.loads(line))
    except (EOFError, gzip.BadGzipFile, zlib.error):
        torn = True
    return records, torn


def repair(path: Path) -> list[dict[str, Any]]:
    """The file's whole records; a torn tail is cut off by rewriting the file (atomically)."""
    records, torn = read_records(path)
    if torn:
        tmp = path.with_name(path.name + ".repair")
        tmp.unlink(missing_ok=True)
        for r in records:
            append_record(tmp, r)
        tmp.replace(path)
    return records


@dataclass
class Table:
    """One workload's table, read back: `header` (the `table` record), `rows` by row id,
    `trials[(row, seed)]`."""

    header: dict[str, Any]
    rows: dict[int, dict[str, Any]] = field(default_factory=dict)
    trials: dict[tuple[int, int], dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> Table:
        records, _ = read_records(path)
        return cls.of(records, str(path))

    @classmethod
    def of(cls, records: list[dict[str, Any]], where: str = "table") -> Table:
        if not records or records[0].get("kind") != "table":
            raise ValueError(f"{where}: the first record is not the table's header")
        t = cls(records[0])
        for r in records[1:]:
            if r["kind"] == "row":
                t.rows[int(r["row"])] = r
            elif r["kind"] == "trial":
                t.trials[(int(r["row"]), int(r["seed"]))] = r
        return t

    def without(self, param: str, value: Any) -> Table:
        """This table as if its space had no `value` among `param`'s choices: the rows that
        take it and their trials dropped, the choice taken out of the stored space (and of
        the `when` lists that name it); the header's name says so (`NAME without VALUE`)."""
        import yaml

        raw = yaml.safe_load(str(self.header["space_text"]))
        for spec in raw["params"].values():
            if value in spec.get("when", {}).get(param, []):
                spec["when"][param] = [v for v in spec["when"][param] if v != value]
        choices = raw["params"][param]["choices"]
        if value not in choices:
            raise ValueError(f"{self.header['name']}: {param} has no choice {value!r}")
        raw["params"][param]["choices"] = [v for v in choices if v != value]
        header = {**self.header, "name": f"{self.header['name']} without {value}",
                  "space_text": yaml.safe_dump(raw, sort_keys=False)}
        rows = {r: v for r, v in self.rows.items() if v["params"].get(param) != value}
        return Table(header, rows, {k: v for k, v in self.trials.items() if k[0] in rows})

    @classmethod
    def named(cls, tables_dir: Path, name: str) -> Table:
        """`NAME` or `NAME without VALUE` (of the table_optimizer: `without`)."""
        base, _, value = name.partition(" without ")
        table = cls.load(tables_dir / f"{base}.jsonl.gz")
        return table.without("table_optimizer", value) if value else table

    def seeds(self, row: int) -> list[int]:
        """The training seeds row `row` was trained with."""
        return sorted(s for (r, s) in self.trials if r == row)

    def space(self, data_file: str | Path | None = None) -> Any:
        """The workload's search space, as the table stored it. A table made from a data
        file names it by content (`data_identity`, `sha256-HEX.csv`): given `data_file`, the
        space reads it once its sha256 is checked (ConfigError, one line, when the bytes
        differ); without, its params are right but its data cannot be loaded."""
        import yaml

        from autoembed.space import parse_space

        text = str(self.header["space_text"])
        raw = yaml.safe_load(text)
        if self.from_file and data_file is not None:
            path = check_data_file(self.header, data_file)
            raw["data"] = {**raw["data"], "name": str(path)}
        return parse_space(raw, str(self.header["space_source"]), text)

    @property
    def from_file(self) -> bool:
        """Whether the table was made from a data file (not built-in data)."""
        return (self.header.get("data_identity") or {}).get("kind") == "file"


def columns(given: list[str] | None) -> tuple[str, ...] | None:
    """`--categorical` as a search takes it (`user,item`) or as words (`user item`)."""
    if given is None:
        return None
    return tuple(c.strip() for g in given for c in g.split(",") if c.strip())


def file_sha256(path: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def data_identity(spec: Any) -> dict[str, Any]:
    """The data a table was made from, named by content, not by path: a file's sha256 (of
    its bytes) with the column options; a built-in's sha256 of its spec and the version of
    the package that ships it (synthetic data: of its spec alone)."""
    import hashlib
    from importlib import metadata

    from autoembed.data.spec import suffix_of
    from autoembed.pipeline.builtin import DATA_PACKAGES

    options = {k: v for k, v in spec.to_dict().items() if k != "name"}
    if spec.is_file:
        digest = file_sha256(Path(spec.name))
        return {"kind": "file", "sha256": digest, "suffix": suffix_of(spec.name),
                "options": options}
    package = DATA_PACKAGES.get(spec.name)
    version = None
    if package is not None:
        try:
            version = f"{package} {metadata.version(package)}"
        except metadata.PackageNotFoundError:
            version = f"{package} (not installed)"
    ident = {"kind": spec.name, "options": options, "package": version}
    digest = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()
    return {**ident, "sha256": digest}


def check_data_file(header: Mapping[str, Any], data_file: str | Path | None) -> Path:
    """`data_file`, resolved, when its bytes are those the table was made from."""
    from autoembed.errors import ConfigError

    ident = header["data_identity"]
    name, digest = header["name"], ident["sha256"]
    if data_file is None:
        raise ConfigError(f"table {name} was made from a data file (sha256 {digest}): give "
                          "it with --data FILE")
    path = Path(data_file).expanduser().resolve()
    if not path.is_file():
        raise ConfigError(f"--data {data_file}: no such file")
    got = file_sha256(path)
    if got != digest:
        raise ConfigError(f"--data {data_file}: sha256 {got} is not that of the data table "
                          f"{name} was made from ({digest}); give that file")
    return path


class Snapper:
    """A proposal's Optuna params -> the nearest row trained (complete) at `seed`: each
    param normalized to [0, 1] by its own Optuna distribution (log scale where it is log), a
    categorical mismatch counting 1, a param compared only where both have it (conditional
    params), Euclidean distance, ties to the lower row id."""

    def __init__(self, table: Table, seed: int = 0) -> None:
        from autoembed.pipeline.optuna_space import distributions

        self.dists = distributions(table.space())
        self.rows = sorted(r for (r, s), tr in table.trials.items()
                           if s == seed and tr["status"] == "complete")
        self.params = {r: table.rows[r]["params"] for r in self.rows}
        if not self.rows:
            raise ValueError(f"no complete trial at seed {seed} to snap to")
        self._columns = {name: self._column(name) for name in self.dists}

    def _column(self, name: str) -> tuple[Any, Any, dict[Any, int] | None]:
        """The rows' values of one param, for `nearest`: (values, present), values on the
        [0, 1] scale of `_gap` (numeric) or as codes (categorical, with the code table)."""
        import numpy as np

        have = [name in self.params[r] for r in self.rows]
        raw = [self.params[r].get(name) for r in self.rows]
        if not hasattr(self.dists[name], "low"):
            codes: dict[Any, int] = {}
            col = [codes.setdefault(v, len(codes)) if h else -1
                   for v, h in zip(raw, have, strict=True)]
            return np.array(col, dtype=np.int64), np.array(have), codes
        col = [self._scaled(name, v) if h else 0.0 for v, h in zip(raw, have, strict=True)]
        return np.array(col, dtype=np.float64), np.array(have), None

    def _scaled(self, name: str, x: Any) -> float:
        d = self.dists[name]
        lo, hi = float(d.low), float(d.high)
        if d.log:
            x, lo, hi = math.log(x), math.log(lo), math.log(hi)
        return 0.0 if hi == lo else (float(x) - lo) / (hi - lo)

    def distance(self, a: Mapping[str, Any], b: Mapping[str, Any]) -> float:
        total = 0.0
        for name in set(a) & set(b):
            total += self._gap(name, a[name], b[name]) ** 2
        return math.sqrt(total)

    def _gap(self, name: str, x: Any, y: Any) -> float:
        d = self.dists[name]
        if not hasattr(d, "low"):  # categorical
            return 0.0 if x == y else 1.0
        lo, hi = float(d.low), float(d.high)
        if d.log:
            x, y, lo, hi = math.log(x), math.log(y), math.log(lo), math.log(hi)
        return 0.0 if hi == lo else abs(float(x) - float(y)) / (hi - lo)

    def nearest(self, params: Mapping[str, Any]) -> tuple[int, float]:
        """(row, distance) of the nearest trained row: `distance` to every row at once."""
        import numpy as np

        total = np.zeros(len(self.rows))
        for name, x in params.items():
            if name not in self._columns:
                continue
            col, have, codes = self._columns[name]
            if codes is not None:
                gap = (col != codes.get(x, -2)).astype(np.float64)
            else:
                gap = np.abs(col - self._scaled(name, x))
            total += np.where(have, gap * gap, 0.0)
        i = int(np.argmin(total))  # the first of equal minima: the lowest row id
        return self.rows[i], math.sqrt(float(total[i]))
