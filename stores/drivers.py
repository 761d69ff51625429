"""Store drivers by name: the built-in ones and any an installed distribution adds.

A driver opens a store from a location string: `(location) -> RunStore`.
The built-ins are `memory`, `file` (a directory), `sqlite` (a file) and
`dynamodb` (`TABLE?bucket=B&kms_key=K`, see `stores.dynamodb.location`). A
third-party store plugs in without editing this project: its distribution
declares an entry point in the group `agent_runtime.stores`, the name being
the driver's and the value its opener (`"my_store:open_store"`). Then
`--store-driver NAME`, `serve` and the runtime config's `store:` find it.
An installed driver cannot take a built-in's name; the built-ins load on
demand, an installed one only when named, so looking names up costs a scan
of the installed distributions' metadata and no import.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stores.base import RunStore

ENTRY_POINT_GROUP = "agent_runtime.stores"
BUILT_IN = ("memory", "file", "sqlite", "dynamodb")

Opener = Callable[[str | None], "RunStore"]


def installed() -> dict[str, EntryPoint]:
    """The drivers installed distributions declare, by name (built-in names left out)."""
    return {point.name: point for point in entry_points(group=ENTRY_POINT_GROUP)
            if point.name not in BUILT_IN}


def driver_names() -> tuple[str, ...]:
    """Every driver name a store can be opened with: the built-ins, then the installed."""
    return BUILT_IN + tuple(sorted(installed()))


def open_store(driver: str, location: str | Path | None = None) -> RunStore:
    """A store by driver name (a built-in or an installed one) at `location`."""
    text = None if location is None or str(location) == "" else str(location)
    if driver == "memory":
        from stores.memory import MemoryRunStore  # noqa: PLC0415 - load backends on demand

        return MemoryRunStore()
    if driver in BUILT_IN:
        if text is None:
            raise ValueError(f"the {driver} store needs a location")
        return _built_in(driver, text)
    point = installed().get(driver)
    if point is None:
        raise ValueError(f"unknown store driver {driver!r}; choose one of "
                         f"{', '.join(driver_names())}")
    opener = point.load()
    if not callable(opener):
        raise ValueError(f"store driver {driver!r} ({point.value}) is not callable")
    store: RunStore = opener(text)
    return store


def _built_in(driver: str, location: str) -> RunStore:
    if driver == "sqlite":
        from stores.sqlite import SqliteRunStore  # noqa: PLC0415 - load backends on demand

        return SqliteRunStore(Path(location))
    if driver == "file":
        from stores.file import FileRunStore  # noqa: PLC0415 - load backends on demand

        return FileRunStore(Path(location))
    from stores.dynamodb.location import open_dynamodb_store  # noqa: PLC0415 - needs botocore

    return open_dynamodb_store(location)


__all__ = ["BUILT_IN", "ENTRY_POINT_GROUP", "Opener", "driver_names", "installed", "open_store"]
