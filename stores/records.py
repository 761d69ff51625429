"""The records every RunStore keeps, and their one JSON encoding.

Records are pydantic v2 models with snake_case fields. Only the identifying
fields are required; everything else has a default, so a test or a third-party
store can build a record with `RunRecord(run_id=..., manifest_hash=...)`.

Encoding lives here and nowhere else: `encode_record` / `decode_record` turn a
record into canonical UTF-8 JSON and back. There is no pickle anywhere; a value
that is not JSON fails here, in a unit test, not in production.
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

# The checkpoint body's format ("major.minor"), written into every checkpoint and
# read on resume (agent_runtime/continuations.py): a newer one is refused, an
# older one migrated. RUNTIME_VERSION names the release that wrote it.
CONTRACT_VERSION = "1.1"  # 1.1: the event log (`Checkpoint.events`)
RUNTIME_VERSION = "0.1.0"

JsonObject = dict[str, Any]
# Any JSON value: what a step outputs, a variable holds, a tool returns. A real
# recursive union, not `Any`, so the engine's seams are checked by mypy.
JsonValue = None | bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"]


# Values shared, not copied, by `json_copy` and `copy_record`: nothing can change them.
_IMMUTABLE = frozenset({str, int, float, bool, type(None), datetime})


def json_copy(value: Any) -> Any:
    """An independent copy of JSON data, several times faster than `copy.deepcopy`
    (no memo, no dispatch table): the engine copies its cursor and loop values
    at every commit point, and a store every record it hands out. Strings,
    numbers, booleans, None and datetimes are shared (they are immutable);
    anything else falls back to `copy.deepcopy`."""
    kind = type(value)
    # Leaves are most of any value: shared in place, without a call each.
    if kind is dict:
        return {key: item if type(item) in _IMMUTABLE else json_copy(item)
                for key, item in value.items()}
    if kind is list:
        return [item if type(item) in _IMMUTABLE else json_copy(item) for item in value]
    if kind in _IMMUTABLE or isinstance(value, StrEnum):
        return value
    return copy.deepcopy(value)


def utc_now() -> datetime:
    return datetime.now(UTC)


def _as_utc(value: Any) -> Any:
    # The contract is timezone-aware UTC. A naive datetime is taken as UTC
    # rather than rejected, and an aware one is converted, so every stored
    # time compares and sorts the same way in every store.
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return value


UtcDatetime = Annotated[datetime, BeforeValidator(_as_utc)]


class RunStatus(StrEnum):
    """Lifecycle of a run. `completed`, `failed` and `cancelled` are terminal."""

    CREATED = "created"
    RUNNING = "running"
    SUSPENDED = "suspended"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATUSES


TERMINAL_STATUSES = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED})


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=False)


class Budget(_Record):
    """A run's token limit; None means unlimited."""

    max_total_tokens: int | None = None


class CheckpointBudget(_Record):
    max_total_tokens: int | None = None
    consumed_tokens: int = 0


class ParentRef(_Record):
    """Where a sub-run was started from."""

    run_id: str
    step_path: str


class Suspension(_Record):
    """Why a run is suspended. `decision` holds the recorded answer to what it waits on
    (an approval, or how to settle an unknown effect)."""

    reason: str
    details: JsonObject = Field(default_factory=dict)
    decision: JsonObject | None = None


class RunError(_Record):
    type: str
    message: str
    details: JsonObject = Field(default_factory=dict)


class RunRecord(_Record):
    run_id: str
    manifest_hash: str
    status: RunStatus = RunStatus.CREATED
    attempt: int = 0
    manifest: JsonObject = Field(default_factory=dict)
    variables: JsonObject = Field(default_factory=dict)
    budget: Budget = Field(default_factory=Budget)
    parent: ParentRef | None = None
    tenant: str | None = None
    # A run created for an idempotent request: the digest of (tenant, key) it was
    # created under. The store keeps keys unique among its runs, so a repeated
    # request finds the run its first one created, whatever that run's id.
    run_key: str | None = None
    lease_owner: str | None = None
    lease_expires_at: UtcDatetime | None = None
    suspension: Suspension | None = None
    # The resume outbox: a suspended run someone asked to continue (an approval
    # recorded, a child finished). `resume_run` clears it; until then the
    # reconciler finds the run by it, so a lost resume event is not a lost run.
    resume_requested_at: UtcDatetime | None = None
    resume_reason: str | None = None
    output: Any = None
    error: RunError | None = None
    checkpoint_seq: int | None = None
    consumed_tokens: int = 0
    # How many times an attempt was taken over from an owner whose lease
    # expired while running: the reconciler fails a run that keeps dying.
    takeovers: int = 0

    @model_validator(mode="before")
    @classmethod
    def _retired_fields(cls, data: Any) -> Any:
        # `engine` ({kind, execution_id}) was never written by any engine (the lease
        # owner names the process or execution) and is gone; records stored while
        # it existed still read.
        if isinstance(data, dict) and "engine" in data:
            data = {key: value for key, value in data.items() if key != "engine"}
        return data
    # Runtime options the run was started with (model override, config file,
    # tool files). Not part of the manifest hash; resume reuses them.
    options: JsonObject = Field(default_factory=dict)
    created_at: UtcDatetime = Field(default_factory=utc_now)
    updated_at: UtcDatetime = Field(default_factory=utc_now)


class Frame(_Record):
    """One active step on the cursor stack (outermost first).

    `step_index` is the step's position among its siblings; `loop_iteration`
    is the iteration of the enclosing loop the step runs in; `child_index` is,
    for a step with children, the child being executed. `continuation` is the
    step's own resumable state, opaque to stores, in the shape its kind's
    `continuation_version` names (older frames are migrated on resume).
    """

    step_path: str
    step_id: str
    step_index: int
    loop_iteration: int | None = None
    child_index: int | None = None
    continuation: JsonObject = Field(default_factory=dict)
    continuation_version: int = Field(default=1, ge=1)


class ArtifactRef(_Record):
    uri: str
    sha256: str
    size: int
    media_type: str = "application/octet-stream"


class Checkpoint(_Record):
    run_id: str
    seq: int
    attempt: int
    manifest_hash: str
    contract_version: str = CONTRACT_VERSION
    runtime_version: str = RUNTIME_VERSION
    cursor: list[Frame] = Field(default_factory=list)
    variables: JsonObject = Field(default_factory=dict)
    step_results: list[JsonObject] = Field(default_factory=list)
    transcript: list[JsonObject] = Field(default_factory=list)
    artifacts: list[ArtifactRef] = Field(default_factory=list)
    budget: CheckpointBudget = Field(default_factory=CheckpointBudget)
    created_at: UtcDatetime = Field(default_factory=utc_now)
    # The run's event log up to this checkpoint (`RunEvent` without its cursor, which
    # is the entry's position from 1): the lifecycle events emitted since the last
    # commit ride in the next one, appended like the transcript, so the log costs no
    # write of its own. Observations, not state: identity ignores them.
    events: list[JsonObject] = Field(default_factory=list)

    def same_content(self, other: Checkpoint) -> bool:
        """Identity of checkpoints ignores `created_at` and the event log: a retried
        execution that reaches the same state with events of its own is a re-save."""
        ignored = {"created_at", "events"}
        return self.model_dump(exclude=ignored) == other.model_dump(exclude=ignored)


# The lists the engine only ever appends to. Stores keep them as deltas.
APPEND_ONLY_FIELDS: tuple[str, ...] = ("step_results", "transcript", "artifacts", "events")


class RunEvent(_Record):
    """One entry of a run's durable event log (`RunStore.load_events`).

    `cursor` numbers the run's log from 1, without gaps, across attempts; the
    rest is the engine's event (agent_runtime/events.py): ids, timings, counts
    and codes, never prompt text, model output, variable values or tool
    arguments."""

    cursor: int
    id: str
    run_id: str
    attempt: int
    sequence: int
    timestamp: UtcDatetime
    type: str
    step_id: str | None = None
    step_path: str | None = None
    data: JsonObject = Field(default_factory=dict)


class CheckpointInfo(_Record):
    seq: int
    attempt: int
    created_at: UtcDatetime
    size_bytes: int


class EffectStatus(StrEnum):
    RESERVED = "reserved"
    COMPLETED = "completed"


class EffectRecord(_Record):
    key: str
    run_id: str
    attempt: int
    status: EffectStatus = EffectStatus.RESERVED
    result: Any = None
    created_at: UtcDatetime = Field(default_factory=utc_now)
    completed_at: UtcDatetime | None = None


class ApprovalDecision(_Record):
    run_id: str
    approval_id: str
    approved: bool
    response: Any = None
    responded_by: str | None = None
    responded_at: UtcDatetime = Field(default_factory=utc_now)


def agent_of(manifest: JsonObject) -> str | None:
    """The agent a run runs, as `list_runs(agent=)` finds it: its manifest's `id`, or,
    when the manifest has no id (absent or empty), its `name`; None when it has
    neither. The one definition every store indexes and filters by."""
    for field in ("id", "name"):
        value = manifest.get(field)
        if isinstance(value, str) and value:
            return value
    return None


class RunPage(_Record):
    runs: list[RunRecord]
    cursor: str | None = None


R = TypeVar("R", bound=BaseModel)


def dumps(value: Any) -> str:
    """Canonical JSON: sorted keys, no insignificant whitespace, UTF-8 safe."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def encode_record(record: BaseModel) -> str:
    """A record's stored text: compact JSON in field order (pydantic's own encoder,
    several times faster than dumping to Python first)."""
    return record.model_dump_json()


class RecordDecodeError(ValueError):
    """Raised when stored bytes do not decode into the expected record."""


def decode_record(model: type[R], text: str | bytes) -> R:
    try:
        return model.model_validate_json(text)
    except ValidationError as error:
        reason = error.errors()[0]["msg"]
        raise RecordDecodeError(f"not a valid {model.__name__}: {reason}") from error


def copy_record(record: R) -> R:
    """A copy of `record` as deep as `record.model_copy(deep=True)`, several times
    faster: its fields copied by `json_copy`, its nested records by this. A store
    hands out copies of the records it keeps, so no caller's change reaches them."""
    fields = {name: copy_record(value) if isinstance(value, BaseModel) else json_copy(value)
              for name, value in record.__dict__.items()}
    copied = record.__class__.__new__(record.__class__)
    object.__setattr__(copied, "__dict__", fields)
    object.__setattr__(copied, "__pydantic_fields_set__", set(record.__pydantic_fields_set__))
    object.__setattr__(copied, "__pydantic_extra__", json_copy(record.__pydantic_extra__))
    object.__setattr__(copied, "__pydantic_private__", json_copy(record.__pydantic_private__))
    return copied


_FIELD_NAMES: dict[type[BaseModel], frozenset[str]] = {}


def trusted_record(model: type[R], fields: dict[str, Any]) -> R:
    """A record of `fields` (every field of `model`, each already valid) with no
    validation and no copies: what pydantic's `model_construct` makes, without its
    per-field work, which costs more than a validation. For the engine's own
    checkpoints and frames at a commit point, never for outside input; `fields`
    becomes the record's own."""
    names = _FIELD_NAMES.get(model)
    if names is None:  # `model_fields` costs a descriptor call: once per model
        names = _FIELD_NAMES[model] = frozenset(model.model_fields)
    if fields.keys() != names:
        raise ValueError(f"a trusted {model.__name__} needs every field, exactly")
    record = model.__new__(model)
    object.__setattr__(record, "__dict__", fields)
    object.__setattr__(record, "__pydantic_fields_set__", set(fields))
    object.__setattr__(record, "__pydantic_extra__", None)
    object.__setattr__(record, "__pydantic_private__", None)
    return record
