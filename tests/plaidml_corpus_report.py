"""Run every PlaidML corpus entry and print one line each: pass, wrong answer, TilecError (its
first line) or crash (the exception type), then the totals.

    python tests/plaidml_corpus_report.py [-v]    (-v: the whole reason for each failure)
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]  # this checkout's tilec, and the corpus beside this file

import tilec  # noqa: E402
from plaidml_corpus import NEGATIVES, PROGRAMS, arguments, mismatch, names_culprit, run  # noqa: E402


def judge_program(program) -> tuple[str, str]:
    arrays = arguments(program)
    try:
        got = run(program, arrays)
    except tilec.TilecError as e:
        return "TilecError", str(e).splitlines()[0]
    except Exception as e:  # noqa: BLE001 - the report's job is to classify every failure
        return "crash", f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    problem = mismatch(program, arrays, got)
    return ("pass", "") if problem is None else ("wrong answer", problem)


def judge_negative(negative) -> tuple[str, str]:
    arrays = arguments(negative)
    try:
        tilec.compile(negative.code)(**arrays)
    except tilec.TilecError as e:
        problem = names_culprit(negative, str(e))
        return ("pass", "") if problem is None else ("refused, badly", f"{problem}: {str(e).splitlines()[0]}")
    except Exception as e:  # noqa: BLE001
        return "crash", f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return "accepted", "ran without an error"


def main(verbose: bool) -> None:
    print(f"tilec from {Path(tilec.__file__).parent}\n")
    totals: Counter[str] = Counter()
    for kind, entries, judge in (("program", PROGRAMS, judge_program), ("negative", NEGATIVES, judge_negative)):
        for entry in entries:
            outcome, why = judge(entry)
            totals[f"{kind}: {outcome}"] += 1
            why = why if verbose else why[:110]
            print(f"{entry.id:40s} {outcome:14s} {why}", flush=True)
    print()
    for key, n in sorted(totals.items()):
        print(f"{key:30s} {n}")
    print(f"{'programs':30s} {len(PROGRAMS)}\n{'negatives':30s} {len(NEGATIVES)}")


if __name__ == "__main__":
    main("-v" in sys.argv)
