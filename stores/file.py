"""FileRunStore: runs as files under one directory, safe across processes on one host.

    runs/<run_id>/run.json                     the run record, and the commit record
    runs/<run_id>/checkpoints/<seq:010d>.json  delta-encoded bodies (stores.deltas)
    runs/<run_id>/effects/<sha256(key)>.json
    runs/<run_id>/approvals/<sha256(approval_id)>.json
    locks/<run_id>                             flock'ed by every access to the run

Every file is sealed and written atomically (`stores.atomic_files`). Run ids
are file names as they are, which keeps the tree readable; an id that could
escape or hide (a path separator, NUL, `..`, a leading dot, over 200 bytes)
is refused with `ValueError` (`file_layout.check_run_id`).

Every file names what it holds, and reads check it against where it sits: a
`run.json` holds its directory's run, a checkpoint file's header its run and
seq, an effect or approval file its run and key (its name is the key's hash).
A file copied from elsewhere is `CorruptRecord`. So is a file the run's
bookkeeping says exists and does not: a committed checkpoint, a counted
effect, or `run.json` itself while the run's other files remain.

Crash consistency: `run.json` commits. Its header holds `latest_seq`, the
highest committed checkpoint, kept by the store rather than taken from
`RunRecord.checkpoint_seq` (which is whatever the lifecycle rules write), and
`effects`, how many effects are committed. An effect file carries its number
(`n`) and is written before the `run.json` that counts it, like a checkpoint;
one numbered above the count is uncommitted (its effect never ran) and is
treated as absent, and removed by `resume_run` (`file_effects`). A checkpoint
file is written before the `run.json` that commits it, so a crash
in between leaves a file above `latest_seq`: never read or listed, overwritten
by the next save of that seq, and removed by `resume_run` (where a crashed
attempt is picked up) along with dead writers' temp files. A checkpoint and its
state change thus commit together. An approval decision commits in `run.json`
(`suspension.decision`) first; the approval file is its lasting copy, written
after and restored from `run.json` if a crash lost it (`file_approvals`).

The state changes are `stores.state_changes`'s: a `_FileWrite` reads
`run.json` and commits as above. Writes hold the run's `flock` exclusively;
reads of more than `run.json` hold it shared (`run.json` alone is always
replaced whole). A per-store thread lock guards the cache of saved
checkpoint lists.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import uuid
from collections.abc import Callable, Collection, Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from pydantic import ValidationError

from stores import transitions
from stores.atomic_files import (
    Sealed,
    fsync_dir,
    is_temp,
    listed,
    locked,
    make_dir,
    meta_field,
    reachable,
    read_required,
    seal,
    write_atomic,
)
from stores.base import CorruptRecord, RunAlreadyExists, RunKeyTaken
from stores.deltas import SavedLists, SavedListsCache, assemble, assemble_each, encode_body
from stores.event_log import check_page, events_fold
from stores.file_approvals import recorded_decision, restore_decision, write_decision
from stores.file_effects import EffectLedger
from stores.file_layout import SUBDIRS, RunFile, check_run_id, read_run_file
from stores.file_run_keys import FileRunKeys
from stores.records import (
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
from stores.state_changes import StateChanges

_TRASH_PREFIX = ".trash-"
_T = TypeVar("_T")


def _record(state: RunFile | None) -> RunRecord | None:
    return None if state is None else state.run


def _existing(state: RunFile | None, run_id: str) -> RunFile:
    """RunNotFound, the first check of every transition, made once up front."""
    transitions.require_run(_record(state), run_id)
    assert state is not None
    return state


class _FileWrite:
    """A run's `run.json` read under its exclusive lock for a state change
    (`state_changes.RunWrite`)."""

    def __init__(self, store: FileRunStore, state: RunFile | None, peers: ExitStack) -> None:
        self._store = store
        self._state = state
        self._peers = peers
        self._peer: RunFile | None = None
        self.run = _record(state)
        self.latest_seq = 0 if state is None else state.latest_seq

    def stored_checkpoint(self, seq: int) -> Checkpoint | None:
        return None if self._state is None else self._store._stored_at(self._state, seq)

    def peer(self, run_id: str, *, writes: bool) -> RunRecord | None:
        """A parent to write is locked until this change ends (a child's lock, then its
        parent's: always up the tree, so two changes never wait on each other). A child
        is only read, unlocked: its end holds this run's lock while it commits, so it
        either committed before this read or sees this change's commit."""
        try:
            if not writes:
                return _record(self._store._state(run_id))
            self._peer = self._peers.enter_context(self._store._locked(run_id))
        except ValueError:
            return None  # an id this store cannot hold names no run of it
        return _record(self._peer)

    def commit(self, run: RunRecord, checkpoint: Checkpoint | None, *,
               lease_expires_at: datetime | None, peer: RunRecord | None = None) -> bool:
        state = self._state
        assert state is not None  # decided on a run
        if peer is not None:
            assert self._peer is not None  # decided on the peer as read, still locked
            # The parent's request first: should a crash come before this run's own
            # commit, the parent is resumed early, finds its child not finished and
            # waits again; the other way round it would wait for a request never filed.
            self._store._commit(self._peer, peer)
        if checkpoint is None:
            self._store._commit(state, run)
            return True
        # The checkpoint's file first, then the run.json that commits it.
        saved = self._store._append(state, checkpoint)
        self._store._commit(state, run, latest_seq=checkpoint.seq)
        # Only a committed checkpoint may serve as the base of the next delta.
        self._store._saved.put(state.incarnation, saved)
        return True


class FileRunStore(StateChanges):
    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._runs = self.path / "runs"
        self._locks = self.path / "locks"
        self._thread_lock = threading.RLock()
        self._saved = SavedListsCache()
        self._keys = FileRunKeys(self.path, lambda run_id: _record(self._state(run_id)))
        with reachable(self.path):
            self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
            make_dir(self._runs)
            make_dir(self._locks)
            # A delete interrupted after its rename leaves a trash directory nobody
            # can reach; finish the job. Another process may be doing the same.
            for entry in os.listdir(self._runs):
                if entry.startswith(_TRASH_PREFIX):
                    shutil.rmtree(self._runs / entry, ignore_errors=True)

    # -- files ---------------------------------------------------------------

    def _dir(self, run_id: str) -> Path:
        check_run_id(run_id)
        return self._runs / run_id

    @contextmanager
    def _locked(self, run_id: str, *, shared: bool = False,
                create: bool = False) -> Iterator[RunFile | None]:
        """Hold the run's lock and yield what run.json holds (None: no such run)."""
        run_dir = self._dir(run_id)
        with self._thread_lock, reachable(self.path):
            # Only create_run makes a lock file for a run that does not exist;
            # a lookup of an unknown id must not leave one behind.
            create = create or run_dir.is_dir()
            with locked(self._locks / run_id, shared=shared, create=create) as present:
                yield self._state(run_id) if present else None

    def _state(self, run_id: str) -> RunFile | None:
        return read_run_file(self._dir(run_id), run_id)

    def _commit(self, state: RunFile, run: RunRecord, *, latest_seq: int | None = None,
                effects: int | None = None) -> None:
        write_atomic(self._dir(run.run_id) / "run.json",
                     state.sealed(run, latest_seq=latest_seq, effects=effects))

    def _checkpoint_path(self, run_id: str, seq: int) -> Path:
        return self._dir(run_id) / "checkpoints" / f"{seq:010d}.json"

    def _checkpoint_file(self, run_id: str, seq: int) -> Sealed:
        path = self._checkpoint_path(run_id, seq)
        meta, body, size = read_required(path, f"committed checkpoint {seq}")
        holds = (meta_field(meta, "run_id", str, path), meta_field(meta, "seq", int, path))
        if holds != (run_id, seq):
            raise CorruptRecord(f"{path}: holds checkpoint {holds[1]} of run {holds[0]!r}")
        return meta, body, size

    def _assemble(self, run_id: str, seq: int) -> tuple[Checkpoint, SavedLists]:
        return self._assembled(run_id, seq, assemble)

    def _assembled(self, run_id: str, seq: int, fold: Callable[[Iterator[str]], _T]) -> _T:
        """`fold` of the bodies of checkpoints 1..`seq`, damage raised as `CorruptRecord`."""
        reading: list[Path] = []

        def bodies() -> Iterator[str]:
            for number in range(1, seq + 1):
                reading.append(self._checkpoint_path(run_id, number))
                yield self._checkpoint_file(run_id, number)[1]

        try:
            return fold(bodies())
        # deltas raises DeltaFormatError, but a well-formed JSON body of the
        # wrong shape surfaces as KeyError/TypeError, and a bad head as a
        # pydantic ValidationError (a ValueError); all are corrupt bytes.
        except (ValueError, KeyError, TypeError) as error:
            where = reading[-1] if reading else self._dir(run_id) / "checkpoints"
            detail = error.errors()[0]["msg"] if isinstance(error, ValidationError) else error
            raise CorruptRecord(f"{where}: checkpoint does not assemble ({detail})") from error

    def _stored_at(self, state: RunFile, seq: int) -> Checkpoint | None:
        if not 0 < seq <= state.latest_seq:
            return None
        return self._assemble(state.run.run_id, seq)[0]

    def _append(self, state: RunFile, checkpoint: Checkpoint) -> SavedLists:
        """Write the checkpoint's file (not yet committed: run.json follows)."""
        previous = self._saved.get(state.incarnation, checkpoint.seq - 1)
        if previous is None and checkpoint.seq > 1:
            previous = self._assemble(checkpoint.run_id, checkpoint.seq - 1)[1]
        body, saved = encode_body(checkpoint, previous)
        # created_at is in the body's head; the header keeps only what
        # list_checkpoints needs that the head may leave out (an unchanged attempt).
        meta = {"run_id": checkpoint.run_id, "seq": checkpoint.seq,
                "attempt": checkpoint.attempt}
        write_atomic(self._checkpoint_path(checkpoint.run_id, checkpoint.seq), seal(body, meta))
        return saved

    def _sweep(self, state: RunFile) -> None:
        """Remove what crashed writers left: temp files and uncommitted checkpoints.

        Runs under the exclusive lock, so no live writer owns any of it. Not
        fsynced: should a removal be lost, the file is garbage still ignored.
        """
        run_dir = self._dir(state.run.run_id)
        for folder in (run_dir, *(run_dir / sub for sub in SUBDIRS)):
            for name in listed(folder):
                seq = name.removesuffix(".json")
                if is_temp(name) or (folder.name == "checkpoints" and seq.isdigit()
                                     and int(seq) > state.latest_seq):
                    os.unlink(folder / name)
        self._ledger(state).sweep()

    @contextmanager
    def _writes(self, run_id: str) -> Iterator[tuple[_FileWrite]]:
        with self._locked(run_id) as state, ExitStack() as peers:
            yield (_FileWrite(self, state, peers),)

    # -- reads ---------------------------------------------------------------

    def load_run(self, run_id: str) -> RunRecord | None:
        with reachable(self.path):
            return _record(self._state(run_id))

    def _load(self, run_id: str, seq: int | None) -> Checkpoint | None:
        with self._locked(run_id, shared=True) as state:
            if state is None:
                return None
            wanted = state.latest_seq if seq is None else seq
            if not 0 < wanted <= state.latest_seq:
                return None
            return self._assemble(run_id, wanted)[0]

    def load_latest_checkpoint(self, run_id: str) -> Checkpoint | None:
        return self._load(run_id, None)

    def load_checkpoint(self, run_id: str, seq: int) -> Checkpoint | None:
        return self._load(run_id, seq)

    def load_checkpoints(self, run_id: str, first_seq: int, last_seq: int) -> list[Checkpoint]:
        with self._locked(run_id, shared=True) as state:
            last = 0 if state is None else min(last_seq, state.latest_seq)
            if max(first_seq, 1) > last:
                return []
            return self._assembled(
                run_id, last, lambda bodies: list(assemble_each(bodies, first=first_seq)))

    def list_events(self, run_id: str, *, after: int = 0, limit: int = 100) -> list[RunEvent]:
        check_page(after, limit)
        with self._locked(run_id, shared=True) as found:
            state = _existing(found, run_id)
            if not state.latest_seq:
                return []
            return self._assembled(run_id, state.latest_seq, events_fold(run_id, after, limit))

    def list_checkpoints(self, run_id: str) -> list[CheckpointInfo]:
        with self._locked(run_id, shared=True) as found:
            state = _existing(found, run_id)
            infos = []
            for seq in range(1, state.latest_seq + 1):
                meta, body, size = self._checkpoint_file(run_id, seq)
                try:
                    head = json.loads(body).get("head", {})
                    infos.append(CheckpointInfo(seq=seq, attempt=meta.get("attempt"),
                                                created_at=head.get("created_at"),
                                                size_bytes=size))
                except (ValueError, AttributeError) as error:
                    raise CorruptRecord(f"{self._checkpoint_path(run_id, seq)}: bad header "
                                        f"or head ({error})") from error
            return infos

    def list_runs(self, *, statuses: Collection[RunStatus] | None = None,
                  lease_expired_before: datetime | None = None,
                  parent_run_id: str | None = None, tenant: str | None = None,
                  resume_requested_before: datetime | None = None, agent: str | None = None,
                  run_id_prefix: str | None = None, created_after: datetime | None = None,
                  created_before: datetime | None = None, newest_first: bool = False,
                  limit: int = 100, cursor: str | None = None) -> RunPage:
        filters: dict[str, Any] = {
            "statuses": statuses, "lease_expired_before": lease_expired_before,
            "parent_run_id": parent_run_id, "tenant": tenant,
            "resume_requested_before": resume_requested_before, "agent": agent,
            "run_id_prefix": run_id_prefix, "created_after": created_after,
            "created_before": created_before}
        with reachable(self.path):
            return self._list_runs(filters, newest_first=newest_first, limit=limit,
                                   cursor=cursor)

    def _list_runs(self, filters: dict[str, Any], *, newest_first: bool, limit: int,
                   cursor: str | None) -> RunPage:
        """`list_runs` with `filters` (those of `transitions.matches`)."""
        found: list[RunRecord] = []
        prefix = filters["run_id_prefix"] or ""
        for run_id in sorted(os.listdir(self._runs), reverse=newest_first):
            # A run's directory is named by its id: a prefix is decided before any read.
            if not run_id.startswith(prefix) or not transitions.beyond(
                    run_id, cursor, newest_first=newest_first):
                continue
            try:
                check_run_id(run_id)
            except ValueError:
                continue  # trash of an interrupted delete, or not ours
            # None: deleted while we listed, or a create not committed yet.
            state = self._state(run_id)
            if state is not None and transitions.matches(state.run, **filters):
                found.append(state.run)
                if len(found) > limit:
                    break
        return transitions.page_of(found, limit)

    def _ledger(self, state: RunFile) -> EffectLedger:
        return EffectLedger(self._dir(state.run.run_id) / "effects", state.run.run_id,
                            state.effects)

    def list_effects(self, run_id: str) -> list[EffectRecord]:
        with self._locked(run_id, shared=True) as found:
            effects = self._ledger(_existing(found, run_id)).effects()
            return sorted(effects, key=lambda effect: (effect.created_at, effect.key))

    # -- writes --------------------------------------------------------------

    def create_run(self, run: RunRecord) -> None:
        run_dir = self._dir(run.run_id)
        with (self._thread_lock, reachable(self.path), self._keys.locked(run.run_key),
              self._locked(run.run_id, create=True) as state):
            if state is not None:
                raise RunAlreadyExists(f"run {run.run_id!r} already exists")
            if run.run_key is not None:
                holder = self._keys.holder(run.run_key)
                if holder is not None:
                    raise RunKeyTaken(f"run {holder!r} holds the run key of run "
                                      f"{run.run_id!r}", run_id=holder)
                self._keys.claim(run.run_key, run.run_id)
            # A directory without run.json is a create that crashed before its
            # commit; nothing in it was ever visible, so start over.
            shutil.rmtree(run_dir, ignore_errors=True)
            make_dir(run_dir)
            for sub in SUBDIRS:
                make_dir(run_dir / sub)
            self._commit(RunFile(run, 0, uuid.uuid4().hex, 0), run)

    def find_run_key(self, run_key: str) -> str | None:
        with self._thread_lock, reachable(self.path):
            return self._keys.holder(run_key)

    def resume_run(self, run_id: str, *, owner: str, now: datetime, lease_seconds: float,
                   allow_running_takeover: bool = False,
                   expired_owner: str | None = None) -> RunRecord:
        with self._locked(run_id) as found:
            state = _existing(found, run_id)
            run = transitions.reserve_attempt(
                state.run, run_id, owner=owner, now=now, lease_seconds=lease_seconds,
                allow_running_takeover=allow_running_takeover,
                expired_owner=expired_owner)
            self._sweep(state)
            restore_decision(self._dir(run_id), state.run)
            self._commit(state, run)
            return run

    def resolve_approval(self, run_id: str, approval_id: str, *, approved: bool, response: Any,
                         responded_by: str | None, at: datetime) -> None:
        with self._locked(run_id) as found:
            state = _existing(found, run_id)
            run_dir = self._dir(run_id)
            change = transitions.record_approval(
                state.run, run_id, approval_id, approved=approved, response=response,
                responded_by=responded_by, at=at,
                existing=recorded_decision(run_dir, state.run, approval_id))
            if change is None:
                restore_decision(run_dir, state.run)
                return
            updated, decision = change
            # run.json first: it is what the engine reads on resume (see file_approvals).
            self._commit(state, updated)
            write_decision(run_dir, decision)

    def begin_effect(self, key: str, *, run_id: str, expected_attempt: int,
                     at: datetime) -> EffectRecord:
        with self._locked(run_id) as found:
            state = _existing(found, run_id)
            effect = transitions.reserve_effect(state.run, run_id, key,
                                                expected_attempt=expected_attempt, at=at)
            ledger = self._ledger(state)
            stored = ledger.get(key)
            if stored is not None:
                return stored
            # An absent key must be new, not lost: reserving a lost effect
            # again would run it twice.
            ledger.check_whole()
            text = encode_record(effect)
            ledger.write(effect.key, text, state.effects + 1)
            # run.json commits the effect (see the module doc).
            self._commit(state, state.run, effects=state.effects + 1)
            return decode_record(EffectRecord, text)

    def complete_effect(self, key: str, *, run_id: str, expected_attempt: int, result: Any,
                        at: datetime) -> None:
        with self._locked(run_id) as found:
            state = _existing(found, run_id)
            ledger = self._ledger(state)
            existing = ledger.get(key)
            if existing is None:
                ledger.check_whole()
            updated = transitions.settle_effect(state.run, run_id, key,
                                                expected_attempt=expected_attempt, result=result,
                                                at=at, existing=existing)
            if updated is not None:
                ledger.write(key, encode_record(updated), ledger.number_of(key))

    def delete_run(self, run_id: str) -> None:
        run_dir = self._dir(run_id)
        trash = self._runs / f"{_TRASH_PREFIX}{uuid.uuid4().hex}"
        with self._thread_lock, reachable(self.path):
            # The key's lock before the run's, as create_run takes them (a run's
            # key never changes, so reading it unlocked is safe).
            unlocked = self._state(run_id)
            run_key = None if unlocked is None else unlocked.run.run_key
            with self._keys.locked(run_key):
                self._delete(run_id, run_dir, trash)
        shutil.rmtree(trash, ignore_errors=True)

    def _delete(self, run_id: str, run_dir: Path, trash: Path) -> None:
        with self._locked(run_id) as state:
            if state is None:
                return
            transitions.check_deletable(state.run)
            # One rename takes the whole run out of sight atomically; the slow
            # removal happens on a name no reader or writer will ever look up.
            os.rename(run_dir, trash)
            fsync_dir(self._runs)
            # Unlinked while held: waiters notice (see atomic_files.locked).
            os.unlink(self._locks / run_id)
            self._saved.forget(state.incarnation)
            if state.run.run_key is not None:
                self._keys.release(state.run.run_key, run_id)

    def close(self) -> None:
        """Nothing stays open between calls; drop the cache."""
        with self._thread_lock:
            self._saved = SavedListsCache()

    def __enter__(self) -> FileRunStore:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()
