"""Tokens and parser of the expression language (see :mod:`advisor.expr.expression`).

The parser is a hand-written recursive descent over a fixed grammar. Every
limit that keeps parsing cheap is enforced here: source length, nesting depth,
node count and literal sizes. Function names are checked against the
function table (:mod:`advisor.expr.functions`) at parse time, so an unknown function is a lint error.
"""

from __future__ import annotations

import difflib
import math
import re
from typing import NamedTuple

from advisor.expr.functions import FUNCTIONS
from advisor.expr.tree import (
    Binary, BoolOp, Call, Compare, Const, Field, Generator, IfElse, Index, ListLit, Node, Ref, Unary,
)
from advisor.errors import ExpressionError
from advisor.expr.values import MAX_MAGNITUDE

__all__ = ["MAX_DEPTH", "MAX_NODES", "MAX_SOURCE", "parse"]

MAX_SOURCE = 2000
MAX_DEPTH = 32
MAX_NODES = 400

# --------------------------------------------------------------------------- tokens

_TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<number>(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?)
  | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>\*\*|//|<=|>=|==|!=|[-+*/%<>()\[\],.])
    """,
    re.VERBOSE,
)
_KEYWORDS = {"and", "or", "not", "in", "if", "else", "for", "true", "false", "null", "True", "False", "None"}
_ESCAPES = {"n": "\n", "t": "\t", "\\": "\\", "'": "'", '"': '"'}


class _Tok(NamedTuple):  # a tuple: rule loading makes thousands
    kind: str  # number, string, name, kw, op, end
    text: str
    pos: int


def _tokenize(source: str) -> list[_Tok]:
    tokens: list[_Tok] = []
    pos = 0
    while pos < len(source):
        m = _TOKEN.match(source, pos)
        if not m:
            raise ExpressionError(f"unexpected character {source[pos]!r} at column {pos + 1}", source, pos)
        kind = m.lastgroup or ""
        text = m.group()
        if kind == "name" and text in _KEYWORDS:
            kind = "kw"
        if kind == "name" and text.startswith("__"):
            raise ExpressionError(f"names starting with `__` are not allowed (column {pos + 1})", source, pos)
        if kind != "ws":
            if kind == "number" and len(text) > 40:
                raise ExpressionError(f"number literal too long at column {pos + 1}", source, pos)
            tokens.append(_Tok(kind, text, pos))
        pos = m.end()
    tokens.append(_Tok("end", "", len(source)))
    return tokens


def _unquote(text: str, source: str, pos: int) -> str:
    body, out, i = text[1:-1], [], 0
    while i < len(body):
        ch = body[i]
        if ch == "\\":
            nxt = body[i + 1]
            if nxt not in _ESCAPES:
                raise ExpressionError(f"unknown escape \\{nxt} in string at column {pos + 1}", source, pos)
            out.append(_ESCAPES[nxt])
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


# --------------------------------------------------------------------------- parser


class _Parser:
    def __init__(self, source: str) -> None:
        self.source = source
        self.tokens = _tokenize(source)
        self.i = 0
        self.depth = 0
        self.nodes = 0

    # helpers -------------------------------------------------------------
    @property
    def tok(self) -> _Tok:
        return self.tokens[self.i]

    def _error(self, message: str, tok: _Tok | None = None) -> ExpressionError:
        tok = tok or self.tok
        found = f"`{tok.text}`" if tok.kind != "end" else "the end"
        return ExpressionError(f"{message} at column {tok.pos + 1}, found {found}", self.source, tok.pos)

    def _is(self, kind: str, *texts: str) -> bool:
        tok = self.tokens[self.i]
        return tok.kind == kind and (not texts or tok.text in texts)

    def _take(self, kind: str, *texts: str) -> _Tok | None:
        tok = self.tokens[self.i]
        if tok.kind == kind and (not texts or tok.text in texts):
            self.i += 1
            return tok
        return None

    def _expect(self, kind: str, text: str) -> _Tok:
        tok = self._take(kind, text)
        if tok is None:
            raise self._error(f"expected `{text}`")
        return tok

    def _node(self, node: Node) -> Node:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise ExpressionError(f"expression has more than {MAX_NODES} parts; split it up", self.source, node.pos)
        return node

    def _enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ExpressionError(f"expression nested deeper than {MAX_DEPTH} levels", self.source, self.tok.pos)

    # grammar -------------------------------------------------------------
    def parse(self) -> Node:
        if not self.source.strip():
            raise ExpressionError("expression is empty", self.source, 0)
        node = self.expr()
        if self.tok.kind != "end":
            raise self._error("unexpected text after the expression")
        return node

    def expr(self) -> Node:
        self._enter()
        try:
            node = self.or_expr()
            if self._is("kw", "if"):
                pos = self.tok.pos
                self.i += 1
                cond = self.or_expr()
                self._expect("kw", "else")
                other = self.expr()
                node = self._node(IfElse(pos, cond, node, other))
            return node
        finally:
            self.depth -= 1

    def or_expr(self) -> Node:
        values = [self.and_expr()]
        pos = self.tok.pos
        while self._take("kw", "or"):
            values.append(self.and_expr())
        return values[0] if len(values) == 1 else self._node(BoolOp(pos, "or", tuple(values)))

    def and_expr(self) -> Node:
        values = [self.not_expr()]
        pos = self.tok.pos
        while self._take("kw", "and"):
            values.append(self.not_expr())
        return values[0] if len(values) == 1 else self._node(BoolOp(pos, "and", tuple(values)))

    def not_expr(self) -> Node:
        tok = self._take("kw", "not")
        if tok:
            self._enter()
            try:
                return self._node(Unary(tok.pos, "not", self.not_expr()))
            finally:
                self.depth -= 1
        return self.comparison()

    def comparison(self) -> Node:
        first = self.arith()
        rest: list[tuple[str, Node]] = []
        while True:
            if self._is("op", "<", "<=", ">", ">=", "==", "!="):
                op = self.tok.text
                self.i += 1
            elif self._is("kw", "in"):
                op = "in"
                self.i += 1
            elif self._is("kw", "not") and self.tokens[self.i + 1].kind == "kw" and self.tokens[self.i + 1].text == "in":
                op = "not in"
                self.i += 2
            else:
                break
            rest.append((op, self.arith()))
        return first if not rest else self._node(Compare(first.pos, first, tuple(rest)))

    def arith(self) -> Node:
        node = self.term()
        while self._is("op", "+", "-"):
            tok = self.tok
            self.i += 1
            node = self._node(Binary(tok.pos, tok.text, node, self.term()))
        return node

    def term(self) -> Node:
        node = self.unary()
        while self._is("op", "*", "/", "//", "%"):
            tok = self.tok
            self.i += 1
            node = self._node(Binary(tok.pos, tok.text, node, self.unary()))
        return node

    def unary(self) -> Node:
        tok = self._take("op", "-", "+")
        if tok:
            self._enter()
            try:
                return self._node(Unary(tok.pos, tok.text, self.unary()))
            finally:
                self.depth -= 1
        return self.power()

    def power(self) -> Node:
        node = self.postfix()
        tok = self._take("op", "**")
        if tok:
            self._enter()
            try:
                node = self._node(Binary(tok.pos, "**", node, self.unary()))
            finally:
                self.depth -= 1
        return node

    def postfix(self) -> Node:
        node = self.primary()
        while True:
            if self._take("op", "."):
                name = self._take("name")
                if name is None:
                    raise self._error("expected a name after `.`")
                if isinstance(node, Ref):
                    node = self._node(Ref(node.pos, node.path + (name.text,)))
                else:
                    node = self._node(Field(name.pos, node, name.text))
            elif self._is("op", "["):
                tok = self.tok
                self.i += 1
                index = self.expr()
                self._expect("op", "]")
                node = self._node(Index(tok.pos, node, index))
            elif self._is("op", "(") and isinstance(node, Ref) and len(node.path) == 1:
                node = self.call(node)
            else:
                return node

    def call(self, name: Ref) -> Node:
        func = name.path[0]
        if func not in FUNCTIONS:
            close = difflib.get_close_matches(func, FUNCTIONS, n=1)
            hint = f"did you mean `{close[0]}()`?" if close else f"known functions: {', '.join(sorted(FUNCTIONS))}"
            raise ExpressionError(f"unknown function `{func}()`; {hint}", self.source, name.pos)
        self._expect("op", "(")
        args: list[Node] = []
        if not self._is("op", ")"):
            first = self.expr()
            if self._is("kw", "for"):
                args.append(self.generator(first))
            else:
                args.append(first)
                while self._take("op", ","):
                    args.append(self.expr())
        self._expect("op", ")")
        arity = FUNCTIONS[func].arity
        if not arity[0] <= len(args) <= arity[1]:
            raise ExpressionError(
                f"`{func}()` takes {arity[0]}{'' if arity[0] == arity[1] else f' to {arity[1]}'} "
                f"argument(s), got {len(args)}",
                self.source,
                name.pos,
            )
        return self._node(Call(name.pos, func, tuple(args)))

    def generator(self, element: Node) -> Node:
        tok = self._expect("kw", "for")
        var = self._take("name")
        if var is None:
            raise self._error("expected a variable name after `for`")
        self._expect("kw", "in")
        source = self.or_expr()  # not expr(): a trailing `if` is the filter, not a ternary
        cond = self.or_expr() if self._take("kw", "if") else None
        return self._node(Generator(tok.pos, element, var.text, source, cond))

    def primary(self) -> Node:
        tok = self.tok
        if tok.kind == "number":
            self.i += 1
            value = float(tok.text) if any(c in tok.text for c in ".eE") else int(tok.text)
            if isinstance(value, int) and value > 2**63:
                value = float(value)
            if not math.isfinite(value) or abs(value) > MAX_MAGNITUDE:
                raise ExpressionError(f"number {tok.text} is out of range", self.source, tok.pos)
            return self._node(Const(tok.pos, value))
        if tok.kind == "string":
            self.i += 1
            return self._node(Const(tok.pos, _unquote(tok.text, self.source, tok.pos)))
        if tok.kind == "kw" and tok.text in ("true", "True", "false", "False", "null", "None"):
            self.i += 1
            value = {"true": True, "True": True, "false": False, "False": False}.get(tok.text)
            return self._node(Const(tok.pos, value))
        if tok.kind == "name":
            self.i += 1
            return self._node(Ref(tok.pos, (tok.text,)))
        if self._take("op", "("):
            node = self.expr()
            self._expect("op", ")")
            return node
        if self._take("op", "["):
            self._enter()
            try:
                items: list[Node] = []
                if not self._is("op", "]"):
                    items.append(self.expr())
                    if self._is("kw", "for"):  # [k.name for k in kernels.top]
                        node = self.generator(items[0])
                        self._expect("op", "]")
                        return node
                    while self._take("op", ","):
                        items.append(self.expr())
                self._expect("op", "]")
                return self._node(ListLit(tok.pos, tuple(items)))
            finally:
                self.depth -= 1
        raise self._error("expected a value")


def parse(source: str) -> Node:
    """Parse ``source`` into a tree; raise :class:`ExpressionError` with the column."""
    if not isinstance(source, str):
        raise ExpressionError(f"an expression must be text, not {type(source).__name__}", str(source)[:80])
    if len(source) > MAX_SOURCE:
        raise ExpressionError(f"expression is longer than {MAX_SOURCE} characters", source[:80] + "...")
    return _Parser(source).parse()
