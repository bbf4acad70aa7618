"""C spellings of the loop IR's float operations and math builtins (single or double precision).

Requires: operands already rendered as C expressions of type `t` ("float" or "double"; float16
values are computed in float). Guarantees: an expression with loop IR's meaning: NaN-propagating
min/max and floor modulo through the prelude's helpers (tilec.codegen.cuda.prelude), round is
``rint`` (halves to even, as numpy), every other builtin its CUDA math-library function.
"""

from __future__ import annotations

from tilec.errors import CodegenError

ARITH = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
MATH = {"exp": "exp", "log": "log", "sqrt": "sqrt", "sin": "sin", "cos": "cos", "tanh": "tanh", "erf": "erf",
        "floor": "floor", "ceil": "ceil", "abs": "fabs", "pow": "pow", "round": "rint", "tan": "tan",
        "asin": "asin", "acos": "acos", "atan": "atan", "sinh": "sinh", "cosh": "cosh", "asinh": "asinh",
        "acosh": "acosh", "atanh": "atanh"}


def float_bin(op: str, a: str, b: str) -> str:
    if op in ARITH:
        return f"({a} {ARITH[op]} {b})"
    if op in ("max", "min"):
        return f"tilec_f{op}({a}, {b})"
    if op == "mod":
        return f"tilec_fmod({a}, {b})"
    raise CodegenError(f"unknown float operation {op}")


def float_call(func: str, args: list[str], t: str) -> str:
    suffix = "f" if t == "float" else ""
    if func in MATH:
        return f"{MATH[func]}{suffix}({', '.join(args)})"
    one = "1.0f" if t == "float" else "1.0"
    if func == "sigmoid":
        return f"({one} / ({one} + exp{suffix}(-{args[0]})))"
    if func == "relu":
        return f"tilec_fmax({args[0]}, ({t})0)"
    if func in ("max", "min"):
        return f"tilec_f{func}({args[0]}, {args[1]})"
    raise CodegenError(f"no CUDA lowering for builtin {func}")
