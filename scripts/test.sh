#!/usr/bin/env bash
# Set up (once) and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
AUTOEMBED_EXTRAS=${AUTOEMBED_EXTRAS:-dev,datasets,team,transformers} bash scripts/setup.sh
exec .venv/bin/python -m pytest tests "$@"
