"""`tilec::tile_grad`, the backward of every op: the derived gradient kernel of the op's Tile source.

Requires: the forward's Tile source, the positions of the inputs that need a gradient, the
forward inputs and one gradient per forward output (shaped like the outputs), all on one device.
Guarantees: one gradient per position in `wrt`, shaped like that input, all from one call of the
gradient kernel (compiled once per (source, wrt, target), tilec.ops.kernels); a fake kernel
makes it traceable by torch.compile.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from tilec.ops.kernels import call, forward_fn, grad_fn, target_of


@torch.library.custom_op("tilec::tile_grad", mutates_args=())
def tile_grad(source: str, wrt: list[int], inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """Gradients of the Tile program `source` w.r.t. its inputs number `wrt`; `inputs` are the
    forward inputs followed by one gradient per forward output (shaped like the outputs)."""
    names = forward_fn(source).inputs
    fn = grad_fn(source, tuple(names[i] for i in wrt), target_of(inputs[0]))
    if inputs[0].is_cuda:  # torch CUDA tensors in and out (a mix of devices is a tilec BindError)
        out = fn(*(t.detach() for t in inputs))
        return [out] if len(wrt) == 1 else list(out)
    return call(fn, inputs)


@tile_grad.register_fake
def _(source: str, wrt: list[int], inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    return [inputs[i].new_empty(inputs[i].shape) for i in wrt]


def input_grads(source: str, forward_inputs: Sequence[torch.Tensor], needs: Sequence[bool],
                output_grads: Sequence[torch.Tensor]) -> list[torch.Tensor | None]:
    """One gradient per forward input (None where not needed), through tilec::tile_grad."""
    wrt = [i for i, need in enumerate(needs) if need]
    result: list[torch.Tensor | None] = [None] * len(forward_inputs)
    if wrt:
        grads = torch.ops.tilec.tile_grad(source, wrt, [*forward_inputs, *output_grads])
        for i, g in zip(wrt, grads):
            result[i] = g
    return result
