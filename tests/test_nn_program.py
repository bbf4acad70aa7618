"""tilec::program (tilec/ops/program.py): any one-output Tile program as a differentiable torch op,
on its eager path and its registered one (torch.compile, dispatch modes), seen by torch's profiler
and flop counter."""

from __future__ import annotations

import torch
from torch.utils.flop_counter import FlopCounterMode

from tilec.ops.program import run_program

MATMUL = "function (A[M, K], B[K, N]) -> (C) { C[i, j: M, N] = +(A[i, k] * B[k, j]); }"


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(16)
    a = torch.randn(3, 4, dtype=torch.float64, generator=gen).requires_grad_()
    b = torch.randn(4, 5, dtype=torch.float64, generator=gen).requires_grad_()
    return a, b


def test_forward_and_derived_gradients_equal_torch_on_the_eager_path():
    a, b = _inputs()
    out = run_program(MATMUL, [a, b], (3, 5))
    cotangent = torch.randn(3, 5, dtype=torch.float64)
    ga, gb = torch.autograd.grad(out, [a, b], cotangent)
    torch.testing.assert_close(out, a @ b)
    torch.testing.assert_close(ga, cotangent @ b.T)
    torch.testing.assert_close(gb, a.T @ cotangent)


def test_flop_counter_counts_the_contractions_forward_and_backward_as_torch_counts_matmul():
    a, b = _inputs()
    with FlopCounterMode(display=False) as ours:
        run_program(MATMUL, [a, b], (3, 5)).sum().backward()
    with FlopCounterMode(display=False) as theirs:
        (a @ b).sum().backward()
    assert ours.get_total_flops() == theirs.get_total_flops() == 3 * 2 * 3 * 4 * 5
    torch.testing.assert_close(a.grad, torch.ones(3, 5, dtype=torch.float64) @ b.T * 2)  # both runs accumulated


def test_torch_compile_traces_the_registered_op():
    a, b = _inputs()
    compiled = torch.compile(lambda x, y: run_program(MATMUL, [x, y], (x.shape[0], y.shape[1])).relu(), fullgraph=True)
    torch.testing.assert_close(compiled(a, b), (a @ b).relu())


def test_the_profiler_shows_the_program_by_name():
    a, b = _inputs()
    with torch.profiler.profile() as prof:
        run_program(MATMUL, [a, b], (3, 5))
    assert "tilec::kernel" in [e.name for e in prof.events()]


def test_a_program_computing_in_float64_on_float32_inputs_gives_float32_gradients():
    # the derived gradient of X is float64 (the program computes in it): written to a float64
    # buffer and converted, never into the float32 one (memory corruption before)
    src = "function (X[N]) -> (O) { Xw = as_float(X, 64); Y = Xw * Xw; O = as_float(Y, 32); }"
    x = torch.randn(100000, dtype=torch.float32, requires_grad=True)
    run_program(src, [x], (100000,)).sum().backward()
    assert x.grad.dtype == torch.float32
    torch.testing.assert_close(x.grad, 2 * x.detach())


def test_functional_convolution_and_linear_count_torchs_flops_and_every_kernel_shows_in_the_profiler():
    import tilec.nn.functional as F

    gen = torch.Generator().manual_seed(3)
    x = torch.randn(2, 3, 8, 8, generator=gen, requires_grad=True)
    w = torch.randn(4, 3, 3, 3, generator=gen, requires_grad=True)
    a = torch.randn(5, 8, generator=gen, requires_grad=True)
    lw = torch.randn(6, 8, generator=gen, requires_grad=True)
    for ours, theirs in [(lambda: F.conv2d(x, w, padding=1), lambda: torch.nn.functional.conv2d(x, w, padding=1)),
                         (lambda: F.linear(a, lw), lambda: torch.nn.functional.linear(a, lw))]:
        with FlopCounterMode(display=False) as counted:
            ours().sum().backward()
        with FlopCounterMode(display=False) as reference:
            theirs().sum().backward()
        assert counted.get_total_flops() == reference.get_total_flops() > 0
    with torch.profiler.profile() as prof:
        F.layer_norm(torch.randn(4, 8), (8,))  # a tuned op's eager path
        F.relu(torch.randn(4))                 # a generic program's
    assert [e.name for e in prof.events()].count("tilec::kernel") == 2
