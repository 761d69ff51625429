"""Run stores: the RunStore contract, its records, and every backend.

`open_store(driver, location)` builds one by name, as the CLI's
`--store-driver memory|file|sqlite|dynamodb --store LOCATION` does.
"""

from __future__ import annotations

from pathlib import Path

from stores.base import (
    ApprovalConflict,
    ArtifactStore,
    CheckpointConflict,
    CorruptRecord,
    InvalidTransition,
    LeaseHeld,
    RunAlreadyExists,
    RunNotFound,
    RunStore,
    RunTerminal,
    StaleAttempt,
    StoreError,
    StoreUnavailable,
)
from stores.memory import MemoryRunStore
from stores.records import (
    ArtifactRef,
    Budget,
    Checkpoint,
    CheckpointInfo,
    EffectRecord,
    Frame,
    RunError,
    RunPage,
    RunRecord,
    RunStatus,
)

DRIVERS = ("memory", "file", "sqlite", "dynamodb")

# What a store raises when the run's state refuses a well-formed request (a lease
# held, a run already terminal, an answer already given, a run id taken, a
# superseded attempt): every edge reports these as a conflict, the CLI with
# exit 4 and the HTTP API with 409, and only from this one list.
CONFLICT_ERRORS: tuple[type[StoreError], ...] = (
    LeaseHeld, RunTerminal, InvalidTransition, ApprovalConflict, RunAlreadyExists,
    CheckpointConflict, StaleAttempt)

__all__ = [
    "CONFLICT_ERRORS",
    "DRIVERS",
    "ApprovalConflict",
    "ArtifactRef",
    "ArtifactStore",
    "Budget",
    "Checkpoint",
    "CheckpointConflict",
    "CheckpointInfo",
    "CorruptRecord",
    "EffectRecord",
    "Frame",
    "InvalidTransition",
    "LeaseHeld",
    "MemoryRunStore",
    "RunAlreadyExists",
    "RunError",
    "RunNotFound",
    "RunPage",
    "RunRecord",
    "RunStatus",
    "RunStore",
    "RunTerminal",
    "StaleAttempt",
    "StoreError",
    "StoreUnavailable",
    "open_store",
]


def open_store(driver: str, location: str | Path | None = None) -> RunStore:
    """A store by driver name: `memory`, `file` (a directory), `sqlite` (a file) or
    `dynamodb` (`TABLE?bucket=B&kms_key=K`, see `stores.dynamodb.location`)."""
    if driver == "memory":
        return MemoryRunStore()
    if location is None or str(location) == "":
        raise ValueError(f"the {driver} store needs a location")
    if driver == "sqlite":
        from stores.sqlite import SqliteRunStore  # noqa: PLC0415 - load backends on demand

        return SqliteRunStore(Path(location))
    if driver == "file":
        from stores.file import FileRunStore  # noqa: PLC0415 - load backends on demand

        return FileRunStore(Path(location))
    if driver == "dynamodb":
        from stores.dynamodb.location import open_dynamodb_store  # noqa: PLC0415 - needs boto3

        return open_dynamodb_store(str(location))
    raise ValueError(f"unknown store driver {driver!r}; choose one of {', '.join(DRIVERS)}")
