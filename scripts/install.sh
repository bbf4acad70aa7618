#!/usr/bin/env bash
# Install tilec and everything its tests and demos need, into the current Python.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
"$PYTHON" -m pip install --quiet --disable-pip-version-check --upgrade pip >/dev/null 2>&1 || true
"$PYTHON" -m pip install --quiet --disable-pip-version-check -e ".[test]"
