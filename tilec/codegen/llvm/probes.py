"""The peak probe's kernels (tilec.runtime.peaks): small LLVM IR loops, JIT-compiled for the host.

* `fma_kernel_ir`: independent chains of vector FMAs (`ACCUMULATORS` accumulators, enough to hide
  any core's FMA latency; each starts elsewhere, or the code generator would merge them);
* `bf16_kernel_ir`: the same with the bf16 dot product ``vdpbf16ps`` (llvmlite.ir has no bfloat
  type, hence IR text throughout);
* `tiles_kernel_ir`: AMX-BF16's tile dot product ``tdpbf16ps`` (16 x 16 x 32 products, 16,384
  flops per instruction) on four independent accumulator tiles;
* `stream_kernel_ir`: a read-only vector sum over a buffer;
* `clock_kernel_ir`: a chain of dependent register-to-register integer adds in x86-64 inline
  assembly, one per cycle (not `add $imm`: Golden Cove and later Intel cores fold chains of
  immediate adds at rename, several per cycle, which read as a 20+ GHz clock on Sapphire Rapids).

Requires: llvmlite; a CpuInfo of the host. Guarantees: `ProbeKernels(cpu)` compiles every kernel
the CPU supports (float32 and float64 FMAs at each vector width up to its widest, bf16 with
``avx512bf16``, bf16 tiles with AMX-BF16 (as width TILE_BITS), the clock on x86-64) into one
execution engine it keeps alive, and hands out `ProbeKernel`s whose `call(n)` runs n loop iterations of `work` flops (bytes for the stream,
cycles for the clock) each; IR that does not compile is a `PeakProbeError`.
"""

from __future__ import annotations

import ctypes
import platform
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tilec.codegen.llvm.amx import TILE_CONFIG, enable_tiles
from tilec.codegen.llvm.binding import LOCK, initialise_llvm, target_machine
from tilec.errors import CodegenError
from tilec.target import CpuInfo, has_tiles

ACCUMULATORS = 12  # independent FMA chains: latency (4-6 cycles) x issue width (up to 2) fits with room
UNROLL = 4  # FMAs per accumulator per loop iteration
CLOCK_ADDS = 64  # dependent adds per inline-assembly block


class PeakProbeError(CodegenError):
    """The peak probe could not compile or run on this machine."""


_LLVM_TYPES = {"float32": "float", "float64": "double"}


def _splat(name: str, vec: str, elem: str, lanes: int, value: str) -> str:
    return (f"  %{name}.0 = insertelement {vec} poison, {elem} {value}, i32 0\n"
            f"  %{name} = shufflevector {vec} %{name}.0, {vec} poison, <{lanes} x i32> zeroinitializer\n")


def fma_kernel_ir(name: str, dtype: str, bits: int, fused: bool = True) -> str:
    """`double name(i64 n, double seed)`: n iterations of UNROLL x ACCUMULATORS independent vector
    FMAs acc = acc * x + y (x = 0.5: the chains converge, no overflow or denormals); returns lane 0
    of the accumulators' sum so that nothing is dead."""
    elem = _LLVM_TYPES[dtype]
    lanes = bits // (32 if dtype == "float32" else 64)
    vec = f"<{lanes} x {elem}>"
    head = f"define double @{name}(i64 %n, double %seed) {{\nentry:\n"
    seed = "%seed"
    if elem == "float":
        head += "  %s32 = fptrunc double %seed to float\n"
        seed = "%s32"
    head += _splat("x", vec, elem, lanes, "0.5") + _splat("y", vec, elem, lanes, seed)
    head += "".join(_distinct_start(a, vec, elem) for a in range(ACCUMULATORS))
    if fused:
        def update(prev: str, cur: str) -> str:
            return f"  {cur} = call {vec} @llvm.fma.v{lanes}{_suffix(elem)}({vec} {prev}, {vec} %x, {vec} %y)\n"
    else:
        def update(prev: str, cur: str) -> str:
            return f"  {cur}.m = fmul {vec} {prev}, %x\n  {cur} = fadd {vec} {cur}.m, %y\n"
    loop, tail = _chains(vec, update)
    tail += "  %r = fpext float %lane to double\n  ret double %r\n}\n" if elem == "float" else "  ret double %lane\n}\n"
    body = loop
    decl = f"declare {vec} @llvm.fma.v{lanes}{_suffix(elem)}({vec}, {vec}, {vec})\n" if fused else ""
    return decl + head + body + tail


def _chains(vec: str, update: Callable[[str, str], str]) -> tuple[str, str]:
    """The loop of ACCUMULATORS independent chains, UNROLL `update(previous, current)` steps each per
    iteration (from `%init<a>`, opening with the loop label), and the exit block's sum of the chains
    up to `%lane`, lane 0 of it."""
    phis, body = "  br label %loop\nloop:\n  %i = phi i64 [0, %entry], [%i.next, %loop]\n", ""
    for a in range(ACCUMULATORS):
        phis += f"  %acc{a} = phi {vec} [%init{a}, %entry], [%acc{a}.{UNROLL}, %loop]\n"
        body += f"  %acc{a}.0 = bitcast {vec} %acc{a} to {vec}\n"
    for u in range(1, UNROLL + 1):
        for a in range(ACCUMULATORS):
            body += update(f"%acc{a}.{u - 1}", f"%acc{a}.{u}")
    tail = "  %i.next = add i64 %i, 1\n  %more = icmp ult i64 %i.next, %n\n  br i1 %more, label %loop, label %exit\nexit:\n"
    total = f"%acc0.{UNROLL}"
    for a in range(1, ACCUMULATORS):
        tail += f"  %sum{a} = fadd {vec} {total}, %acc{a}.{UNROLL}\n"
        total = f"%sum{a}"
    return phis + body, tail + f"  %lane = extractelement {vec} {total}, i32 0\n"


def _distinct_start(a: int, vec: str, elem: str) -> str:
    """%init<a> = %y + a: every chain starts elsewhere (identical chains would be merged by the code
    generator, leaving one chain's worth of instructions)."""
    return f"  %init{a} = fadd {vec} %y, {_splat_constant(vec, elem, float(a))}\n"


def _splat_constant(vec: str, elem: str, value: float) -> str:
    lanes = int(vec[1:].split()[0])
    return "<" + ", ".join([f"{elem} {value!r}"] * lanes) + ">"


def _suffix(elem: str) -> str:
    return "f32" if elem == "float" else "f64"


def bf16_kernel_ir(name: str) -> str:
    """`double name(i64 n, double seed)`: vdpbf16ps chains (16 float32 lanes, each adding two bf16
    products: 64 flops per instruction). The operands are bf16 pairs reinterpreted from a float32
    splat of 0.5 (0.5 and 0.0: the accumulators stay finite)."""
    vec, bvec = "<16 x float>", "<32 x bfloat>"
    ir = f"declare {vec} @llvm.x86.avx512bf16.dpbf16ps.512({vec}, {bvec}, {bvec})\n"
    ir += f"define double @{name}(i64 %n, double %seed) {{\nentry:\n  %s32 = fptrunc double %seed to float\n"
    ir += _splat("y", vec, "float", 16, "%s32") + _splat("h", vec, "float", 16, "0.5")
    ir += "".join(_distinct_start(a, vec, "float") for a in range(ACCUMULATORS))
    ir += f"  %b = bitcast {vec} %h to {bvec}\n"

    def update(prev: str, cur: str) -> str:
        return f"  {cur} = call {vec} @llvm.x86.avx512bf16.dpbf16ps.512({vec} {prev}, {bvec} %b, {bvec} %b)\n"
    loop, tail = _chains(vec, update)
    return ir + loop + tail + "  %r = fpext float %lane to double\n  ret double %r\n}\n"


TILE_BITS = 8192  # the "width" under which the AMX tile probe's figure is kept: a tile's 16 rows of 512 bits
TILE_FLOPS = 2 * 16 * 16 * 32  # of one tdpbf16ps
TILE_ACCUMULATORS = 4  # independent accumulator tiles (each tdpbf16ps takes 16 cycles; 4 keep the unit busy)


def tiles_kernel_ir(name: str) -> str:
    """`double name(i64 n, double seed)`: n iterations of UNROLL tdpbf16ps on each of four
    accumulator tiles, operands zeroed tiles (the instruction's time does not depend on its data);
    the tiles configured and released around the loop. Returns `seed`."""
    data = ", ".join(f"i8 {byte}" for byte in TILE_CONFIG)
    ir = (f"@{name}.config = internal constant [64 x i8] [{data}], align 64\n"
          "declare void @llvm.x86.ldtilecfg(ptr)\ndeclare void @llvm.x86.tilezero(i8 immarg)\n"
          "declare void @llvm.x86.tdpbf16ps(i8 immarg, i8 immarg, i8 immarg)\ndeclare void @llvm.x86.tilerelease()\n")
    ir += f"define double @{name}(i64 %n, double %seed) {{\nentry:\n  call void @llvm.x86.ldtilecfg(ptr @{name}.config)\n"
    ir += "".join(f"  call void @llvm.x86.tilezero(i8 {t})\n" for t in range(8))
    ir += "  br label %loop\nloop:\n  %i = phi i64 [0, %entry], [%i.next, %loop]\n"
    for _ in range(UNROLL):
        for a in range(TILE_ACCUMULATORS):
            ir += f"  call void @llvm.x86.tdpbf16ps(i8 {a}, i8 {4 + a % 2}, i8 {6 + a // 2})\n"
    ir += ("  %i.next = add i64 %i, 1\n  %more = icmp ult i64 %i.next, %n\n  br i1 %more, label %loop, label %exit\n"
           "exit:\n  call void @llvm.x86.tilerelease()\n  ret double %seed\n}\n")
    return ir


STREAM_VECTORS = 8  # independent sums, one vector each, per loop iteration


def stream_kernel_ir(name: str, bits: int) -> str:
    """`double name(ptr p, i64 n)`: the sum of n blocks of STREAM_VECTORS vectors of doubles at p
    (a read-only stream: every byte crosses the memory bus once)."""
    lanes = bits // 64
    vec = f"<{lanes} x double>"
    ir = f"define double @{name}(ptr %p, i64 %n) {{\nentry:\n  br label %loop\nloop:\n"
    ir += "  %i = phi i64 [0, %entry], [%i.next, %loop]\n"
    body = f"  %base = mul i64 %i, {STREAM_VECTORS * lanes}\n"
    for a in range(STREAM_VECTORS):
        ir += f"  %acc{a} = phi {vec} [zeroinitializer, %entry], [%acc{a}.next, %loop]\n"
        body += (f"  %off{a} = add i64 %base, {a * lanes}\n  %q{a} = getelementptr double, ptr %p, i64 %off{a}\n"
                 f"  %v{a} = load {vec}, ptr %q{a}, align 8\n  %acc{a}.next = fadd {vec} %acc{a}, %v{a}\n")
    ir += body + "  %i.next = add i64 %i, 1\n  %more = icmp ult i64 %i.next, %n\n"
    ir += "  br i1 %more, label %loop, label %exit\nexit:\n"
    total = "%acc0.next"
    for a in range(1, STREAM_VECTORS):
        ir += f"  %sum{a} = fadd {vec} {total}, %acc{a}.next\n"
        total = f"%sum{a}"
    return ir + f"  %lane = extractelement {vec} {total}, i32 0\n  ret double %lane\n}}\n"


def clock_kernel_ir(name: str) -> str:
    """`i64 name(i64 n)`: n blocks of CLOCK_ADDS dependent register adds (x86-64 assembly, one
    cycle each): the time of a call is n * CLOCK_ADDS cycles. The addend is a register (the loop
    count), never an immediate, so that no core can fold the chain at rename."""
    adds = "\\0A".join(["addq $1, $0"] * CLOCK_ADDS)
    return (f"define i64 @{name}(i64 %n) {{\nentry:\n  br label %loop\nloop:\n"
            f"  %i = phi i64 [0, %entry], [%i.next, %loop]\n  %v = phi i64 [0, %entry], [%v.next, %loop]\n"
            f"  %v.next = call i64 asm sideeffect \"{adds}\", \"=r,r,0\"(i64 %n, i64 %v)\n"
            f"  %i.next = add i64 %i, 1\n  %more = icmp ult i64 %i.next, %n\n"
            f"  br i1 %more, label %loop, label %exit\nexit:\n  ret i64 %v.next\n}}\n")


# ------------------------------------------------------------------ compiled


@dataclass(frozen=True)
class ProbeKernel:
    """A compiled probe: call(n) runs n loop iterations; `work` is the flops (or bytes) of one."""

    name: str
    call: Callable[[int], Any]
    work: float


def _features(cpu: CpuInfo) -> set[str]:
    return {f[1:] for f in cpu.features.split(",") if f.startswith("+")}


def _widths(cpu: CpuInfo) -> list[int]:
    return [b for b in (128, 256, 512) if b <= cpu.vector_bits]


def _is_x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64")


class ProbeKernels:
    """The probe kernels of one CPU, compiled into one execution engine (kept alive with it)."""

    def __init__(self, cpu: CpuInfo) -> None:
        features = _features(cpu)
        fused = "fma" in features or "avx512f" in features
        self.fma: dict[tuple[str, int], int] = {}  # (dtype, bits) -> flops per iteration
        parts = []
        for dtype in ("float32", "float64"):
            for bits in _widths(cpu):
                lanes = bits // (32 if dtype == "float32" else 64)
                parts.append(fma_kernel_ir(f"fma_{dtype}_{bits}", dtype, bits, fused))
                self.fma[dtype, bits] = 2 * lanes * ACCUMULATORS * UNROLL
        if "avx512bf16" in features:
            parts.append(bf16_kernel_ir("fma_bfloat16_512"))
            self.fma["bfloat16", 512] = 64 * ACCUMULATORS * UNROLL
        if has_tiles(cpu):
            enable_tiles()
            parts.append(tiles_kernel_ir(f"fma_bfloat16_{TILE_BITS}"))
            self.fma["bfloat16", TILE_BITS] = TILE_FLOPS * TILE_ACCUMULATORS * UNROLL
        self.stream_bits = max(_widths(cpu))
        parts.append(stream_kernel_ir("stream", self.stream_bits))
        self.has_clock = _is_x86()
        if self.has_clock:
            parts.append(clock_kernel_ir("clock"))
        llvm = initialise_llvm()
        with LOCK:
            try:
                module = llvm.parse_assembly("\n".join(parts))
                module.verify()
                self.engine = llvm.create_mcjit_compiler(module, target_machine(cpu))
                self.engine.finalize_object()
            except RuntimeError as err:
                raise PeakProbeError(f"the peak probe's kernels do not compile for CPU {cpu.name} ({err}); "
                                     f"this is a tilec bug: report it with `tilec info --json`'s versions") from None
            self.addresses = {name: self.engine.get_function_address(name)
                              for name in [f"fma_{d}_{b}" for d, b in self.fma] + ["stream"]
                              + (["clock"] if self.has_clock else [])}

    def fma_kernel(self, dtype: str, bits: int) -> ProbeKernel:
        fn = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_int64, ctypes.c_double)(self.addresses[f"fma_{dtype}_{bits}"])
        return ProbeKernel(f"fma_{dtype}_{bits}", lambda n: fn(n, 0.5), self.fma[dtype, bits])

    def stream_kernel(self, buffer: np.ndarray) -> ProbeKernel:
        """Reads all of `buffer` (float64, its length a multiple of a block) once per iteration."""
        fn = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_void_p, ctypes.c_int64)(self.addresses["stream"])
        blocks = buffer.size // (STREAM_VECTORS * self.stream_bits // 64)
        pointer = buffer.ctypes.data

        def call(n: int) -> None:
            for _ in range(n):
                fn(pointer, blocks)
        return ProbeKernel("stream", call, float(buffer.nbytes))

    def clock_kernel(self) -> ProbeKernel:
        fn = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)(self.addresses["clock"])
        return ProbeKernel("clock", fn, float(CLOCK_ADDS))


__all__ = ["ACCUMULATORS", "CLOCK_ADDS", "STREAM_VECTORS", "UNROLL", "PeakProbeError", "ProbeKernel", "ProbeKernels",
           "TILE_BITS", "bf16_kernel_ir", "clock_kernel_ir", "fma_kernel_ir", "stream_kernel_ir", "tiles_kernel_ir"]
