"""MemoryRunStore: one process, no durability, the full contract.

Every record is kept encoded and decoded on the way out, exactly as a durable
store would, so a value that does not survive JSON fails in a unit test. A
run's definition (manifest, variables, options) is encoded once, when the run
is created, apart from its state: it never changes, and the writes of a
running run (checkpoints, leases, effects) then cost the same whatever the
size of its manifest. The state changes are `stores.state_changes`'s, made
under one lock.

The lifecycle rules read a run's state at every write; they never change a
record they read, only copy it. So the store keeps the record its state
decodes to beside the text, and a checkpoint's save, which only copies it
with numbers and UTC times, keeps its new record and encodes it when a reader
first asks (the next save reads the record itself): every commit point's
write, without a decode and an encode of the run each time.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

from stores import transitions
from stores.base import RunAlreadyExists, RunKeyTaken, Settlement
from stores.deltas import SavedLists, SavedListsCache, assemble, assemble_each, encode_body
from stores.event_log import check_page, events_fold
from stores.records import (
    ApprovalDecision,
    Checkpoint,
    CheckpointInfo,
    EffectRecord,
    RunEvent,
    RunPage,
    RunRecord,
    RunStatus,
    decode_record,
    encode_record,
)
from stores.state_changes import StateChanges, apply_change, saving


class _StoredCheckpoint:
    __slots__ = ("attempt", "body", "created_at", "seq")

    def __init__(self, seq: int, attempt: int, created_at: datetime, body: str) -> None:
        self.seq = seq
        self.attempt = attempt
        self.created_at = created_at
        self.body = body


# The fields of a run fixed at its creation: kept apart from the ones writes change.
_DEFINITION = frozenset({"manifest", "variables", "options"})


class _MemoryWrite:
    """A run read under the store's lock for a state change (`state_changes.RunWrite`)."""

    def __init__(self, store: MemoryRunStore, run_id: str, *, defer: bool = False) -> None:
        self._store = store
        self._run_id = run_id
        self._defer = defer  # the record committed is encoded when first read
        self.run = store._state(run_id)
        self.latest_seq = store._latest_seq(run_id)

    def stored_checkpoint(self, seq: int) -> Checkpoint | None:
        return self._store._stored_at(self._run_id, seq)

    def peer(self, run_id: str, *, writes: bool) -> RunRecord | None:
        return self._store._state(run_id)  # under the same lock as this run

    def commit(self, run: RunRecord, checkpoint: Checkpoint | None, *,
               lease_expires_at: datetime | None, peer: RunRecord | None = None) -> bool:
        if checkpoint is not None:
            self._store._append(checkpoint)
        if peer is not None:
            self._store._put_run(peer)
        if self._defer and peer is None:
            self._store._defer_run(run)
        else:
            self._store._put_run(run)
        return True


def _utc(moment: datetime) -> bool:
    """Whether a time decodes as it is: aware, in UTC (`records.UtcDatetime`)."""
    return moment.tzinfo is UTC


class MemoryRunStore(StateChanges):
    # Its calls never wait on a disk or a network: the engine makes them on its
    # event loop's thread, where a hop to a store thread would cost more than the
    # call saves (agent_runtime/store_thread.py). A subclass that does wait (a
    # test's slow store) sets it True.
    waits_on_io = False

    def __init__(self) -> None:
        self._lock = threading.RLock()
        # run id -> (state JSON, definition JSON). The state JSON is None while the
        # state is a record a checkpoint's save decided, kept in `_decoded` and
        # encoded when a reader first asks for it (`_defer_run`).
        self._runs: dict[str, tuple[str | None, str]] = {}
        self._checkpoints: dict[str, list[_StoredCheckpoint]] = {}
        self._effects: dict[tuple[str, str], str] = {}
        self._approvals: dict[tuple[str, str], str] = {}
        self._saved = SavedListsCache()
        # run id -> (state JSON, the record it decodes to): a run's state is read
        # by every write (two for a checkpoint that settles effects), and the
        # rules never change a record they read, only copy it.
        self._decoded: dict[str, tuple[str | None, RunRecord]] = {}
        # (run id, key) -> (effect JSON, record) of an effect reserved and not yet
        # settled: its settlement reads it back (the record is the rules', made here).
        self._reserved: dict[tuple[str, str], tuple[str, EffectRecord]] = {}
        self._run_keys: dict[str, str] = {}  # run key -> the id of the run created under it

    # -- reads ---------------------------------------------------------------

    def _run(self, run_id: str) -> RunRecord | None:
        """The whole record, as a reader sees it."""
        stored = self._runs.get(run_id)
        if stored is None:
            return None
        state, definition = stored
        if state is None:
            state = self._encoded_state(run_id)
        return decode_record(RunRecord, f"{state[:-1]},{definition[1:]}")

    def _state(self, run_id: str) -> RunRecord | None:
        """The record without its definition: what the lifecycle rules read and write."""
        stored = self._runs.get(run_id)
        if stored is None:
            return None
        known = self._decoded.get(run_id)
        if known is not None and known[0] is stored[0]:
            return known[1]
        state = stored[0] if stored[0] is not None else self._encoded_state(run_id)
        record = decode_record(RunRecord, state)
        self._decoded[run_id] = (state, record)
        return record

    def _defer_run(self, run: RunRecord) -> None:
        """Write a run's state decided for a checkpoint's save, to be encoded when a
        reader first asks for it: the next save reads the record itself. Only for a
        record the rules copied from one this store decoded, with numbers and UTC
        times: its text, whenever made, decodes to the record as it is."""
        self._runs[run.run_id] = (None, self._runs[run.run_id][1])
        self._decoded[run.run_id] = (None, run)

    def _encoded_state(self, run_id: str) -> str:
        record = self._decoded[run_id][1]
        state = record.model_dump_json(exclude=set(_DEFINITION))
        self._runs[run_id] = (state, self._runs[run_id][1])
        self._decoded[run_id] = (state, record)
        return state

    def _put_run(self, run: RunRecord) -> None:
        """Write a run's state; its definition is the one written at creation."""
        state = run.model_dump_json(exclude=set(_DEFINITION))
        stored = self._runs.get(run.run_id)
        definition = (stored[1] if stored is not None
                      else run.model_dump_json(include=set(_DEFINITION)))
        self._runs[run.run_id] = (state, definition)

    def load_run(self, run_id: str) -> RunRecord | None:
        with self._lock:
            return self._run(run_id)

    def _assemble(self, run_id: str, seq: int | None) -> tuple[Checkpoint, SavedLists] | None:
        stored = self._checkpoints.get(run_id, [])
        if seq is not None:
            stored = [row for row in stored if row.seq <= seq]
            if not stored or stored[-1].seq != seq:
                return None
        if not stored:
            return None
        return assemble(row.body for row in stored)

    def load_latest_checkpoint(self, run_id: str) -> Checkpoint | None:
        with self._lock:
            found = self._assemble(run_id, None)
            return None if found is None else found[0]

    def load_checkpoint(self, run_id: str, seq: int) -> Checkpoint | None:
        with self._lock:
            found = self._assemble(run_id, seq)
            return None if found is None else found[0]

    def load_checkpoints(self, run_id: str, first_seq: int, last_seq: int) -> list[Checkpoint]:
        with self._lock:
            stored = [row for row in self._checkpoints.get(run_id, []) if row.seq <= last_seq]
            if first_seq > last_seq or not stored or stored[-1].seq < first_seq:
                return []
            return list(assemble_each((row.body for row in stored), first=first_seq))

    def list_checkpoints(self, run_id: str) -> list[CheckpointInfo]:
        with self._lock:
            transitions.require_run(self._state(run_id), run_id)
            return [
                CheckpointInfo(seq=row.seq, attempt=row.attempt, created_at=row.created_at,
                               size_bytes=len(row.body.encode()))
                for row in self._checkpoints.get(run_id, [])
            ]

    def list_runs(self, *, statuses: Collection[RunStatus] | None = None,
                  lease_expired_before: datetime | None = None,
                  parent_run_id: str | None = None, tenant: str | None = None,
                  resume_requested_before: datetime | None = None, agent: str | None = None,
                  run_id_prefix: str | None = None, created_after: datetime | None = None,
                  created_before: datetime | None = None, newest_first: bool = False,
                  limit: int = 100, cursor: str | None = None) -> RunPage:
        with self._lock:
            found: list[RunRecord] = []
            for run_id in sorted(self._runs, reverse=newest_first):
                if not transitions.beyond(run_id, cursor, newest_first=newest_first):
                    continue
                run = self._run(run_id)
                assert run is not None  # listed under the lock
                if transitions.matches(run, statuses=statuses,
                                       lease_expired_before=lease_expired_before,
                                       parent_run_id=parent_run_id, tenant=tenant,
                                       resume_requested_before=resume_requested_before,
                                       agent=agent, run_id_prefix=run_id_prefix,
                                       created_after=created_after,
                                       created_before=created_before):
                    found.append(run)
                    if len(found) > limit:
                        break
            return transitions.page_of(found, limit)

    # -- writes --------------------------------------------------------------

    def create_run(self, run: RunRecord) -> None:
        with self._lock:
            if run.run_id in self._runs:
                raise RunAlreadyExists(f"run {run.run_id!r} already exists")
            if run.run_key is not None:
                holder = self._run_keys.get(run.run_key)
                if holder is not None:
                    raise RunKeyTaken(f"run {holder!r} holds the run key of run "
                                      f"{run.run_id!r}", run_id=holder)
                self._run_keys[run.run_key] = run.run_id
            self._put_run(run)

    def find_run_key(self, run_key: str) -> str | None:
        with self._lock:
            return self._run_keys.get(run_key)

    def resume_run(self, run_id: str, *, owner: str, now: datetime, lease_seconds: float,
                   allow_running_takeover: bool = False,
                   expired_owner: str | None = None) -> RunRecord:
        with self._lock:
            run = transitions.reserve_attempt(
                self._run(run_id), run_id, owner=owner, now=now, lease_seconds=lease_seconds,
                allow_running_takeover=allow_running_takeover,
                expired_owner=expired_owner)
            self._put_run(run)
            return run

    def _stored_at(self, run_id: str, seq: int) -> Checkpoint | None:
        rows = self._checkpoints.get(run_id, [])
        if 0 < seq <= len(rows):
            found = self._assemble(run_id, seq)
            return None if found is None else found[0]
        return None

    def _latest_seq(self, run_id: str) -> int:
        rows = self._checkpoints.get(run_id, [])
        return rows[-1].seq if rows else 0

    def _append(self, checkpoint: Checkpoint) -> None:
        run_id = checkpoint.run_id
        previous = self._saved.get(run_id, checkpoint.seq - 1)
        if previous is None and checkpoint.seq > 1:
            found = self._assemble(run_id, checkpoint.seq - 1)
            previous = None if found is None else found[1]
        body, saved = encode_body(checkpoint, previous)
        self._checkpoints.setdefault(run_id, []).append(
            _StoredCheckpoint(checkpoint.seq, checkpoint.attempt, checkpoint.created_at, body))
        self._saved.put(run_id, saved)

    @contextmanager
    def _writes(self, run_id: str) -> Iterator[tuple[_MemoryWrite]]:
        with self._lock:
            yield (_MemoryWrite(self, run_id),)

    def resolve_approval(self, run_id: str, approval_id: str, *, approved: bool, response: Any,
                         responded_by: str | None, at: datetime) -> None:
        with self._lock:
            text = self._approvals.get((run_id, approval_id))
            existing = None if text is None else decode_record(ApprovalDecision, text)
            change = transitions.record_approval(
                self._state(run_id), run_id, approval_id, approved=approved, response=response,
                responded_by=responded_by, at=at, existing=existing)
            if change is None:
                return
            updated, decision = change
            self._approvals[(run_id, approval_id)] = encode_record(decision)
            self._put_run(updated)

    def begin_effect(self, key: str, *, run_id: str, expected_attempt: int,
                     at: datetime) -> EffectRecord:
        with self._lock:
            effect = transitions.reserve_effect(self._state(run_id), run_id, key,
                                                expected_attempt=expected_attempt, at=at)
            text = self._effects.get((run_id, key))
            if text is not None:
                return decode_record(EffectRecord, text)
            self._effects[(run_id, key)] = text = encode_record(effect)
            self._reserved[(run_id, key)] = (text, effect)
            return decode_record(EffectRecord, text)  # the caller's own copy

    def save_checkpoint(self, checkpoint: Checkpoint, *, expected_attempt: int,
                        lease_expires_at: datetime | None = None) -> None:
        # `_change`, without a generator's context manager: every commit point's write.
        # The rules copy the record they read (the store's own) with numbers and these
        # times: in UTC, they decode as they are, so its encoding can wait.
        defer = _utc(checkpoint.created_at) and (lease_expires_at is None
                                                 or _utc(lease_expires_at))
        with self._lock:
            apply_change((_MemoryWrite(self, checkpoint.run_id, defer=defer),), checkpoint,
                         saving(checkpoint, expected_attempt=expected_attempt,
                                lease_expires_at=lease_expires_at),
                         lease_expires_at=lease_expires_at)

    def save_checkpoint_settling(self, checkpoint: Checkpoint, settlements: Sequence[Settlement],
                                 *, expected_attempt: int, at: datetime,
                                 lease_expires_at: datetime | None = None,
                                 reservations: Sequence[str] = ()) -> None:
        """The effects settled and reserved with the checkpoint (`SettlesInCheckpoint`):
        every change decided first, then all written under the lock, or none."""
        transitions.check_checkpoint_owner(checkpoint.run_id, checkpoint)
        run_id = checkpoint.run_id
        with self._lock:
            state = self._state(run_id)
            written: dict[tuple[str, str], str] = {}
            reserved: dict[tuple[str, str], tuple[str, EffectRecord]] = {}
            for settlement in settlements:
                updated = transitions.settle_effect(
                    state, run_id, settlement.key, expected_attempt=expected_attempt,
                    result=settlement.result, at=at, existing=self._effect(run_id, settlement.key))
                if updated is not None:
                    written[(run_id, settlement.key)] = encode_record(updated)
            for key in reservations:
                effect = transitions.reserve_new_effect(
                    state, run_id, key, expected_attempt=expected_attempt, at=at,
                    existing=self._effect(run_id, key))
                written[(run_id, key)] = text = encode_record(effect)
                reserved[(run_id, key)] = (text, effect)
            self.save_checkpoint(checkpoint, expected_attempt=expected_attempt,
                                 lease_expires_at=lease_expires_at)
            self._effects.update(written)
            for written_key in written:
                self._reserved.pop(written_key, None)
            self._reserved.update(reserved)

    def _effect(self, run_id: str, key: str) -> EffectRecord | None:
        """An effect as stored, for the rules to read (never handed to a caller)."""
        text = self._effects.get((run_id, key))
        if text is None:
            return None
        known = self._reserved.get((run_id, key))
        return known[1] if known is not None and known[0] is text \
            else decode_record(EffectRecord, text)

    def complete_effect(self, key: str, *, run_id: str, expected_attempt: int, result: Any,
                        at: datetime) -> None:
        with self._lock:
            updated = transitions.settle_effect(self._state(run_id), run_id, key,
                                                expected_attempt=expected_attempt,
                                                result=result, at=at,
                                                existing=self._effect(run_id, key))
            if updated is not None:
                self._effects[(run_id, key)] = encode_record(updated)
                self._reserved.pop((run_id, key), None)

    def list_effects(self, run_id: str) -> list[EffectRecord]:
        with self._lock:
            transitions.require_run(self._state(run_id), run_id)
            return sorted(
                (decode_record(EffectRecord, text)
                 for (owner, _), text in self._effects.items() if owner == run_id),
                key=lambda effect: (effect.created_at, effect.key))

    def list_events(self, run_id: str, *, after: int = 0, limit: int = 100) -> list[RunEvent]:
        check_page(after, limit)
        with self._lock:
            transitions.require_run(self._state(run_id), run_id)
            bodies = [row.body for row in self._checkpoints.get(run_id, [])]
        return events_fold(run_id, after, limit)(bodies)

    def delete_run(self, run_id: str) -> None:
        with self._lock:
            run = self._state(run_id)
            if run is None:
                return
            transitions.check_deletable(run)
            if run.run_key is not None:
                self._run_keys.pop(run.run_key, None)
            del self._runs[run_id]
            self._decoded.pop(run_id, None)
            for owned in [k for k in self._reserved if k[0] == run_id]:
                del self._reserved[owned]
            self._checkpoints.pop(run_id, None)
            self._saved.forget(run_id)
            for table in (self._effects, self._approvals):
                for owned in [k for k in table if k[0] == run_id]:
                    del table[owned]

    def close(self) -> None:
        """Nothing to release."""

    def __enter__(self) -> MemoryRunStore:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()
