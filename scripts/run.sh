#!/usr/bin/env bash
# Set up (once) and run autoembed's main job on the embedded defaults; extra arguments are
# passed to `autoembed estimate` (until the search lands, the main job is the estimate of the
# default config: the seed workload against an 8 GB budget).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/autoembed estimate --budget 8GB "$@"
