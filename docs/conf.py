"""Sphinx configuration of autoembed's documentation site.

Build it (strict: every warning, a broken link or reference among them, is an error):

    .venv/bin/python -m sphinx -W --keep-going -b html docs build/docs

tests/test_docs.py runs that build as part of the test suite.
"""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS / "_ext"))

project = "autoembed"
author = "the autoembed authors"
copyright = "the autoembed authors, Apache-2.0"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "autoembed_docs",
]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_ext", "config_keys.yaml"]

# Markdown: GitHub-style heading anchors, so `page.md#a-heading` links resolve (and are
# checked) as they do on GitHub.
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]
# No typographic rewriting: `--model` stays two hyphens (an en dash is a copy-paste trap in
# the CLI reference), quotes stay straight.
smartquotes = False
suppress_warnings: list[str] = []

# The API reference: the public `autoembed` names, from their docstrings. Type hints stay
# in the signatures (they are strings under `from __future__ import annotations`).
autodoc_typehints = "signature"
autodoc_preserve_defaults = True
default_role = "code"  # docstrings write `name` for code, as the Markdown pages do
autodoc_member_order = "bysource"
autodoc_default_options = {"members": False}

html_theme = "furo"
html_title = "autoembed"
html_static_path: list[str] = []
