"""PlaidML's own Tile programs run unchanged and match numpy; PlaidML's negative programs are
refused with a TilecError naming the culprit, with a line and column (the corpus: plaidml_corpus.py).
"""

from __future__ import annotations

import re

import pytest

import tilec
from plaidml_corpus import NEGATIVES, PROGRAMS, arguments, mismatch, names_culprit, run


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


@pytest.mark.parametrize("negative", NEGATIVES, ids=[n.id for n in NEGATIVES])
def test_plaidml_negative_program_is_refused(negative):
    arrays = arguments(negative)
    with pytest.raises(tilec.TilecError) as info:
        tilec.compile(negative.code)(**arrays)
    problem = names_culprit(negative, str(info.value))
    assert problem is None, f"{negative.id}: {problem}\n{info.value}"
