"""Where a value sits in a JSON or YAML document, named as a reader's messages name it,
and the JSON object hook that refuses a key written twice.

Its own module, apart from the manifest reader (`agent_runtime.manifest_input`,
which loads the YAML parser and the manifest's base model): the HTTP API's
guard names the place of every request body it refuses with these, and most
requests never read a manifest.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from agent_runtime.excerpts import excerpt

PathPart = str | int

_IDENTIFIER = re.compile(r"[A-Za-z_$][\w$-]*")
_KEY_SHOWN = 80  # longer keys are shown as an excerpt


def format_path(parts: Iterable[PathPart]) -> str:
    """`("steps", 0, "loop", "maxIterations")` -> `steps[0].loop.maxIterations`."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif len(part) <= _KEY_SHOWN and _IDENTIFIER.fullmatch(part):
            out += f".{part}" if out else part
        elif len(part) <= _KEY_SHOWN and part.isprintable():
            out += f"[{json.dumps(part, ensure_ascii=False)}]"
        else:  # a hostile key: quoted briefly, escaped
            out += f"[{excerpt(part, 40)}]"
    return out


def quote(text: str, limit: int = 60) -> str:
    """`'text'` as repr shows it when short and printable, else an escaped excerpt."""
    if len(text) <= limit and text.isprintable():
        return repr(text)
    return excerpt(text, limit)


def unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object hook that refuses a key written twice (instead of keeping the last)."""
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {quote(key)}")
        result[key] = value
    return result
