"""The `stencil` template (tilec/schedule/cpu/stencil.py): sums of a few taps, vectorised along the
output's last axis, each row split into its border (scalar) and its interior (vectors, the last
one overlapping its neighbour), against numpy/torch on random inputs.

Depthwise convolutions written directly in Tile (no group axis: `F[c, 0, i, j]`) over kernel
sizes, paddings (before and after apart), dilations and widths that leave every kind of interior
(none, narrower than a vector, an exact number of vectors, a remainder); a stencil whose interior
moves with an outer variable (the cascade of narrower vectors); a one-operand sum; and the
heuristic's choice of the template for them.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import tilec
from tilec.schedule.template_schedule import TemplateConfig, TemplateSchedule


def _stencil(src: str) -> tilec.Function:
    return tilec.compile(src).with_schedule(TemplateSchedule((TemplateConfig(0, "stencil", ()),)))


def _depthwise(kh: int, kw: int, pad: tuple[int, int, int, int], dilation: int, stride: int = 1) -> str:
    top, bottom, left, right = pad
    return (f"function (X[N, C, H, W], F[C, M, {kh}, {kw}]) -> (O) {{\n"
            f"  O[n, c, x, y: N, C, (H + {top + bottom} - {dilation * (kh - 1) + 1}) / {stride} + 1, "
            f"(W + {left + right} - {dilation * (kw - 1) + 1}) / {stride} + 1] = "
            f"+(X[n, c, {stride}*x + {dilation}*i - {top}, {stride}*y + {dilation}*j - {left}] * F[c, 0, i, j]);\n}}")


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 3), c=st.integers(1, 5), h=st.integers(1, 12), w=st.integers(4, 70),
       kh=st.integers(1, 5), kw=st.integers(1, 7), pads=st.tuples(*[st.integers(0, 3)] * 4),
       dilation=st.sampled_from([1, 2]), dtype=st.sampled_from([np.float32, np.float64]), seed=st.integers(0, 2**16))
def test_depthwise_convolutions_agree_with_torch(n, c, h, w, kh, kw, pads, dilation, dtype, seed):
    """Whichever template the heuristic takes (the stencil's where it applies: not where a padding
    leaves output cells no tap reaches, which makes the output not direct, nor for 1x1 filters)."""
    top, bottom, left, right = pads
    oh = h + top + bottom - dilation * (kh - 1)
    ow = w + left + right - dilation * (kw - 1)
    if oh < 1 or ow < 1:
        return  # (no output)
    rng = np.random.default_rng(seed)
    x, f = rng.standard_normal((n, c, h, w)).astype(dtype), rng.standard_normal((c, 1, kh, kw)).astype(dtype)
    got = _check(tilec.compile(_depthwise(kh, kw, pads, dilation)), x, f, pads, dilation)
    assert got.dtype == dtype


def _check(fn: tilec.Function, x: np.ndarray, f: np.ndarray, pads: tuple[int, int, int, int], dilation: int,
           stride: int = 1) -> np.ndarray:
    top, bottom, left, right = pads
    got = fn(x, f)
    padded = F.pad(torch.from_numpy(x).double(), (left, right, top, bottom))
    want = F.conv2d(padded, torch.from_numpy(f).double(), stride=stride, dilation=dilation, groups=x.shape[1]).numpy()
    tol = 1e-5 if x.dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * f.shape[2] * f.shape[3])
    return got


def test_the_template_takes_the_usual_depthwise_filters():
    """3x3, 5x5 and 7x7 with 'same' padding, a dilated 3x3, rows of 4 to 67 columns (no vector,
    one, several, a remainder), forced and as the heuristic's choice."""
    rng = np.random.default_rng(0)
    for k, dilation, width in ((3, 1, 4), (3, 1, 16), (3, 1, 28), (5, 1, 35), (7, 1, 67), (3, 2, 19), (7, 1, 7)):
        pad = dilation * (k - 1) // 2
        pads = (pad, pad, pad, pad)
        src = _depthwise(k, k, pads, dilation)
        x, f = rng.standard_normal((2, 3, 9, width)).astype(np.float32), rng.standard_normal((3, 1, k, k)).astype(np.float32)
        assert "stencil" in tilec.compile(src).explain({"X": x.shape, "F": f.shape}, stage="templates")
        _check(_stencil(src), x, f, pads, dilation)


def test_stride_two_depthwise_convolutions_read_every_other_column():
    """A stride-2 read of y (MobileNet's downsampling layers): its interior from the guards divided
    by the stride, rounded inwards; widths whose last column does or does not reach the border."""
    rng = np.random.default_rng(3)
    for k, width in ((3, 8), (3, 9), (3, 40), (5, 41), (7, 70)):
        pads = (k // 2,) * 4
        src = _depthwise(k, k, pads, 1, stride=2)
        x, f = rng.standard_normal((2, 3, 11, width)).astype(np.float32), rng.standard_normal((3, 1, k, k)).astype(np.float32)
        assert "stencil" in tilec.compile(src).explain({"X": x.shape, "F": f.shape}, stage="templates")
        _check(_stencil(src), x, f, pads, 1, stride=2)


def test_an_interior_that_moves_with_an_outer_variable_takes_narrower_vectors():
    """O[x, y] = +(A[x, x + y + j - 2]) for j < 3: the reads of row x shift by x, so the columns
    whose taps stay inside depend on the row."""
    src = "function (A[R, K]) -> (O) { O[x, y: R, K] = +(A[x, x + y + j - 2]), j < 3; }"
    fn = _stencil(src)
    a = np.random.default_rng(1).standard_normal((9, 37)).astype(np.float32)
    want = np.zeros_like(a)
    for x in range(9):
        for y in range(37):
            want[x, y] = sum(a[x, x + y + j - 2] for j in range(3) if 0 <= x + y + j - 2 < 37)
    np.testing.assert_allclose(fn(a), want, rtol=1e-6, atol=1e-6)


def test_a_one_operand_stencil_and_the_heuristic_choice():
    """A 5-point box sum along rows (one operand, no weight): the heuristic takes the template."""
    src = "function (A[R, K]) -> (O) { O[x, y: R, K] = +(A[x, y + j - 2]), j < 5; }"
    a = np.random.default_rng(2).standard_normal((6, 50)).astype(np.float32)
    fn = tilec.compile(src)
    assert "stencil" in fn.explain({"A": a.shape}, stage="templates")
    padded = np.pad(a.astype(np.float64), ((0, 0), (2, 2)))
    want = sum(padded[:, j:j + 50] for j in range(5))
    np.testing.assert_allclose(fn(a), want, rtol=1e-5, atol=1e-5)
    dw = tilec.compile(_depthwise(3, 3, (1, 1, 1, 1), 1))
    assert "stencil" in dw.explain({"X": (2, 3, 8, 8), "F": (3, 1, 3, 3)}, stage="templates")


def test_what_the_template_refuses_it_names():
    """A stride-3 read of the last variable, a long reduction, a max, a guard reading -y: the template
    does not apply (the heuristic's other choices compute them: tests/test_autodiff.py)."""
    strided = "function (X[N, W], F[K]) -> (O) { O[n, y: N, W / 3 - 2] = +(X[n, 3*y + j] * F[j]); }"
    long_sum = "function (A[R, K]) -> (O) { O[x, y: R, K] = +(A[x, y + j - 40]), j < 80; }"
    peak = "function (A[R, K]) -> (O) { O[x, y: R, K] = >(A[x, y + j - 1]), j < 3; }"
    flipped = "function (D[N]) -> (O) { O[k: 6] = +(D[i]), i - k < 3; }"  # a guard with -y: no interior
    for src, shape in ((strided, {"X": (2, 40), "F": (3,)}), (long_sum, {"A": (2, 100)}), (peak, {"A": (2, 9)}),
                       (flipped, {"D": (6,)})):
        try:
            _stencil(src).explain(shape, stage="templates")
        except tilec.TilecError as err:
            assert "stencil" in str(err) and "64 tuples" in str(err)
        else:
            raise AssertionError(f"the stencil template applied to {src}")
