"""The PyTorch ops (tilec/ops/torch_ops.py) and modules (tilec/nn.py) against torch's own."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import tilec
import tilec.nn as tnn
from tilec.ops import torch_ops as T
from tilec.ops.arguments import as_list, same_dtype
from tilec.ops.conv2d import _conv2d_check


def rand(*shape: int, grad: bool = True) -> torch.Tensor:
    return torch.randn(*shape, dtype=torch.float32).requires_grad_(grad)


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


def check_op(ours: Callable[..., torch.Tensor], theirs: Callable[..., torch.Tensor], *args: Any) -> None:
    """Forward and the gradients of every tensor argument, ours vs torch's (float32)."""
    tensors = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    out, ref = ours(*args), theirs(*args)
    assert out.shape == ref.shape and out.dtype == ref.dtype
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)
    g = torch.randn_like(ref)
    got = torch.autograd.grad(out, tensors, g)
    want = torch.autograd.grad(ref, tensors, g)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4)


# ------------------------------------------------------------------ forward and gradients vs torch


@pytest.mark.parametrize("stride,padding,dilation,bias", [
    (1, 0, 1, True), (2, 1, 1, False), ((2, 1), (1, 2), 1, True), (1, 2, 2, True)])
def test_conv2d(stride: Any, padding: Any, dilation: Any, bias: bool) -> None:
    x, w = rand(2, 3, 9, 8), rand(4, 3, 3, 2)
    b = rand(4) if bias else None
    check_op(lambda x, w, b: T.conv2d(x, w, b, stride, padding, dilation),
             lambda x, w, b: F.conv2d(x, w, b, stride, padding, dilation), x, w, b)


@pytest.mark.parametrize("cin,cout,groups,stride,padding,dilation,bias", [
    (4, 6, 2, 1, 1, 1, True), (6, 6, 6, 2, 1, 1, True), (6, 12, 3, (1, 2), 0, 2, False), (8, 8, 8, 1, 1, 1, False)])
def test_conv2d_groups(cin: int, cout: int, groups: int, stride: Any, padding: Any, dilation: Any,
                       bias: bool) -> None:
    """Grouped and depthwise (groups == channels) convs, forward and gradients, through the eager
    wrapper and the registered op."""
    x, w = rand(2, cin, 7, 8), rand(cout, cin // groups, 3, 3)
    b = rand(cout) if bias else None
    check_op(lambda x, w, b: T.conv2d(x, w, b, stride, padding, dilation, groups),
             lambda x, w, b: F.conv2d(x, w, b, stride, padding, dilation, groups), x, w, b)
    check_op(lambda x, w, b: torch.ops.tilec.conv2d(x, w, b, as_list(stride), as_list(padding),
                                                    as_list(dilation), groups),
             lambda x, w, b: F.conv2d(x, w, b, stride, padding, dilation, groups), x, w, b)


@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
@pytest.mark.parametrize("bias", [True, False])
def test_linear(activation: str | None, bias: bool) -> None:
    act = {None: lambda t: t, "relu": F.relu, "gelu": F.gelu}[activation]
    check_op(lambda x, w, b: T.linear(x, w, b, activation), lambda x, w, b: act(F.linear(x, w, b)),
             rand(2, 3, 5), rand(4, 5), rand(4) if bias else None)


def test_linear_1d_input() -> None:
    check_op(T.linear, F.linear, rand(5), rand(3, 5), rand(3))


@pytest.mark.parametrize("causal", [False, True])
def test_attention(causal: bool) -> None:
    check_op(lambda q, k, v: T.attention(q, k, v, causal),
             lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
             rand(2, 2, 5, 4), rand(2, 2, 7, 4), rand(2, 2, 7, 3))


def test_attention_scale() -> None:
    check_op(lambda q, k, v: T.attention(q, k, v, scale=0.3),
             lambda q, k, v: F.scaled_dot_product_attention(q, k, v, scale=0.3),
             rand(1, 2, 4, 4), rand(1, 2, 4, 4), rand(1, 2, 4, 4))


def test_relu_gelu() -> None:
    check_op(T.relu, F.relu, rand(3, 4, 5))
    check_op(T.gelu, F.gelu, rand(3, 4, 5))


@pytest.mark.parametrize("dim", [-1, 1])
def test_softmax(dim: int) -> None:
    check_op(lambda x: T.softmax(x, dim), lambda x: torch.softmax(x, dim), rand(3, 4, 5))


@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm(affine: bool) -> None:
    w, b = (rand(5), rand(5)) if affine else (None, None)
    check_op(lambda x, w, b: T.layer_norm(x, 5, w, b, 1e-5), lambda x, w, b: F.layer_norm(x, (5,), w, b, 1e-5),
             rand(3, 4, 5), w, b)
    check_op(lambda x: T.layer_norm(x, (4, 5)), lambda x: F.layer_norm(x, (4, 5)), rand(3, 4, 5))


def test_non_contiguous_inputs() -> None:
    x = rand(2, 9, 8, 3, grad=False).permute(0, 3, 1, 2)  # NHWC storage seen as NCHW
    w = rand(4, 3, 3, 3, grad=False)
    assert not x.is_contiguous()
    torch.testing.assert_close(T.conv2d(x, w, padding=1), F.conv2d(x, w, padding=1), rtol=1e-4, atol=1e-5)
    a, wt = rand(6, 4, grad=False).t(), rand(5, 12, grad=False)[:, ::2]
    torch.testing.assert_close(T.linear(a, wt), F.linear(a, wt), rtol=1e-4, atol=1e-5)
    q = rand(1, 4, 2, 8, grad=False).transpose(1, 2)
    torch.testing.assert_close(T.attention(q, q, q), F.scaled_dot_product_attention(q, q, q), rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------ torch.library.opcheck


OPCHECK_CASES: list[tuple[str, Callable[[], tuple[Any, ...]]]] = [
    ("conv2d", lambda: (rand(1, 2, 6, 5), rand(3, 2, 3, 3), rand(3), [2, 1], [1, 1], [1, 1], 1)),
    ("conv2d", lambda: (rand(1, 2, 6, 5), rand(3, 2, 3, 3), None, [1, 1], [0, 0], [1, 1], 1)),
    ("conv2d", lambda: (rand(1, 4, 6, 5), rand(6, 2, 3, 3), rand(6), [1, 1], [1, 1], [1, 1], 2)),
    ("conv2d", lambda: (rand(2, 3, 6, 5), rand(3, 1, 3, 3), None, [2, 2], [1, 1], [1, 1], 3)),
    ("linear", lambda: (rand(2, 3, 5), rand(4, 5), rand(4), "gelu")),
    ("linear", lambda: (rand(3, 5), rand(4, 5), None, "relu")),
    ("attention", lambda: (rand(1, 2, 5, 4), rand(1, 2, 6, 4), rand(1, 2, 6, 4), True, None)),
    ("relu", lambda: (rand(3, 4),)),
    ("gelu", lambda: (rand(3, 4),)),
    ("softmax", lambda: (rand(3, 4, 5), 1)),
    ("layer_norm", lambda: (rand(3, 4, 5), [5], rand(5), None, 1e-5)),
]


@pytest.mark.parametrize("name,make", OPCHECK_CASES, ids=[f"{n}{i}" for i, (n, _) in enumerate(OPCHECK_CASES)])
def test_opcheck(name: str, make: Callable[[], tuple[Any, ...]]) -> None:
    op = getattr(torch.ops.tilec, name).default
    torch.library.opcheck(op, make())


# ------------------------------------------------------------------ nn modules vs torch.nn


def check_module(ours: torch.nn.Module, theirs: torch.nn.Module, *inputs: torch.Tensor, **kwargs: Any) -> None:
    ours.load_state_dict(theirs.state_dict())
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    out, ref = ours(*inputs, **kwargs), theirs(*inputs, **kwargs)
    if isinstance(out, tuple):
        out, ref = out[0], ref[0]
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)
    g = torch.randn_like(ref)
    params = list(theirs.parameters())
    got = torch.autograd.grad(out, list(ours.parameters()), g)
    want = torch.autograd.grad(ref, params, g)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4)


def test_modules() -> None:
    check_module(tnn.Conv2d(3, 4, 3, stride=2, padding=1), torch.nn.Conv2d(3, 4, 3, stride=2, padding=1),
                 rand(2, 3, 7, 7))
    check_module(tnn.Conv2d(3, 4, (1, 3), bias=False), torch.nn.Conv2d(3, 4, (1, 3), bias=False), rand(1, 3, 5, 5))
    check_module(tnn.Conv2d(4, 4, 3, padding=1, groups=4), torch.nn.Conv2d(4, 4, 3, padding=1, groups=4),
                 rand(2, 4, 6, 6))
    check_module(tnn.Conv2d(4, 4, 4, padding="same"), torch.nn.Conv2d(4, 4, 4, padding="same"), rand(2, 4, 6, 6))
    check_module(tnn.Linear(5, 4), torch.nn.Linear(5, 4), rand(2, 3, 5))
    check_module(tnn.LayerNorm(5), torch.nn.LayerNorm(5), rand(2, 3, 5))
    x = rand(3, 4)
    torch.testing.assert_close(tnn.GELU()(tnn.ReLU()(x)), F.gelu(F.relu(x)))


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("causal", [False, True])
def test_multihead_attention(batch_first: bool, causal: bool) -> None:
    ours, theirs = tnn.MultiheadAttention(8, 2, batch_first=batch_first), \
        torch.nn.MultiheadAttention(8, 2, batch_first=batch_first)
    assert set(ours.state_dict()) == {"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"}
    q, kv = rand(2, 5, 8), rand(2, 5, 8)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(5) if causal else None
    check_module(ours, theirs, q, kv, kv, need_weights=False, attn_mask=mask, is_causal=causal)
    check_module(ours, theirs, q, q, q, need_weights=False, attn_mask=mask, is_causal=causal)  # packed q, k, v
    if causal and not batch_first:
        return  # the 5 x 5 mask fits [L, B, E] = [2, 5, 8] inputs only where torch drops it (need_weights=False)
    out, weights = ours(q, kv, kv, attn_mask=mask, is_causal=causal)  # need_weights=True: averaged weights
    want_out, want_weights = theirs(q, kv, kv, attn_mask=mask, is_causal=causal)
    torch.testing.assert_close(out, want_out, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(weights, want_weights, rtol=1e-4, atol=1e-5)


def test_training_matches_torch() -> None:
    def model(nn: Any) -> torch.nn.Module:
        return torch.nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.ReLU(), torch.nn.Flatten(),
                                   nn.Linear(4 * 6 * 6, 3))

    ref = model(torch.nn)
    ours = model(tnn)
    ours.load_state_dict(ref.state_dict())
    x, y = torch.randn(4, 2, 6, 6), torch.randint(0, 3, (4,))
    losses = []
    for m in (ours, ref):
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        curve = []
        for _ in range(5):
            opt.zero_grad()
            loss = F.cross_entropy(m(x), y)
            loss.backward()
            opt.step()
            curve.append(loss.item())
        losses.append(curve)
    assert losses[0][-1] < losses[0][0]
    for a, b in zip(*losses):
        assert abs(a - b) < 1e-3, losses


# ------------------------------------------------------------------ errors


@pytest.mark.parametrize("call,match", [
    (lambda: T.conv2d(rand(1, 3, 5, 5).double(), rand(2, 3, 3, 3)), "must share one dtype"),
    (lambda: T.conv2d(rand(3, 5, 5), rand(2, 3, 3, 3)), "'x' must have rank 4"),
    (lambda: T.conv2d(rand(1, 3, 5, 5), rand(2, 4, 3, 3)), "'weight' has 4 input channels"),
    (lambda: T.conv2d(rand(1, 3, 5, 5), rand(2, 3, 3, 3), rand(3)), "'bias' has shape"),
    (lambda: T.conv2d(rand(1, 4, 5, 5), rand(2, 4, 3, 3), groups=2), "4 input channels per group"),
    (lambda: T.conv2d(rand(1, 4, 5, 5), rand(3, 2, 3, 3), groups=2), "not a multiple of groups=2"),
    (lambda: T.conv2d(rand(1, 4, 5, 5), rand(2, 4, 3, 3), groups=0), "'groups' must be an integer >= 1"),
    (lambda: T.conv2d(rand(1, 3, 2, 2), rand(2, 3, 3, 3)), "does not fit"),
    (lambda: T.conv2d(rand(1, 3, 5, 5), rand(2, 3, 3, 3), stride=0), "'stride' must be"),
    (lambda: T.linear(rand(2, 5), rand(4, 6)), "'x' has 5 features"),
    (lambda: T.linear(rand(2, 5), rand(4, 5), activation="tanh"), "activation='tanh'"),
    (lambda: T.linear(rand(2, 5).int(), rand(4, 5)), "torch.float32, torch.float64, torch.bfloat16 and torch.float16 are supported"),
    (lambda: T.attention(rand(1, 2, 3, 4), rand(1, 2, 3, 5), rand(1, 2, 3, 4)), "'k' has shape"),
    (lambda: T.attention(rand(1, 2, 3, 4), rand(1, 2, 3, 4), rand(1, 2, 4, 4)), "'v' has shape"),
    (lambda: T.attention(rand(2, 3, 4), rand(2, 3, 4), rand(2, 3, 4)), "'q' must have rank 4"),
    (lambda: T.softmax(rand(3, 4), 2), "dim=2 is out of range"),
    (lambda: T.layer_norm(rand(3, 4), 5), "normalized_shape=\\[5\\]"),
    (lambda: T.layer_norm(rand(3, 4), 4, rand(5)), "'weight' has shape"),
    (lambda: T.relu(torch.ones(3, dtype=torch.int32)), "'x' has dtype torch.int32"),
    (lambda: tnn.MultiheadAttention(8, 2)(rand(2, 3, 8), rand(2, 3, 8), rand(2, 3, 8).double()),
     "query, key and value must all have dtype"),
])
def test_errors(call: Callable[[], Any], match: str) -> None:
    with pytest.raises(tilec.TilecError, match=match):
        call()


def test_devices_other_than_cpu_and_cuda_refused() -> None:
    x = rand(1, 3, 5, 5, grad=False)
    meta = x.to("meta")
    with pytest.raises(tilec.TilecError, match="CPU or CUDA tensors"):
        _conv2d_check(meta, meta, None, [1, 1], [0, 0], [1, 1], 1)
    with pytest.raises(tilec.TilecError, match="one device, got x on cpu, weight on meta"):
        same_dtype("conv2d", x=x, weight=meta)  # CUDA ops: tests/test_torch_cuda.py


def test_import_tilec_does_not_import_torch() -> None:
    import subprocess
    import sys
    code = "import sys, tilec; assert 'torch' not in sys.modules and 'tilec.nn' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_torch_compile_forward_and_backward() -> None:
    def model(nn: Any) -> torch.nn.Module:
        return torch.nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.ReLU(), torch.nn.Flatten(),
                                   nn.Linear(4 * 6 * 6, 3), nn.LayerNorm(3))

    ref, ours = model(torch.nn), model(tnn)
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(4, 2, 6, 6)
    compiled = torch.compile(ours, fullgraph=True)  # fullgraph: the tilec ops trace without graph breaks
    out, want = compiled(x), ref(x)
    torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-5)
    out.square().sum().backward()
    want.square().sum().backward()
    for a, b in zip(ours.parameters(), ref.parameters()):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-3, atol=1e-4)


# ------------------------------------------------------------------ gradcheck (float64)

def _double(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, dtype=torch.float64, requires_grad=True)


@pytest.mark.parametrize("name, fn, make", [
    ("conv2d", lambda x, w, b: T.conv2d(x, w, b, stride=2, padding=1), lambda: (_double(1, 2, 5, 5), _double(3, 2, 3, 3),
                                                                               _double(3))),
    ("conv2d_groups", lambda x, w, b: T.conv2d(x, w, b, stride=1, padding=1, groups=2),
     lambda: (_double(1, 4, 4, 5), _double(4, 2, 3, 3), _double(4))),
    ("conv2d_depthwise", lambda x, w: T.conv2d(x, w, None, stride=2, padding=1, groups=3),
     lambda: (_double(2, 3, 5, 5), _double(6, 1, 3, 3))),
    ("linear", lambda x, w, b: T.linear(x, w, b, "gelu"), lambda: (_double(3, 4), _double(2, 4), _double(2))),
    ("attention", lambda q, k, v: T.attention(q, k, v, True, 0.5), lambda: (_double(1, 2, 3, 4), _double(1, 2, 3, 4),
                                                                             _double(1, 2, 3, 4))),
    ("relu", lambda x: T.relu(x), lambda: (_double(2, 5),)),
    ("gelu", lambda x: T.gelu(x), lambda: (_double(2, 5),)),
    ("softmax", lambda x: T.softmax(x, -1), lambda: (_double(2, 5),)),
    ("layer_norm", lambda x, w, b: T.layer_norm(x, [4], w, b, 1e-5), lambda: (_double(3, 4), _double(4), _double(4))),
])
def test_gradcheck_in_float64(name, fn, make):
    torch.manual_seed(3)
    inputs = make()
    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-5, rtol=1e-4), name


# ------------------------------------------------------------------ the registered ops' own autograd

@pytest.mark.parametrize("name, ours, theirs, make", [
    ("conv2d", lambda x, w, b: torch.ops.tilec.conv2d(x, w, b, [2, 1], [1, 0], [1, 1], 1),
     lambda x, w, b: F.conv2d(x, w, b, (2, 1), (1, 0)), lambda: (rand(2, 3, 7, 6), rand(4, 3, 3, 2), rand(4))),
    ("linear", lambda x, w, b: torch.ops.tilec.linear(x, w, b, "gelu"), lambda x, w, b: F.gelu(F.linear(x, w, b)),
     lambda: (rand(2, 3, 5), rand(4, 5), rand(4))),
    ("softmax", lambda x: torch.ops.tilec.softmax(x, 1), lambda x: F.softmax(x, 1), lambda: (rand(3, 4, 5),)),
    ("layer_norm", lambda x, w, b: torch.ops.tilec.layer_norm(x, [5], w, b, 1e-5),
     lambda x, w, b: F.layer_norm(x, [5], w, b), lambda: (rand(3, 4, 5), rand(5), rand(5))),
    ("relu", lambda x: torch.ops.tilec.relu(x), F.relu, lambda: (rand(3, 4),)),
])
def test_registered_ops_autograd(name, ours, theirs, make):
    """The wrappers take an eager path (an autograd.Function, no dispatcher); torch.compile and
    direct callers of torch.ops.tilec.* get the registered ops, whose autograd is checked here."""
    check_op(ours, theirs, *make())


def test_wrappers_take_the_eager_path() -> None:
    x, w = rand(2, 5), rand(3, 5)
    assert type(T.linear(x, w).grad_fn).__name__ == "_TileOpBackward"
    assert "_TileOp" not in type(torch.ops.tilec.linear(x, w, None, "none").grad_fn).__name__


# ------------------------------------------------------------------ copy elimination in derived gradients

def test_eliminate_copies_keeps_values_and_drops_renamings() -> None:
    import numpy as np

    from tilec.ops import sources
    from tilec.autodiff import derive
    from tilec.frontend import parse
    from tilec.ir.copies import eliminate_copies, hoist_copies
    from tilec.ir.tensor import Elementwise, ETensor

    source = sources.conv2d_source((2, 2), (1, 1), (1, 1), True)
    derived = derive(parse(source), ["X", "F", "Bias"], keep_copies=True)
    slim = eliminate_copies(derived)
    assert str(derive(parse(source), ["X", "F", "Bias"])) == str(hoist_copies(slim))  # derive drops them by default
    assert slim.outputs == derived.outputs and slim.params == derived.params
    assert not any(isinstance(st, Elementwise) and isinstance(st.expr, ETensor) for st in slim.statements)
    assert len(slim.statements) < len(derived.statements)
    assert eliminate_copies(slim) is slim  # nothing left to do: the same object
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s).astype(np.float32) for s in ((2, 3, 7, 6), (4, 3, 3, 3), (4,), (2, 4, 4, 3))]
    for a, b in zip(tilec.compile(str(derived))(*args), tilec.compile(str(slim))(*args)):
        np.testing.assert_array_equal(a, b)
    # an input copied to an output stays; a temporary read after its copy is renamed everywhere
    kept = parse("function (A[N]) -> (B, C) { B = A; T = A * 2.0; U = T; C = U + T; }")
    assert [str(s) for s in eliminate_copies(kept).statements] == ["B = A", "T = A * 2.0", "C = T + T"]


def test_hoist_copies_runs_each_copy_right_after_what_it_copies() -> None:
    """A derived conv gradient's copy back to NCHW (DX = +(DI[n, h, w, c])) runs right after DI, not
    after the weight gradient; copies of inputs and copies already in place stay; every statement
    still follows what it reads, and the values are the same."""
    import numpy as np

    from tilec.autodiff import derive
    from tilec.frontend import parse
    from tilec.ir.copies import eliminate_copies, hoist_copies, plain_copy
    from tilec.ir.tensor import statement_reads
    from tilec.ops import sources

    slim = eliminate_copies(derive(parse(sources.conv2d_source((2, 2), (1, 1), (1, 1), True)), ["X", "F", "Bias"],
                                   keep_copies=True))
    hoisted = hoist_copies(slim)
    order = [st.output for st in hoisted.statements]
    assert sorted(order) == sorted(st.output for st in slim.statements) and order != [st.output for st in slim.statements]
    dx = next(st for st in hoisted.statements if st.output == "DX")
    source = plain_copy(dx)
    assert source is not None and order.index("DX") == order.index(source) + 1
    for k, st in enumerate(hoisted.statements):  # each after every statement whose result it reads
        assert all(name in hoisted.input_names or name in order[:k] for name in statement_reads(st))
    assert hoist_copies(hoisted) is hoisted
    kept = parse("function (A[N, M]) -> (B, C) { B[j, i: M, N] = +(A[i, j]); T = A * 2.0; C[j, i: M, N] = +(T[i, j]); }")
    assert hoist_copies(kept) is kept  # B copies an input; C already follows T
    summed = parse("function (A[N, M]) -> (C, D) { T = A * 2.0; D = A + 1.0; C[i: N] = +(T[i, j]); }")
    assert plain_copy(summed.statements[2]) is None and hoist_copies(summed) is summed  # a sum is no copy
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s).astype(np.float32) for s in ((2, 3, 7, 6), (4, 3, 3, 3), (4,), (2, 4, 4, 3))]
    for a, b in zip(tilec.compile(str(slim))(*args), tilec.compile(str(hoisted))(*args)):
        np.testing.assert_array_equal(a, b)


def test_compiled_functions_take_cpu_torch_tensors_that_require_grad_without_copies():
    import numpy as np
    f = tilec.compile("C[i, j: M, N] = +(A[i, k] * B[k, j])")
    a = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    b = torch.randn(5, 4, dtype=torch.float64).t()  # a transposed view: copied to a contiguous array
    np.testing.assert_allclose(f(a, b), (a @ b).detach().numpy(), rtol=1e-12)
    from tilec.runtime.function import _as_array
    x = torch.randn(4, 4, requires_grad=True)
    assert _as_array("x", x).ctypes.data == x.data_ptr()  # contiguous: the tensor's own memory
