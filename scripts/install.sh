#!/usr/bin/env bash
# Install tilec and everything its tests and demos need, into the current Python.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
"$PYTHON" -m pip install --quiet --disable-pip-version-check --upgrade pip >/dev/null 2>&1 || true
# torch (the baseline of `tilec bench conv2d/attention`) first and pinned: its CPU wheel is on
# disk here; left to resolve `.[torch]` on its own, pip would fetch gigabytes of CUDA packages.
"$PYTHON" -m pip install --quiet --disable-pip-version-check torch==2.13.0
"$PYTHON" -m pip install --quiet --disable-pip-version-check -e ".[test,torch]"
