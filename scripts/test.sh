#!/usr/bin/env bash
# Set up (once) and run the whole test suite; arguments go to pytest (a path runs only
# that: bash scripts/test.sh tests/test_budget.py).
set -euo pipefail
cd "$(dirname "$0")/.."
# with TorchRec (AUTOEMBED_TORCHREC=0 leaves it out: its tests then skip with a reason)
AUTOEMBED_TORCHREC=${AUTOEMBED_TORCHREC:-1} \
  AUTOEMBED_EXTRAS=${AUTOEMBED_EXTRAS:-dev,datasets,team,transformers,docs} bash scripts/setup.sh
# no path given: pytest runs pyproject.toml's testpaths (tests/)
exec .venv/bin/python -m pytest "$@"
