"""Dropout: `native_dropout` and its backward, with the mask drawn inside the kernel or by torch.

Where the masks come from is the backend's one random-number setting (`set_dropout_masks`, or
the environment variable TILEC_DROPOUT_MASKS; read when a graph compiles):

- **"kernel"** (the default): the kernel computes each element's keep bit from its flat index and
  a per-call key that torch's global generator draws (one `randint`, so `torch.manual_seed`
  makes a run repeat itself): a 32-bit integer hash, two rounds of the "lowbias32" mixer (shifts,
  xors and two multiplies; the key enters each round), whose top 24 bits against keep x 2^24 decide.
  Nothing but the key crosses from torch: torch's `bernoulli_` on the CPU costs 6-13 ns an
  element (0.76 ms for one of BERT's [8, 64, 256] activations on Zen 4, seven of them a step),
  the hash a few integer instructions in the fused kernel. The masks are not torch's (Inductor's
  are not either), so a compiled run draws other masks than an eager one seeded alike;
- **"torch"**: torch draws the mask (`bernoulli_` on a tensor of the input's shape) right before
  the kernel runs, consuming the generator as eager's dropout does, so compiled and eager runs
  seeded alike drop the same elements (what a comparison of loss curves step by step needs).

Either way the mask is returned (bool) for the backward, which multiplies by it again.
"""

from __future__ import annotations

import os

import torch
import torch.fx as fx

from tilec.errors import TilecError
from tilec.torch_backend.lowering.registry import argv, require_float, result, tile
from tilec.torch_backend.program import ProgramWriter, Value, convert, literal

aten = torch.ops.aten

MODES = ("kernel", "torch")
ENVIRONMENT = "TILEC_DROPOUT_MASKS"
_chosen: str | None = None  # set_dropout_masks' choice, over the environment's


def set_dropout_masks(mode: str | None) -> str | None:
    """Choose where dropout's masks come from: "kernel" or "torch" (see this module), or None for
    the environment's choice (TILEC_DROPOUT_MASKS, default "kernel"). Graphs compile with the
    choice of the moment, and TorchDynamo shares compiled graphs among copies of a model, so a
    change of the choice resets TorchDynamo (`torch._dynamo.reset()`): later calls compile again.
    Returns the previous choice (None if there was none), to restore it."""
    global _chosen
    if mode is not None and mode not in MODES:
        raise TilecError(f"set_dropout_masks: expected one of {', '.join(map(repr, MODES))} or None, got {mode!r}")
    before = dropout_masks()
    previous, _chosen = _chosen, mode
    if dropout_masks() != before:
        torch._dynamo.reset()
    return previous


def dropout_masks() -> str:
    """Where the next compiled graph's dropout masks come from: "kernel" or "torch"."""
    if _chosen is not None:
        return _chosen
    mode = os.environ.get(ENVIRONMENT, "kernel").strip() or "kernel"
    if mode not in MODES:
        raise TilecError(f"{ENVIRONMENT}={mode!r}: expected one of {', '.join(MODES)} (unset means \"kernel\")")
    return mode


GOLDEN = 0x9E3779B9  # 2^32 / golden ratio: spreads a key's bits before the second round
MIX = (0x7FEB352D, 0x846CA68B)  # the lowbias32 mixer's multipliers


def _draw_key() -> torch.Tensor:
    return torch.randint(0, 2 ** 31 - 1, (), dtype=torch.int64)


def _mixed(p: ProgramWriter, v: Value) -> Value:
    """lowbias32(v): x ^= x >> 16; x *= M0; x ^= x >> 15; x *= M1; x ^= x >> 16 (uint32, wrapping)."""
    u32 = torch.uint32
    a = p.let(f"({v.name} ^ ({v.name} >> 16)) * {MIX[0]}", v.shape, u32, v)
    b = p.let(f"({a.name} ^ ({a.name} >> 15)) * {MIX[1]}", v.shape, u32, a)
    return p.let(f"{b.name} ^ ({b.name} >> 16)", v.shape, u32, b)


def kernel_keep(p: ProgramWriter, shape: tuple[int, ...], keep: float, donor: Value | None = None) -> Value:
    """A bool Value of `shape`: element e kept when its hash (of its flat index and a key torch
    draws) falls below keep x 2^24. `donor`: a tensor of `shape` whose indices to take, if any."""
    u32 = torch.uint32
    key = p.generate((), torch.int64, _draw_key)
    if donor is None or not donor.dense or donor.tile_shape != shape:  # a tensor of the shape for index()
        donor = p.generate(shape, torch.int8, lambda: torch.empty(shape, dtype=torch.int8))
    terms, stride = [], 1
    coords: list[Value] = []
    for d in reversed(range(len(shape))):
        if shape[d] > 1:
            coord = p.fresh()
            p.statements.append(f"{coord} = index({donor.name}, {d});")
            coords.append(Value(coord, shape, torch.int32))
            factor = stride % 2 ** 32
            terms.append(f"as_uint({coord}, 32)" + (f" * {factor}" if factor != 1 else ""))
        stride *= shape[d]
    flat = " + ".join(terms) if terms else "as_uint(0, 32)"
    first = p.let(f"({flat}) ^ as_uint({key.name}, 32)", shape, u32, key, *coords)
    once = _mixed(p, first)
    second = p.let(f"{once.name} + as_uint({key.name}, 32) * {GOLDEN}", shape, u32, once, key)
    hashed = _mixed(p, second)
    return p.let(f"({hashed.name} >> 8) < {round(keep * 2 ** 24)}", shape, torch.bool, hashed)


@tile(aten.native_dropout.default)
def _dropout(p: ProgramWriter, node: fx.Node) -> tuple[Value, Value]:
    x = p.tensor(argv(node)[0])
    prob, train = float(argv(node)[1]), argv(node)[2]
    require_float(x, "dropout")
    if not train or prob == 0.0:
        ones = p.let("as_bool(1)", x.shape, torch.bool)
        return x, ones
    keep = 1.0 - prob
    scale = 1.0 / keep if keep > 0 else 0.0
    shape, dtype = x.shape, x.dtype
    if dropout_masks() == "kernel":
        kept = kernel_keep(p, shape, keep, x)
        out = p.let(f"{kept.name} ? {p.elementwise(x)} * {literal(scale)} : 0.0", shape, dtype, x, kept)
        return out, kept
    mask = p.generate(shape, dtype, lambda: torch.empty(shape, dtype=dtype).bernoulli_(keep))
    out = p.let(f"{p.elementwise(x)} * {mask.name} * {literal(scale)}", shape, dtype, x, mask)
    return out, p.let(f"as_bool({mask.name})", shape, torch.bool, mask)


@tile(aten.native_dropout_backward.default)
def _dropout_backward(p: ProgramWriter, node: fx.Node) -> Value:
    shape, dtype = result(node)
    g, m = p.tensor(argv(node)[0]), p.tensor(argv(node)[1])
    scale = float(argv(node)[2])
    return p.let(f"{p.elementwise(g)} * {convert(p.elementwise(m), dtype)} * {literal(scale)}",
                 shape, dtype, g, m)


__all__ = ["MODES", "ENVIRONMENT", "set_dropout_masks", "dropout_masks", "kernel_keep"]
