"""Tunable statements, and the same statements cut out of their programs.

Requires: a BoundProgram and a Target. Guarantees:
- `tunable_statements(bp, target)`: in program order, each statement that the first applicable
  template of the target kind's tuning order (tilec.schedule.heuristics.cpu.TUNED,
  tilec.schedule.heuristics.gpu.ORDER) lowers and can tune, with that template and the number of
  statements it lowers together (statements it covers are skipped). A template in that order
  that cannot be tuned (Winograd's) takes the statements its heuristic would lower, and they are
  not tuned: a record of another template's knobs would replace the faster algorithm untuned
  calls run;
- `cut(bp, index, count)`: the program of statements index .. index+count-1 alone. Its inputs are
  the tensors they read and do not compute (program inputs or other statements' results),
  declared without dims, so they bind at the shapes `bp` gives them; its outputs are those of its
  results that the rest of the program reads or returns; the size symbols it reads are bound by
  keyword; the constants they read (literal-only statements, whose type adapts to their use) and
  the layout copies they read (permutations of another tensor) are computed again before them.
  The same statement in two programs (two fused kernels of a model that hold the same matmul) has
  one cut, so one tuning record serves both, and a candidate
  schedule is measured on the statement alone instead of on the whole program. (A template's
  count is what its match covers; the epilogue the heuristic fuses into a matmul is not part of
  the cut, so the tuner times the matmul without it.)
"""

from __future__ import annotations

from dataclasses import dataclass

from tilec.ir import tensor as T
from tilec.ir.bounds import BoundContraction, BoundProgram
from tilec.schedule import params as lowering_params
from tilec.schedule.heuristics import cpu as cpu_heuristic
from tilec.schedule.heuristics import gpu as gpu_heuristic
from tilec.schedule.patterns.layout_copy import match_copy
from tilec.schedule.templates.base import Context
from tilec.target import Target


@dataclass(frozen=True)
class TunableStatement:
    index: int
    template: str
    count: int  # statements the template lowers together, from `index`


@dataclass(frozen=True)
class Cut:
    """A program of a few statements of a larger one, with its inputs' shapes and dtypes and the
    size symbols it reads."""

    program: T.Program
    first: int  # the index in `program` of the first statement cut out (constants it reads come before)
    shapes: tuple[tuple[str, tuple[int, ...]], ...]
    dtypes: tuple[tuple[str, str], ...]
    sizes: tuple[tuple[str, int], ...]

    @property
    def source(self) -> str:
        return str(self.program)


def tunable_statements(bp: BoundProgram, target: Target) -> list[TunableStatement]:
    """The statements the tuner can tune (module doc), in program order."""
    ctx = Context(bp, target, lowering_params.current())
    order = gpu_heuristic.ORDER if target.is_gpu else cpu_heuristic.TUNED
    found: list[TunableStatement] = []
    index = 0
    while index < len(bp.statements):
        step = 1
        for template in order:
            if template.tunable:
                plan = template.match(index, ctx)
            else:  # a fast algorithm the heuristic prefers (winograd): the statement runs it, untuned
                choice = template.heuristic(index, ctx)
                plan = choice.plan if choice is not None else None
            if plan is None:
                continue
            step = max(1, template.consumed(plan))
            if template.tunable:
                found.append(TunableStatement(index, template.name, step))
            break
        index += step
    return found


def cut(bp: BoundProgram, index: int, count: int) -> Cut:
    """Statements index .. index+count-1 of `bp` as a program of their own (module doc)."""
    program = bp.program
    inside = program.statements[index:index + count]
    computed = {st.output for st in inside}
    sizes = {name for st in inside for name in T.statement_sizes(st)}
    reads = [name for st in inside for name in T.statement_reads(st)]
    reads += sorted(n for n in sizes if n not in bp.sizes)  # tensors read as sizes (a scalar input's value)
    earlier = {st.output: i for i, st in enumerate(program.statements[:index])}
    before = sorted({earlier[n] for n in reads if n in earlier and n not in computed
                     and (_constant(program.statements[earlier[n]]) or _layout_copy(bp, earlier[n]))})
    statements = tuple(program.statements[i] for i in before) + inside
    computed |= {st.output for st in statements}
    sizes |= {name for st in statements for name in T.statement_sizes(st)}
    params = [n for n in dict.fromkeys(reads + [n for st in statements for n in T.statement_reads(st)])
              if n not in computed]
    later = {name for st in program.statements[index + count:] for name in T.statement_reads(st)}
    outputs = tuple(st.output for st in inside if st.output in later or st.output in program.outputs)
    alone = T.Program(tuple(T.TensorParam(name, None) for name in params), outputs or (inside[-1].output,), statements)
    return Cut(alone, len(before), tuple((n, tuple(bp.shapes[n])) for n in params),
               tuple((n, bp.dtypes[n]) for n in params),
               tuple((n, int(bp.sizes[n])) for n in sorted(sizes) if n in bp.sizes and n not in computed))


def _layout_copy(bp: BoundProgram, index: int) -> bool:
    """Whether statement `index` only lays a tensor out anew (a permutation: a convolution's weights
    as [KH, KW, C, CO], its input as NHWC). The cut keeps it, so that the statement reads its operand
    as it does in the program: through the copy, which the heuristic may fold into its packing. Given
    the copy's result as a contiguous input instead, a 1x1 convolution's input-gradient cut read its
    B transposed and ran 0.108 ms where the whole gradient program ran 0.062 (Zen 5), and the tuner
    reported 1.6-2x "gains" on ResNet-18 that the step never saw."""
    b = bp.statements[index]
    return isinstance(b, BoundContraction) and match_copy(b, bp) is not None


def _constant(st: T.Statement) -> bool:
    """A statement of literals and sizes only: its result is a weak literal (tilec.ir.dtypes) that
    takes the type of what it meets, which an input of the cut would not do, so the cut computes
    it again."""
    return isinstance(st, T.Elementwise) and not T.eexpr_tensors(st.expr)


__all__ = ["Cut", "TunableStatement", "cut", "tunable_statements"]
