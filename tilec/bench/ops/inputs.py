"""The inputs of the ops that `tilec bench` times: random arrays in the baseline's layout.

Inputs are made in the baseline's layout (torch's NCHW/OIHW for conv2d); whatever layout a
tilec kernel prefers, converting to it belongs inside the kernel and so inside its timed call.

Requires: the op's sizes, a dtype name and a random generator. Guarantees: standard-normal
arrays of that dtype, the same for the same generator state; `check_conv2d_shape` refuses sizes
whose conv has no output, with a BenchError that says how to fix them.
"""

from __future__ import annotations

import numpy as np

from tilec.bench.ops.op import BenchError, Inputs, Shape


def random_array(rng: np.random.Generator, dtype: str, *dims: int) -> np.ndarray:
    if dtype in ("float32", "float64"):
        return rng.standard_normal(dims, dtype=np.dtype(dtype))  # type: ignore[call-overload]
    return rng.standard_normal(dims, dtype=np.float32).astype(dtype)  # 16-bit floats: float32 values rounded


def gemm_inputs(s: Shape, dtype: str, rng: np.random.Generator) -> Inputs:
    return random_array(rng, dtype, s["M"], s["K"]), random_array(rng, dtype, s["K"], s["N"])


def gemm_bias_relu_inputs(s: Shape, dtype: str, rng: np.random.Generator) -> Inputs:
    return gemm_inputs(s, dtype, rng) + (random_array(rng, dtype, s["N"]),)


def conv2d_inputs(s: Shape, dtype: str, rng: np.random.Generator) -> Inputs:
    return (random_array(rng, dtype, s["N"], s["C"], s["H"], s["W"]),
            random_array(rng, dtype, s["CO"], s["C"], s["KH"], s["KW"]))


def attention_inputs(s: Shape, dtype: str, rng: np.random.Generator) -> Inputs:
    return tuple(random_array(rng, dtype, s["B"], s["H"], s["S"], s["D"]) for _ in range(3))


def conv2d_output_size(s: Shape) -> tuple[int, int]:
    return ((s["H"] + 2 * s["pad"] - s["KH"]) // s["stride"] + 1,
            (s["W"] + 2 * s["pad"] - s["KW"]) // s["stride"] + 1)


def check_conv2d_shape(s: Shape) -> None:
    oh, ow = conv2d_output_size(s)
    if s["H"] + 2 * s["pad"] < s["KH"] or s["W"] + 2 * s["pad"] < s["KW"] or oh < 1 or ow < 1:
        raise BenchError(f"conv2d: a {s['KH']}x{s['KW']} kernel does not fit a {s['H']}x{s['W']} image "
                         f"with pad={s['pad']}; make H and W at least KH - 2*pad and KW - 2*pad")
