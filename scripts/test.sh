#!/usr/bin/env bash
# Sets up KernelFoundry with its test tools and runs the whole test suite (a real JetStream server,
# real g++/nvcc builds, real subprocesses; GPU tests skip without a GPU), then the linter.
set -euo pipefail
cd "$(dirname "$0")/.."
KF_EXTRAS=dev bash scripts/setup.sh
.venv/bin/python -m ruff check .
exec .venv/bin/python -m pytest -q "$@"
