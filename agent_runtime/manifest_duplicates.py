"""Names a manifest must not repeat, found in its raw data.

Variable keys (ignoring case), connection aliases and sibling step ids are
unique. The manifest models check them too, but only once every field of the
list is valid, and stop at the first; reading the raw data here, every
duplicate is reported alongside the manifest's other problems, so one run of
`validate` shows them all.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def duplicate_names(data: Any) -> Iterator[tuple[str, str]]:
    """Duplicate variable keys, connection aliases and sibling step ids in raw manifest
    data, as (path, reason).

    The models check these only once every field of the list is valid, and stop
    at the first; read from the raw data, each duplicate is reported alongside
    the other problems.
    """
    if not isinstance(data, dict):
        return
    keys: set[str] = set()
    for index, declaration in enumerate(_dicts(data.get("variables"))):
        key = declaration.get("key")
        if isinstance(key, str):
            if key.casefold() in keys:
                yield (f"variables[{index}].key", f"duplicate variable key {key!r} "
                       "(keys are compared ignoring case)")
            keys.add(key.casefold())
    aliases: set[str] = set()
    for index, connection in enumerate(_dicts(data.get("connections"))):
        field = "alias" if "alias" in connection else "ref"
        alias = connection.get(field)
        if isinstance(alias, str):
            if alias in aliases:
                yield (f"connections[{index}].{field}", f"duplicate connection alias {alias!r}")
            aliases.add(alias)
    yield from _duplicate_step_ids(data.get("steps"), "steps")


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [item if isinstance(item, dict) else {} for item in value] \
        if isinstance(value, list) else []


def _duplicate_step_ids(steps: Any, prefix: str) -> Iterator[tuple[str, str]]:
    seen: set[str] = set()
    for index, step in enumerate(_dicts(steps)):
        step_id = step.get("id")
        if isinstance(step_id, str) and step_id:
            if step_id in seen:
                yield (f"{prefix}[{index}].id",
                       f"duplicate step id {step_id!r} among sibling steps")
            seen.add(step_id)
        if step.get("type") == "loop":
            yield from _duplicate_step_ids(step.get("steps"), f"{prefix}[{index}].steps")
