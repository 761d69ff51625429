"""`{{ path }}` rendering for prompt, system prompt and message text.

Lookup is case-insensitive and a missing value renders as "", as in the reference
implementation; values are formatted the way JavaScript would print them, so a manifest
renders the same text on either runtime.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from agent_runtime.js_json import js_json, number_text

__all__ = [
    "MISSING",
    "PLACEHOLDER",
    "RESERVED_SEGMENTS",
    "render",
    "resolve_path",
    "template_paths",
    "to_text",
]


class Missing:
    """The type of `MISSING`; falsy so `value or default` reads naturally."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"

    def __bool__(self) -> bool:
        return False


MISSING: Final[Any] = Missing()
"""Returned by `resolve_path` when the path names nothing (distinct from a stored None)."""

# Manifests are shared with a JavaScript runtime, where these names reach the object
# prototype; refusing them everywhere keeps a manifest from behaving differently there.
RESERVED_SEGMENTS: Final = frozenset({"__proto__", "prototype", "constructor"})

# A path is dot-separated segments; anything else inside braces is not a placeholder and
# is left in the text as written (prompts legitimately contain `{{ ... }}` prose).
PLACEHOLDER: Final = re.compile(r"\{\{\s*([\w$-]+(?:\.[\w$-]+)*)\s*\}\}")


def resolve_path(scope: Mapping[str, Any], path: str, *, case_insensitive: bool = True) -> Any:
    """Return the value at dotted `path` in `scope`, or `MISSING`.

    A mapping is looked up by exact key first, then (when `case_insensitive`) by the
    first key equal to the segment ignoring case; a list takes a decimal index or
    `length`; a string takes `length`. Reserved segments never resolve.
    """
    current: Any = scope
    for segment in path.split("."):
        if segment.lower() in RESERVED_SEGMENTS:
            return MISSING
        current = _step(current, segment, case_insensitive)
        if current is MISSING:
            return MISSING
    return current


def _step(value: Any, segment: str, case_insensitive: bool) -> Any:
    if isinstance(value, Mapping):
        if segment in value:
            return value[segment]
        if case_insensitive:
            folded = segment.lower()
            for key, item in value.items():
                if isinstance(key, str) and key.lower() == folded:
                    return item
        return MISSING
    if isinstance(value, list | tuple):
        if segment == "length":
            return len(value)
        # isascii() keeps Unicode digits such as "²" from reaching int().
        if segment.isascii() and segment.isdigit():
            index = int(segment)
            return value[index] if index < len(value) else MISSING
        return MISSING
    if isinstance(value, str) and segment == "length":
        return len(value)
    return MISSING


def to_text(value: Any) -> str:
    """Format `value` for text the way JavaScript's String() would, objects as
    JSON.stringify writes them (agent_runtime/js_json.py)."""
    if isinstance(value, str):
        return value
    if value is None or value is MISSING:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return number_text(value)
    if isinstance(value, dict | list | tuple):
        return js_json(value)  # as the reference's JSON.stringify writes it
    return str(value)


def render(text: str, scope: Mapping[str, Any]) -> str:
    """Replace every `{{ path }}` in `text` with the text of its value ("" when missing)."""
    if "{{" not in text:
        return text
    return PLACEHOLDER.sub(lambda match: to_text(resolve_path(scope, match.group(1))), text)


def template_paths(text: str) -> list[str]:
    """The paths `text` references, in order of appearance (repeats included)."""
    if "{{" not in text:
        return []
    return [match.group(1) for match in PLACEHOLDER.finditer(text)]
