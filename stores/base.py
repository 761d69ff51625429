"""The RunStore contract: what every store guarantees and what it raises.

This module is the specification a third-party store is written against;
`stores.conformance` checks every rule below on any store.

Rules every store keeps:

* Run ids are unique (`RunAlreadyExists`).
* `completed`, `failed` and `cancelled` are terminal and immutable. Repeating
  the identical terminal write (same status, attempt and output or error; `at`
  ignored; a checkpoint passed with it equal to the stored one) is a no-op.
* Checkpoint `seq` is exactly latest + 1 and continues across attempts.
  Re-saving an identical checkpoint (ignoring `created_at`) is a no-op; a
  different checkpoint with a used or skipped seq raises `CheckpointConflict`.
* `resume_run` is atomic: of N concurrent reservations exactly one wins.
* Every write carrying a stale `expected_attempt` raises `StaleAttempt` and
  changes nothing, so a superseded owner can never overwrite a newer one.
* A checkpoint and the state change it comes with (`suspend_run`,
  `complete_run`, `fail_run` with `checkpoint=`) commit together or not at all.
* Writes to a cancelled run raise `RunTerminal`, so a running owner stops at
  its next write.
* Check order for a write: `RunNotFound`, then `StaleAttempt`, then
  `RunTerminal` / `InvalidTransition`.
* Every method naming a run that does not exist raises `RunNotFound`, except
  the `load_*` methods (they return None) and `delete_run` (a no-op).
* The engine only appends to the append-only lists of a checkpoint
  (`records.APPEND_ONLY_FIELDS`); a store may store only the new entries, but
  stores in full a checkpoint whose lists do not extend the previous ones.
  `CheckpointInfo.size_bytes` is what that checkpoint added to storage.
  Those lists may be the engine's own, which go on growing once the write
  returns (a copy per commit point would cost more with every entry): a store
  reads them during the call, and what it keeps of them past it keeps their
  length at the call (`deltas.SavedLists` does).
* The event log is the checkpoints' `events` list (append-only, as the
  transcript): `list_events` pages it by cursor, the entry's position from 1.
  It commits with the checkpoint that carries it, so it costs no write of its
  own, and a checkpoint's identity ignores it (a retry's re-save is identical).
* Reads never return silently wrong data. A record is checked against its
  checksum, its identity (the run, seq or key it is stored under) and the
  store's bookkeeping: checkpoints are exactly seqs 1..`checkpoint_seq`, and a
  record the store counted (an effect, a committed checkpoint) is there. Any
  failure is `CorruptRecord` naming the record; nothing is read as absent
  because it went missing.
* The resume outbox: `request_resume` and `resolve_approval` file a request
  (`resume_requested_at`, `resume_reason`) on a suspended run; the earliest
  pending request stands; `resume_run` clears it, and so does the run's end
  (a finished run has nothing to resume). The reconciler finds requests no
  one served with `list_runs(resume_requested_before=T)`, so a lost resume
  event delays a run but never strands it.
* A sub-run's end tells its parent: the write that ends a run with a `parent`
  (`complete_run`, `fail_run`, `cancel_run`) files a resume request (reason
  `"sub-run-finished"`, at the write's `at`) on that parent when it is
  suspended on it (reason `"sub-run"`, `details["child_run_id"]` naming the
  run), in the same atomic commit; and `suspend_run` with reason `"sub-run"`
  on a child that has already ended files that request on the suspending run
  itself. The two are serialised, so a child ending while its parent
  suspends is never missed: a parent due to go on is always in the outbox,
  and nobody has to read the runs that wait to find it.

A backend need not write the rules or the state changes again: the rules are
`stores.transitions`, and `stores.state_changes.StateChanges` makes every
state change (read, decide, append the checkpoint, commit) from one primitive
the backend supplies, a read of the run under its lock or transaction.

Times are timezone-aware UTC datetimes. Stores are synchronous and are context
managers (`close()` on exit).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, NamedTuple, Protocol, Self, runtime_checkable

from stores.records import (
    Checkpoint,
    CheckpointInfo,
    EffectRecord,
    RunError,
    RunEvent,
    RunPage,
    RunRecord,
    RunStatus,
)

# The reason of the resume request a sub-run's end files on its parent.
SUB_RUN_FINISHED = "sub-run-finished"


class StoreError(Exception):
    """Base of every error a store raises."""


class RunNotFound(StoreError):
    pass


class RunAlreadyExists(StoreError):
    pass


class RunKeyTaken(RunAlreadyExists):
    """Another stored run was created under the same `run_key`: `run_id` names it."""

    def __init__(self, message: str, *, run_id: str) -> None:
        super().__init__(message)
        self.run_id = run_id


class StaleAttempt(StoreError):
    """The write carried an attempt that is no longer the run's current one."""


class LeaseHeld(StoreError):
    """The run is running under a lease that has not been given up."""

    def __init__(self, message: str, *, owner: str | None = None,
                 expires_at: datetime | None = None) -> None:
        super().__init__(message)
        self.owner = owner
        self.expires_at = expires_at


class InvalidTransition(StoreError):
    """The run's status does not allow this change."""


class RunTerminal(InvalidTransition):
    """The run is completed, failed or cancelled; nothing more may change it."""


class CheckpointConflict(StoreError):
    pass


class ApprovalConflict(StoreError):
    """An approval already has a different recorded answer."""


class CorruptRecord(StoreError):
    """Stored data failed a check: a checksum, a decode, its identity (a record that
    names another run, seq or key than where it is kept) or its completeness (a
    record the store's own bookkeeping says exists is missing). The message names
    the record and the store. Never repaired, skipped or read as absence.
    """


class StoreUnavailable(StoreError):
    """The store cannot be used at all: its location is not what it must be (a
    directory where a file belongs, a device, a dangling symbolic link), cannot be
    opened or read (permissions, I/O), or stays locked past the busy timeout. The
    message names the location and the reason. Unlike `CorruptRecord` it says
    nothing about the stored data; retrying may succeed once the cause is fixed.
    """


@runtime_checkable
class RunStore(Protocol):
    """Durable home of runs, their checkpoints, effects and approval decisions."""

    def create_run(self, run: RunRecord) -> None:
        """Store a new run as given (normally status `created`, attempt 0).

        Raises `RunAlreadyExists` when the id is taken. A run with a `run_key`
        claims the key in the same atomic write: when another stored run holds
        it, `RunKeyTaken` names that run and nothing is stored.
        """

    def find_run_key(self, run_key: str) -> str | None:
        """The id of the stored run created under `run_key`, or None. A key is
        held from its run's creation until the run is deleted (by `delete_run`,
        or retention), then free again."""

    def load_run(self, run_id: str) -> RunRecord | None:
        """The run's record, or None.

        Every read raises `CorruptRecord` naming the record when what is stored
        fails a check (a checksum, its identity, a record the store counted and
        cannot find), and `StoreUnavailable` when the store cannot be reached.
        """

    def load_latest_checkpoint(self, run_id: str) -> Checkpoint | None:
        """The run's checkpoint at its `checkpoint_seq`, reassembled in full, or None.

        The stored checkpoints must be exactly seqs 1..`checkpoint_seq`: a gap or
        a missing tail is `CorruptRecord`, never an older checkpoint.
        """

    def load_checkpoint(self, run_id: str, seq: int) -> Checkpoint | None:
        """The checkpoint with this seq, reassembled in full; None when the run has no
        such seq (outside 1..`checkpoint_seq`), `CorruptRecord` when it should and
        does not."""

    def load_checkpoints(self, run_id: str, first_seq: int, last_seq: int) -> list[Checkpoint]:
        """The checkpoints with seqs `first_seq`..`last_seq` that the run has (the range
        cut to 1..`checkpoint_seq`), by seq, each as `load_checkpoint` returns it; []
        when the run does not exist or has none of them. Reads each stored body once,
        so a run's whole timeline costs what loading its latest checkpoint costs, not
        that times the number of checkpoints. The checkpoints may share the entries
        of their append-only lists (never changed in place). `CorruptRecord` as
        `load_checkpoint`."""
        ...

    def list_checkpoints(self, run_id: str) -> list[CheckpointInfo]:
        """Every checkpoint's seq, attempt, created_at and added bytes, by seq.

        Raises `RunNotFound`.
        """

    def resume_run(self, run_id: str, *, owner: str, now: datetime, lease_seconds: float,
                   allow_running_takeover: bool = False,
                   expired_owner: str | None = None) -> RunRecord:
        """Reserve a new attempt: status `running`, attempt + 1, a lease for `owner`.

        Allowed from `created` and `suspended`. From `running` only with
        `allow_running_takeover=True` and either a lease that expires at or
        before `now` or `expired_owner` equal to the stored lease owner (the
        caller confirmed that owner dead: same host and its pid gone);
        otherwise `LeaseHeld`. Terminal runs raise `RunTerminal`. The returned
        record keeps the last `suspension` (with its `decision`) and has no
        pending resume request (`resume_requested_at`, `resume_reason` cleared);
        a takeover of a running run counts one more in `takeovers`, and a new
        checkpoint (saved alone or with a state change) resets it to 0, so it
        counts consecutive takeovers without progress. Of
        concurrent reservations of one run exactly one succeeds.
        """
        ...

    def renew_lease(self, run_id: str, *, expected_attempt: int, now: datetime,
                    lease_seconds: float) -> None:
        """Extend the current attempt's lease to `now + lease_seconds`.

        Raises `StaleAttempt`, `RunTerminal`, or `InvalidTransition` when the
        run is not running.
        """

    def save_checkpoint(self, checkpoint: Checkpoint, *, expected_attempt: int,
                        lease_expires_at: datetime | None = None) -> None:
        """Append a checkpoint of the running attempt; renew the lease in the same write.

        The run's `consumed_tokens` and `budget.max_total_tokens` become the
        checkpoint's (a resume may have replaced the limit), in the same write;
        so does a checkpoint passed with a state change.

        Raises `StaleAttempt`, `RunTerminal`, `InvalidTransition` (run not
        running) or `CheckpointConflict` (seq not latest + 1 and not an
        identical re-save).
        """

    def suspend_run(self, run_id: str, *, expected_attempt: int, reason: str,
                    details: dict[str, Any], at: datetime,
                    checkpoint: Checkpoint | None = None) -> None:
        """Move a running run to `suspended`, with the checkpoint if given, atomically.

        The new suspension replaces the previous one; the lease is released. A
        `"sub-run"` suspension on a child (`details["child_run_id"]`) that has
        already ended also files a resume request (see the module's rules).
        """

    def complete_run(self, run_id: str, *, expected_attempt: int, output: Any, at: datetime,
                     checkpoint: Checkpoint | None = None) -> None:
        """Move a running run to `completed` with its output (and checkpoint) atomically.

        A sub-run's end files a resume request on the parent suspended on it, in the
        same commit (so do `fail_run` and `cancel_run`; see the module's rules).
        """

    def fail_run(self, run_id: str, *, expected_attempt: int, error: RunError, at: datetime,
                 checkpoint: Checkpoint | None = None) -> None:
        """Move a run to `failed` with the error (and checkpoint) atomically.

        Allowed from any non-terminal state (a queued run may fail before it
        ever ran).
        """

    def cancel_run(self, run_id: str, *, at: datetime, expected_attempt: int | None = None) -> None:
        """Cancel a non-terminal run. Cancelling a cancelled run again is a no-op.

        With `expected_attempt` the cancel is fenced like any other write.
        Raises `RunTerminal` when the run completed or failed.
        """

    def list_runs(self, *, statuses: Collection[RunStatus] | None = None,
                  lease_expired_before: datetime | None = None,
                  parent_run_id: str | None = None, tenant: str | None = None,
                  resume_requested_before: datetime | None = None, agent: str | None = None,
                  run_id_prefix: str | None = None, created_after: datetime | None = None,
                  created_before: datetime | None = None, newest_first: bool = False,
                  limit: int = 100, cursor: str | None = None) -> RunPage:
        """The runs that match every filter given, a page of at most `limit` at a time.

        Ordered by run_id, ascending, or descending with `newest_first=True`
        (the runtime's ids are time-ordered). `RunPage.cursor` is None on the
        last page; passed back, it continues after the last run returned (ids
        above it, or below it with `newest_first`), with the same filters.

        * `statuses`: runs in one of them.
        * `lease_expired_before=T`: `running` runs whose lease expires before
          T and `created` runs created before T, nothing else.
        * `parent_run_id`: the sub-runs started from that run.
        * `tenant`: runs whose `tenant` equals it.
        * `resume_requested_before=T`: `suspended` runs with a resume request
          filed before T (`resume_requested_at < T`).

        The search an operator runs (the console's run list) adds:

        * `agent`: runs of that agent, `records.agent_of(run.manifest)` equal to
          it (the manifest's `id`, or its `name` when it has no id).
        * `run_id_prefix`: runs whose id starts with it (case-sensitive).
        * `created_after=A`, `created_before=B`: `A <= created_at < B`.

        A store answers these from its own indexes where it has them (the
        SQLite store's agent and creation columns, DynamoDB's `by-agent` index
        for an agent within a tenant): a search reads about what it finds, not
        every run.

        A listing may lag the writes of the last moment (a store may answer from
        an eventually consistent index and reads, as DynamoDB's are): a run just
        written may be missing from a page or shown as it was, but a page never
        holds a run that did not match the filters when it was read. Decide on
        `load_run`, which is current.
        """
        ...

    def request_resume(self, run_id: str, *, at: datetime, reason: str) -> None:
        """File a request to resume a suspended run: `resume_requested_at`, `resume_reason`.

        The outbox the reconciler reads (`list_runs(resume_requested_before=)`).
        When a request is pending, the earlier of the two stands (its time and
        reason), so asking again never pushes the run's grace period further
        out; a later request is a no-op. Status and attempt do not change.
        Raises `RunNotFound`, then `RunTerminal` on a finished run or
        `InvalidTransition` on a run that is not suspended.
        """

    def resolve_approval(self, run_id: str, approval_id: str, *, approved: bool, response: Any,
                         responded_by: str | None, at: datetime) -> None:
        """Record the answer to the question a suspended run waits on.

        `approval_id` names the question: the `details.approval_id` of a
        suspension with reason `approval`, or the `details.key` of one with
        reason `effect-unknown` (how to settle an effect whose outcome is
        unknown: `approved=True`, `response={"action": "retry" | "result" |
        "skip", "result": ...}`).

        The answer is (`approved`, `response`). The same answer again is a
        no-op; a different one raises `ApprovalConflict`. A finished run
        raises `RunTerminal`; a run not suspended on `approval_id` raises
        `InvalidTransition`. The decision is kept in `suspension.decision`,
        and a new one files a resume request (as `request_resume` with
        `at` and reason `"approval-recorded"`) in the same write.
        """

    def begin_effect(self, key: str, *, run_id: str, expected_attempt: int,
                     at: datetime) -> EffectRecord:
        """Reserve an effect before dispatching it (fenced by attempt).

        When the key exists the stored record is returned unchanged.
        """
        ...

    def complete_effect(self, key: str, *, run_id: str, expected_attempt: int, result: Any,
                        at: datetime) -> None:
        """Record an effect's result. An unknown key, or a result different from
        the stored one, raises `InvalidTransition`; the identical result is a no-op.
        """

    def list_effects(self, run_id: str) -> list[EffectRecord]:
        """The run's effects, oldest first. Raises `RunNotFound`; `CorruptRecord` when a
        record names another run or key, or (where the store counts them) one is missing."""
        ...

    def list_events(self, run_id: str, *, after: int = 0, limit: int = 100) -> list[RunEvent]:
        """The run's durable event log after cursor `after`: at most `limit` events, by
        cursor (`after + 1`, `after + 2`, ...; an empty list when none is committed yet).

        The log holds the `events` of the run's checkpoints: an event commits with
        the checkpoint (or the suspension or end carrying one) that follows it, in
        the same write, never in a write of its own; cursors number it from 1
        without gaps across attempts (`stores.event_log`). It goes with the run
        (`delete_run`). Raises `RunNotFound`, `ValueError` for a negative `after`
        or a `limit` outside 1..`event_log.MAX_EVENTS_PAGE`, and `CorruptRecord`
        as the checkpoint reads do.
        """
        ...

    def delete_run(self, run_id: str) -> None:
        """Remove a terminal run and all it owns, its `run_key` included. A missing
        run is a no-op; a non-terminal run raises `InvalidTransition`."""

    def close(self) -> None:
        """Release connections and files."""

    def __enter__(self) -> Self:
        ...

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        """Close the store."""


class Settlement(NamedTuple):
    """An effect's result, to be recorded with the checkpoint that records it in the
    run's transcript (`SettlesInCheckpoint`)."""

    key: str
    result: Any


@runtime_checkable
class SettlesInCheckpoint(Protocol):
    """A store that can settle and reserve effects and save a checkpoint in one
    atomic commit.

    Optional: an engine on a store without it reserves (`begin_effect`), settles
    (`complete_effect`) and checkpoints in commits of their own. With it a tool
    call costs two commits fewer: its reservation rides in the checkpoint that
    records the call as pending, its result in the one that records the result,
    and no attempt ever sees an effect completed whose result no checkpoint holds.
    """

    def save_checkpoint_settling(self, checkpoint: Checkpoint, settlements: Sequence[Settlement],
                                 *, expected_attempt: int, at: datetime,
                                 lease_expires_at: datetime | None = None,
                                 reservations: Sequence[str] = ()) -> None:
        """`complete_effect` of each settlement (completed `at`), `begin_effect` of each
        key in `reservations` (reserved `at` by `expected_attempt`) and
        `save_checkpoint`, all committed together or none: the errors are theirs.

        A reservation is of a key new to the run: the engine reserves here only
        the calls it recorded in this very checkpoint, whose keys no earlier
        commit can hold. A key the run already has raises `InvalidTransition`
        (an existing record is never returned here, as `begin_effect` would).
        """


# Told, on a thread of the store's, how a queued save ended: None once it committed,
# else what `save_checkpoint` would have raised.
SaveSettled = Callable[[BaseException | None], None]


class QueuesCheckpoints(Protocol):
    """A store that can take a checkpoint's save without its caller waiting on it.

    Optional, for a caller that must not block (the engine on its event loop,
    with many runs saving at once): instead of handing `save_checkpoint` (or
    `save_checkpoint_settling`: a store that queues saves settles in them too)
    to a thread that waits for the commit, the caller queues the save and is
    told how it ended. Saves queued by many runs share transactions and their
    fsync, and no thread waits for each.

    Each method is the save its name says, returning before it is made:
    `settled(None)` once it committed, or `settled(error)` with the error the
    waiting method would have raised, called once on a thread of the store's
    (quick, and never calling the store). An error found before queueing (a
    checkpoint not the run's, a closed store) is raised at once and `settled`
    is never called. Neither blocks on I/O: the caller may be an event loop.

    The engine uses a method only where a store's class defines it next to
    the waiting method it is the twin of: a subclass or wrapper that changes
    `save_checkpoint` (fault injection, the crash kit) is called as it is.
    """

    def queue_checkpoint(self, checkpoint: Checkpoint, *, settled: SaveSettled,
                         expected_attempt: int, lease_expires_at: datetime | None = None
                         ) -> None:
        """`save_checkpoint`, queued."""

    def queue_checkpoint_settling(self, checkpoint: Checkpoint, settlements: Sequence[Settlement],
                                  *, settled: SaveSettled, expected_attempt: int, at: datetime,
                                  lease_expires_at: datetime | None = None,
                                  reservations: Sequence[str] = ()) -> None:
        """`save_checkpoint_settling`, queued."""


@runtime_checkable
class ArtifactStore(Protocol):
    """Content-addressed bytes produced by runs (tool outputs, files)."""

    def put(self, data: bytes, *, media_type: str, run_id: str) -> tuple[str, str]:
        """Store bytes that belong to `run_id`; return (uri, sha256)."""
        ...

    def get(self, uri: str) -> bytes:
        """Return the bytes at `uri`, verified against their hash (`CorruptRecord`)."""
        ...

    def run_of(self, uri: str) -> str | None:
        """The run whose artifact `uri` names (the `run_id` given to `put`), or None
        for an artifact stored before artifacts were kept per run (shared by runs).
        Raises ValueError when `uri` names no artifact of this store. Reads nothing:
        the runtime asks it before `get`, to refuse a run another run's artifact."""
        ...

    def delete_run(self, run_id: str) -> int:
        """Delete every artifact of `run_id` (retention); return how many. Repeatable."""
        ...
