"""A provider's answer read as the JSON it is: a field left out, null or of another
type is absent, never an error (the drivers that parse HTTP answers themselves:
`openai` and its kin, `anthropic`)."""

from __future__ import annotations

from typing import Any


def json_object(value: Any) -> dict[str, Any]:
    """`value` if it is a JSON object, else an empty one (a field left out or null)."""
    return value if isinstance(value, dict) else {}


def json_objects(value: Any) -> list[dict[str, Any]]:
    """The JSON objects of a list field (none when it is left out or null)."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def json_text(value: Any) -> str | None:
    """`value` if it is a string, else None."""
    return value if isinstance(value, str) else None


def json_count(value: Any) -> int | None:
    """A count as reported (a token count, an index): a whole number, else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None
