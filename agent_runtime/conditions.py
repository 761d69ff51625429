"""Conditions: the JEXL subset used by step `when` and loop `condition`/`goal`.

We do not use the PyPI `pyjexl` package: it has been unmaintained since 2019, depends on
the legacy `future` compatibility package, ships no type information, and raises
AttributeError on property access such as `items.length` where JEXL, which runs on
JavaScript, yields a value. The subset manifests use is small enough to own: a tokenizer
and a Pratt parser build a tiny AST once per expression (cached), which is then evaluated
many times with JavaScript-like semantics, because the reference implementation evaluates
the same expressions with JEXL on JavaScript.
"""

from __future__ import annotations

import functools
import math
import operator
import re
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, TypeVar

from agent_runtime.errors import ConditionSyntaxError
from agent_runtime.templates import MISSING, PLACEHOLDER, RESERVED_SEGMENTS, resolve_path, to_text

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
# JavaScript's ToNumber grammar for strings ("" is 0; anything else unmatched is NaN).
_JS_NUMERIC = re.compile(r"(?:[+-]?(?:Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?))?")
_JS_RADIX = re.compile(r"0(?:[xX][0-9a-fA-F]+|[oO][0-7]+|[bB][01]+)")
_T = TypeVar("_T")


def truthy(value: Any) -> bool:
    """JavaScript truthiness: None, False, 0, NaN and "" are false; [] and {} are true."""
    if isinstance(value, str):
        return value != ""
    if isinstance(value, int | float):  # bool included
        return value != 0 and not math.isnan(value)
    return value is not None and value is not MISSING


def _num(value: Any) -> int | float:
    # JavaScript's ToNumber, except that lists and dicts are always NaN.
    if isinstance(value, int | float):
        return int(value) if isinstance(value, bool) else value
    if isinstance(value, str):
        text = value.strip()
        if _JS_NUMERIC.fullmatch(text):
            return float(text.replace("Infinity", "inf") or 0)
        return int(text, 0) if _JS_RADIX.fullmatch(text) else math.nan
    return 0 if value is None else math.nan


def _float(value: int | float) -> float:
    try:
        return float(value)
    except OverflowError:  # an int past the double range is what JavaScript calls Infinity
        return math.inf if value > 0 else -math.inf


def _strict_eq(left: Any, right: Any) -> bool:
    # JavaScript `===`, except that lists and dicts compare by content: manifests only
    # hold JSON values, and the identity of two JSON values means nothing to an author.
    if isinstance(left, bool) or isinstance(right, bool):
        return type(left) is type(right) and left == right
    if isinstance(left, int | float):
        return isinstance(right, int | float) and left == right
    if isinstance(left, str):
        return isinstance(right, str) and left == right
    if isinstance(left, list | tuple):
        return (isinstance(right, list | tuple) and len(left) == len(right)
                and all(map(_strict_eq, left, right)))
    if isinstance(left, Mapping):
        return (isinstance(right, Mapping) and left.keys() == right.keys()
                and all(_strict_eq(item, right[key]) for key, item in left.items()))
    return left is right or (type(left) is type(right) and left == right)


def _loose_eq(left: Any, right: Any) -> bool:
    # JavaScript `==` between primitives; null equals only null (there is no undefined).
    if left is None or right is None:
        return left is right
    if isinstance(left, str | int | float) and isinstance(right, str | int | float):
        if type(left) is type(right) or (isinstance(left, str) and isinstance(right, str)):
            return bool(left == right)
        return _num(left) == _num(right)
    return _strict_eq(left, right)


def _compare(relation: Callable[[Any, Any], bool], left: Any, right: Any) -> bool:
    # JavaScript's relational comparison of primitives: two strings by code point, any
    # other pair as numbers (null is 0, so `null < 1` and `null <= null` hold; NaN never).
    if isinstance(left, str) and isinstance(right, str):
        return relation(left, right)
    if all(side is None or isinstance(side, str | int | float) for side in (left, right)):
        return relation(_num(left), _num(right))
    return False


def _arithmetic(operation: Callable[[Any, Any], Any], left: Any, right: Any) -> Any:
    x, y = _num(left), _num(right)
    try:
        return operation(x, y)
    except OverflowError:
        return operation(_float(x), _float(y))


def _add(left: Any, right: Any) -> Any:
    if isinstance(left, str) or isinstance(right, str):
        return to_text(left) + to_text(right)
    return _arithmetic(operator.add, left, right)


def _divide(left: Any, right: Any) -> float:
    x, y = _num(left), _num(right)
    if y == 0:  # JavaScript: an infinity signed by both operands; 0 / 0 is NaN
        dividend = _float(x)
        if dividend == 0 or math.isnan(dividend):
            return math.nan
        return math.copysign(math.inf, dividend) * math.copysign(1.0, y)
    return float(_arithmetic(operator.truediv, x, y))


def _floor_divide(left: Any, right: Any) -> int | float:
    quotient = _divide(left, right)  # JEXL's `//` is Math.floor(a / b)
    return math.floor(quotient) if math.isfinite(quotient) else quotient


def _remainder(left: Any, right: Any) -> float:
    try:  # fmod truncates like JavaScript's `%`: the sign follows the dividend
        return math.fmod(_num(left), _num(right))
    except (ValueError, OverflowError):  # x % 0 and Infinity % x are NaN in JavaScript
        return math.nan


def _key_text(key: Any) -> str | None:
    # JavaScript turns a number or boolean used as a property key into its string.
    return key if isinstance(key, str) else to_text(key) if isinstance(key, int | float) else None


def _contains(needle: Any, haystack: Any) -> bool:
    if isinstance(haystack, str):
        text = _key_text(needle)
        return text is not None and text in haystack
    if isinstance(haystack, list | tuple):
        return any(_strict_eq(needle, item) for item in haystack)  # JEXL's `in` uses ===
    return isinstance(haystack, Mapping) and _key_text(needle) in haystack


def _member(container: Any, key: Any) -> Any:
    if isinstance(container, Mapping):
        name = _key_text(key)
        return None if name is None or name in RESERVED_SEGMENTS else container.get(name)
    if isinstance(container, list | tuple | str):
        if key == "length":
            return len(container)
        if (isinstance(key, str) and key.isascii() and key.isdigit()) or (
            isinstance(key, float) and key.is_integer()
        ):
            key = int(key)
        if isinstance(key, int) and not isinstance(key, bool) and 0 <= key < len(container):
            return container[key]
    return None  # JavaScript's undefined; reading through it stays None (safe navigation)


_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "==": _loose_eq, "!=": lambda left, right: not _loose_eq(left, right), "in": _contains,
    "<": functools.partial(_compare, operator.lt), "<=": functools.partial(_compare, operator.le),
    ">": functools.partial(_compare, operator.gt), ">=": functools.partial(_compare, operator.ge),
    "+": _add, "-": functools.partial(_arithmetic, operator.sub),
    "*": functools.partial(_arithmetic, operator.mul),
    "/": _divide, "//": _floor_divide, "%": _remainder,
}  # fmt: skip


class _Node(NamedTuple):
    kind: str  # "literal", "name", "template", "member", "array", "object" or an operator
    value: Any  # the literal, the name, the path or the object's keys
    children: tuple[_Node, ...]
    depth: int


def _node(kind: str, value: Any, *children: _Node) -> _Node:
    # A leaf has depth 0, so depth counts the operators stacked above the deepest leaf.
    return _Node(kind, value, children, 1 + max((child.depth for child in children), default=-1))


def _evaluate(node: _Node, scope: Mapping[str, Any]) -> Any:
    kind, value, children, _ = node
    match kind:
        case "literal":
            return value
        case "name":
            return None if value in RESERVED_SEGMENTS else scope.get(value)
        case "template":
            found = resolve_path(scope, value)
            return None if found is MISSING else found
        case "member":
            return _member(_evaluate(children[0], scope), _evaluate(children[1], scope))
        case "array":
            return [_evaluate(child, scope) for child in children]
        case "object":
            return {key: _evaluate(item, scope) for key, item in zip(value, children, strict=True)}
        case "!":
            return not truthy(_evaluate(children[0], scope))
        case "negate":
            return -_num(_evaluate(children[0], scope))
    left = _evaluate(children[0], scope)
    match kind:
        case "&&":
            return _evaluate(children[1], scope) if truthy(left) else left
        case "||":
            return left if truthy(left) else _evaluate(children[1], scope)
        case "?":
            return _evaluate(children[1 if truthy(left) else 2], scope)
    return _BINARY[kind](left, _evaluate(children[1], scope))


class _Token(NamedTuple):
    kind: str  # "num", "str", "name", "template", "op" or "end"
    value: Any
    pos: int
    text: str


def _error(expression: str, position: int, reason: str) -> ConditionSyntaxError:
    return ConditionSyntaxError(reason, expression=expression, position=position)


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
            value = float(text) if "." in text else int(text)
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
            raise _error(self.expression, 0, "empty expression")
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
            reason = f"{wanted} but found {token.text!r} at position {token.pos}"
        else:
            reason = f"unexpected token {token.text!r} at position {token.pos}"
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
        """The expression's value in `scope`; missing names and odd types never raise."""
        return _evaluate(self._root, scope)

    def identifiers(self) -> list[str]:
        """Top-level names read, once each in source order; `{{ a.b }}` contributes `a`."""
        return list(self._names)

    def __repr__(self) -> str:
        return f"Condition({self.expression!r})"


@functools.lru_cache(maxsize=1024)
def compile_condition(expression: str) -> Condition:
    """Parse `expression` once; raises ConditionSyntaxError naming the offending position."""
    return Condition(expression)


def evaluate_condition(expression: str, scope: Mapping[str, Any]) -> bool:
    """Whether `expression` is truthy in `scope`."""
    return truthy(compile_condition(expression).evaluate(scope))


def condition_identifiers(expression: str) -> list[str]:
    """The top-level names `expression` reads, for dependency analysis."""
    return compile_condition(expression).identifiers()
