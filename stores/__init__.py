"""Run stores: the RunStore contract, its records, and every backend.

`open_store(driver, location)` builds one by name, as the CLI's
`--store-driver NAME --store LOCATION` does: a built-in driver (memory, file,
sqlite, dynamodb) or one an installed distribution adds (`stores.drivers`).

The contract and its records load with the package; `MemoryRunStore` loads on
first use (PEP 562), so a process that uses one backend (a Lambda handler on
DynamoDB) does not load another with it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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
from stores.drivers import BUILT_IN, open_store
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

if TYPE_CHECKING:
    from stores.memory import MemoryRunStore

# The built-in store drivers (stores.drivers also finds installed ones).
DRIVERS = BUILT_IN

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




def __getattr__(name: str) -> Any:
    if name != "MemoryRunStore":
        raise AttributeError(f"module 'stores' has no attribute {name!r}")
    value = importlib.import_module("stores.memory").MemoryRunStore
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
