"""Tile source text -> syntax tree (:mod:`tilec.frontend.ast`).

The Lark LALR parser runs with the transformer inlined, so no parse tree is built
and deep nesting costs no Python recursion here. Every Lark error becomes a
:class:`~tilec.errors.TileSyntaxError` with line, column and a caret snippet.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from pathlib import Path
from typing import Any

import lark
from lark import Token, Transformer

from tilec.errors import TileSyntaxError
from tilec.frontend import ast

_GRAMMAR = Path(__file__).with_name("grammar.lark")

# Readable names for the grammar's terminals, used in "expected ..." messages.
_TERMINAL_TEXT = {
    "NAME": "a name", "INT": "an integer", "FLOAT": "a number", "COMPARE": "a comparison",
    "LPAR": "'('", "RPAR": "')'", "LSQB": "'['", "RSQB": "']'", "LBRACE": "'{'", "RBRACE": "'}'",
    "COMMA": "','", "SEMICOLON": "';'", "COLON": "':'", "EQUAL": "'='", "PLUS": "'+'",
    "MINUS": "'-'", "STAR": "'*'", "SLASH": "'/'", "MORETHAN": "'>'", "LESSTHAN": "'<'",
    "QMARK": "'?'", "DEFAULT": "'default'", "NO_DEFRACT": "'no_defract'", "FUNCTION": "'function'",
    "__ANON_0": "'->'", "__ANON_1": "'=='", "$END": "end of input", "ATTR_OPEN": "'[['",
    "ATTR_CLOSE": "']]'", "SHIFT_LEFT": "'<<'", "SHIFT_RIGHT": "'>>'", "TILDE": "'~'", "CIRCUMFLEX": "'^'",
    "VBAR": "'|'", "AMPERSAND": "'&'",
}


def _pos(item: Any) -> ast.Pos:
    if isinstance(item, Token):
        return (item.line or 1, item.column or 1)
    if isinstance(item, (ast.AccessNode, ast.LhsNode)):
        return item.tensor.pos
    return item.pos


def _name(tok: Token) -> ast.Name:
    return ast.Name(str(tok), _pos(tok))


class _ToAst(Transformer):
    """Grammar rule -> AST node. Method names are the grammar's aliases."""

    # -- program structure
    def start(self, items: list) -> ast.ProgramNode:
        (fn,) = items
        return fn

    def single_statement(self, items: list) -> ast.ProgramNode:
        return ast.ProgramNode((), (), (items[0],), single_statement=True)

    def function_def(self, items: list) -> ast.ProgramNode:
        params = tuple(p for p in items if isinstance(p, ast.ParamNode))
        outputs = tuple(_name(t) for t in items if isinstance(t, Token))
        stmts = tuple(s for s in items if isinstance(s, (ast.ContractionNode, ast.ElementwiseNode)))
        return ast.ProgramNode(params, outputs, stmts, single_statement=False)

    def attributed(self, items: list) -> ast.StatementNode:
        *attributes, stmt = items
        return dataclasses.replace(stmt, attributes=tuple(attributes)) if attributes else stmt

    def attribute(self, items: list) -> ast.AttributeNode:
        name = _name(items[1])
        params = tuple(_name(t) for t in items[2:-1] if isinstance(t, Token))
        return ast.AttributeNode(name, params)

    def param_any(self, items: list) -> ast.ParamNode:
        return ast.ParamNode(_name(items[0]), None)

    def param_scalar(self, items: list) -> ast.ParamNode:
        return ast.ParamNode(_name(items[0]), ())

    def param_dims(self, items: list) -> ast.ParamNode:
        return ast.ParamNode(_name(items[0]), tuple(items[1:]))

    # -- contractions
    def contraction(self, items: list) -> ast.ContractionNode:
        lhs, agg, (combo, operands), *tails = items
        scalar = None
        if combo == "scalar":
            scalar, operands = operands[1], (operands[0],)
            combo = "single"
        constraints = tuple(t for t in tails if isinstance(t, ast.ConstraintNode))
        defaults = [t for t in tails if isinstance(t, tuple)]
        if len(defaults) > 1:
            raise TileSyntaxError("'default' given twice", "", *defaults[1][0].pos)
        no_defract = any(t == "no_defract" for t in tails)
        return ast.ContractionNode(lhs, agg, combo, operands, constraints,
                                   defaults[0][0] if defaults else None, no_defract, scalar)

    def lhs_scalar(self, items: list) -> ast.LhsNode:
        return ast.LhsNode(_name(items[0]), (), ())

    def lhs_nosize(self, items: list) -> ast.LhsNode:
        return ast.LhsNode(_name(items[0]), items[1], None)

    def lhs_sized(self, items: list) -> ast.LhsNode:
        return ast.LhsNode(_name(items[0]), items[1], items[2])

    def iexpr_list(self, items: list) -> tuple:
        return tuple(items)

    def agg_sum(self, _: list) -> str:
        return "+"

    def agg_prod(self, _: list) -> str:
        return "*"

    def agg_max(self, _: list) -> str:
        return ">"

    def agg_min(self, _: list) -> str:
        return "<"

    def agg_assign(self, _: list) -> str:
        return "="

    def combo_single(self, items: list) -> tuple:
        return ("single", tuple(items))

    def combo_mul(self, items: list) -> tuple:
        return ("mul", tuple(items))

    def combo_add(self, items: list) -> tuple:
        return ("add", tuple(items))

    def combo_eq(self, items: list) -> tuple:
        return ("eq", tuple(items))

    def combo_cond(self, items: list) -> tuple:
        return ("cond", tuple(items))

    @staticmethod
    def _scalar_right(op: str, items: list) -> tuple:
        access, value = items
        return ("scalar", (access, ast.ScalarOperandNode(op, value, left=False)))

    def combo_scalar_mul(self, items: list) -> tuple:
        return self._scalar_right("*", items)

    def combo_scalar_add(self, items: list) -> tuple:
        return self._scalar_right("+", items)

    def combo_scalar_sub(self, items: list) -> tuple:
        return self._scalar_right("-", items)

    def combo_scalar_div(self, items: list) -> tuple:
        return self._scalar_right("/", items)

    def combo_scalar_left(self, items: list) -> tuple:
        value, op, access = items
        return ("scalar", (access, ast.ScalarOperandNode(str(op), value, left=True)))

    def scalar_op(self, items: list) -> str:
        return str(items[0])

    def neg_int(self, items: list) -> ast.Int:
        return ast.Int(-int(items[0]), _pos(items[0]))

    def neg_float(self, items: list) -> ast.Float:
        return ast.Float(-float(items[0]), _pos(items[0]))

    def access_scalar(self, items: list) -> ast.AccessNode:
        return ast.AccessNode(_name(items[0]), ())

    def access_indexed(self, items: list) -> ast.AccessNode:
        return ast.AccessNode(_name(items[0]), items[1])

    def tail_constraint(self, items: list) -> ast.ConstraintNode:
        return ast.ConstraintNode(items[0], items[1])

    def tail_default(self, items: list) -> tuple:
        return (_name(items[-1]),)  # a 1-tuple: told apart from the other tails by its type

    def tail_default_literal(self, items: list) -> tuple:
        return (items[-1],)

    def tail_no_defract(self, _: list) -> str:
        return "no_defract"

    # -- index expressions
    def i_int(self, items: list) -> ast.Int:
        return ast.Int(_int_literal(items[0]), _pos(items[0]))

    def i_name(self, items: list) -> ast.Name:
        return _name(items[0])

    def i_juxtaposed(self, items: list) -> ast.Bin:
        coeff, var = items
        return ast.Bin("*", ast.Int(_int_literal(coeff), _pos(coeff)), _name(var), _pos(coeff))

    def i_call(self, items: list) -> ast.Call:
        func = _name(items[0])
        return ast.Call(func, tuple(items[1:]), func.pos)

    def i_neg(self, items: list) -> ast.Neg:
        return ast.Neg(items[0], _pos(items[0]))

    def _bin(self, op: str, items: list) -> ast.Bin:
        return ast.Bin(op, items[0], items[1], _pos(items[0]))

    def i_add(self, items: list) -> ast.Bin:
        return self._bin("+", items)

    def i_sub(self, items: list) -> ast.Bin:
        return self._bin("-", items)

    def i_mul(self, items: list) -> ast.Bin:
        return self._bin("*", items)

    def i_div(self, items: list) -> ast.Bin:
        return self._bin("/", items)

    # -- elementwise
    def elementwise(self, items: list) -> ast.ElementwiseNode:
        return ast.ElementwiseNode(_name(items[0]), items[1])

    def e_select(self, items: list) -> ast.Select:
        return ast.Select(items[0], items[1], items[2], _pos(items[0]))

    def e_compare(self, items: list) -> ast.Compare:
        return ast.Compare(str(items[1]), items[0], items[2], _pos(items[0]))

    e_add = i_add
    e_sub = i_sub
    e_mul = i_mul
    e_div = i_div
    e_neg = i_neg
    e_int = i_int
    e_name = i_name

    def _bit_call(self, func: str, items: list) -> ast.Call:
        args = tuple(a for a in items if not isinstance(a, Token))
        pos = _pos(args[0])
        return ast.Call(ast.Name(func, pos), args, pos)

    def e_bit_xor(self, items: list) -> ast.Call:
        return self._bit_call("bit_xor", items)

    def e_bit_or(self, items: list) -> ast.Call:
        return self._bit_call("bit_or", items)

    def e_bit_and(self, items: list) -> ast.Call:
        return self._bit_call("bit_and", items)

    def e_bit_left(self, items: list) -> ast.Call:
        return self._bit_call("bit_left", items)

    def e_bit_right(self, items: list) -> ast.Call:
        return self._bit_call("bit_right", items)

    def e_bit_not(self, items: list) -> ast.Call:
        return self._bit_call("bit_not", items)

    def e_float(self, items: list) -> ast.Float:
        value = float(items[0])
        if math.isinf(value):
            raise TileSyntaxError(f"the number {_short(str(items[0]))} is beyond the float64 range (about 1.8e308)",
                                  "", *_pos(items[0]))
        return ast.Float(value, _pos(items[0]))

    def e_call(self, items: list) -> ast.Call:
        func = _name(items[0])
        args = tuple(a for a in items[1:] if a is not None)
        return ast.Call(func, args, func.pos)


MAX_LITERAL_DIGITS = 1000  # integer literals are exact Python ints, up to this many digits
MAX_NESTING = 256  # expression depth every later pass handles without exhausting Python's stack


def _short(text: str) -> str:
    return text if len(text) <= 40 else f"{text[:20]}...{text[-10:]} ({len(text)} characters)"


def _int_literal(tok: Token) -> int:
    text = str(tok)
    if len(text) > MAX_LITERAL_DIGITS:
        raise TileSyntaxError(f"the integer {_short(text)} has {len(text)} digits; tilec accepts at most "
                              f"{MAX_LITERAL_DIGITS}", "", *_pos(tok))
    return int(text)


def _children(node: Any) -> tuple:
    if isinstance(node, (ast.Bin, ast.Compare)):
        return node.a, node.b
    if isinstance(node, ast.Neg):
        return (node.a,)
    if isinstance(node, ast.Select):
        return node.cond, node.a, node.b
    if isinstance(node, ast.Call):
        return node.args
    return ()


def _expression_roots(program: ast.ProgramNode) -> list:
    roots: list = [d for p in program.params for d in (p.dims or ())]
    for s in program.statements:
        if isinstance(s, ast.ElementwiseNode):
            roots.append(s.expr)
            continue
        roots += list(s.lhs.indices) + list(s.lhs.sizes or ())
        roots += [i for a in s.operands for i in a.indices]
        roots += [e for c in s.constraints for e in (c.poly, c.bound)]
    return roots


def check_nesting(program: ast.ProgramNode, source: str) -> None:
    """Refuse expressions nested deeper than MAX_NESTING (walked without recursion)."""
    stack = [(root, 1) for root in _expression_roots(program)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_NESTING:
            line, column = _pos(node)
            raise TileSyntaxError(f"expression nested more than {MAX_NESTING} levels deep; split it into several "
                                  f"statements", source, line, column)
        stack += [(child, depth + 1) for child in _children(node)]


@functools.lru_cache(maxsize=1)
def _parser() -> lark.Lark:
    return lark.Lark(
        _GRAMMAR.read_text(),
        parser="lalr",
        lexer="contextual",
        transformer=_ToAst(),
        maybe_placeholders=True,
    )


def parse_source(source: str) -> ast.ProgramNode:
    """Parse Tile text into a syntax tree; raises TileSyntaxError on bad input."""
    if not isinstance(source, str):
        raise TileSyntaxError(f"Tile source must be a str, got {type(source).__name__}", "", 1, 1)
    if not source.strip():
        raise TileSyntaxError("empty program: expected a statement or a 'function'", source, 1, 1)
    try:
        tree = _parser().parse(source)
        assert isinstance(tree, ast.ProgramNode)
        check_nesting(tree, source)
        return tree
    except TileSyntaxError as err:
        raise TileSyntaxError(err.reason, source, err.line, err.column) from None
    except lark.exceptions.UnexpectedCharacters as err:
        at = err.pos_in_stream or 0
        char = source[at] if at < len(source) else "end of input"
        raise TileSyntaxError(f"unexpected character {char!r}", source, err.line, err.column) from None
    except lark.exceptions.UnexpectedToken as err:
        raise TileSyntaxError(_unexpected_token_message(err), source, *_token_pos(err.token, source)) from None
    except lark.exceptions.UnexpectedEOF as err:
        line, column = _end_pos(source)
        raise TileSyntaxError(f"unexpected end of input; expected {_expected(err.expected)}",
                              source, line, column) from None
    except lark.exceptions.UnexpectedInput as err:  # any other Lark input error
        raise TileSyntaxError(str(err).splitlines()[0], source, getattr(err, "line", 1) or 1,
                              getattr(err, "column", 1) or 1) from None
    except lark.exceptions.VisitError as err:  # an exception inside the transformer
        inner = err.orig_exc
        if isinstance(inner, TileSyntaxError):
            raise TileSyntaxError(inner.reason, source, inner.line, inner.column) from None
        raise


def _token_pos(token: Token, source: str) -> tuple[int, int]:
    if token.type == "$END" or token.line is None or token.column is None:
        return _end_pos(source)
    return token.line, token.column


def _end_pos(source: str) -> tuple[int, int]:
    lines = source.splitlines() or [""]
    return len(lines), len(lines[-1]) + 1


def _unexpected_token_message(err: lark.exceptions.UnexpectedToken) -> str:
    tok = err.token
    what = "end of input" if tok.type == "$END" else repr(str(tok))
    return f"unexpected {what}; expected {_expected(err.expected)}"


def _expected(terminals: Any) -> str:
    names = sorted({_TERMINAL_TEXT.get(t, t.lower()) for t in terminals})
    if len(names) > 8:
        names = names[:8] + ["..."]
    return " or ".join(names) if len(names) <= 2 else "one of " + ", ".join(names)
