"""`python -m tilec.cli ...`: the same as the `tilec` command (and how `tilec bench` re-executes itself)."""

import sys

from tilec.cli import main

sys.exit(main())
