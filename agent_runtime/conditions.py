"""Conditions: the JEXL subset used by step `when` and loop `condition`/`goal`.

We do not use the PyPI `pyjexl` package: it has been unmaintained since 2019, depends on
the legacy `future` compatibility package, ships no type information, and raises
AttributeError on property access such as `items.length` where JEXL, which runs on
JavaScript, yields a value. The subset manifests use is small enough to own: a tokenizer
and a Pratt parser build a tiny AST once per expression (cached), which is then evaluated
many times with JavaScript-like semantics (`condition_semantics`), because the reference
implementation evaluates the same expressions with JEXL on JavaScript.

Cost is bounded (`agent_runtime.limits`): an expression longer than
`conditionLength` does not compile, and one evaluation may spend at most
`conditionCost` work units (one per operator, one per list item or object
entry compared, one per 16 characters of text built or searched), so a
manifest cannot make a run hang; numbers follow JavaScript's doubles, so
arithmetic cannot grow integers without bound. Past either bound, and for
values nested too deeply to compare, evaluation raises
`ConditionEvaluationError` and the step fails with a clear message.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, TypeVar

from agent_runtime.condition_semantics import (
    BINARY,
    EvaluationCost,
    js_int,
    member,
    scanned,
    to_number,
    truthy,
)
from agent_runtime.document_paths import quote
from agent_runtime.errors import ConditionEvaluationError, ConditionSyntaxError
from agent_runtime.limits import current_limits
from agent_runtime.templates import MISSING, PLACEHOLDER, RESERVED_SEGMENTS, resolve_path

__all__ = ["Condition", "compile_condition", "condition_identifiers", "evaluate_condition",
           "truthy"]  # fmt: skip

MAX_DEPTH = 200
"""Deeper expressions are refused at compile time, so evaluation cannot hit RecursionError."""

# Binding powers, low to high, from JEXL's own grammar (not JavaScript's), because the
# reference implementation's manifests are evaluated by JEXL: `&&` and `||` share one level
# (`a || b && c` is `(a || b) && c`), all comparisons and `in` share one, and `%` binds
# tighter than `*`. Prefix `!` and `-` bind between `%` and member access: `!a.b` is
# `!(a.b)`, `-a * b` is `(-a) * b`.
_INFIX_POWER: dict[str, int] = {
    "?": 1, "||": 10, "&&": 10, "==": 20, "!=": 20,
    "<": 20, "<=": 20, ">": 20, ">=": 20, "in": 20,
    "+": 30, "-": 30, "*": 40, "/": 40, "//": 40, "%": 50, ".": 80, "[": 80,
}  # fmt: skip
_PREFIX_POWER = 70
_KEYWORDS: dict[str, Any] = {"true": True, "false": False, "null": None}
_TOKEN = re.compile(
    r"\s*(?:(?P<num>[0-9]+(?:\.[0-9]+)?|\.[0-9]+)"
    r"|(?P<str>'(?:\\.|[^\\'])*'|\"(?:\\.|[^\\\"])*\")"
    r"|(?P<name>[A-Za-z_$][A-Za-z0-9_$]*)"
    # The placeholder pattern's one group, named here so the tokenizer can read the path.
    r"|(?P<template>" + PLACEHOLDER.pattern.replace("(", "(?P<path>", 1) + ")"
    r"|(?P<op>\|\||&&|[=!<>]=|//|[-<>+*/%!?:()[\]{},.|]))",
    re.DOTALL,
)
_ESCAPE = re.compile(r"\\(.)", re.DOTALL)
_T = TypeVar("_T")


class _Node(NamedTuple):
    kind: str  # "literal", "name", "template", "member", "array", "object" or an operator
    value: Any  # the literal, the name, the path or the object's keys
    children: tuple[_Node, ...]
    depth: int


def _node(kind: str, value: Any, *children: _Node) -> _Node:
    # A leaf has depth 0, so depth counts the operators stacked above the deepest leaf.
    return _Node(kind, value, children, 1 + max((child.depth for child in children), default=-1))


def _evaluate(node: _Node, scope: Mapping[str, Any], cost: EvaluationCost) -> Any:
    kind, value, children, _ = node
    cost.charge(1)
    match kind:
        case "literal":
            return value
        case "name":
            return None if value in RESERVED_SEGMENTS else scope.get(value)
        case "template":
            found = resolve_path(scope, value)
            return None if found is MISSING else found
        case "member":
            return member(_evaluate(children[0], scope, cost),
                           _evaluate(children[1], scope, cost))
        case "array":
            return [_evaluate(child, scope, cost) for child in children]
        case "object":
            return {key: _evaluate(item, scope, cost)
                    for key, item in zip(value, children, strict=True)}
        case "!":
            return not truthy(_evaluate(children[0], scope, cost))
        case "negate":
            return -to_number(scanned(_evaluate(children[0], scope, cost), cost))
    left = _evaluate(children[0], scope, cost)
    match kind:
        case "&&":
            return _evaluate(children[1], scope, cost) if truthy(left) else left
        case "||":
            return left if truthy(left) else _evaluate(children[1], scope, cost)
        case "?":
            return _evaluate(children[1 if truthy(left) else 2], scope, cost)
    return BINARY[kind](left, _evaluate(children[1], scope, cost), cost)


class _Token(NamedTuple):
    kind: str  # "num", "str", "name", "template", "op" or "end"
    value: Any
    pos: int
    text: str


def _error(expression: str, position: int, reason: str) -> ConditionSyntaxError:
    return ConditionSyntaxError(reason, expression=expression, position=position)


def _integer_literal(text: str) -> int | float:
    # As JavaScript reads it: a double past 2**53, Infinity past the double range
    # (and no int() of thousands of digits, which Python refuses).
    digits = text.lstrip("0") or "0"
    return js_int(int(digits)) if len(digits) <= 400 else math.inf


def _unquote(text: str) -> str:
    # As in JEXL, a backslash escapes only the enclosing quote and itself; any other is
    # kept: `\n` in an expression is a backslash and an "n", not a newline.
    return _ESCAPE.sub(lambda m: m[1] if m[1] in (text[0], "\\") else m[0], text[1:-1])


def _tokenize(expression: str) -> list[_Token]:
    tokens: list[_Token] = []
    pos = 0
    while match := _TOKEN.match(expression, pos):
        kind = match.lastgroup or ""
        start, pos = match.span(kind)
        last = tokens[-1] if tokens else None
        if kind == "num" and expression[start] == "." and last and last.text != "in" and (
            last.kind != "op" or last.text in (")", "]", "}")
        ):  # ".5" after an operand is member access (and then an error), not a number
            kind, pos = "op", start + 1
        elif kind == "op" and expression.startswith("{{", start):
            raise _error(expression, start,
                         f"invalid template at position {start}: expected '{{{{ path }}}}'")
        text = expression[start:pos]
        value: Any = text
        if kind == "num":
            value = float(text) if "." in text else _integer_literal(text)
        elif kind == "str":
            value = _unquote(text)
        elif kind == "template":
            value = match["path"]
        tokens.append(_Token(kind, value, start, text))
    start = len(expression) - len(expression[pos:].lstrip())
    if start == len(expression):
        return [*tokens, _Token("end", None, start, "")]
    if expression[start] in "'\"":
        raise _error(expression, start, f"unterminated string starting at position {start}")
    char = expression[start]
    raise _error(expression, start, f"unexpected character {char!r} at position {start}")


class _Parser:
    """Pratt parser: `_expression(power)` takes the infix operators binding tighter than
    `power`, so precedence and associativity come from `_INFIX_POWER` alone."""

    def __init__(self, expression: str) -> None:
        self.expression = expression
        self.tokens = _tokenize(expression)
        self.index = 0
        self.nesting = 0
        self.names: dict[str, None] = {}  # top-level names read, in source order

    def parse(self) -> _Node:
        if self.tokens[0].kind == "end":
            # A blank condition is true, as the reference's evaluator has it.
            return _node("literal", True)
        node = self._expression(0)
        if (token := self.tokens[self.index]).kind != "end":
            raise self._unexpected(token)
        return node

    def _advance(self) -> _Token:
        token = self.tokens[self.index]
        self.index += token.kind != "end"
        return token

    def _at(self, op: str) -> bool:
        token = self.tokens[self.index]
        return token.kind == "op" and token.text == op

    def _expect(self, op: str) -> None:
        if not self._at(op):
            raise self._unexpected(self.tokens[self.index], f"expected {op!r}")
        self.index += 1

    def _unexpected(self, token: _Token, wanted: str = "") -> ConditionSyntaxError:
        if token.kind == "end":
            reason = f"{wanted or 'expected a value'} at end of expression"
        elif wanted:
            reason = f"{wanted} but found {quote(token.text)} at position {token.pos}"
        else:
            reason = f"unexpected token {quote(token.text)} at position {token.pos}"
        return _error(self.expression, token.pos, reason)

    def _guard(self, depth: int, token: _Token) -> None:
        # Nesting bounds the parser's recursion and node depth bounds evaluation's: a
        # left-leaning chain (`a+a+...`) parses in a loop but evaluates recursively.
        if depth > MAX_DEPTH:
            raise _error(self.expression, token.pos,
                         f"expression is nested too deeply (more than {MAX_DEPTH} levels)")

    def _expression(self, power: int) -> _Node:
        token = self._advance()
        self._guard(self.nesting, token)
        self.nesting += 1
        left = self._prefix(token)
        self._guard(left.depth, token)
        while True:
            token = self.tokens[self.index]
            is_op = token.kind == "op" or (token.kind == "name" and token.text == "in")
            op = token.text if is_op else ""
            if op in ("|", "("):
                feature = "transforms" if op == "|" else "function calls"
                raise _error(self.expression, token.pos,
                             f"{feature} are not supported ({op!r} at position {token.pos})")
            if _INFIX_POWER.get(op, 0) <= power:
                self.nesting -= 1
                return left
            self.index += 1
            left = self._infix(op, left)
            self._guard(left.depth, token)

    def _prefix(self, token: _Token) -> _Node:
        kind, value = token.kind, token.value
        if kind in ("num", "str"):
            return _node("literal", value)
        if kind == "name" and value in _KEYWORDS:
            return _node("literal", _KEYWORDS[value])
        if kind == "template" or (kind == "name" and value != "in"):
            self.names.setdefault(value.split(".")[0])
            return _node(kind, value)
        if value in ("!", "-") and kind == "op":
            return _node("!" if value == "!" else "negate", None, self._expression(_PREFIX_POWER))
        if value == "(" and kind == "op":
            node = self._expression(0)
            self._expect(")")
            return node
        if value == "[" and kind == "op":
            return _node("array", None, *self._list("]", functools.partial(self._expression, 0)))
        if value == "{" and kind == "op":
            entries = self._list("}", self._entry)
            keys = tuple(key for key, _ in entries)
            return _node("object", keys, *(item for _, item in entries))
        raise self._unexpected(token)

    def _infix(self, op: str, left: _Node) -> _Node:
        if op == ".":
            if (token := self._advance()).kind != "name":
                raise self._unexpected(token, "expected a property name after '.'")
            return _node("member", None, left, _node("literal", token.value))
        if op == "[":
            key = self._expression(0)
            self._expect("]")
            return _node("member", None, left, key)
        if op == "?":
            then = self._expression(0)
            self._expect(":")
            return _node("?", None, left, then, self._expression(0))
        return _node(op, None, left, self._expression(_INFIX_POWER[op]))

    def _list(self, close: str, item: Callable[[], _T]) -> list[_T]:
        items: list[_T] = []
        while not self._at(close):
            items.append(item())
            if not self._at(close) and not self._at(","):
                raise self._unexpected(self.tokens[self.index], f"expected ',' or {close!r}")
            self.index += self._at(",")
        self.index += 1
        return items

    def _entry(self) -> tuple[str, _Node]:
        if (token := self._advance()).kind not in ("name", "str"):
            raise self._unexpected(token, "expected an object key")
        self._expect(":")
        return token.value, self._expression(0)


class Condition:
    """A compiled expression. Immutable, so one instance serves every evaluation."""

    __slots__ = ("_names", "_root", "expression")

    def __init__(self, expression: str) -> None:
        parser = _Parser(expression)
        try:
            self._root = parser.parse()
        except RecursionError:  # MAX_DEPTH fits the default limit, not an already deep stack
            raise _error(expression, 0, "expression is nested too deeply") from None
        self._names = tuple(parser.names)
        self.expression = expression

    def evaluate(self, scope: Mapping[str, Any]) -> Any:
        """The expression's value in `scope`; missing names and odd types never raise.

        Raises `ConditionEvaluationError` only past the cost limits: too much
        work, a string past the length limit, values nested too deeply to compare.
        """
        limits = current_limits()
        cost = EvaluationCost(limits.condition_cost, limits.max_string_length)
        try:
            return _evaluate(self._root, scope, cost)
        except RecursionError:
            raise ConditionEvaluationError("values nested too deeply to compare") from None
        except ValueError as error:  # e.g. an integer too long to turn into text
            raise ConditionEvaluationError(f"cannot evaluate: {error}") from None

    def identifiers(self) -> list[str]:
        """Top-level names read, once each in source order; `{{ a.b }}` contributes `a`."""
        return list(self._names)

    def __repr__(self) -> str:
        return f"Condition({self.expression!r})"


def compile_condition(expression: str) -> Condition:
    """Parse `expression` once; raises ConditionSyntaxError naming the offending position.

    An expression longer than the `conditionLength` limit is refused unread.
    """
    limit = current_limits().condition_length
    if len(expression) > limit:
        raise _error(expression[:limit], limit,
                     f"expression is longer than the limit of {limit:,} characters")
    return _compiled(expression)


@functools.lru_cache(maxsize=1024)
def _compiled(expression: str) -> Condition:
    return Condition(expression)


def evaluate_condition(expression: str, scope: Mapping[str, Any]) -> bool:
    """Whether `expression` is truthy in `scope`."""
    return truthy(compile_condition(expression).evaluate(scope))


def condition_identifiers(expression: str) -> list[str]:
    """The top-level names `expression` reads, for dependency analysis."""
    return compile_condition(expression).identifiers()
