"""The reference interpreter: Tile's tensor IR executed directly with numpy (target "interp").

    polyhedron.py   exact affine forms, conditions, the Fourier–Motzkin box of a statement
    tuples.py       enumeration of a box's tuples that meet every condition
    contraction.py  one contraction: shape inference, contributions, aggregation, default
    elementwise.py  one elementwise statement with numpy broadcasting and tilec's type rules
    function.py     InterpretedFunction: argument binding, statements in order, trace and log
"""

from tilec.interp.function import InterpretedFunction, run_statement

__all__ = ["InterpretedFunction", "run_statement"]
