"""The smallest value valid against a (common subset of) JSON Schema, bounded in size.

`scripted/echo` answers a prompt with an `outputSchema` with this value. The
schema is a tenant's: `minLength: 50000000` or `minItems` nested three deep
would make the smallest instance gigabytes, so the instance is built against a
budget of JSON text (`MAX_ECHO_OUTPUT_BYTES`, as `json.dumps` writes it). Every
size is known before the value is made: a string's from `minLength`, an
array's from one item's size times `minItems`, an object's as each required
property is added. A value that would pass the budget is never made; the
model call fails with `EchoRefused` (`echo_output_too_large`), naming the
keyword and the cap and never the schema's content.

Keywords read: `const`, `enum`, `default`, `anyOf`/`oneOf` (the first),
`allOf` (merged), `type`, `properties`/`required`, `items`/`minItems`,
`minimum`/`exclusiveMinimum`, `minLength`. Others (`pattern`, `format`,
`minProperties`, `$ref`) are not read: the value may then be invalid, and
the step's validation of the answer says so.
"""

from __future__ import annotations

import copy
import json
import math
from typing import Any

from agent_runtime.models.base import ModelError

# The JSON text of echo's answer is at most this long: a fixed bound on what
# one echo call allocates, whatever the schema asks.
MAX_ECHO_OUTPUT_BYTES = 64 * 1024
# Schemas nested deeper than this (through properties, items, combinators) are
# refused rather than walked; the runtime's schema check allows 32 already.
MAX_ECHO_SCHEMA_DEPTH = 64
# An integer bound of more digits than this is refused: its text would be
# longer than any number a JSON reader takes, and Python will not print an
# int past 4,300 digits.
MAX_ECHO_NUMBER_DIGITS = 1000
# log10(2): digits per bit, to size an int without printing it.
_DIGITS_PER_BIT = 0.30103

TOO_LARGE = "echo_output_too_large"
UNSUPPORTED = "echo_schema_unsupported"
# What json.dumps writes between items and after a key.
_ITEM_SEPARATOR = len(", ")
_KEY_SEPARATOR = len(": ")


class EchoRefused(ModelError):
    """`scripted/echo` cannot answer this outputSchema within its bounds (never retried)."""


def smallest_instance(schema: Any, *, max_bytes: int = MAX_ECHO_OUTPUT_BYTES) -> Any:
    """The smallest value valid against `schema`, whose `json.dumps` text is at most
    `max_bytes` long; raises `EchoRefused` when it would be longer (or the schema
    nests past `MAX_ECHO_SCHEMA_DEPTH`) before allocating it."""
    value, _ = _Builder(max_bytes).build(schema, depth=0)
    return value


class _Builder:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes

    def fits(self, size: int, keyword: str) -> int:
        """`size`, when it is within the cap; else the refusal, naming `keyword`."""
        if size > self.max_bytes:
            raise EchoRefused(TOO_LARGE, f"the smallest instance of the outputSchema is over "
                                         f"echo's cap of {self.max_bytes:,} bytes of JSON, by "
                                         f"`{keyword}` (at least {size:,} bytes)")
        return size

    def build(self, schema: Any, depth: int) -> tuple[Any, int]:
        """The instance and the length of its `json.dumps` text."""
        if depth > MAX_ECHO_SCHEMA_DEPTH:
            raise EchoRefused(TOO_LARGE, "the outputSchema nests deeper than "
                                         f"{MAX_ECHO_SCHEMA_DEPTH} levels")
        if not isinstance(schema, dict):
            return None, len("null")
        for keyword in ("const", "enum", "default"):
            if keyword in schema and (keyword != "enum" or _non_empty_list(schema[keyword])):
                # The schema's own value: already in memory, bounded by the schema's size.
                value = schema[keyword][0] if keyword == "enum" else schema[keyword]
                return value, self.fits(_text_size(value, keyword), keyword)
        for combinator in ("anyOf", "oneOf"):
            if _non_empty_list(schema.get(combinator)):
                return self.build(schema[combinator][0], depth + 1)
        if _non_empty_list(schema.get("allOf")):
            merged: dict[str, Any] = {}
            for part in schema["allOf"]:
                if isinstance(part, dict):
                    merged.update(part)
            return self.build(merged, depth + 1)
        kind = schema.get("type")
        if isinstance(kind, list):
            kind = "null" if "null" in kind else (kind[0] if kind else None)
        if kind is None:
            kind = "object" if "properties" in schema else "string"
        if kind == "object":
            return self.build_object(schema, depth)
        if kind == "array":
            return self.build_array(schema, depth)
        if kind in ("number", "integer"):
            return self.build_number(schema, integer=kind == "integer")
        if kind == "boolean":
            return False, len("false")
        if kind == "null":
            return None, len("null")
        length = _count(schema, "minLength")
        self.fits(length + len('""'), "minLength")
        return "x" * length, length + len('""')

    def build_object(self, schema: dict[str, Any], depth: int) -> tuple[Any, int]:
        properties = schema.get("properties")
        properties = properties if isinstance(properties, dict) else {}
        required = schema.get("required")
        value: dict[str, Any] = {}
        size = len("{}")
        for name in required if isinstance(required, list) else []:
            if not isinstance(name, str) or name in value:
                continue
            item, item_size = self.build(properties.get(name, {}), depth + 1)
            size += (_ITEM_SEPARATOR if value else 0) + len(json.dumps(name)) + _KEY_SEPARATOR
            size = self.fits(size + item_size, "required")
            value[name] = item
        return value, size

    def build_array(self, schema: dict[str, Any], depth: int) -> tuple[Any, int]:
        count = _count(schema, "minItems")
        if count == 0:
            return [], len("[]")
        item, item_size = self.build(schema.get("items", {}), depth + 1)
        size = self.fits(len("[]") + count * item_size + (count - 1) * _ITEM_SEPARATOR,
                         "minItems")
        # Equal items, each its own copy (a caller may change one): their text is
        # within `max_bytes`, so their number and the copies are bounded too.
        return [item] + [copy.deepcopy(item) for _ in range(count - 1)], size

    def build_number(self, schema: dict[str, Any], *, integer: bool) -> tuple[Any, int]:
        minimum = _number(schema, "minimum")
        exclusive = _number(schema, "exclusiveMinimum")
        if minimum is not None and schema.get("exclusiveMinimum") is True:  # draft 4
            minimum, exclusive = None, minimum
        value: int | float = 0
        if integer:  # the least integer >= minimum and > exclusiveMinimum
            bounds = [] if minimum is None else [math.ceil(minimum)]
            bounds += [] if exclusive is None else [math.floor(exclusive) + 1]
            value = max(bounds, default=0)
        else:
            value = 0 if minimum is None else minimum
            if exclusive is not None and (minimum is None or value <= exclusive):
                value = exclusive + 0.5
        if isinstance(value, int) and abs(value).bit_length() * _DIGITS_PER_BIT > \
                MAX_ECHO_NUMBER_DIGITS:
            raise EchoRefused(TOO_LARGE, "the outputSchema's `minimum` needs an "
                                         f"integer of more than {MAX_ECHO_NUMBER_DIGITS:,} digits")
        return value, self.fits(len(json.dumps(value)), "minimum")


def _non_empty_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value)


def _number(schema: dict[str, Any], keyword: str) -> int | float | None:
    """A numeric keyword's value; None when absent or not a number (a draft-4 boolean)."""
    value = schema.get(keyword)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        raise EchoRefused(UNSUPPORTED, f"the outputSchema's `{keyword}` is not a finite number")
    return value


def _count(schema: dict[str, Any], keyword: str) -> int:
    """A `minLength`/`minItems` as an int (0 when absent or not a count)."""
    value = schema.get(keyword, 0)
    if isinstance(value, float) and not math.isfinite(value):
        raise EchoRefused(TOO_LARGE, f"the outputSchema's `{keyword}` is not a finite number")
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return 0
    return math.ceil(value)


def _text_size(value: Any, keyword: str) -> int:
    try:
        return len(json.dumps(value))
    except (TypeError, ValueError) as error:  # a YAML date, an infinite float, a huge int
        raise EchoRefused(UNSUPPORTED, f"the outputSchema's `{keyword}` is not "
                                       "a JSON value") from error
