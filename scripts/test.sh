#!/usr/bin/env bash
# The test command (README): install, then run the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
PYTHON="${PYTHON:-python3}"
exec "$PYTHON" -m pytest -q "$@"
