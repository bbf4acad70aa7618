"""The ops that `tilec bench` times: each op's Tile source, inputs, baseline and shapes.

Every Tile source of the benchmark lives in this module (the `*_source` functions), so that
schedule work can replace them with tuned templates in one place. A source is plain text with
the op's static parameters (strides, padding, the softmax scale) substituted as literals.

Inputs are made in the baseline's layout (torch's NCHW/OIHW for conv2d); whatever layout a
tilec kernel prefers, converting to it belongs inside the kernel and so inside its timed call.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from tilec.errors import TilecError

Shape = Mapping[str, int]
Inputs = tuple[np.ndarray, ...]

DTYPES = ("float32", "float64")


class BenchError(TilecError):
    """A benchmark cannot run as asked: bad --shape, missing baseline library, wrong result."""


# ------------------------------------------------------------------ Tile sources


def gemm_source(shape: Shape) -> str:
    return "function (A[M, K], B[K, N]) -> (C) { C[i, j: M, N] = +(A[i, k] * B[k, j]); }"


def gemm_bias_relu_source(shape: Shape) -> str:
    return ("function (A[M, K], B[K, N], Bias[N]) -> (C) {\n"
            "    T[i, j: M, N] = +(A[i, k] * B[k, j]);\n"
            "    C = relu(T + Bias);\n"
            "}")


def conv2d_source(shape: Shape) -> str:
    """NCHW in and out (torch's layout). A 1x1 kernel is a GEMM per output row straight on NCHW
    (no copy of the input, of which a strided conv reads only part); larger kernels convert to
    NHWC/HWIO inside the program (part of the timed call) so the channels are the GEMM's
    reduction and the output channels its vector axis."""
    s, p = shape["stride"], shape["pad"]
    oh, ow = f"(H + {2 * p} - KH) / {s} + 1", f"(W + {2 * p} - KW) / {s} + 1"
    if shape.get("KH") == 1 and shape.get("KW") == 1 and p == 0:
        return (f"function (X[N, C, H, W], F[CO, C, KH, KW]) -> (O) {{\n"
                f"    O[n, co, x, y: N, CO, {oh}, {ow}] = +(X[n, c, {s}*x, {s}*y] * F[co, c, 0, 0]);\n"
                f"}}")
    return (f"function (X[N, C, H, W], F[CO, C, KH, KW]) -> (O) {{\n"
            f"    I[n, h, w, c: N, H, W, C] = =(X[n, c, h, w]);\n"
            f"    K[i, j, c, co: KH, KW, C, CO] = =(F[co, c, i, j]);\n"
            f"    Y[n, x, y, co: N, {oh}, {ow}, CO] = +(I[n, {s}*x + i - {p}, {s}*y + j - {p}, c] * K[i, j, c, co]);\n"
            f"    O[n, co, x, y: N, CO, {oh}, {ow}] = =(Y[n, x, y, co]);\n"
            f"}}")


def attention_source(shape: Shape, causal: bool = False) -> str:
    """softmax(Q K^T / sqrt(D)) V as the op library writes it (tilec/ops/sources.py), unfused in Tile;
    the templates turn it into one fused kernel."""
    from tilec.ops.sources import attention_source as library_source

    return library_source(causal, 1.0 / math.sqrt(shape["D"]))


# ------------------------------------------------------------------ baselines


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise BenchError("this baseline needs PyTorch; install it with "
                         "`python -m pip install torch` (or run scripts/install.sh)") from None
    return torch


def _gemm_baseline(inputs: Inputs, shape: Shape) -> Callable[[], Any]:
    a, b = inputs
    return lambda: np.matmul(a, b)


def _gemm_bias_relu_baseline(inputs: Inputs, shape: Shape) -> Callable[[], Any]:
    a, b, bias = inputs
    return lambda: np.maximum(np.matmul(a, b) + bias, 0)


def _conv2d_baseline(inputs: Inputs, shape: Shape) -> Callable[[], Any]:
    torch = _torch()
    x, f = (torch.from_numpy(a) for a in inputs)
    stride, pad = shape["stride"], shape["pad"]
    return lambda: torch.nn.functional.conv2d(x, f, stride=stride, padding=pad)


def _attention_baseline(causal: bool) -> Callable[[Inputs, Shape], Callable[[], Any]]:
    def build(inputs: Inputs, shape: Shape) -> Callable[[], Any]:
        torch = _torch()
        q, k, v = (torch.from_numpy(a) for a in inputs)
        return lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return build


# ------------------------------------------------------------------ inputs and work


def _random(rng: np.random.Generator, dtype: str, *dims: int) -> np.ndarray:
    return rng.standard_normal(dims, dtype=np.dtype(dtype))  # type: ignore[call-overload]


def _gemm_inputs(s: Shape, dtype: str, rng: np.random.Generator) -> Inputs:
    return _random(rng, dtype, s["M"], s["K"]), _random(rng, dtype, s["K"], s["N"])


def _gemm_bias_relu_inputs(s: Shape, dtype: str, rng: np.random.Generator) -> Inputs:
    return _gemm_inputs(s, dtype, rng) + (_random(rng, dtype, s["N"]),)


def _conv2d_inputs(s: Shape, dtype: str, rng: np.random.Generator) -> Inputs:
    return (_random(rng, dtype, s["N"], s["C"], s["H"], s["W"]),
            _random(rng, dtype, s["CO"], s["C"], s["KH"], s["KW"]))


def _attention_inputs(s: Shape, dtype: str, rng: np.random.Generator) -> Inputs:
    return tuple(_random(rng, dtype, s["B"], s["H"], s["S"], s["D"]) for _ in range(3))


def conv2d_output_size(s: Shape) -> tuple[int, int]:
    return ((s["H"] + 2 * s["pad"] - s["KH"]) // s["stride"] + 1,
            (s["W"] + 2 * s["pad"] - s["KW"]) // s["stride"] + 1)


def _conv2d_check(s: Shape) -> None:
    oh, ow = conv2d_output_size(s)
    if s["H"] + 2 * s["pad"] < s["KH"] or s["W"] + 2 * s["pad"] < s["KW"] or oh < 1 or ow < 1:
        raise BenchError(f"conv2d: a {s['KH']}x{s['KW']} kernel does not fit a {s['H']}x{s['W']} image "
                         f"with pad={s['pad']}; make H and W at least KH - 2*pad and KW - 2*pad")


def _no_check(s: Shape) -> None:
    pass


# ------------------------------------------------------------------ the ops


@dataclass(frozen=True)
class Op:
    name: str
    label: str  # the name in reports: "attention" or "attention-causal"
    sizes: tuple[str, ...]  # the --shape names, in report order
    defaults: Mapping[str, int]  # sizes that may be left out (conv2d's stride and pad)
    cases: tuple[Mapping[str, int], ...]  # the acceptance cases, run when no --shape is given
    quick: Mapping[str, int]  # a small case for --quick and the tests
    baseline: str  # what the baseline is, in JSON reports
    baseline_short: str  # and in the table
    source: Callable[[Shape], str]
    make_inputs: Callable[[Shape, str, np.random.Generator], Inputs]
    make_baseline: Callable[[Inputs, Shape], Callable[[], Any]]
    flops: Callable[[Shape], float]
    check_shape: Callable[[Shape], None] = _no_check
    minimums: Mapping[str, int] = field(default_factory=dict)  # sizes that may be 0 otherwise must be >= 1
    causal: bool = False
    wrt: tuple[str, ...] = ()  # a backward case: tilec.grad of `source` with respect to these inputs

    @property
    def backward(self) -> bool:
        return bool(self.wrt)


def _gemm_flops(s: Shape) -> float:
    return 2.0 * s["M"] * s["N"] * s["K"]


def _conv2d_flops(s: Shape) -> float:
    oh, ow = conv2d_output_size(s)
    return 2.0 * s["N"] * oh * ow * s["CO"] * s["C"] * s["KH"] * s["KW"]


def _attention_flops(causal: bool) -> Callable[[Shape], float]:
    def flops(s: Shape) -> float:  # two S x S x D products; causal does about half the work
        full = 4.0 * s["B"] * s["H"] * s["S"] * s["S"] * s["D"]
        return full / 2 if causal else full
    return flops


def _resnet_layer(c: int, hw: int, co: int, k: int, stride: int, pad: int) -> dict[str, int]:
    return dict(N=8, C=c, H=hw, W=hw, CO=co, KH=k, KW=k, stride=stride, pad=pad)


GEMM_SIZES = ("M", "N", "K")
CONV_SIZES = ("N", "C", "H", "W", "CO", "KH", "KW", "stride", "pad")
ATTENTION_SIZES = ("B", "H", "S", "D")
ATTENTION_CASE = dict(B=4, H=8, S=512, D=64)
ATTENTION_QUICK = dict(B=1, H=2, S=32, D=16)


def _attention(causal: bool) -> Op:
    return Op("attention", "attention-causal" if causal else "attention", ATTENTION_SIZES, {},
              (ATTENTION_CASE,), ATTENTION_QUICK,
              "torch.nn.functional.scaled_dot_product_attention" + ("(is_causal=True)" if causal else ""),
              "torch sdpa" + (" causal" if causal else ""),
              lambda s: attention_source(s, causal), _attention_inputs, _attention_baseline(causal),
              _attention_flops(causal), causal=causal)


OPS: dict[str, Op] = {
    "gemm": Op("gemm", "gemm", GEMM_SIZES, {},
               (dict(M=1024, N=1024, K=1024), dict(M=2048, N=2048, K=2048)), dict(M=64, N=48, K=32),
               "numpy.matmul", "numpy.matmul", gemm_source, _gemm_inputs, _gemm_baseline, _gemm_flops),
    "gemm_bias_relu": Op("gemm_bias_relu", "gemm_bias_relu", GEMM_SIZES, {},
                         (dict(M=1024, N=1024, K=1024),), dict(M=64, N=48, K=32),
                         "numpy matmul+add+maximum", "numpy mm+add+max", gemm_bias_relu_source, _gemm_bias_relu_inputs,
                         _gemm_bias_relu_baseline, _gemm_flops),
    "conv2d": Op("conv2d", "conv2d", CONV_SIZES, dict(stride=1, pad=0),
                 (_resnet_layer(64, 56, 64, 3, 1, 1), _resnet_layer(256, 14, 256, 3, 1, 1),
                  _resnet_layer(256, 56, 512, 1, 2, 0)),
                 dict(N=1, C=4, H=9, W=9, CO=8, KH=3, KW=3, stride=2, pad=1),
                 "torch.nn.functional.conv2d", "torch conv2d", conv2d_source, _conv2d_inputs, _conv2d_baseline,
                 _conv2d_flops, _conv2d_check, minimums=dict(pad=0)),
    "attention": _attention(False),
}
OP_NAMES = tuple(OPS)


def get_op(name: str, causal: bool = False) -> Op:
    if name not in OPS:
        raise BenchError(f"unknown op '{name}'; the ops are {', '.join(OP_NAMES)} (or all)")
    if causal:
        if name != "attention":
            raise BenchError(f"--causal applies to attention only, not to {name}")
        return _attention(True)
    return OPS[name]


# ------------------------------------------------------------------ backward cases
#
# tilec's side is `tilec.grad(source, wrt)` called on the forward inputs and the output gradient
# (the derived program recomputes only the forward values the gradients read: the NHWC copies for
# conv2d, the softmax for attention). torch's side runs the forward once, outside the timed call,
# and times `torch.autograd.grad(y, inputs, dy, retain_graph=True)`: only the saved graph's backward
# nodes (ConvolutionBackward0 -> aten.convolution_backward; SDPA's backward kernel).

BACKWARD_BASELINE = "torch.autograd.grad(y, inputs, dy, retain_graph=True) after y = "


def _with_grad_output(make: Callable[[Shape, str, np.random.Generator], Inputs],
                      out_shape: Callable[[Shape], tuple[int, ...]]) -> Callable[[Shape, str, np.random.Generator], Inputs]:
    def inputs(s: Shape, dtype: str, rng: np.random.Generator) -> Inputs:
        return make(s, dtype, rng) + (_random(rng, dtype, *out_shape(s)),)
    return inputs


def _conv2d_out_shape(s: Shape) -> tuple[int, ...]:
    return (s["N"], s["CO"]) + conv2d_output_size(s)


def _attention_out_shape(s: Shape) -> tuple[int, ...]:
    return s["B"], s["H"], s["S"], s["D"]


def _backward_baseline(forward: Callable[..., Any]) -> Callable[[Inputs, Shape], Callable[[], Any]]:
    def build(inputs: Inputs, shape: Shape) -> Callable[[], Any]:
        torch = _torch()
        xs = tuple(torch.from_numpy(a).requires_grad_(True) for a in inputs[:-1])
        dy = torch.from_numpy(inputs[-1])
        y = forward(torch, shape, *xs)
        return lambda: torch.autograd.grad(y, xs, dy, retain_graph=True)
    return build


def _conv2d_forward(torch: Any, s: Shape, x: Any, w: Any) -> Any:
    return torch.nn.functional.conv2d(x, w, stride=s["stride"], padding=s["pad"])


def _attention_forward(causal: bool) -> Callable[..., Any]:
    def forward(torch: Any, s: Shape, q: Any, k: Any, v: Any) -> Any:
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return forward


def backward_op(op: Op) -> Op:
    """The gradients of `op`'s inputs given its output's gradient, against torch autograd."""
    wrt: tuple[str, ...]
    if op.name == "conv2d":
        wrt, out_shape, forward = ("X", "F"), _conv2d_out_shape, _conv2d_forward
        flops_factor = 2.0  # the input and the weight gradient: one conv's work each
    elif op.name == "attention":
        wrt, out_shape, forward = ("Q", "K", "V"), _attention_out_shape, _attention_forward(op.causal)
        flops_factor = 2.5  # QK^T again, dP = dO V^T, dV, dQ, dK: five products to the forward's two
    else:
        raise BenchError(f"--backward applies to conv2d and attention, not to {op.name}")
    forward_flops = op.flops
    return replace(op, label=f"{op.label}-backward", baseline=BACKWARD_BASELINE + op.baseline,
                   baseline_short=f"{op.baseline_short} bwd",
                   make_inputs=_with_grad_output(op.make_inputs, out_shape),
                   make_baseline=_backward_baseline(forward),
                   flops=lambda s: flops_factor * forward_flops(s), wrt=wrt)


BACKWARD_OPS = ("conv2d", "attention")


def parse_shape(op: Op, text: str) -> dict[str, int]:
    """`M=1024,N=1024,K=1024` -> {"M": 1024, ...}, in the op's order, defaults filled in."""
    expected = ", ".join(op.sizes)
    given: dict[str, int] = {}
    for item in (part.strip() for part in text.split(",")):
        name, sep, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name or not value:
            raise BenchError(f"--shape {text!r}: expected NAME=VALUE pairs separated by commas, such as "
                             f"{format_shape(op.cases[0])}; got {item!r}")
        if name not in op.sizes:
            raise BenchError(f"--shape {text!r}: unknown size '{name}' for {op.name}; its sizes are {expected}")
        if name in given:
            raise BenchError(f"--shape {text!r}: size '{name}' given twice")
        try:
            number = int(value)
        except ValueError:
            raise BenchError(f"--shape {text!r}: {name} must be an integer, got {value!r}") from None
        least = op.minimums.get(name, 1)
        if number < least:
            raise BenchError(f"--shape {text!r}: {name} must be at least {least}, got {number}")
        given[name] = number
    missing = [n for n in op.sizes if n not in given and n not in op.defaults]
    if missing:
        raise BenchError(f"--shape {text!r}: missing {', '.join(missing)}; {op.name} needs {expected}"
                         + (f" ({', '.join(f'{k}={v}' for k, v in op.defaults.items())} by default)"
                            if op.defaults else ""))
    shape = {n: given.get(n, op.defaults.get(n, 0)) for n in op.sizes}
    op.check_shape(shape)
    return shape


def format_shape(shape: Shape) -> str:
    return ",".join(f"{k}={v}" for k, v in shape.items())


# ------------------------------------------------------------------ a case: what the harness runs


@dataclass(frozen=True)
class Prepared:
    """Zero-argument calls of both sides on the same inputs, and a check of their results."""

    tilec: Callable[[], Any]
    baseline: Callable[[], Any]
    check: Callable[[Any, Any], None]


@dataclass(frozen=True)
class Case:
    op: Op
    shape: Mapping[str, int]
    dtype: str = "float32"
    target: str = "llvm"
    seed: int = 0

    @property
    def flops(self) -> float:
        return self.op.flops(self.shape)

    def source(self) -> str:
        return self.op.source(self.shape)

    def prepare(self) -> Prepared:
        """Make the inputs and both callables; the Tile program is compiled on its first call."""
        import tilec

        inputs = self.op.make_inputs(self.shape, self.dtype, np.random.default_rng(self.seed))
        if self.op.wrt:
            fn = tilec.grad(self.source(), self.op.wrt, target=self.target)
        else:
            fn = tilec.compile(self.source(), target=self.target)
        baseline = self.op.make_baseline(inputs, self.shape)
        return Prepared(lambda: fn(*inputs), baseline, self.check)

    def check(self, got: Any, expected: Any) -> None:
        """Raise a BenchError unless tilec's result matches the baseline's (loosely: fp32 sums differ)."""
        if isinstance(expected, (tuple, list)):  # a backward case: one result per gradient
            got = got if isinstance(got, (tuple, list)) else (got,)
            if len(got) != len(expected):
                raise BenchError(f"{self.op.label}: tilec gives {len(got)} gradients, the baseline {len(expected)}")
            for k, (g, e) in enumerate(zip(got, expected)):
                self._check_one(g, e, f" (d{self.op.wrt[k]})" if k < len(self.op.wrt) else "")
            return
        self._check_one(got, expected, "")

    def _check_one(self, got: Any, expected: Any, what: str) -> None:
        got = np.asarray(got)
        expected = np.asarray(expected.detach()) if hasattr(expected, "detach") else np.asarray(expected)
        where = f"{self.op.label}{what} {format_shape(self.shape)}"
        if got.shape != expected.shape:
            raise BenchError(f"{where}: tilec's result has shape {got.shape}, {self.op.baseline} gives "
                             f"{expected.shape}")
        scale = float(np.max(np.abs(expected))) if expected.size else 0.0
        rtol, atol = 1e-3, 1e-3 * max(scale, 1e-6)
        bad = ~np.isclose(got, expected, rtol=rtol, atol=atol)
        if bad.any():
            first = tuple(int(i) for i in np.argwhere(bad)[0])
            raise BenchError(f"{where}: tilec's result differs from {self.op.baseline} at {int(bad.sum())} of "
                             f"{bad.size} elements; first at {first}: tilec {got[first]!r}, baseline "
                             f"{expected[first]!r} (rtol {rtol}, atol {atol:.3g})")


def select_cases(op_name: str, shapes: Sequence[str] = (), *, causal: bool = False, quick: bool = False,
                 dtype: str = "float32", target: str = "llvm", backward: bool = False) -> list[Case]:
    """The cases `tilec bench` runs: for one op (or "all"), the --shape ones, the quick one or the
    acceptance cases. "all" includes causal attention; with `backward`, "all" is the ops that have
    a backward case (conv2d, attention, causal attention), each case's gradients."""
    if dtype not in DTYPES:
        raise BenchError(f"--dtype {dtype}: the benchmarks run in {' or '.join(DTYPES)}")
    if shapes and quick:
        raise BenchError("give --shape or --quick, not both")
    if op_name == "all":
        if shapes:
            raise BenchError("--shape needs one op: tilec bench OP --shape ...")
        if causal:
            raise BenchError("--causal needs the attention op: tilec bench attention --causal")
        chosen = [OPS[name] for name in OP_NAMES] + [get_op("attention", causal=True)]
        if backward:
            chosen = [op for op in chosen if op.name in BACKWARD_OPS]
    else:
        chosen = [get_op(op_name, causal)]
    if backward:
        chosen = [backward_op(op) for op in chosen]
    cases = []
    for op in chosen:
        if shapes:
            picked: Sequence[Mapping[str, int]] = [parse_shape(op, text) for text in shapes]
        else:
            picked = [op.quick] if quick else list(op.cases)
        cases += [Case(op, dict(shape), dtype, target) for shape in picked]
    return cases
