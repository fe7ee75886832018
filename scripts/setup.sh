#!/usr/bin/env bash
# Create .venv and install autoembed with its dependencies, once (re-runs are no-ops until
# pyproject.toml changes). torch is pinned first: with no torch present, a range like
# torch>=2.5 makes pip fetch a multi-GB CUDA build; the pin takes the CPU wheel on a CPU-only
# machine of this kind and the CUDA build on a GPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
TORCH_SPEC=${AUTOEMBED_TORCH:-torch==2.13.0}
EXTRAS=${AUTOEMBED_EXTRAS:-dev}
stamp=.venv/.autoembed-installed
want="$(sha256sum pyproject.toml | cut -c1-16) $TORCH_SPEC $EXTRAS"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
if ! .venv/bin/python -c "import torch" >/dev/null 2>&1; then
  echo "autoembed setup: installing $TORCH_SPEC ..." >&2
  .venv/bin/python -m pip install -q "$TORCH_SPEC"
fi
echo "autoembed setup: installing autoembed[$EXTRAS] ..." >&2
# the build backend's notices (editable mode, deprecations) are for us, not the user
PYTHONWARNINGS="ignore::UserWarning" .venv/bin/python -m pip install -q -e ".[$EXTRAS]"
echo "$want" > "$stamp"
