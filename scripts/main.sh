#!/usr/bin/env bash
# The main job (README): install, then compile, check and benchmark kernels on the host CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
PYTHON="${PYTHON:-python3}"
exec "$PYTHON" -m tilec.demo "$@"
