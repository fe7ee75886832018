"""Files a user keeps: written whole or not at all, with the user's umask, and a set of
files published as one unit.

* `atomic_write(path, write)`: `write(fh)` into a new file beside `path` (`.NAME.tmp-XXXX`),
  fsync, then `os.replace` over `path`. The file is created with mode 0666 less the umask
  (what `open()` makes), never mkstemp's 0600.
* `publish(directory, files)`: the files of one run (model.pt and metrics.json) go into a
  new folder `.result-TOKEN/`, which the symlink `result` then points at (`os.replace` of a
  new link: the one step that publishes); `NAME -> result/NAME` links stand beside it. A
  reader sees the old run's files or the new run's, never one of each, whatever step a kill
  stops it at (`PUBLISH_STEPS`; `tests/test_train_publish.py` kills it at each).
* `sweep(directory)`: removes what a killed writer left (temporary files of the names
  given, unpublished `.result-*` folders); `publish` and `autoembed train` call it.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import IO, Any

__all__ = ["atomic_write", "atomic_write_text", "publish", "published", "sweep",
           "PUBLISH_STEPS", "RESULT_LINK", "copy_tree_new"]

RESULT_LINK = "result"  # the symlink naming the published run's folder
_RUN_PREFIX = ".result-"
_TMP = ".tmp-"
# publish's steps, in order; `after_step(name)` runs after each (tests kill the process there)
PUBLISH_STEPS = ("staged", "written", "linked", "swapped", "names", "cleaned")
after_step: Callable[[str], None] | None = None


def _step(name: str) -> None:
    if after_step is not None:
        after_step(name)


def _temp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}{_TMP}{secrets.token_hex(6)}")


def _write_new(path: Path, write: Callable[[IO[bytes]], Any]) -> None:
    """`write(fh)` into the new file `path` (it must not exist; mode 0666 less the umask),
    flushed to disk; removed if anything fails."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    try:
        with os.fdopen(os.open(path, flags, 0o666), "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        path.unlink(missing_ok=True)
        raise


def atomic_write(path: str | Path, write: Callable[[IO[bytes]], Any]) -> Path:
    """Replace `path` by what `write(fh)` writes, atomically (see the module docstring)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_name(p)
    _write_new(tmp, write)
    try:
        os.replace(tmp, p)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return p


def atomic_write_text(path: str | Path, text: str) -> Path:
    """`atomic_write` of `text` (UTF-8, newlines as given)."""
    return atomic_write(path, lambda fh: fh.write(text.encode("utf-8")))


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def published(directory: str | Path) -> Path | None:
    """The folder of the run `directory` publishes (its `result` link's target), or None."""
    link = Path(directory) / RESULT_LINK
    if not link.is_symlink():
        return None
    target = link.parent / os.readlink(link)
    return target if target.is_dir() else None


def publish(directory: str | Path, files: Mapping[str, Callable[[IO[bytes]], Any]]) -> Path:
    """Write `files` (name -> writer) as one run of `directory` and publish it (see the
    module docstring); returns the run's folder. The previous run's folder is removed."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    sweep(d, files)
    old = published(d)
    run = d / f"{_RUN_PREFIX}{secrets.token_hex(6)}"
    run.mkdir()
    _step("staged")
    for name, write in files.items():
        _write_new(run / name, write)
    _fsync_dir(run)
    _step("written")
    tmp = _temp_name(d / RESULT_LINK)
    os.symlink(run.name, tmp)
    _step("linked")
    os.replace(tmp, d / RESULT_LINK)  # the publishing step
    _fsync_dir(d)
    _step("swapped")
    _link_names(d, files)
    _step("names")
    if old is not None and old != run:
        shutil.rmtree(old, ignore_errors=True)
    _step("cleaned")
    return run


def _link_names(d: Path, names: Iterable[str]) -> None:
    """`NAME -> result/NAME` for each name. A plain file of that name (a run written before
    runs were published as one unit) goes first, all of them before any link is made, so
    no moment shows one run's file beside another's."""
    names = list(names)
    wanted = {n: f"{RESULT_LINK}/{n}" for n in names}
    for n in names:
        p = d / n
        if p.exists() and not (p.is_symlink() and os.readlink(p) == wanted[n]):
            p.unlink()
    for n in names:
        p = d / n
        if not p.is_symlink():
            tmp = _temp_name(p)
            os.symlink(wanted[n], tmp)
            os.replace(tmp, p)


def sweep(directory: str | Path, names: Iterable[str] = ()) -> None:
    """Remove what a killed writer left in `directory`: temporary files of `names` and of
    the `result` link, and `.result-*` folders the link does not name. Repairs the
    `NAME -> result/NAME` links (of the names the published run holds) of a publish
    stopped after its swap."""
    d = Path(directory)
    if not d.is_dir():
        return
    names = list(names)
    keep = published(d)
    prefixes = tuple(f".{n}{_TMP}" for n in (*names, RESULT_LINK))
    for p in d.iterdir():
        if p.name.startswith(prefixes):
            p.unlink(missing_ok=True)
        elif p.name.startswith(_RUN_PREFIX) and p.is_dir() and not p.is_symlink() \
                and p != keep:
            shutil.rmtree(p, ignore_errors=True)
    if keep is not None:  # the names the published run holds
        _link_names(d, [n for n in names if (keep / n).is_file()])


def _copier(src: Path) -> Callable[[IO[bytes]], None]:
    def copy(fh: IO[bytes]) -> None:
        with src.open("rb") as src_fh:
            shutil.copyfileobj(src_fh, fh)
    return copy


def copy_tree_new(src: str | Path, dst: str | Path) -> Path:
    """Copy the folder `src` to `dst` (which must not exist) as one step: files into a
    temporary folder beside it (modes from the umask, not from `src`), then renamed."""
    s, t = Path(src), Path(dst)
    tmp = _temp_name(t)
    tmp.mkdir(parents=True)
    try:
        for f in s.rglob("*"):
            rel = tmp / f.relative_to(s)
            if f.is_dir():
                rel.mkdir(parents=True, exist_ok=True)
            else:
                rel.parent.mkdir(parents=True, exist_ok=True)
                _write_new(rel, _copier(f))
        os.rename(tmp, t)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return t
