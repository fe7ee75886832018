#!/usr/bin/env bash
# Set up (once) and run autoembed's main job on the embedded defaults: a search of
# search_spaces/default.yaml under an 8 GB budget. Extra arguments go to `autoembed search`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/autoembed search --budget 8GB "$@"
