#!/usr/bin/env bash
# Create .venv and install autoembed with its dependencies, once (re-runs are no-ops until
# pyproject.toml changes). torch is pinned first: with no torch present, a range like
# torch>=2.5 makes pip fetch a multi-GB CUDA build; the pin takes the CPU wheel on a CPU-only
# machine of this kind and the CUDA build on a GPU machine.
#
# AUTOEMBED_TORCHREC=1 also installs TorchRec (autoembed.torchrec) in two steps: torchrec's
# metadata asks for `fbgemm-gpu`, the CUDA build, which must not land on a CPU machine and a
# pip extra cannot say --no-deps, so torchrec and the matching FBGEMM build go in --no-deps
# (fbgemm-gpu-cpu without a GPU, fbgemm-gpu with one), then torchrec's real dependencies.
# 1.8.0 is pinned: torchrec 1.9.x does not load against torch 2.13 (an undefined symbol in
# fbgemm_gpu_tbe_index_select.so).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
TORCH_SPEC=${AUTOEMBED_TORCH:-torch==2.13.0}
EXTRAS=${AUTOEMBED_EXTRAS:-dev}
TORCHREC=${AUTOEMBED_TORCHREC:-0}
TORCHREC_VERSION=1.8.0
# torchrec 1.8.0's Requires-Dist less fbgemm-gpu (the versions tested with torch 2.13)
TORCHREC_DEPS="tensordict==0.15.3 torchmetrics==1.0.3 tqdm pyre-extensions==0.0.32"
# The stamp records what is installed: pyproject's hash, the torch pin, the extras and
# TorchRec. A re-run asking for no more than that (fewer extras, say `run.sh` after
# `test.sh`) installs nothing; a changed pyproject.toml or a new extra installs again.
stamp=.venv/.autoembed-installed
hash=$(sha256sum pyproject.toml | cut -c1-16)
had_hash="" had_torch="" had_extras="" had_torchrec="torchrec=0"
if [ -f "$stamp" ]; then
  read -r had_hash had_torch had_extras had_torchrec < "$stamp" || true
fi
covered=1
for extra in ${EXTRAS//,/ }; do
  case ",$had_extras," in *",$extra,"*) ;; *) covered=0 ;; esac
done
if [ "$had_hash" = "$hash" ] && [ "$had_torch" = "$TORCH_SPEC" ] && [ "$covered" = 1 ] \
    && { [ "$TORCHREC" != "1" ] || [ "$had_torchrec" = "torchrec=1" ]; }; then
  exit 0
fi
if [ "$had_hash" = "$hash" ] && [ "$had_torch" = "$TORCH_SPEC" ] && [ -n "$had_extras" ]; then
  EXTRAS="$had_extras,$EXTRAS"  # keep what is there: pip does not remove an extra's packages
  [ "$had_torchrec" = "torchrec=1" ] && TORCHREC=1
fi
EXTRAS=$(echo "$EXTRAS" | tr ',' '\n' | sort -u | paste -sd, -)
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
if ! .venv/bin/python -c "import torch" >/dev/null 2>&1; then
  echo "autoembed setup: installing $TORCH_SPEC ..." >&2
  .venv/bin/python -m pip install -q "$TORCH_SPEC"
fi
echo "autoembed setup: installing autoembed[$EXTRAS] ..." >&2
# the build backend's notices (editable mode, deprecations) are for us, not the user
PYTHONWARNINGS="ignore::UserWarning" .venv/bin/python -m pip install -q -e ".[$EXTRAS]"
if [ "$TORCHREC" = "1" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    FBGEMM=fbgemm-gpu==$TORCHREC_VERSION
  else
    FBGEMM=fbgemm-gpu-cpu==$TORCHREC_VERSION
  fi
  echo "autoembed setup: installing torchrec==$TORCHREC_VERSION and $FBGEMM ..." >&2
  # --no-warn-conflicts: pip would call the missing fbgemm-gpu (the CUDA build) an error
  .venv/bin/python -m pip install -q --no-warn-conflicts --no-deps \
    "torchrec==$TORCHREC_VERSION" "$FBGEMM"
  # shellcheck disable=SC2086
  .venv/bin/python -m pip install -q --no-warn-conflicts $TORCHREC_DEPS "$TORCH_SPEC"
fi
echo "$hash $TORCH_SPEC $EXTRAS torchrec=$TORCHREC" > "$stamp"
