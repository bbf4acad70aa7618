"""Counts of pass / wrong / fallback per op and dtype of tests/test_backend_opinfo.py (the tilec
torch.compile backend on PyTorch's OpInfo samples).

    python tests/backend_opinfo_report.py             # every sample of every op
    python tests/backend_opinfo_report.py -n 3 add    # 3 samples per dtype of ops whose name contains 'add'
    python tests/backend_opinfo_report.py -v softmax  # ... and each sample that is not a pass
    python tests/backend_opinfo_report.py -w =add     # op 'add' only, each wrong sample
"""

from __future__ import annotations

import argparse
import collections
import time

from test_backend_opinfo import OPS, describe, dtypes_of, op_id, run_sample, samples, spread


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("pattern", nargs="?", default="")
    parser.add_argument("-n", type=int, default=None, help="samples per op and dtype (default: all)")
    parser.add_argument("-v", action="store_true", help="print each sample that is not a pass")
    parser.add_argument("-w", action="store_true", help="print each wrong sample only")
    args = parser.parse_args()
    totals: collections.Counter[str] = collections.Counter()
    start = time.time()
    for name, variant in OPS:
        pattern, ident = args.pattern.lower(), op_id(name, variant).lower()
        if (ident != pattern[1:]) if pattern.startswith("=") else (pattern not in ident):
            continue
        parts = []
        for dtype in dtypes_of(name, variant):
            counts: collections.Counter[str] = collections.Counter()
            for sample in spread(samples(name, variant, dtype), args.n):
                outcome = run_sample(name, variant, sample)
                counts[outcome.kind] += 1
                if (args.v and outcome.kind != "pass") or (args.w and outcome.kind == "wrong"):
                    print(f"  {outcome.kind} {dtype} {describe(sample)}: {outcome.detail[:300]}", flush=True)
            totals.update(counts)
            parts.append(f"{str(dtype).removeprefix('torch.')} " +
                         "/".join(str(counts[k]) for k in ("pass", "wrong", "fallback"))
                         + (f" ({counts['torch rejects']} rejected by torch)" if counts["torch rejects"] else ""))
        print(f"{op_id(name, variant)}: {'; '.join(parts)}   (pass/wrong/fallback)", flush=True)
    print(f"total: pass {totals['pass']}, wrong {totals['wrong']}, fallback {totals['fallback']}, "
          f"rejected by torch {totals['torch rejects']} "
          f"({time.time() - start:.0f} s)")


if __name__ == "__main__":
    main()
