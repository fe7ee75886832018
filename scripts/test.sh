#!/usr/bin/env bash
# Set up (once) and run the whole test suite; arguments go to pytest (a path runs only
# that: bash scripts/test.sh tests/test_budget.py).
set -euo pipefail
cd "$(dirname "$0")/.."
# with TorchRec (AUTOEMBED_TORCHREC=0 leaves it out: its tests then skip with a reason)
AUTOEMBED_TORCHREC=${AUTOEMBED_TORCHREC:-1} \
  AUTOEMBED_EXTRAS=${AUTOEMBED_EXTRAS:-dev,datasets,team,transformers,docs} bash scripts/setup.sh
# no path given: pytest runs pyproject.toml's testpaths (tests/). Test files run in
# AUTOEMBED_TEST_WORKERS processes at once (pytest-xdist; default 3 on CI's 2 cores: the
# tests wait on subprocesses and Ray part of the time, which a third fills; 0: in this process), each file whole in one of them (--dist loadfile), so a
# module's set-up (its Ray, its search) is made once; the longest files first
# (tests/conftest.py), so that no long file runs alone at the end.
# bytecode is written (a machine may set PYTHONDONTWRITEBYTECODE): the suite starts hundreds
# of Python processes, and each would compile autoembed and rewrite the tests' asserts again
unset PYTHONDONTWRITEBYTECODE
exec .venv/bin/python -m pytest -n "${AUTOEMBED_TEST_WORKERS:-3}" --dist loadfile "$@"
