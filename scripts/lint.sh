#!/usr/bin/env bash
# Static checks: ruff (lint) and mypy (types) over the package.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
"$PYTHON" -m pip install --quiet --disable-pip-version-check -e ".[dev]"
"$PYTHON" -m ruff check tilec
"$PYTHON" -m mypy tilec
