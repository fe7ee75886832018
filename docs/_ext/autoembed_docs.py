"""Sphinx directives that generate autoembed's reference pages from the code itself.

* ``autoembed-config-keys`` (option ``:which: config`` or ``table``): one row per field of
  `EmbeddingConfig` / `TableConfig`, in declaration order, with its default and its declared
  rule (`autoembed.config.FIELD_RULES` / `TABLE_RULES`, the rule text the validation errors
  print) beside its meaning from ``docs/config_keys.yaml``. A field without a meaning
  there, or a meaning for a field that does not exist, fails the build.
* ``autoembed-cli``: every `autoembed` command from the typer app: its help, then one row
  per option (the spellings, default, help). An option without help fails the build.

So a new config key or CLI option appears on the site by itself, and a test (the strict
build, tests/test_docs.py) fails until it is explained.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.parsers.rst import directives
from docutils.statemachine import StringList
from sphinx import addnodes
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

logger = logging.getLogger(__name__)


class Undocumented(Exception):
    """A key or option the code has and the documentation does not explain."""

KEYS_FILE = Path(__file__).resolve().parents[1] / "config_keys.yaml"


def _cell(text: Any) -> str:
    """A Markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _code(value: Any) -> str:
    text = str(value)
    return f"``{text}``" if "`" in text else f"`{text}`"


def key_meanings() -> dict[str, dict[str, str]]:
    """docs/config_keys.yaml: {"config": {key: meaning}, "table": {key: meaning}}."""
    import yaml

    raw = yaml.safe_load(KEYS_FILE.read_text())
    return {k: dict(raw.get(k) or {}) for k in ("config", "table")}


def _default(f: dataclasses.Field[Any]) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return "required"
    if value is None:
        return "null (unset)"
    if isinstance(value, bool):
        return _code(str(value).lower())
    if isinstance(value, tuple) and value and dataclasses.is_dataclass(value[0]):
        return "one table `f0` of 1,000,000 rows"
    if isinstance(value, tuple):
        return _code(list(value))
    return _code(value)


def config_rows(which: str) -> list[str]:
    """The reference table of `which` ("config" or "table") as Markdown lines."""
    from autoembed.config import FIELD_RULES, TABLE_RULES, EmbeddingConfig, TableConfig

    cls, rules = (EmbeddingConfig, FIELD_RULES) if which == "config" else (TableConfig,
                                                                           TABLE_RULES)
    meanings = key_meanings()[which]
    fields = dataclasses.fields(cls)
    names = {f.name for f in fields}
    missing = [f.name for f in fields if not meanings.get(f.name)]
    extra = sorted(set(meanings) - names)
    if missing or extra:
        raise Undocumented(
            f"{KEYS_FILE.name} [{which}]: "
            + (f"no meaning for {', '.join(missing)}" if missing else "")
            + ("; " if missing and extra else "")
            + (f"{', '.join(extra)} is not a {cls.__name__} field" if extra else ""))
    lines = ["| key | default | values | meaning |", "|---|---|---|---|"]
    for f in fields:
        rule = rules.get(f.name)
        values = rule.text.removeprefix("must be ") if rule is not None else "see meaning"
        lines.append(f"| `{f.name}` | {_cell(_default(f))} | {_cell(values)} | "
                     f"{_cell(meanings[f.name])} |")
    return lines


def _option(p: Any) -> str:
    spell = ", ".join(_code(o) for o in [*p.opts, *p.secondary_opts])
    return spell + (" (required)" if getattr(p, "required", False) else "")


def _option_default(p: Any) -> str:
    if getattr(p, "required", False) or p.default is None:
        return ""
    if isinstance(p.default, bool):
        flag = p.opts[0] if p.default else (p.secondary_opts or [""])[0]
        return _code(flag) if flag else ("on" if p.default else "off")
    if isinstance(p.default, (list, tuple)) and not p.default:
        return ""
    return _code(p.default)


def cli_lines() -> list[str]:
    """Every command of the `autoembed` app as Markdown: a heading, its help, its options."""
    import typer.main

    from autoembed.cli import app

    group = typer.main.get_command(app)
    lines: list[str] = []
    undocumented = []
    for name, cmd in group.commands.items():  # type: ignore[attr-defined]
        lines += [f"## `autoembed {name}`", "", " ".join((cmd.help or "").split()), "",
                  "| option | default | what it does |", "|---|---|---|"]
        for p in cmd.params:
            if p.param_type_name != "option" or getattr(p, "hidden", False):
                continue
            if not (p.help or "").strip():
                undocumented.append(f"autoembed {name} {p.opts[0]}")
            lines.append(f"| {_option(p)} | {_cell(_option_default(p))} | {_cell(p.help)} |")
        lines.append("")
    if undocumented:
        raise Undocumented(f"CLI options without help: {', '.join(undocumented)}")
    return lines


def api_lines() -> list[str]:
    """An autodoc entry per public name of `autoembed` (its `__all__`), in that order
    (reStructuredText inside an `eval-rst` block: autodoc writes reST)."""
    import inspect

    import autoembed

    lines = ["```{eval-rst}"]
    for name in autoembed.__all__:
        obj = getattr(autoembed, name)
        if name == "search":  # the facade forwards to the pipeline, which documents it
            lines += [".. autofunction:: autoembed.pipeline.search", ""]
        elif inspect.isclass(obj) and issubclass(obj, BaseException):
            lines += [f".. autoexception:: autoembed.{name}", ""]
        elif inspect.isclass(obj):
            lines += [f".. autoclass:: autoembed.{name}", "   :members:", ""]
        elif callable(obj):
            lines += [f".. autofunction:: autoembed.{name}", ""]
    return [*lines, "```"]


_SPANS = re.compile(r"(``.*?``|`[^`]*`)")
_UNDERSCORE_REF = re.compile(r"(?<=\w)_(?=\W|$)")


def _plain(text: str) -> str:
    """One docstring line's text outside code spans, with reST's inline markup characters
    escaped: the docstrings are plain text with `code`, not reStructuredText."""
    return _UNDERSCORE_REF.sub(r"\\_", text.replace("\\", "\\\\").replace("*", "\\*")
                               .replace("|", "\\|"))


def plain_docstring(app: Any, what: str, name: str, obj: Any, options: Any,
                    lines: list[str]) -> None:
    """autodoc-process-docstring: read the docstrings as the plain text they are (a list
    item's leading "* " stays a bullet)."""
    for i, line in enumerate(lines):
        body = line.lstrip()
        lead = line[:len(line) - len(body)]
        bullet = "* " if body.startswith("* ") else ""
        parts = _SPANS.split(body[len(bullet):])
        lines[i] = lead + bullet + "".join(p if j % 2 else _plain(p)
                                           for j, p in enumerate(parts))


class _Generated(SphinxDirective):
    """Markdown generated from the code, parsed as if it were in the page."""

    has_content = False

    def markdown(self) -> list[str]:
        raise NotImplementedError

    def run(self) -> list[nodes.Node]:
        container = nodes.container()
        try:
            text = self.markdown()
        except Undocumented as e:  # a warning: the strict build (-W) fails on it
            logger.warning(str(e), location=self.get_location())
            return []
        self.state.nested_parse(StringList(text), self.content_offset, container,
                                match_titles=True)
        self.env.note_dependency(str(KEYS_FILE))
        return container.children


class ConfigKeys(_Generated):
    option_spec = {"which": lambda v: directives.choice(v, ("config", "table"))}

    def markdown(self) -> list[str]:
        return config_rows(self.options.get("which", "config"))


class CliReference(_Generated):
    def markdown(self) -> list[str]:
        return cli_lines()


class ApiReference(_Generated):
    def markdown(self) -> list[str]:
        return api_lines()


# benchmarks/results/*.md, each shown as a page of the site: generated at build time into
# docs/_results/ (git ignores it), one page including the file
RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
RESULTS_PAGES = "_results"


def results_pages(app: Any) -> None:
    """Write docs/_results/NAME.md for each results file: an orphan page (no toctree needs
    it) that includes the file, its images and links read from where the file is."""
    out = Path(app.srcdir) / RESULTS_PAGES
    out.mkdir(exist_ok=True)
    for md in sorted(RESULTS.glob("*.md")):
        text = (f"---\norphan: true\n---\n\n```{{include}} ../../benchmarks/results/{md.name}"
                "\n:relative-images:\n:relative-docs: ../\n```\n")
        page = out / md.name
        if not page.is_file() or page.read_text() != text:
            page.write_text(text)


def repository_links(app: Any, doctree: nodes.document) -> None:
    """A Markdown link from a page to a file of the repository outside docs/ (a results
    file, a script: `../benchmarks/results/x.md`) works on GitHub as it stands; on the site
    a results file links to its page (`results_pages`), any other file becomes a download
    of that file (copied into the build), so a link to a file that does not exist still
    fails the build ("download file not readable")."""
    import os

    env = app.env
    here = Path(env.doc2path(env.docname)).parent
    for ref in list(doctree.findall(addnodes.pending_xref)):
        target = ref.get("reftarget", "")
        if ref.get("refdomain") != "doc" or ref.get("reftype") != "myst" \
                or target in env.found_docs:
            continue
        path = Path(target + ".md")
        if not path.is_absolute():
            path = Path(env.srcdir) / path
        if Path(env.srcdir) in path.resolve().parents:
            continue  # a page of the site: Sphinx resolves (or reports) it
        page = f"{RESULTS_PAGES}/{path.stem}"
        if path.resolve().parent == RESULTS and page in env.found_docs:
            ref["reftarget"] = page  # its page on the site, not a download
            continue
        new = addnodes.download_reference(
            "", "", *ref.children, refdomain=None, reftype="myst", refexplicit=True,
            reftarget=os.path.relpath(path, here), refdoc=env.docname)
        ref.replace_self(new)


def setup(app: Any) -> dict[str, Any]:
    app.add_directive("autoembed-config-keys", ConfigKeys)
    app.add_directive("autoembed-cli", CliReference)
    app.add_directive("autoembed-api", ApiReference)
    app.connect("autodoc-process-docstring", plain_docstring)
    app.connect("builder-inited", results_pages)  # before the pages are found and read
    # before Sphinx's download collector (priority 500) reads the download references
    app.connect("doctree-read", repository_links, priority=400)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
