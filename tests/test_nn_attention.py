"""tilec.nn.functional's attention and tilec.nn.MultiheadAttention on the options PyTorch's OpInfo and
ModuleInfo samples leave out (tests/test_nn_opinfo.py runs those): masks of every kind with rows
left empty, mask gradients, grouped-query heads, any batch rank, causal with L != S, static keys,
bias_k/bias_v with add_zero_attn, kdim/vdim, and dropout (its statistics, and torch's own bits
under one seed). Values and gradients against torch's, in float64.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import tilec
import tilec.nn
import tilec.nn.functional as T

DT = torch.float64


def make(*shape: int, grad: bool = True) -> torch.Tensor:
    return torch.randn(*shape, dtype=DT).requires_grad_(grad)


def same(ours: Callable[..., Any], theirs: Callable[..., Any], *args: Any, seed: int | None = None,
         **kwargs: Any) -> None:
    """ours(*args, **kwargs) == theirs(...) in values and in the gradients of every floating leaf
    (under torch.manual_seed(seed) before each call, when given)."""
    leaves = [a for a in [*args, *kwargs.values()] if isinstance(a, torch.Tensor) and a.requires_grad]
    results = []
    for fn in (ours, theirs):
        if seed is not None:
            torch.manual_seed(seed)
        out = fn(*args, **kwargs)
        outs = [o for o in (out if isinstance(out, tuple) else (out,)) if o is not None]
        cot = [torch.ones_like(o) * torch.linspace(-1, 1, o.numel(), dtype=DT).reshape(o.shape) for o in outs]
        grads = torch.autograd.grad(outs, leaves, cot, allow_unused=True)
        results.append((outs, grads))
    (got, got_grads), (want, want_grads) = results
    assert len(got) == len(want)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, equal_nan=True)
    for g, w in zip(got_grads, want_grads):
        if w is None or g is None:
            assert (w is None or not w.any()) and (g is None or not g.any())
        else:
            torch.testing.assert_close(g, w, equal_nan=True)


# ------------------------------------------------------------------ scaled_dot_product_attention


@pytest.mark.parametrize("shapes", [((3, 4), (5, 4), (5, 6)), ((2, 3, 2, 3, 4), (2, 3, 2, 5, 4), (2, 3, 2, 5, 2)),
                                    ((3, 3, 4), (2, 1, 5, 4), (1, 3, 5, 4))], ids=["2d", "5d", "broadcast"])
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_shapes(shapes: tuple[tuple[int, ...], ...], causal: bool) -> None:
    same(T.scaled_dot_product_attention, F.scaled_dot_product_attention, *(make(*s) for s in shapes),
         is_causal=causal, scale=0.7)


@pytest.mark.parametrize("lq,s", [(6, 3), (2, 5)])
def test_sdpa_causal_is_top_left_when_lengths_differ(lq: int, s: int) -> None:
    same(T.scaled_dot_product_attention, F.scaled_dot_product_attention, make(2, lq, 4), make(2, s, 4),
         make(2, s, 3), is_causal=True)


def test_sdpa_bool_mask_with_an_empty_row_gives_zeros() -> None:
    mask = torch.rand(2, 1, 3, 5) > 0.4
    mask[0, 0, 1] = False
    q, k, v = make(2, 2, 3, 4), make(2, 2, 5, 4), make(2, 2, 5, 6)
    same(T.scaled_dot_product_attention, F.scaled_dot_product_attention, q, k, v, attn_mask=mask)
    assert not T.scaled_dot_product_attention(q, k, v, attn_mask=mask)[0, :, 1].any()


def test_sdpa_float_mask_gets_its_gradient_and_minus_inf_rows_give_zeros() -> None:
    mask = torch.randn(3, 5, dtype=DT)
    mask[1] = float("-inf")
    mask[2, :2] = float("-inf")
    same(T.scaled_dot_product_attention, F.scaled_dot_product_attention, make(2, 3, 4), make(2, 5, 4),
         make(2, 5, 6), attn_mask=mask.requires_grad_())


@pytest.mark.parametrize("mask_heads", [0, 1, 4])
def test_sdpa_grouped_query_heads(mask_heads: int) -> None:
    mask = None if not mask_heads else torch.rand(mask_heads, 3, 5) > 0.3
    same(T.scaled_dot_product_attention, F.scaled_dot_product_attention, make(2, 4, 3, 4), make(2, 2, 5, 4),
         make(2, 2, 5, 6), attn_mask=mask, enable_gqa=True)


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_dropout_draws_torchs_mask_under_one_seed(causal: bool) -> None:
    same(T.scaled_dot_product_attention, F.scaled_dot_product_attention, make(2, 3, 4, 8), make(2, 3, 6, 8),
         make(2, 3, 6, 8), dropout_p=0.3, is_causal=causal, seed=7)


def test_sdpa_dropout_statistics() -> None:
    q, k = torch.zeros(1, 200, 4, dtype=DT), torch.zeros(1, 100, 4, dtype=DT)
    v = torch.ones(1, 100, 1, dtype=DT)  # uniform weights 1/100: the output is (kept count) / (100 (1 - p))
    out = T.scaled_dot_product_attention(q, k, v, dropout_p=0.25)
    kept = out * 100 * 0.75
    assert torch.allclose(kept, kept.round())
    assert abs(float(kept.mean()) / 100 - 0.75) < 0.02  # 20,000 draws: 5 standard deviations
    assert not T.scaled_dot_product_attention(q, k, v, dropout_p=1.0).any()


def test_sdpa_refusals_name_the_argument() -> None:
    with pytest.raises(tilec.TilecError, match="attn_mask should not be set when is_causal"):
        T.scaled_dot_product_attention(make(2, 3, 4), make(2, 5, 4), make(2, 5, 6), attn_mask=make(3, 5),
                                       is_causal=True)
    with pytest.raises(tilec.TilecError, match="empty tensors with a non-empty output"):
        T.scaled_dot_product_attention(make(2, 3, 0), make(2, 5, 0), make(2, 5, 6))


@pytest.mark.parametrize("shapes", [((2, 0, 4), (2, 5, 4), (2, 5, 6)), ((2, 3, 4), (2, 0, 4), (2, 0, 6)),
                                    ((0, 3, 4), (0, 5, 4), (0, 5, 6)), ((2, 3, 4), (2, 5, 4), (2, 5, 0))])
def test_sdpa_empty_inputs_give_torchs_zeros(shapes: tuple[tuple[int, ...], ...]) -> None:
    same(T.scaled_dot_product_attention, F.scaled_dot_product_attention, *(make(*s) for s in shapes))


# ------------------------------------------------------------------ multi_head_attention_forward


def mha_args(batched: bool = True, e: int = 4, kdim: int = 4, vdim: int = 4, separate: bool = False,
             bias_kv: bool = False) -> tuple[list[Any], dict[str, Any]]:
    lead = (3, 2) if batched else (3,)
    lead_kv = (5, 2) if batched else (5,)
    args = [make(*lead, e), make(*lead_kv, kdim), make(*lead_kv, vdim), e, 2,
            None if separate else make(3 * e, e), make(3 * e), make(1, 1, e) if bias_kv else None,
            make(1, 1, e) if bias_kv else None, False, 0.0, make(e, e), make(e)]
    kwargs: dict[str, Any] = {}
    if separate:
        kwargs = {"use_separate_proj_weight": True, "q_proj_weight": make(e, e), "k_proj_weight": make(e, kdim),
                  "v_proj_weight": make(e, vdim)}
    return args, kwargs


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("average", [True, False])
@pytest.mark.parametrize("batched", [True, False])
def test_mha_masks(need_weights: bool, average: bool, batched: bool) -> None:
    args, kwargs = mha_args(batched)
    kpm = torch.tensor([[False, True, False, False, True], [False, False, False, True, False]])
    same(T.multi_head_attention_forward, F.multi_head_attention_forward, *args, **kwargs,
         key_padding_mask=kpm if batched else kpm[0], attn_mask=make(3, 5), need_weights=need_weights,
         average_attn_weights=average)


@pytest.mark.parametrize("need_weights", [True, False])
def test_mha_bool_attn_mask_3d_and_float_padding_mask(need_weights: bool) -> None:
    args, kwargs = mha_args()
    attn = torch.rand(4, 3, 5) > 0.3
    attn[:, :, 0] = False
    kpm = torch.randn(2, 5, dtype=DT)
    same(T.multi_head_attention_forward, F.multi_head_attention_forward, *args, **kwargs, attn_mask=attn,
         key_padding_mask=kpm, need_weights=need_weights)


@pytest.mark.parametrize("zero_attn", [True, False])
def test_mha_bias_kv_and_zero_attn_with_masks(zero_attn: bool) -> None:
    args, kwargs = mha_args(separate=True, kdim=3, vdim=6, bias_kv=True)
    args[9] = zero_attn
    kpm = torch.tensor([[False, True, False, False, True], [False, False, False, True, False]])
    same(T.multi_head_attention_forward, F.multi_head_attention_forward, *args, **kwargs,
         key_padding_mask=kpm, attn_mask=make(3, 5), need_weights=True)


def test_mha_static_keys_and_values() -> None:
    args, kwargs = mha_args()
    same(T.multi_head_attention_forward, F.multi_head_attention_forward, *args, **kwargs,
         static_k=make(4, 6, 2), static_v=make(4, 6, 2), need_weights=False)


@pytest.mark.parametrize("need_weights", [True, False])
def test_mha_causal(need_weights: bool) -> None:
    args, kwargs = mha_args()
    args[1], args[2] = make(3, 2, 4), make(3, 2, 4)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(3, dtype=DT)
    same(T.multi_head_attention_forward, F.multi_head_attention_forward, *args, **kwargs, attn_mask=mask,
         is_causal=True, need_weights=need_weights)


@pytest.mark.parametrize("need_weights", [True, False])
def test_mha_dropout_draws_torchs_mask_under_one_seed(need_weights: bool) -> None:
    args, kwargs = mha_args()
    args[10] = 0.4
    same(T.multi_head_attention_forward, F.multi_head_attention_forward, *args, **kwargs,
         attn_mask=make(3, 5), need_weights=need_weights, seed=3)
    same(T.multi_head_attention_forward, F.multi_head_attention_forward, *args, **kwargs,
         training=False)  # evaluation: no dropout


# ------------------------------------------------------------------ nn.MultiheadAttention


@pytest.mark.parametrize("options", [{}, {"kdim": 3, "vdim": 5}, {"add_bias_kv": True, "add_zero_attn": True},
                                     {"bias": False, "dropout": 0.2}], ids=str)
@pytest.mark.parametrize("batch_first", [True, False])
def test_module(options: dict[str, Any], batch_first: bool) -> None:
    torch.manual_seed(0)
    theirs = torch.nn.MultiheadAttention(4, 2, batch_first=batch_first, dtype=DT, **options)
    ours = tilec.nn.MultiheadAttention(4, 2, batch_first=batch_first, dtype=DT, **options)
    ours.load_state_dict(theirs.state_dict())
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    q = make(2, 3, 4)
    k, v = make(2, 5, options.get("kdim", 4)), make(2, 5, options.get("vdim", 4))
    if not batch_first:
        q, k, v = (t.detach().transpose(0, 1).requires_grad_() for t in (q, k, v))
    kpm = torch.tensor([[False, True, False, False, True], [False, False, False, True, False]])
    for need_weights in (True, False):
        same(ours, theirs, q, k, v, key_padding_mask=kpm, need_weights=need_weights, seed=1)
        if "kdim" not in options:
            x = make(2, 3, 4)
            same(ours, theirs, x, x, x, need_weights=need_weights, seed=1)  # self-attention: one projection


@pytest.mark.parametrize("shape", [(0, 2, 8), (3, 0, 8), (0, 8)])
@pytest.mark.parametrize("need_weights", [True, False])
def test_multihead_attention_on_empty_inputs_equals_torch(shape, need_weights):
    torch.manual_seed(0)
    reference = torch.nn.MultiheadAttention(8, 2)
    module = tilec.nn.MultiheadAttention(8, 2)
    module.load_state_dict(reference.state_dict())
    x = torch.randn(*shape, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    out, weights = module(x, x, x, need_weights=need_weights)
    want, want_weights = reference(x_ref, x_ref, x_ref, need_weights=need_weights)
    assert out.shape == want.shape
    assert (weights is None) == (want_weights is None)
    if weights is not None:
        assert weights.shape == want_weights.shape
    out.sum().backward()
    want.sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad)
    for ours, theirs in zip(module.parameters(), reference.parameters()):
        torch.testing.assert_close(ours.grad if ours.grad is not None else torch.zeros_like(ours),
                                   theirs.grad if theirs.grad is not None else torch.zeros_like(theirs))
