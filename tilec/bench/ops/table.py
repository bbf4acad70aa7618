"""The ops `tilec bench` knows, by name: their sizes, acceptance cases, work (flops) and traffic
(the elements of their inputs and outputs).

Requires: nothing. Guarantees: OPS maps each name in OP_NAMES to its Op (attention without the
causal mask; `get_op(name, causal=True)` gives the causal one); an unknown name is a BenchError
listing the known ones.
"""

from __future__ import annotations

from collections.abc import Callable

from tilec.bench.ops.baselines import (attention_baseline, conv2d_baseline, gemm_baseline,
                                       gemm_bias_relu_baseline)
from tilec.bench.ops.inputs import (attention_inputs, check_conv2d_shape, conv2d_inputs, conv2d_output_size,
                                    gemm_bias_relu_inputs, gemm_inputs)
from tilec.bench.ops.op import BenchError, Op, Shape
from tilec.bench.ops.sources import attention_source, conv2d_source, gemm_bias_relu_source, gemm_source


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


def _gemm_elements(s: Shape) -> float:  # A, B and C
    return float(s["M"] * s["K"] + s["K"] * s["N"] + s["M"] * s["N"])


def _gemm_bias_relu_elements(s: Shape) -> float:
    return _gemm_elements(s) + s["N"]


def _conv2d_elements(s: Shape) -> float:  # the image, the filters and the output
    oh, ow = conv2d_output_size(s)
    return float(s["N"] * s["C"] * s["H"] * s["W"] + s["CO"] * s["C"] * s["KH"] * s["KW"] + s["N"] * s["CO"] * oh * ow)


def _attention_elements(s: Shape) -> float:  # Q, K, V and the output
    return 4.0 * s["B"] * s["H"] * s["S"] * s["D"]


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
              lambda s: attention_source(s, causal), attention_inputs, attention_baseline(causal),
              _attention_flops(causal), causal=causal, elements=_attention_elements)


OPS: dict[str, Op] = {
    "gemm": Op("gemm", "gemm", GEMM_SIZES, {},
               (dict(M=1024, N=1024, K=1024), dict(M=2048, N=2048, K=2048)), dict(M=64, N=48, K=32),
               "numpy.matmul", "numpy.matmul", gemm_source, gemm_inputs, gemm_baseline, _gemm_flops,
               elements=_gemm_elements),
    "gemm_bias_relu": Op("gemm_bias_relu", "gemm_bias_relu", GEMM_SIZES, {},
                         (dict(M=1024, N=1024, K=1024),), dict(M=64, N=48, K=32),
                         "numpy matmul+add+maximum", "numpy mm+add+max", gemm_bias_relu_source, gemm_bias_relu_inputs,
                         gemm_bias_relu_baseline, _gemm_flops, elements=_gemm_bias_relu_elements),
    "conv2d": Op("conv2d", "conv2d", CONV_SIZES, dict(stride=1, pad=0),
                 (_resnet_layer(64, 56, 64, 3, 1, 1), _resnet_layer(256, 14, 256, 3, 1, 1),
                  _resnet_layer(256, 56, 512, 1, 2, 0)),
                 dict(N=1, C=4, H=9, W=9, CO=8, KH=3, KW=3, stride=2, pad=1),
                 "torch.nn.functional.conv2d", "torch conv2d", conv2d_source, conv2d_inputs, conv2d_baseline,
                 _conv2d_flops, check_conv2d_shape, minimums=dict(pad=0), elements=_conv2d_elements,
                 fast_algorithms=True),
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
