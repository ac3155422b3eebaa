#!/usr/bin/env bash
# Sets up KernelFoundry and evolves a fused CPU kernel for the example elementwise chain.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/kernelfoundry run tasks/level2_elementwise_chain.py --iterations "${KF_ITERATIONS:-4}" "$@"
