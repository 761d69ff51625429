"""What condition operators do to values: JavaScript's semantics, and their cost.

The reference implementation evaluates conditions with JEXL on JavaScript, so
the operators here follow JavaScript: truthiness, `==` between primitives,
relational comparison of mixed types, numbers as doubles (exact integers up
to 2**53, Infinity past the double range), `+` joining text. Lists and
objects compare by content, since manifests hold JSON values.

Every operator charges the evaluation's `EvaluationCost`: one unit per list
item or object entry compared, one per `CHARS_PER_UNIT` characters of text
built, compared or searched. Past the budget, or past the string length
limit, it raises `ConditionEvaluationError`.
"""

from __future__ import annotations

import functools
import math
import operator
import re
from collections.abc import Callable, Mapping
from typing import Any

from agent_runtime.errors import ConditionEvaluationError
from agent_runtime.templates import MISSING, RESERVED_SEGMENTS, to_text

__all__ = ["BINARY", "CHARS_PER_UNIT", "EvaluationCost", "js_int", "member", "scanned",
           "to_number", "truthy"]

# JavaScript's ToNumber grammar for strings ("" is 0; anything else unmatched is NaN).
# (Written so no text matches two ways: `[0-9]+\.?[0-9]*` backtracked quadratically.)
_JS_NUMERIC = re.compile(
    r"(?:[+-]?(?:Infinity|(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?))?")
_JS_RADIX = re.compile(r"0(?:[xX][0-9a-fA-F]+|[oO][0-7]+|[bB][01]+)")
_MAX_SAFE_INTEGER = 2**53  # past it JavaScript's numbers are doubles; so are ours
CHARS_PER_UNIT = 16
"""Characters of text built, compared or searched that cost one unit."""


class EvaluationCost:
    """What one evaluation may still spend; charging past it ends the evaluation."""

    __slots__ = ("left", "limit", "max_text")

    def __init__(self, limit: int, max_text: int) -> None:
        self.left = self.limit = limit
        self.max_text = max_text

    def charge(self, units: int) -> None:
        self.left -= units
        if self.left < 0:
            raise ConditionEvaluationError(
                f"too costly to evaluate: more than {self.limit:,} work units "
                "(limits.conditionCost in the runtime config)")

    def text(self, length: int) -> None:
        """Charge for building a string of `length` characters; refuse one past the limit."""
        if length > self.max_text:
            raise ConditionEvaluationError(
                f"builds a string longer than the limit of {self.max_text:,} characters")
        self.charge(length // CHARS_PER_UNIT)


def js_int(value: int) -> int | float:
    """An integer result as JavaScript holds it: exact up to 2**53, a double past it."""
    return value if -_MAX_SAFE_INTEGER <= value <= _MAX_SAFE_INTEGER else _float(value)


def truthy(value: Any) -> bool:
    """JavaScript truthiness: None, False, 0, NaN and "" are false; [] and {} are true."""
    if isinstance(value, str):
        return value != ""
    if isinstance(value, int):  # bool included; an int of any size (no float of it)
        return value != 0
    if isinstance(value, float):
        return value != 0 and not math.isnan(value)
    return value is not None and value is not MISSING


def to_number(value: Any) -> int | float:
    # JavaScript's ToNumber, except that lists and dicts are always NaN.
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):  # a variable's JSON integer: as JavaScript reads it
        return js_int(value)
    if isinstance(value, float):
        return value
    if isinstance(value, str):
        text = value.strip()
        if _JS_NUMERIC.fullmatch(text):
            return float(text.replace("Infinity", "inf") or 0)
        return js_int(int(text, 0)) if _JS_RADIX.fullmatch(text) else math.nan
    return 0 if value is None else math.nan


def _float(value: int | float) -> float:
    try:
        return float(value)
    except OverflowError:  # an int past the double range is what JavaScript calls Infinity
        return math.inf if value > 0 else -math.inf


def _strict_eq(left: Any, right: Any, cost: EvaluationCost) -> bool:
    # JavaScript `===`, except that lists and dicts compare by content: manifests only
    # hold JSON values, and the identity of two JSON values means nothing to an author.
    if isinstance(left, bool) or isinstance(right, bool):
        return type(left) is type(right) and left == right
    if isinstance(left, int | float):
        return isinstance(right, int | float) and left == right
    if isinstance(left, str):
        if not isinstance(right, str) or len(left) != len(right):
            return False
        cost.charge(len(left) // CHARS_PER_UNIT)
        return left == right
    if isinstance(left, list | tuple):
        if not isinstance(right, list | tuple) or len(left) != len(right):
            return False
        cost.charge(len(left))
        return all(_strict_eq(a, b, cost) for a, b in zip(left, right, strict=True))
    if isinstance(left, Mapping):
        if not isinstance(right, Mapping) or len(left) != len(right):
            return False
        cost.charge(len(left))
        return left.keys() == right.keys() and all(
            _strict_eq(item, right[key], cost) for key, item in left.items())
    return left is right or (type(left) is type(right) and left == right)


def _loose_eq(left: Any, right: Any, cost: EvaluationCost) -> bool:
    # JavaScript `==` between primitives; null equals only null (there is no undefined).
    if left is None or right is None:
        return left is right
    if isinstance(left, str | int | float) and isinstance(right, str | int | float):
        if isinstance(left, str) and isinstance(right, str):
            return _strict_eq(left, right, cost)
        if type(left) is type(right):
            return bool(left == right)
        return to_number(scanned(left, cost)) == to_number(scanned(right, cost))
    return _strict_eq(left, right, cost)


def scanned(value: Any, cost: EvaluationCost) -> Any:
    """`value`, its length charged when it is text an operator reads as a number."""
    if isinstance(value, str):
        cost.charge(len(value) // CHARS_PER_UNIT)
    return value


def _compare(relation: Callable[[Any, Any], bool], left: Any, right: Any,
             cost: EvaluationCost) -> bool:
    # JavaScript's relational comparison of primitives: two strings by code point, any
    # other pair as numbers (null is 0, so `null < 1` and `null <= null` hold; NaN never).
    if isinstance(left, str) and isinstance(right, str):
        cost.charge(min(len(left), len(right)) // CHARS_PER_UNIT)
        return relation(left, right)
    if all(side is None or isinstance(side, str | int | float) for side in (left, right)):
        return relation(to_number(scanned(left, cost)), to_number(scanned(right, cost)))
    return False


def _arithmetic(operation: Callable[[Any, Any], Any], left: Any, right: Any) -> Any:
    x, y = to_number(left), to_number(right)
    try:
        result = operation(x, y)
    except OverflowError:
        return operation(_float(x), _float(y))
    return js_int(result) if isinstance(result, int) else result


def _add(left: Any, right: Any, cost: EvaluationCost) -> Any:
    if isinstance(left, str) or isinstance(right, str):
        first, second = to_text(left), to_text(right)  # a list or object: its JSON
        cost.text(len(first) + len(second))
        return first + second
    return _arithmetic(operator.add, scanned(left, cost), scanned(right, cost))


def _divide(left: Any, right: Any) -> float:
    x, y = to_number(left), to_number(right)
    if y == 0:  # JavaScript: an infinity signed by both operands; 0 / 0 is NaN
        dividend = _float(x)
        if dividend == 0 or math.isnan(dividend):
            return math.nan
        return math.copysign(math.inf, dividend) * math.copysign(1.0, y)
    return float(_arithmetic(operator.truediv, x, y))


def _floor_divide(left: Any, right: Any) -> int | float:
    quotient = _divide(left, right)  # JEXL's `//` is Math.floor(a / b)
    return js_int(math.floor(quotient)) if math.isfinite(quotient) else quotient


def _remainder(left: Any, right: Any) -> float:
    try:  # fmod truncates like JavaScript's `%`: the sign follows the dividend
        return math.fmod(to_number(left), to_number(right))
    except (ValueError, OverflowError):  # x % 0 and Infinity % x are NaN in JavaScript
        return math.nan


def _key_text(key: Any) -> str | None:
    # JavaScript turns a number or boolean used as a property key into its string.
    return key if isinstance(key, str) else to_text(key) if isinstance(key, int | float) else None


def _contains(needle: Any, haystack: Any, cost: EvaluationCost) -> bool:
    if isinstance(haystack, str):
        text = _key_text(needle)
        cost.charge(len(haystack) // CHARS_PER_UNIT)
        return text is not None and text in haystack
    if isinstance(haystack, list | tuple):
        cost.charge(len(haystack))  # JEXL's `in` uses ===
        return any(_strict_eq(needle, item, cost) for item in haystack)
    return isinstance(haystack, Mapping) and _key_text(needle) in haystack


def member(container: Any, key: Any) -> Any:
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


def _numeric(operation: Callable[[Any, Any], Any]) -> Callable[[Any, Any, EvaluationCost], Any]:
    def apply(left: Any, right: Any, cost: EvaluationCost) -> Any:
        return operation(scanned(left, cost), scanned(right, cost))
    return apply


BINARY: dict[str, Callable[[Any, Any, EvaluationCost], Any]] = {
    "==": _loose_eq, "!=": lambda left, right, cost: not _loose_eq(left, right, cost),
    "in": _contains,
    "<": functools.partial(_compare, operator.lt), "<=": functools.partial(_compare, operator.le),
    ">": functools.partial(_compare, operator.gt), ">=": functools.partial(_compare, operator.ge),
    "+": _add, "-": _numeric(functools.partial(_arithmetic, operator.sub)),
    "*": _numeric(functools.partial(_arithmetic, operator.mul)),
    "/": _numeric(_divide), "//": _numeric(_floor_divide), "%": _numeric(_remainder),
}  # fmt: skip
