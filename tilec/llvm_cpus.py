"""What LLVM knows about x86-64 CPUs: their names and features, and which instruction-set
extensions it generates for a CPU.

Requires: llvmlite with an x86-64 target. Guarantees: `llvm_catalogue` gives the CPU and feature
names LLVM accepts (its ``-mcpu=help`` text, which it prints on stderr: captured at the file
descriptor); `cpu_isa` the extensions of EXTENSIONS that code for a CPU may use, found by
compiling one tiny function per extension for it (a function LLVM lowers to an instruction of
that extension only when the CPU has it) and looking for the instruction in the assembly. Every
use of LLVM's C API here takes LLVM_LOCK, which the code generator takes too. Nothing here
imports the rest of tilec: tilec.target builds its CPU records on it.
"""

from __future__ import annotations

import functools
import os
import re
import sys
import tempfile
import threading
from typing import Any

LLVM_LOCK = threading.RLock()  # LLVM's C API is not safe to drive from several threads at once

# One instruction-set extension each: a function LLVM lowers to an instruction of that extension
# only when the CPU has it, and the pattern of that instruction in the assembly.
PROBES: dict[str, tuple[str, str]] = {
    "sse4.1": ("declare float @llvm.floor.f32(float)\n"
               "define float @p(float %a) #0 { %r = call float @llvm.floor.f32(float %a)\n ret float %r }", r"roundss"),
    "popcnt": ("declare i64 @llvm.ctpop.i64(i64)\n"
               "define i64 @p(i64 %a) #0 { %r = call i64 @llvm.ctpop.i64(i64 %a)\n ret i64 %r }", r"popcnt"),
    "avx": ("define <8 x float> @p(<8 x float> %a, <8 x float> %b) #0 {"
            " %r = fadd <8 x float> %a, %b\n ret <8 x float> %r }", r"vaddps\s+%ymm"),
    "avx2": ("define <8 x i32> @p(<8 x i32> %a, <8 x i32> %b) #0 {"
             " %r = add <8 x i32> %a, %b\n ret <8 x i32> %r }", r"vpaddd\s+%ymm"),
    "fma": ("declare float @llvm.fma.f32(float, float, float)\n"
            "define float @p(float %a, float %b, float %c) #0 {"
            " %r = call float @llvm.fma.f32(float %a, float %b, float %c)\n ret float %r }", r"vfmadd"),
    "f16c": ("define <8 x float> @p(<8 x half> %a) #0 { %r = fpext <8 x half> %a to <8 x float>\n ret <8 x float> %r }",
             r"vcvtph2ps"),
    "bmi2": ("define i64 @p(i64 %a, i64 %b) #0 { %r = shl i64 %a, %b\n ret i64 %r }", r"shlx"),
    "avx512f": ("define <16 x float> @p(<16 x float> %a, <16 x float> %b) #0 {"
                " %r = fadd <16 x float> %a, %b\n ret <16 x float> %r }", r"%zmm"),
    "avx512vl": ("define <8 x i32> @p(<8 x i32> %a, <8 x i32> %b) #0 { %c = icmp sgt <8 x i32> %a, %b\n"
                 " %r = select <8 x i1> %c, <8 x i32> %a, <8 x i32> zeroinitializer\n ret <8 x i32> %r }",
                 r"vpcmpgtd\s+%ymm\d+, %ymm\d+, %k"),
    "avx512bw": ("define <64 x i8> @p(<64 x i8> %a, <64 x i8> %b) #0 {"
                 " %r = add <64 x i8> %a, %b\n ret <64 x i8> %r }", r"vpaddb\s+%zmm"),
    "avx512dq": ("define <8 x i64> @p(<8 x double> %a) #0 { %r = fptosi <8 x double> %a to <8 x i64>\n"
                 " ret <8 x i64> %r }", r"vcvttpd2qq"),
    "avx512bf16": ("define bfloat @p(float %a) #0 { %r = fptrunc float %a to bfloat\n ret bfloat %r }",
                   r"vcvtneps2bf16"),
    "avx512fp16": ("define half @p(half %a, half %b) #0 { %r = fadd half %a, %b\n ret half %r }", r"vaddsh"),
}
PROBE_ATTRIBUTES = 'attributes #0 = { "min-legal-vector-width"="512" "prefer-vector-width"="512" nounwind }'


def _llvm() -> Any:
    import llvmlite.binding as llvm

    with LLVM_LOCK:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
    return llvm


@functools.cache
def llvm_catalogue() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(CPU names, feature names) LLVM accepts for the host's target (x86-64), from its own help
    text (printed on stderr when asked for CPU ``help``: captured at the file descriptor)."""
    llvm = _llvm()
    with LLVM_LOCK, tempfile.TemporaryFile() as sink:
        sys.stderr.flush()
        saved = os.dup(2)
        try:
            os.dup2(sink.fileno(), 2)
            llvm.Target.from_default_triple().create_target_machine(cpu="help")
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        sink.seek(0)
        text = sink.read().decode(errors="replace")
    cpus, features = text.partition("Available features")[::2]
    entry = re.compile(r"^\s+([\w.\-]+)\s+- ", re.M)
    return tuple(entry.findall(cpus)), tuple(entry.findall(features))


@functools.cache
def cpu_isa(name: str, features: str) -> frozenset[str]:
    """The instruction-set extensions (LLVM feature names, those of `PROBES`) LLVM generates for
    CPU `name` with `features`: each probe function compiled for it uses its extension or not."""
    llvm = _llvm()
    found = set()
    with LLVM_LOCK:
        machine = llvm.Target.from_default_triple().create_target_machine(cpu=name, features=features, opt=2)
        for feature, (ir, pattern) in PROBES.items():
            asm = machine.emit_assembly(llvm.parse_assembly(f"{ir}\n{PROBE_ATTRIBUTES}"))
            if re.search(pattern, asm):
                found.add(feature)
    return frozenset(found)


EXTENSIONS = tuple(PROBES)

__all__ = ["EXTENSIONS", "LLVM_LOCK", "PROBES", "cpu_isa", "llvm_catalogue"]
