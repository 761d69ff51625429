"""JSON text byte for byte as JavaScript's `JSON.stringify(value)` writes it.

Where a receiver may sign or hash the bytes we send (a webhook's body), they
must be the ones the reference implementation sends, and it is TypeScript.
Python's `json.dumps` differs in three ways this module corrects:

* numbers: JavaScript writes `1` for 1.0, `10000000000000000` for 1e16,
  `1e-7` for 1e-07 and `1e+21` past 10**21 (Number::toString), an integer
  past 2**53 as the double it becomes, and NaN or an infinity as `null`;
* key order: an object's integer-like keys ("0", "7", ... up to 2**32 - 2)
  come first, in ascending order, then the others in insertion order;
* whitespace: none at all.

Strings are escaped as both do (quote, backslash, control characters), with
other characters written as they are.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
from typing import Any

_MAX_SAFE_INTEGER = 2**53 - 1
_MAX_ARRAY_INDEX = 2**32 - 2


def js_json(value: Any) -> str:
    """`JSON.stringify(value)` of a JSON value (dicts, lists, str, int, float, bool, None)."""
    parts: list[str] = []
    _write(value, parts)
    return "".join(parts)


def _write(value: Any, parts: list[str]) -> None:
    if value is None or value is True or value is False:
        parts.append("null" if value is None else "true" if value else "false")
    elif isinstance(value, str):
        parts.append(json.dumps(value, ensure_ascii=False))
    elif isinstance(value, int):
        parts.append(str(value) if abs(value) <= _MAX_SAFE_INTEGER else _number(float(value)))
    elif isinstance(value, float):
        parts.append(_number(value))
    elif isinstance(value, dict):
        parts.append("{")
        for index, key in enumerate(_key_order(value)):
            if index:
                parts.append(",")
            parts.append(json.dumps(key, ensure_ascii=False))
            parts.append(":")
            _write(value[key], parts)
        parts.append("}")
    elif isinstance(value, list | tuple):
        parts.append("[")
        for index, item in enumerate(value):
            if index:
                parts.append(",")
            _write(item, parts)
        parts.append("]")
    else:
        raise TypeError(f"{type(value).__name__} is not a JSON value")


def _key_order(mapping: dict[Any, Any]) -> list[Any]:
    indices = [key for key in mapping if _array_index(key)]
    return sorted(indices, key=int) + [key for key in mapping if not _array_index(key)]


def _array_index(key: Any) -> bool:
    """A key JavaScript keeps as an integer index: its canonical decimal text."""
    return (isinstance(key, str) and key.isascii() and key.isdigit()
            and (key == "0" or not key.startswith("0")) and int(key) <= _MAX_ARRAY_INDEX)


def _number(value: float) -> str:
    # JSON has no NaN or infinities: JSON.stringify writes null for them.
    return "null" if math.isnan(value) or math.isinf(value) else number_text(value)


def number_text(value: float) -> str:
    """`String(value)` of a double: Number::toString (ECMA-262 6.1.6.1.20), from the
    shortest digits that read back as the same double (Python's repr gives them)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "0"  # -0 too
    sign = "-" if value < 0 else ""
    # repr gives the shortest digits that read back as the same double, as JS does.
    digits_tuple, exponent = Decimal(repr(abs(value))).normalize().as_tuple()[1:]
    digits = "".join(map(str, digits_tuple))
    k = len(digits)
    n = int(exponent) + k  # the decimal point sits after the first n digits
    if k <= n <= 21:
        text = digits + "0" * (n - k)
    elif 0 < n <= 21:
        text = f"{digits[:n]}.{digits[n:]}"
    elif -6 < n <= 0:
        text = f"0.{'0' * -n}{digits}"
    else:
        mantissa = digits[0] + (f".{digits[1:]}" if k > 1 else "")
        text = f"{mantissa}e{'+' if n - 1 >= 0 else '-'}{abs(n - 1)}"
    return sign + text


__all__ = ["js_json", "number_text"]
