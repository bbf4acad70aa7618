#!/usr/bin/env bash
# Static checks: ruff (lint), mypy (types) and import-linter (the layering contracts in
# pyproject.toml: layers only point down, no import cycles) over the package.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
"$PYTHON" -m pip install --quiet --disable-pip-version-check -e ".[dev]"
"$PYTHON" -m ruff check tilec
"$PYTHON" -m mypy tilec
"$PYTHON" -c "import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports())"
