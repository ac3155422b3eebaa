#!/usr/bin/env bash
# Creates .venv (if missing) and installs KernelFoundry into it. Idempotent.
#   KF_EXTRAS=dev   also install the test and lint tools
#   KF_TORCH        the torch requirement to install first (default: torch==2.13.0, CPU build where available)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  .venv/bin/python -m pip install -q "${KF_TORCH:-torch==2.13.0}"
fi
if [ -n "${KF_EXTRAS:-}" ]; then
  .venv/bin/python -m pip install -q -e ".[${KF_EXTRAS}]"
else
  .venv/bin/python -m pip install -q -e .
fi
