"""A fast, conservative precheck for the JSON Schemas that tools and answers use most.

Validating a tool call's arguments with jsonschema costs tens of microseconds
(its `iter_errors` walks every keyword through generic machinery), and a
prompt with tools validates on every call. Most of those schemas are small:
an object of typed properties, some required, no others allowed, as a Python
tool's signature produces. `precheck(schema)` compiles a schema made only of
such keywords into a function that answers True only for a value the full
validator accepts too; False means "not sure": `CompiledSchema` then asks
jsonschema, which decides and explains. A schema with any other keyword gets
no precheck at all. So the precheck can make validation faster, never
different:

- keywords: `type`, `properties`, `required`, `additionalProperties`,
  `items` (one schema for every item), `enum` and `const` (of strings,
  integers, booleans and null), and the annotations `title`, `description`,
  `default`, `examples`; any `$schema`, `$ref`, `format` or other keyword
  means no precheck;
- types are read strictly: `integer` is a Python int that is not a bool (a
  float with no fraction, which the drafts count as an integer, is left to
  jsonschema), `number` an int or float that is not a bool, `array` a list,
  `object` a dict;
- effort is bounded: past `MAX_CHECKS` keyword checks for one value the
  answer is "not sure", so a huge value meets jsonschema's own step limit
  exactly as before.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

# Keyword checks one precheck may make before it leaves the value to jsonschema.
MAX_CHECKS = 2_000

_ANNOTATIONS = frozenset({"title", "description", "default", "examples"})
_KEYWORDS = frozenset({"type", "properties", "required", "additionalProperties", "items",
                       "enum", "const"}) | _ANNOTATIONS
_SCALARS = (str, int, bool, type(None))

_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda value: type(value) is str,
    "integer": lambda value: type(value) is int,
    "number": lambda value: type(value) is int or type(value) is float,
    "boolean": lambda value: type(value) is bool,
    "null": lambda value: value is None,
    "array": lambda value: type(value) is list,
    "object": lambda value: type(value) is dict,
}


class _Budget:
    __slots__ = ("left",)

    def __init__(self) -> None:
        self.left = MAX_CHECKS

    def spend(self) -> bool:
        self.left -= 1
        return self.left >= 0


# A compiled node: (value, budget) -> surely valid.
_Check = Callable[[Any, _Budget], bool]


def precheck(schema: Any) -> Callable[[Any], bool] | None:
    """A function telling values surely valid against `schema`, or None when the
    schema uses anything beyond the subset above."""
    node = _node(schema)
    if node is None:
        return None
    return lambda value: node(value, _Budget())


def _node(schema: Any) -> _Check | None:
    if schema is True:
        return lambda value, budget: True
    if not isinstance(schema, Mapping) or not set(schema) <= _KEYWORDS:
        return None
    checks: list[_Check] = []
    if "type" in schema:
        kinds = schema["type"]
        names = [kinds] if isinstance(kinds, str) else kinds
        if not isinstance(names, list) or not names or not all(
                isinstance(name, str) and name in _TYPES for name in names):
            return None
        tests = [_TYPES[name] for name in names]
        checks.append(lambda value, budget: any(test(value) for test in tests))
    for keyword in ("enum", "const"):
        if keyword in schema:
            allowed = schema[keyword] if keyword == "enum" else [schema[keyword]]
            if not isinstance(allowed, list) or not all(
                    type(member) in _SCALARS for member in allowed):
                return None
            checks.append(_member_of(allowed))
    objects = _object_checks(schema)
    if objects is None:
        return None
    checks.extend(objects)
    if "items" in schema:
        item = _node(schema["items"])
        if item is None:
            return None
        checks.append(lambda value, budget: type(value) is not list or all(
            budget.spend() and item(element, budget) for element in value))

    def check(value: Any, budget: _Budget) -> bool:
        return all(budget.spend() and each(value, budget) for each in checks)

    return check


def _member_of(allowed: list[Any]) -> _Check:
    # Equal and of the same type: 1 and True, or 1 and 1.0, are left to jsonschema.
    members = [(type(member), member) for member in allowed]
    return lambda value, budget: any(type(value) is kind and value == member
                                     for kind, member in members)


def _object_checks(schema: Mapping[str, Any]) -> list[_Check] | None:
    """The checks of `properties`, `required` and `additionalProperties` (they apply
    to objects only), or None when one of them is beyond the subset."""
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    extra = schema.get("additionalProperties", True)
    if not isinstance(properties, Mapping) or not isinstance(required, list) \
            or not all(isinstance(name, str) for name in required):
        return None
    nodes: dict[str, _Check] = {}
    for name, subschema in properties.items():
        node = _node(subschema)
        if node is None:
            return None
        nodes[name] = node
    if extra is True:
        other: _Check | None = None
    elif extra is False:
        other = lambda value, budget: False  # noqa: E731 - an extra key: jsonschema says why
    else:
        other = _node(extra)
        if other is None:
            return None

    def members(value: Any, budget: _Budget) -> bool:
        if type(value) is not dict:
            return True
        if any(name not in value for name in required):
            return False
        for key, member in value.items():
            node = nodes.get(key, other)
            if node is not None and not (budget.spend() and node(member, budget)):
                return False
        return True

    return [members]
