"""PlaidML's own Tile programs run unchanged and match numpy; PlaidML's negative programs are
refused with a TilecError naming the culprit, with a line and column (the corpus: plaidml_corpus.py).
"""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

import tilec
from plaidml_corpus import NEGATIVES, PROGRAMS, arguments, expected, mismatch, names_culprit, run
from plaidml_corpus_base import f32, scalar

BY_ID = {p.id: p for p in PROGRAMS}

# Programs whose references hold for any sizes: their arguments as a function of three sizes >= 1.
RESIZABLE = {
    "tut_sum_over_axis": lambda a, b, c: {"I": f32(a, b)},
    "tut_matmul": lambda a, b, c: {"A": f32(a, b), "B": f32(b, c)},
    "tut_mean_over_axis": lambda a, b, c: {"I": f32(a, b)},
    "tut_cumsum": lambda a, b, c: {"I": f32(a + b)},
    "tut_conv1d": lambda a, b, c: {"I": f32(a, b + 2, c), "K": f32(3, c, 2)},
    "tut_dilated_conv2d": lambda a, b, c: {"I": f32(1, a + 4, b + 3, c), "K": f32(3, 2, c, 2)},
    "op_cumsum": lambda a, b, c: {"I": f32(a, b)},
    "op_concatenate": lambda a, b, c: {"I0": f32(2, a, c), "I1": f32(2, b, c), "I2": f32(2, c, c)},
    "op_conv2d_same_upper_stride2": lambda a, b, c: {"I": f32(1, a, b, c), "K": f32(3, 3, c, 2)},
    "op_pool_max_same_upper_ncx": lambda a, b, c: {"I": f32(1, c, a, b)},
    "op_pool_avg_same_ncx": lambda a, b, c: {"I": f32(1, c, a, b), "One": scalar(1.0)},
    "kb_permute_dimensions": lambda a, b, c: {"X": f32(a, b, c)},
    "kb_repeat_elements": lambda a, b, c: {"I": f32(a, b, c)},
    "kb_reverse": lambda a, b, c: {"I": f32(a, b)},
    "kb_spatial_2d_padding": lambda a, b, c: {"I": f32(1, a, b, c)},
    "kb_tile": lambda a, b, c: {"I": f32(a, b)},
}


def test_the_corpus_is_large_and_every_entry_is_cited():
    assert len(PROGRAMS) >= 110, len(PROGRAMS)
    ids = [p.id for p in [*PROGRAMS, *NEGATIVES]]
    assert len(ids) == len(set(ids)), "duplicate ids"
    assert len({p.code for p in PROGRAMS}) >= 110, "fewer than 110 distinct program texts"
    signatures = {(p.code, tuple((n, a.shape, a.dtype) for n, a in p.args.items())) for p in PROGRAMS}
    assert len(signatures) == len(PROGRAMS), "an entry repeats another's program and argument types"
    for entry in [*PROGRAMS, *NEGATIVES]:
        assert re.match(r"plaidml/plaidml: \S+ @ \S+", entry.cite), entry.id
    assert len(NEGATIVES) >= 8


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.id for p in PROGRAMS])
def test_plaidml_program_matches_numpy(program):
    arrays = arguments(program)
    got = run(program, arrays)
    problem = mismatch(program, arrays, got)
    assert problem is None, f"{program.id} ({program.cite}): {problem}"


@pytest.mark.parametrize("program_id", sorted(RESIZABLE))
@settings(max_examples=4, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate])  # no shrinking: each try compiles
@given(sizes=st.tuples(st.integers(1, 6), st.integers(1, 6), st.integers(1, 4)), seed=st.integers(0, 2**16))
def test_plaidml_program_matches_numpy_at_any_size(program_id, sizes, seed):
    program = replace(BY_ID[program_id], args=RESIZABLE[program_id](*sizes))
    arrays = arguments(program, seed)
    got = run(program, arrays)
    problem = mismatch(program, arrays, got)
    assert problem is None, f"{program.id} with shapes {[a.shape for a in arrays.values()]}: {problem}"


def test_resizable_references_agree_with_the_corpus_arguments():
    # The resized argument builders describe the same arguments as the corpus entries (names, ranks).
    for program_id, build in RESIZABLE.items():
        base = BY_ID[program_id].args
        resized = build(2, 3, 2)
        assert list(resized) == list(base), program_id
        assert all(len(resized[n].shape) == len(base[n].shape) for n in base), program_id
        program = replace(BY_ID[program_id], args=resized)
        assert all(np.all(np.isfinite(r.astype(np.float64))) for r in expected(program, arguments(program))), program_id


@pytest.mark.parametrize("negative", NEGATIVES, ids=[n.id for n in NEGATIVES])
def test_plaidml_negative_program_is_refused(negative):
    arrays = arguments(negative)
    with pytest.raises(tilec.TilecError) as info:
        tilec.compile(negative.code)(**arrays)
    problem = names_culprit(negative, str(info.value))
    assert problem is None, f"{negative.id}: {problem}\n{info.value}"
