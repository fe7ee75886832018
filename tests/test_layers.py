"""The layer rule: autoembed's modules import one way, and never in a cycle; each package sits
in one layer and no two modules share a name.

docs/ARCHITECTURE.md states the layer order (its table between the `layers:` markers, bottom
row first); this test reads it there, so the document is the one statement of the rule. It
walks every module's AST and counts every import: at module level, inside functions, under
`if TYPE_CHECKING`, relative ones, `from pkg import submodule` (an edge to the submodule),
and string literals naming a module (`importlib.import_module("autoembed.x")`, a lazy
name -> module map). It fails on an import from a lower layer to a higher one, on any cycle
between modules, and on a module the table does not place. It also fails on a package whose
modules (subpackages included) sit in more than one layer, and on a module file name used in
two packages, unless ARCHITECTURE.md's marked lists name the package or the name and say why.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "ARCHITECTURE.md"
BEGIN, END = "<!-- layers: bottom to top -->", "<!-- /layers -->"
SPANS = ("<!-- packages across layers -->", "<!-- /packages across layers -->")
SAME_NAMES = ("<!-- same-name modules -->", "<!-- /same-name modules -->")

# Offending edges (importer, imported) in other owners' code, each to be removed by its
# owner (issue 24). The test fails when one no longer offends, so this set only shrinks.
KNOWN_VIOLATIONS: frozenset[tuple[str, str]] = frozenset({
})


@dataclass(frozen=True)
class Edge:
    """`src` imports `dst` at `where` (file:line)."""

    src: str
    dst: str
    where: str


def read_layers(text: str) -> list[list[str]]:
    """The module names of each layer row between the markers, bottom row first."""
    if BEGIN not in text or END not in text:
        raise AssertionError(f"the layer table's markers {BEGIN} ... {END} are missing")
    body = text.split(BEGIN, 1)[1].split(END, 1)[0]
    rows = [line for line in body.splitlines() if line.startswith("|")]
    layers = [re.findall(r"`([\w.*]+)`", row.split("|")[-2]) for row in rows]
    return [names for names in layers if names]


def find_modules(root: Path, package: str) -> dict[str, Path]:
    """Every module of `package` under `root`: dotted name -> file (a package is its
    __init__.py)."""
    found = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _targets(node: ast.AST, module: str, path: Path, mods: Mapping[str, Path]) -> list[str]:
    """The modules `node` imports, as names that may still need resolving."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            here = module.split(".") if _is_package(path) else module.split(".")[:-1]
            here = here[: len(here) - (node.level - 1)]
            base = ".".join(here + ([node.module] if node.module else []))
        return [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
    if (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
            and getattr(node.func, "attr", getattr(node.func, "id", "")) in _IMPORTERS):
        return [str(node.args[0].value)]
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and "." in node.value:
        return [node.value] if node.value in mods else []  # a lazy map {"name": "pkg.mod"}
    return []


_IMPORTERS = ("import_module", "__import__")


def _logger_names(tree: ast.AST) -> set[int]:
    """ids of the string constants passed to getLogger (a logger's name is no import)."""
    return {id(arg) for call in ast.walk(tree) if isinstance(call, ast.Call)
            and getattr(call.func, "attr", getattr(call.func, "id", "")) == "getLogger"
            for arg in call.args}


def _resolve(name: str, mods: Mapping[str, Path]) -> str | None:
    """The module an import of `name` runs: `name`, else its nearest enclosing module."""
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def find_imports(root: Path, mods: Mapping[str, Path]) -> list[Edge]:
    """Every import edge between the modules `mods`, wherever in a module it is made."""
    edges: dict[Edge, None] = {}  # ordered, each import once
    for module, path in mods.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        loggers = _logger_names(tree)
        for node in ast.walk(tree):
            if id(node) in loggers:
                continue
            for target in _targets(node, module, path, mods):
                dst = _resolve(target, mods)
                if dst is not None and dst != module:
                    where = f"{path.relative_to(root)}:{getattr(node, 'lineno', 0)}"
                    edges[Edge(module, dst, where)] = None
    return list(edges)


def place(module: str, layers: list[list[str]]) -> int | None:
    """The layer (row index) of `module`: its own entry, else the nearest `pkg.*` entry."""
    best: tuple[int, int] | None = None  # (matched length, layer)
    for i, names in enumerate(layers):
        for name in names:
            if name.endswith(".*"):
                pkg = name[:-2]
                hit = module == pkg or module.startswith(pkg + ".")
                length = len(pkg)
            else:
                hit, length = module == name, len(name) + 1  # an exact entry beats pkg.*
            if hit and (best is None or length > best[0]):
                best = (length, i)
    return None if best is None else best[1]


def cycles(pairs: Iterable[tuple[str, str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    graph: dict[str, set[str]] = {}
    for a, b in pairs:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def offending(edges: list[Edge], layer: Mapping[str, int | None],
              excused: frozenset[tuple[str, str]] = frozenset()) -> dict[tuple[str, str], str]:
    """(src, dst) -> why, for each upward edge and each edge inside a cycle, leaving out
    the `excused` pairs (and the cycles only they close). A cycle through several layers has
    an upward edge, reported as such; so the cycles looked for are those within a layer."""
    bad: dict[tuple[str, str], str] = {}
    for e in edges:
        lo, hi = layer[e.src], layer[e.dst]
        if (e.src, e.dst) not in excused and lo is not None and hi is not None and lo < hi:
            bad[(e.src, e.dst)] = f"upward (layer {lo + 1} -> {hi + 1})"
    pairs = {(e.src, e.dst) for e in edges
             if layer[e.src] is not None and layer[e.src] == layer[e.dst]} - excused
    for component in cycles(pairs):
        inside = {(a, b) for a, b in pairs if a in component and b in component}
        for a, b in sorted(inside):
            loop = " -> ".join([a, *shortest_path(b, a, inside)])
            bad.setdefault((a, b), f"in a cycle: {loop}")
    return bad


def shortest_path(start: str, goal: str, pairs: set[tuple[str, str]]) -> list[str]:
    """The modules from `start` to `goal` along `pairs`, both ends included (breadth first)."""
    came: dict[str, str | None] = {start: None}
    frontier = [start]
    while goal not in came:
        reached = []
        for a, b in sorted(pairs):
            if a in frontier and b not in came:
                came[b] = a
                reached.append(b)
        frontier = reached
    path: list[str] = []
    at: str | None = goal
    while at is not None:
        path.append(at)
        at = came[at]
    return path[::-1]


def check(root: Path, package: str, doc: str,
          known: frozenset[tuple[str, str]] = frozenset()) -> list[str]:
    """Every breach of the layer rule in `package` under `root`, one line each."""
    layers = read_layers(doc)
    mods = find_modules(root, package)
    problems = [f"{mods[m].relative_to(root)}: module {m} is in no row of the layer table"
                for m in mods if place(m, layers) is None]
    entries = [n for names in layers for n in names]
    problems += [f"layer table: {n} names no module" for n in entries
                 if not any(m == n.removesuffix(".*") for m in mods)]
    layer = {m: place(m, layers) for m in mods}
    edges = find_imports(root, mods)
    for (src, dst), why in sorted(offending(edges, layer, known).items()):
        problems += [f"{e.where}: {src} -> {dst}: {why}" for e in edges
                     if (e.src, e.dst) == (src, dst)]
    still = offending(edges, layer)
    problems += [f"KNOWN_VIOLATIONS: {src} -> {dst} no longer offends; remove it"
                 for src, dst in sorted(known - still.keys())]
    return problems


def read_reasons(text: str, markers: tuple[str, str]) -> dict[str, str]:
    """The `* `name`: why` entries between `markers`: name -> why (a why is required)."""
    begin, end = markers
    if begin not in text or end not in text:
        raise AssertionError(f"the list's markers {begin} ... {end} are missing")
    body = text.split(begin, 1)[1].split(end, 1)[0]
    found = {}
    for line in body.splitlines():
        entry = re.match(r"\* `([\w.]+)`: *(.*)", line.strip())
        if entry:
            if not entry.group(2).strip():
                raise AssertionError(f"{entry.group(1)}: the list says no why")
            found[entry.group(1)] = entry.group(2)
    return found


def split_packages(root: Path, package: str, doc: str) -> list[str]:
    """Each package below `package` (its subpackages with it) whose modules sit in more than
    one layer, unless the doc's list names it; each listed package that sits in one."""
    layers, mods = read_layers(doc), find_modules(root, package)
    allowed = read_reasons(doc, SPANS)
    problems = []
    for pkg in sorted(m for m, path in mods.items() if _is_package(path) and m != package):
        members = sorted(m for m in mods if m == pkg or m.startswith(pkg + "."))
        spans: dict[int, list[str]] = {}
        for m in members:
            if (at := place(m, layers)) is not None:
                spans.setdefault(at, []).append(m)
        if len(spans) > 1 and pkg not in allowed:
            where = "; ".join(f"layer {i + 1}: {', '.join(ms)}" for i, ms in sorted(spans.items()))
            problems.append(f"package {pkg} spans layers ({where}): move modules, or say why "
                            "in ARCHITECTURE.md's list of packages across layers")
        elif len(spans) <= 1 and pkg in allowed:
            problems.append(f"packages across layers: {pkg} sits in one layer; remove it")
    packages = {m for m, path in mods.items() if _is_package(path)}
    problems += [f"packages across layers: {name} names no package"
                 for name in sorted(allowed.keys() - packages)]
    return problems


def repeated_names(root: Path, package: str, doc: str) -> list[str]:
    """Each module file name (not __init__.py) found in two packages under `package`, unless
    the doc's same-name list gives it; each listed name that no longer repeats."""
    by_name: dict[str, list[str]] = {}
    for module, path in find_modules(root, package).items():
        if not _is_package(path):
            by_name.setdefault(path.name, []).append(module)
    allowed = read_reasons(doc, SAME_NAMES)
    problems = [f"{name}: {', '.join(sorted(ms))} share a name; rename one, or say why in "
                "ARCHITECTURE.md's list of same-name modules"
                for name, ms in sorted(by_name.items()) if len(ms) > 1 and name not in allowed]
    problems += [f"same-name modules: {name} does not repeat; remove it"
                 for name in sorted(allowed) if len(by_name.get(name, [])) < 2]
    return problems


def test_autoembed_imports_point_one_way() -> None:
    problems = check(REPO, "autoembed", DOC.read_text(), KNOWN_VIOLATIONS)
    assert not problems, "the layer rule (docs/ARCHITECTURE.md) is broken:\n" + "\n".join(
        problems)


def test_each_package_sits_in_one_layer() -> None:
    problems = split_packages(REPO, "autoembed", DOC.read_text())
    assert not problems, "\n".join(problems)


def test_module_names_tell_packages_apart() -> None:
    problems = repeated_names(REPO, "autoembed", DOC.read_text())
    assert not problems, "\n".join(problems)


TOY_DOC = f"""
{BEGIN}
| layer | modules |
|---|---|
| low | `toy.low`, `toy.lazy` |
| mid | `toy.a`, `toy.b`, `toy.sub.*` |
| high | `toy.high`, `toy.sub.top` |
| front | `toy` |
{END}
"""

TOY = {
    "__init__.py": "from toy import high\n",
    "low.py": "def later():\n    from toy import high\n",  # upward, inside a function
    "lazy.py": "import importlib\nM = importlib.import_module('toy.sub.top')\n",  # upward
    "a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from toy.b import X\n",
    "b.py": "import logging\nimport toy.a.missing\nlog = logging.getLogger('toy.high')\n",
    "high.py": "from . import low\nfrom .sub import inner\n",
    "sub/__init__.py": "",
    "sub/inner.py": "from .. import a\n",
    "sub/top.py": "from toy.sub.inner import f\n",
    "stray.py": "",
}


def toy_package(tmp_path: Path) -> Path:
    for name, text in TOY.items():
        (tmp_path / "toy" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "toy" / name).write_text(text)
    return tmp_path


def test_the_checker_finds_each_kind_of_breach(tmp_path: Path) -> None:
    problems = check(toy_package(tmp_path), "toy", TOY_DOC)
    assert sorted(problems) == sorted([
        "toy/stray.py: module toy.stray is in no row of the layer table",
        "toy/low.py:2: toy.low -> toy.high: upward (layer 1 -> 3)",
        "toy/lazy.py:2: toy.lazy -> toy.sub.top: upward (layer 1 -> 3)",
        "toy/a.py:3: toy.a -> toy.b: in a cycle: toy.a -> toy.b -> toy.a",
        "toy/b.py:2: toy.b -> toy.a: in a cycle: toy.b -> toy.a -> toy.b",
    ])


def test_known_violations_excuse_and_must_still_occur(tmp_path: Path) -> None:
    root = toy_package(tmp_path)
    (root / "toy" / "stray.py").unlink()
    known = frozenset({("toy.low", "toy.high"), ("toy.lazy", "toy.sub.top"),
                       ("toy.b", "toy.a"), ("toy.sub.top", "toy.sub.inner")})
    assert check(root, "toy", TOY_DOC, known) == [
        "KNOWN_VIOLATIONS: toy.sub.top -> toy.sub.inner no longer offends; remove it"]


def test_a_stale_table_entry_fails(tmp_path: Path) -> None:
    root = toy_package(tmp_path)
    (root / "toy" / "stray.py").unlink()
    (root / "toy" / "lazy.py").unlink()
    assert "layer table: toy.lazy names no module" in check(root, "toy", TOY_DOC)


@pytest.mark.parametrize("text", ["no markers here", f"{BEGIN}\n| a | `x` |\n"])
def test_the_table_must_be_marked(text: str) -> None:
    with pytest.raises(AssertionError, match="markers"):
        read_layers(text)


LISTS = f"""
{SPANS[0]}
* `toy.gone`: a package that no longer exists
{SPANS[1]}
{SAME_NAMES[0]}
* `inner.py`: no longer repeated
{SAME_NAMES[1]}
"""


def test_a_package_across_layers_fails_unless_listed(tmp_path: Path) -> None:
    root = toy_package(tmp_path)
    doc = TOY_DOC + LISTS
    assert split_packages(root, "toy", doc) == [
        "package toy.sub spans layers (layer 2: toy.sub, toy.sub.inner; layer 3: toy.sub.top): "
        "move modules, or say why in ARCHITECTURE.md's list of packages across layers",
        "packages across layers: toy.gone names no package"]
    listed = doc.replace("* `toy.gone`: a package that no longer exists",
                         "* `toy.sub`: its top is what the high layer builds")
    assert split_packages(root, "toy", listed) == []
    (root / "toy" / "sub" / "top.py").unlink()
    assert split_packages(root, "toy", listed) == [
        "packages across layers: toy.sub sits in one layer; remove it"]


def test_a_repeated_module_name_fails_unless_listed(tmp_path: Path) -> None:
    root = toy_package(tmp_path)
    doc = TOY_DOC + LISTS
    assert repeated_names(root, "toy", doc) == [
        "same-name modules: inner.py does not repeat; remove it"]
    (root / "toy" / "sub" / "low.py").write_text("")
    assert repeated_names(root, "toy", doc)[0] == (
        "low.py: toy.low, toy.sub.low share a name; rename one, or say why in "
        "ARCHITECTURE.md's list of same-name modules")
    listed = doc.replace("* `inner.py`: no longer repeated", "* `low.py`: the same role twice")
    assert repeated_names(root, "toy", listed) == []


@pytest.mark.parametrize("entry", ["* `low.py`:", "* `low.py`:   "])
def test_a_listed_exception_must_say_why(entry: str) -> None:
    with pytest.raises(AssertionError, match="says no why"):
        read_reasons(f"{SAME_NAMES[0]}\n{entry}\n{SAME_NAMES[1]}", SAME_NAMES)
