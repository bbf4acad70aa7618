"""tilec.nn.functional.embedding, cross_entropy and mse_loss beyond the OpInfo rows of
test_nn_opinfo.py: the embedding samples PyTorch generates only without requires_grad (padding_idx,
max_norm, scale_grad_by_freq, sparse), and the edges of the losses (every target ignored, label
smoothing with weights and ignore_index, unbatched and empty inputs, broadcasting, refusals).
Each is compared with torch: values, gradients and, for max_norm, the weight renormalised in place.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch_reference import DTYPES, compare, opinfo

import tilec.nn
import tilec.nn.functional as T
from tilec.errors import TilecError


def _leaf(t: torch.Tensor, grad: bool) -> torch.Tensor:
    return t.detach().clone().requires_grad_(grad and t.is_floating_point())


def _same(fn_tilec, fn_torch, *args, grad=True, **kwargs):
    """fn_tilec and fn_torch on copies of args: outputs, gradients of every float argument (dense
    or sparse), and the arguments afterwards (in-place updates) agree."""
    ours = [_leaf(a, grad) if isinstance(a, torch.Tensor) else a for a in args]
    theirs = [_leaf(a, grad) if isinstance(a, torch.Tensor) else a for a in args]
    with warnings.catch_warnings(record=True) as ours_warned:
        warnings.simplefilter("always")
        got = fn_tilec(*ours, **kwargs)
    with warnings.catch_warnings(record=True) as theirs_warned:
        warnings.simplefilter("always")
        want = fn_torch(*theirs, **kwargs)
    assert len(ours_warned) == len(theirs_warned)
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got, want, equal_nan=True)
    for a, b in zip(ours, theirs):
        if isinstance(a, torch.Tensor):
            torch.testing.assert_close(a.detach(), b.detach(), equal_nan=True)
    leaves = [(a, b) for a, b in zip(ours, theirs) if isinstance(a, torch.Tensor) and a.requires_grad]
    if not leaves or not want.requires_grad:
        return
    cotangent = torch.randn(want.shape, dtype=want.dtype)
    got_grads = torch.autograd.grad(got, [a for a, _ in leaves], cotangent, allow_unused=True)
    want_grads = torch.autograd.grad(want, [b for _, b in leaves], cotangent, allow_unused=True)
    for g, w in zip(got_grads, want_grads):
        if w is None or g is None:
            assert (w is None or not w.to_dense().any()) and (g is None or not g.to_dense().any())
            continue
        assert g.is_sparse == w.is_sparse
        torch.testing.assert_close(g.to_dense(), w.to_dense())


def _embedding_samples(dtype):
    op = opinfo("nn.functional.embedding")
    return list(op.sample_inputs("cpu", dtype, requires_grad=False))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_embedding_matches_torch_on_every_opinfo_sample_with_gradients(dtype):
    samples = _embedding_samples(dtype)
    assert len(samples) == 10  # the harness's 3, and padding_idx (2), max_norm (2), scale_grad_by_freq, sparse (2)
    for sample in samples:
        weight, (idx,), kwargs = sample.input, sample.args, sample.kwargs
        if kwargs.get("sparse") and kwargs.get("scale_grad_by_freq"):
            _same(T.embedding, F.embedding, idx, weight, grad=False, **kwargs)  # torch has no such gradient
            with pytest.raises(TilecError, match="scale_grad_by_freq"):
                out = T.embedding(idx, _leaf(weight, True), **kwargs)
                out.sum().backward()
            continue
        _same(T.embedding, F.embedding, idx, weight, **kwargs)


@pytest.mark.parametrize("shape", [(), (0,), (3, 0, 2), (7,)])
@pytest.mark.parametrize("options", [{}, {"padding_idx": -2}, {"scale_grad_by_freq": True, "padding_idx": 1},
                                     {"max_norm": 0.5, "norm_type": float("inf")}, {"sparse": True, "padding_idx": 0}])
def test_embedding_shapes_and_options(shape, options):
    reference = F.embedding
    if shape == () and options.get("sparse") and "padding_idx" in options:
        # torch's own sparse backward fails on a 0-d index with padding_idx (IndexError): its result
        # for the same index as a 1-element vector, which is the same lookup, is the reference
        def reference(i, w, **kwargs):
            return F.embedding(i.reshape(1), w, **kwargs).reshape(w.shape[1:])
    weight = torch.randn(5, 4, dtype=torch.float64)
    idx = torch.randint(0, 5, shape)
    _same(T.embedding, reference, idx, weight, **options)
    _same(T.embedding, reference, idx.int(), weight.float(), **options)


def test_embedding_refusals_name_the_problem():
    weight = torch.randn(5, 4)
    with pytest.raises(TilecError, match="out of range"):
        T.embedding(torch.tensor([1, 5]), weight)
    with pytest.raises(TilecError, match="out of range"):
        T.embedding(torch.tensor([-1]), weight)
    with pytest.raises(TilecError, match="padding_idx"):
        T.embedding(torch.tensor([1]), weight, padding_idx=5)
    with pytest.raises(TilecError, match="int64 or int32"):
        T.embedding(torch.tensor([1.0]), weight)


def test_embedding_module_from_pretrained_and_max_norm():
    table = torch.randn(6, 3) * 3
    ours = tilec.nn.Embedding.from_pretrained(table.clone(), freeze=False, padding_idx=2, max_norm=1.0)
    theirs = torch.nn.Embedding.from_pretrained(table.clone(), freeze=False, padding_idx=2, max_norm=1.0)
    assert type(ours) is tilec.nn.Embedding
    idx = torch.tensor([[0, 2, 2], [5, 0, 1]])
    cotangent = torch.randn(2, 3, 3)
    got, want = ours(idx), theirs(idx)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(ours.weight.detach(), theirs.weight.detach())
    (got * cotangent).sum().backward()
    (want * cotangent).sum().backward()
    torch.testing.assert_close(ours.weight.grad, theirs.weight.grad)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("label_smoothing", [0.0, 0.3])
@pytest.mark.parametrize("weighted", [False, True])
def test_cross_entropy_class_targets(dtype, reduction, label_smoothing, weighted):
    weight = torch.rand(4, dtype=dtype) + 0.5 if weighted else None
    options = dict(weight=weight, reduction=reduction, label_smoothing=label_smoothing)
    x = torch.randn(3, 4, 2, 5, dtype=dtype)
    target = torch.randint(0, 4, (3, 2, 5))
    target[0, 0] = 2
    _same(T.cross_entropy, F.cross_entropy, x, target, ignore_index=2, **options)
    _same(T.cross_entropy, F.cross_entropy, x.to(memory_format=torch.channels_last), target, **options)
    _same(T.cross_entropy, F.cross_entropy, torch.randn(4, dtype=dtype), torch.tensor(3), **options)  # unbatched
    _same(T.cross_entropy, F.cross_entropy, x, torch.full((3, 2, 5), 1), ignore_index=1, **options)  # all ignored
    _same(T.cross_entropy, F.cross_entropy, torch.randn(0, 4, dtype=dtype), torch.zeros(0, dtype=torch.int64),
          **options)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("label_smoothing", [0.0, 0.2])
@pytest.mark.parametrize("weighted", [False, True])
def test_cross_entropy_probability_targets(dtype, reduction, label_smoothing, weighted):
    weight = torch.rand(4, dtype=dtype) + 0.5 if weighted else None
    options = dict(weight=weight, reduction=reduction, label_smoothing=label_smoothing)
    x = torch.randn(3, 4, 5, dtype=dtype)
    _same(T.cross_entropy, F.cross_entropy, x, torch.rand(3, 4, 5, dtype=dtype).softmax(1), **options)
    _same(T.cross_entropy, F.cross_entropy, x[0, :, 0], torch.rand(4, dtype=dtype), **options)  # unbatched
    _same(T.cross_entropy, F.cross_entropy, torch.randn(0, 4, dtype=dtype), torch.rand(0, 4, dtype=dtype), **options)


def test_cross_entropy_refusals_and_legacy_arguments():
    with pytest.raises(TilecError, match="out of bounds"):
        T.cross_entropy(torch.randn(2, 3), torch.tensor([0, 3]))
    with pytest.raises(TilecError, match="int64"):
        T.cross_entropy(torch.randn(2, 3), torch.tensor([0, 1], dtype=torch.int32))
    with pytest.raises(ValueError, match="is not a valid value for reduction"):
        T.cross_entropy(torch.randn(2, 3), torch.tensor([0, 1]), reduction="average")
    _same(T.cross_entropy, F.cross_entropy, torch.randn(2, 3), torch.tensor([0, 1]), size_average=False)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_mse_loss_broadcasting_weights_and_empty(dtype, reduction):
    x = torch.randn(2, 3, 4, dtype=dtype)
    _same(T.mse_loss, F.mse_loss, x, torch.randn(3, 1, dtype=dtype), reduction=reduction)  # warns, broadcasts
    _same(T.mse_loss, F.mse_loss, torch.randn((), dtype=dtype), x, reduction=reduction)
    _same(T.mse_loss, F.mse_loss, x, torch.randn(2, 3, 4, dtype=dtype), reduction=reduction,
          weight=torch.rand(2, 3, 4, dtype=dtype))
    _same(T.mse_loss, F.mse_loss, torch.randn(0, 3, dtype=dtype), torch.randn(0, 3, dtype=dtype), reduction=reduction)
    y = torch.randn(2, 3, 4, 5, dtype=dtype).to(memory_format=torch.channels_last)
    t = torch.randn(2, 3, 4, 5, dtype=dtype).to(memory_format=torch.channels_last)
    _same(T.mse_loss, F.mse_loss, y, t, reduction=reduction)
    if reduction == "none":
        assert T.mse_loss(y, t, reduction="none").is_contiguous(memory_format=torch.channels_last)
    z = torch.randn(2, 3, 1, 5, dtype=dtype).to(memory_format=torch.channels_last)  # a size-1 axis moves
    _same(T.mse_loss, F.mse_loss, z, torch.randn(2, 3, 1, 5, dtype=dtype).to(memory_format=torch.channels_last),
          reduction=reduction)


def test_float32_sums_of_many_terms_stay_within_torch_tolerance():
    """Scalar losses over ~100k terms: a float32 sum in one order drifted 12 ulps from the exact sum
    (torch's cascade sum: about 1); the blocked sums stay as close as torch's float32 result."""
    torch.manual_seed(0)
    x = torch.randn(16, 100, 8, 8, requires_grad=True)
    p = torch.rand(16, 100, 8, 8, requires_grad=True)
    assert compare(F.cross_entropy, T.cross_entropy, (x, p), {"label_smoothing": 0.2})
    assert compare(F.cross_entropy, T.cross_entropy, (x, torch.randint(0, 100, (16, 8, 8))), {"reduction": "sum"})
    assert compare(F.mse_loss, T.mse_loss, (torch.randn(300, 1000, requires_grad=True), torch.randn(300, 1000)),
                   {"reduction": "sum"})


def test_mse_loss_weight_divides_by_its_own_sum_when_the_target_broadcasts():
    x, w = torch.randn(3, 1, dtype=torch.float64), torch.rand(3, 1, dtype=torch.float64)
    _same(T.mse_loss, F.mse_loss, x, torch.randn(2, 3, 4, dtype=torch.float64), weight=w)
