"""Engine state to JSON: the one place values are normalised before they are saved.

Run state is JSON only (never pickle). Values coming from user code — tool
results, model output — pass through `json_value` before they enter a
checkpoint, so an unserialisable value fails at the tool call that produced
it, with its name, rather than later inside a store.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math
from collections.abc import Mapping
from datetime import date, datetime
from decimal import Decimal
from enum import Enum
from typing import Any

from pydantic import BaseModel


class NotJsonSerialisable(TypeError):
    pass


def json_value(value: Any, *, what: str = "value") -> Any:
    """`value` as plain JSON data (dict/list/str/int/float/bool/None)."""
    try:
        # Most values (a tool's result, a model's data) are plain JSON already:
        # copied without naming every key on the way, which only an error needs.
        return _plain_copy(value)
    except _NotPlain:
        return _converted(value, what)


class _NotPlain(Exception):
    """A value `_plain_copy` leaves to `_converted`: not plain JSON data as it is."""


def _plain_copy(value: Any) -> Any:
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if kind is dict:
        result: dict[str, Any] = {}
        for key, item in value.items():
            if type(key) is not str:
                raise _NotPlain
            result[key] = _plain_copy(item)
        return result
    if kind is list:
        return [_plain_copy(item) for item in value]
    if kind is float and math.isfinite(value):
        return value
    raise _NotPlain


def _converted(value: Any, what: str) -> Any:
    """`json_value` of a value that is not plain JSON data as it is: converted, or
    refused naming where in it the value is that has no JSON form."""
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise NotJsonSerialisable(f"{what}: {value} is not a JSON number")
        return value
    if isinstance(value, Mapping):
        result: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise NotJsonSerialisable(f"{what}: object keys must be strings, got {key!r}")
            result[key] = _converted(item, f"{what}.{key}")
        return result
    if isinstance(value, list | tuple | set | frozenset):
        return [_converted(item, f"{what}[{index}]") for index, item in enumerate(value)]
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _converted(dataclasses.asdict(value), what)
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, Enum):
        return _converted(value.value, what)
    if isinstance(value, bytes):
        return {"base64": base64.b64encode(value).decode("ascii")}
    raise NotJsonSerialisable(f"{what}: {type(value).__name__} is not JSON-serialisable")


def canonical_json(value: Any) -> str:
    """The one canonical JSON text of a value, hashed or measured wherever equal values
    must give equal text (manifest hashes, request fingerprints, schema sizes):
    sorted keys, no insignificant whitespace, non-ASCII kept. NaN and infinities
    have no JSON form and raise ValueError. (`stores.records.dumps` is the same
    form on the store side of the layering, which cannot import this module.)"""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)


def json_size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode(
        "utf-8", "surrogatepass"))
