"""`tilec info [--json] [--refresh]`: the machine as the compiler sees it, and what it measured of it.

Prints the host Target (LLVM CPU name, vector width, the features the code generators look for,
cores, FMA units, cache sizes), the machine's measured peaks (tilec.runtime.peaks: measured now
when not cached, or again with --refresh), the cache directory and records file, and the versions
of tilec, Python, llvmlite/LLVM, numpy and torch.

Requires: nothing. Guarantees: exit status 0 with every section printed; a part that cannot be
read (the peak probe fails, torch does not import) says why in its place, never as a traceback;
`--json` prints one JSON object with the same fields.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path
from typing import Any

from tilec.codegen.llvm.probes import TILE_BITS

#: the CPU features the code generators and templates look for, as LLVM names them
NOTABLE_FEATURES = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512bf16", "amx-bf16", "avx512fp16")


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict[str, str]:
    """The first processor's model name, family and model number (empty where unknown)."""
    found = {"model name": "", "cpu family": "", "model": ""}
    try:
        for line in cpuinfo.read_text().splitlines():
            name, _, value = line.partition(":")
            name = name.strip()
            if name in found and not found[name]:
                found[name] = value.strip()
            if not line.strip() and any(found.values()):
                break
    except OSError:
        pass
    return {"name": found["model name"] or platform.processor() or "unknown", "family": found["cpu family"],
            "model": found["model"]}


def target_info() -> dict[str, Any]:
    from tilec.target import host_target

    target = host_target()
    cpu = target.host
    assert cpu is not None
    features = {f[1:] for f in cpu.features.split(",") if f.startswith("+")}
    return {"target": target.name, "llvm_cpu": cpu.name, **{f"cpu_{k}": v for k, v in cpu_model().items()},
            "vector_bits": cpu.vector_bits, "vector_registers": cpu.vector_registers,
            "features": [f for f in NOTABLE_FEATURES if f in features],
            "features_absent": [f for f in NOTABLE_FEATURES if f not in features],
            "cores": cpu.cores, "fma_units": cpu.fma_units, "fma_latency": cpu.fma_latency, "l1d_bytes": cpu.l1d_bytes, "l1d_ways": cpu.l1d_ways,
            "l2_bytes": cpu.l2_bytes, "l2_fill_bytes": cpu.l2_fill_bytes, "l3_bytes": cpu.l3_bytes, "key": target.key}


def peaks_info(refresh: bool) -> dict[str, Any]:
    """The measured peaks as a dict, with the derived figures; {"error": why} when the probe fails."""
    from tilec.runtime import peaks

    try:
        found = peaks.machine_peaks(refresh=refresh)
    except Exception as err:  # noqa: BLE001 - info reports every failure in place, never a traceback
        return {"error": f"{type(err).__name__}: {err}"}
    path = peaks.cache_path()
    return {**found.to_dict(), "fma_per_cycle": found.fma_per_cycle, "measured_fma_units": found.fma_units,
            "width_gain_float32": found.width_gain("float32"), "cache_file": str(path) if path else None}


def versions() -> dict[str, str | None]:
    import llvmlite
    import llvmlite.binding as llvm
    import numpy

    from tilec.version import __version__

    found: dict[str, str | None] = {"tilec": __version__, "python": platform.python_version(),
                                    "llvmlite": llvmlite.__version__,
                                    "llvm": ".".join(map(str, llvm.llvm_version_info)), "numpy": numpy.__version__}
    try:
        import torch

        found["torch"] = torch.__version__
    except Exception as err:  # noqa: BLE001 - a broken torch is reported, not raised
        found["torch"] = None
        found["torch_error"] = f"{type(err).__name__}: {err}".splitlines()[0]
    return found


def paths() -> dict[str, Any]:
    from tilec.config import options
    from tilec.records.db import default_path

    try:
        records: str | None = str(default_path())
    except Exception as err:  # noqa: BLE001 - e.g. no cache directory and no TILEC_RECORDS
        records = f"none ({err})"
    return {"cache_dir": str(options.cache_dir) if options.cache_dir else None,
            "disk_cache": bool(options.disk_cache and options.cache_dir), "records": records}


def collect(refresh: bool = False) -> dict[str, Any]:
    return {"target": target_info(), "peaks": peaks_info(refresh), "paths": paths(), "versions": versions()}


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % (scale // 1024 or 1) == 0:
            return f"{n / scale:g} {unit}"
    return f"{n} B"


def format_info(info: dict[str, Any]) -> str:
    t, p, where, v = info["target"], info["peaks"], info["paths"], info["versions"]
    family = f", family {t['cpu_family']} model {t['cpu_model']}" if t["cpu_family"] else ""
    lines = [
        f"target     {t['target']}: LLVM CPU {t['llvm_cpu']} ({t['cpu_name']}{family}), {t['cores']} cores",
        f"vectors    {t['vector_bits']} bits, {t['vector_registers']} registers; features {' '.join(t['features']) or '-'}"
        + (f" (absent: {' '.join(t['features_absent'])})" if t["features_absent"] else ""),
        f"caches     L1d {_size(t['l1d_bytes'])} ({t['l1d_ways']}-way), L2 {_size(t['l2_bytes'])} per core (fills L1 at {t['l2_fill_bytes']} B/cycle); "
        f"L3 {_size(t['l3_bytes'])}",
        f"fma_units  {t['fma_units']} (full-width FMAs per cycle, as the compiler's Target has it); "
        f"FMA latency {t['fma_latency']} cycles",
    ]
    lines += _format_peaks(p)
    lines += [f"cache      {where['cache_dir'] or '-'} (disk cache {'on' if where['disk_cache'] else 'off'})",
              f"records    {where['records']}",
              "versions   " + ", ".join(f"{k} {val}" for k, val in v.items() if k != "torch_error" and val)
              + (f"; torch: {v['torch_error']}" if v.get("torch_error") else "")]
    return "\n".join(lines)


def _format_peaks(p: dict[str, Any]) -> list[str]:
    if "error" in p:
        return [f"peaks      not measured: {p['error']}"]
    clock = f"clock {p['clock_ghz']:.2f} GHz" if p["clock_ghz"] else "clock unknown"
    lines = [f"peaks      measured {p['measured_at']} in {p['seconds']:.1f} s at load {p['load_average']:.2f}; {clock}"
             + (f"; kept in {p['cache_file']}" if p["cache_file"] else "")]
    if p["fma_per_cycle"] is not None:
        gain = p["width_gain_float32"]
        lines.append(f"           {p['fma_per_cycle']:.2f} full-width float32 FMAs per cycle (fma_units "
                     f"{p['measured_fma_units']})" + (f"; widest vs next width: {gain:.2f}x" if gain else ""))
    every = f"{p['cores']} cores GFLOP/s"
    lines.append(f"           {'dtype':<9}{'bits':>5}{'1 core GFLOP/s':>16}{every:>18}{'FLOP/cycle':>12}")
    for f in p["fma"]:
        per_cycle = f"{f['flops_per_cycle']:.1f}" if f["flops_per_cycle"] is not None else "-"
        width = "tiles" if f["bits"] == TILE_BITS else f["bits"]  # AMX's tile dot product
        lines.append(f"           {f['dtype']:<9}{width:>5}{f['single_gflops']:>16.1f}{f['all_gflops']:>18.1f}"
                     f"{per_cycle:>12}")
    lines.append(f"           memory (read-only stream of {_size(p['stream_bytes'])}): 1 core {p['single_gbs']:.1f} GB/s, "
                 f"{p['cores']} cores {p['all_gbs']:.1f} GB/s")
    return lines


def cmd_info(args: argparse.Namespace) -> int:
    info = collect(refresh=args.refresh)
    print(json.dumps(info, indent=1) if args.json else format_info(info), flush=True)
    if "error" in info["peaks"]:
        print(f"tilec: warning: the machine's peaks could not be measured: {info['peaks']['error']}", file=sys.stderr)
    return 0


def add_info_parser(sub: argparse._SubParsersAction) -> None:
    info = sub.add_parser(
        "info", help="the machine as the compiler sees it: target, measured peaks, paths, versions",
        description="Print the host Target the compiler uses (LLVM CPU, vector width, features, cores, FMA units, "
                    "caches), this machine's measured peaks (FMA throughput per dtype and width, memory bandwidth; "
                    "measured once per machine and cached), the cache directory, the records file and the versions.")
    info.add_argument("--json", action="store_true", help="one JSON object instead of text")
    info.add_argument("--refresh", action="store_true", help="measure the peaks again (a second or two)")
    info.set_defaults(run=cmd_info)
