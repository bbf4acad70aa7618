"""The backend's convolutions leave out kernel taps that read only padding when one tap per
dimension is left (a 3x3 kernel on a 1x1 map), forward and backward, against torch's own convolution and its gradients
(tilec/torch_backend/lowering/library.py, `live_taps`)."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
from tilec.torch_backend.lowering import library  # noqa: E402

aten = torch.ops.aten


def test_live_taps_of_resnets_last_stage():
    centre = library.live_taps((1, 1), (3, 3), (1, 1), (1, 1), (1, 1))
    assert centre == ((slice(1, 2), slice(1, 2)), (0, 0))  # a 1x1 convolution without padding
    assert library.live_taps((2, 2), (3, 3), (2, 2), (1, 1), (1, 1)) is None  # 2x2 taps live: the whole kernel
    assert library.live_taps((8, 8), (3, 3), (1, 1), (1, 1), (1, 1)) is None  # every tap reads the input


@settings(max_examples=25, deadline=None)
@given(size=st.tuples(st.integers(1, 4), st.integers(1, 4)), kernel=st.tuples(st.integers(1, 4), st.integers(1, 4)),
       stride=st.integers(1, 3), padding=st.integers(0, 3), dilation=st.integers(1, 2), seed=st.integers(0, 2**31 - 1))
@example(size=(1, 1), kernel=(3, 3), stride=1, padding=1, dilation=1, seed=0)  # the centre tap alone
@example(size=(2, 2), kernel=(3, 3), stride=2, padding=1, dilation=1, seed=1)  # 2x2 of the 3x3 taps: all of it
@example(size=(1, 1), kernel=(3, 1), stride=1, padding=2, dilation=2, seed=2)  # dilated: the centre alone
def test_convolutions_on_small_maps_match_torch(size, kernel, stride, padding, dilation, seed):
    stride_, padding_, dilation_ = [stride] * 2, [padding] * 2, [dilation] * 2
    if any(n + 2 * padding - dilation * (k - 1) < 1 for n, k in zip(size, kernel)):
        return  # torch refuses a kernel larger than the padded input too
    gen = torch.Generator().manual_seed(seed)
    x, w, b = torch.randn(2, 3, *size, generator=gen), torch.randn(5, 3, *kernel, generator=gen), torch.randn(5, generator=gen)
    want = aten.convolution(x, w, b, stride_, padding_, dilation_, False, [0, 0], 1)
    got = library.conv(x, w, b, stride_, padding_, dilation_, False, [0, 0], 1)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    g = torch.randn(want.shape, generator=gen)
    mask = [True, True, True]
    want_grads = aten.convolution_backward(g, x, w, [5], stride_, padding_, dilation_, False, [0, 0], 1, mask)
    got_grads = library.conv_backward(g, x, w, [5], stride_, padding_, dilation_, False, [0, 0], 1, mask)
    for got_g, want_g in zip(got_grads, want_grads):
        torch.testing.assert_close(got_g, want_g, rtol=1e-4, atol=1e-4)
