#!/usr/bin/env bash
# The test command (README): install, then run the whole suite. With no arguments it runs in two
# phases: every test not marked `serial` on all cores (pytest-xdist, one worker per core), then the
# `serial` ones (they time things or start processes of their own: tests/conftest.py) alone.
# With arguments, one plain pytest run with them (e.g. `bash scripts/test.sh tests/test_ops.py`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
PYTHON="${PYTHON:-python3}"
if [ "$#" -gt 0 ]; then
    exec "$PYTHON" -m pytest -q "$@"
fi
WORKERS="$("$PYTHON" -c 'import os; print(max(1, len(os.sched_getaffinity(0))))')"
status=0
"$PYTHON" -m pytest -q -n "$WORKERS" -m "not slow and not serial" || status=$?
"$PYTHON" -m pytest -q -m "serial and not slow" || status=$?
exit "$status"
