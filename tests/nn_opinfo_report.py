"""Counts of pass / wrong / refused per function and module of tests/test_nn_opinfo.py.

    python tests/nn_opinfo_report.py            # everything (max_pool2d: every sample)
    python tests/nn_opinfo_report.py conv2d     # functions and modules whose name contains 'conv2d'
    python tests/nn_opinfo_report.py -v conv2d  # ... and each sample that is not a pass
"""

from __future__ import annotations

import collections
import sys

from test_nn_opinfo import FUNCTIONS, MODULES
from torch_reference import compare_module, compare_sample, function_dtypes, functional, module_cases, module_dtypes, samples


def main(argv: list[str]) -> None:
    verbose = "-v" in argv
    pattern = next((a for a in argv if a != "-v"), "")
    totals: collections.Counter[str] = collections.Counter()
    for name, variant, _ in FUNCTIONS:
        if pattern.lower() not in name.lower():
            continue
        counts: collections.Counter[str] = collections.Counter()
        for dtype in function_dtypes(name, variant):
            for sample in samples(name, dtype, variant):
                outcome = compare_sample(name, sample, functional(name), variant)
                counts[outcome.kind] += 1
                if verbose and not outcome:
                    print(f"  {outcome.kind} {dtype} {sample.summary()}: {outcome.detail[:300]}")
        totals.update(counts)
        print(f"{name}{'.' + variant if variant else ''}: {dict(counts)}", flush=True)
    for name in MODULES:
        if pattern.lower() not in name.lower():
            continue
        counts = collections.Counter()
        for dtype in module_dtypes(name):
            for case in module_cases(name, dtype):
                outcome = compare_module(case)
                counts[outcome.kind] += 1
                if verbose and not outcome:
                    print(f"  {outcome.kind} {dtype} {case}: {outcome.detail[:300]}")
        totals.update(counts)
        print(f"nn.{name}: {dict(counts)}", flush=True)
    print(f"total: {dict(totals)}")


if __name__ == "__main__":
    main(sys.argv[1:])
