#!/usr/bin/env bash
# Set up (once) and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
# with TorchRec (AUTOEMBED_TORCHREC=0 leaves it out: its tests then skip with a reason)
AUTOEMBED_TORCHREC=${AUTOEMBED_TORCHREC:-1} \
  AUTOEMBED_EXTRAS=${AUTOEMBED_EXTRAS:-dev,datasets,team,transformers} bash scripts/setup.sh
exec .venv/bin/python -m pytest tests "$@"
