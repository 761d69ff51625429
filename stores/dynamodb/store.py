"""DynamoDbRunStore: runs in one DynamoDB table, large bodies in S3.

The item layout is in `items`; the requests, and how a refused one is
read, in `requests`; reading and remembering runs in `runs`;
`list_runs` over the GSIs in `listing`; the effect ledger in
`effects`; removing a run in `deletion`. The lifecycle rules come from
`stores.transitions` and the state changes around them from
`stores.state_changes`, exactly as in every other store: this module only
reads, writes and translates.

Fencing. With no transaction spanning a read and a write, every state change
is an optimistic read-modify-write: read META, decide with `transitions`,
write conditioned on `rev = :read AND attempt = :read AND status = :read`
(`attempt` and `status` are the contract's fence; `rev`, replaced by every
write, makes it exact). A refused write returns the item as it is
(`ReturnValuesOnConditionCheckFailure=ALL_OLD`): the rules run again on it and
raise the contract's error, or decide the harmless change again. The error is
always the rules' verdict on the stored item, never a guess from the refusal.

A checkpoint and the state change it comes with are one `TransactWriteItems`
(the checkpoint put with `attribute_not_exists`, the META write fenced).

Requests. An owner's `save_checkpoint` is one `TransactWriteItems`, no read,
when the run as the store remembers it predicts success (`predicted_saves`);
a refusal falls back to the read-modify-write above. Effect writes predict the
same way. A body over `inline_limit` (compressed) adds one S3 put.

A checkpoint that renews the lease moves the run's status index entry only
when the entry is due within half a lease (`items.lease_still_due`): a small
checkpoint then writes two items of a KB each (4 write units in its
transaction), not those and a moved index entry (2 more).

Concurrency. Across processes DynamoDB's conditions decide; inside one
process a striped lock also serialises a run's operations, which the caches
need (tests/stores/aws/test_dynamodb_fencing.py drives the interleavings:
moto does not make a condition and its write atomic).

`list_runs` Queries the GSIs, never Scans (see `listing`).

Retention. A terminal run's META gets a TTL (`expires_at`, `retention` after
it ended). DynamoDB's TTL removes that item only; what the run owned is
removed by `delete_run(run_id)` on the now missing run (what
functions/retention does on the table stream's TTL removals), blobs included,
or, items only, by the next `create_run` of that id.
"""

from __future__ import annotations

import copy
import secrets
import threading
import uuid
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any

from stores import aws_clients, transitions
from stores.base import RunAlreadyExists, RunKeyTaken, StoreError
from stores.deltas import SavedLists, encode_body
from stores.dynamodb import run_keys
from stores.dynamodb.deletion import clear_leftovers, delete_run
from stores.dynamodb.effects import EffectLedger
from stores.dynamodb.items import (
    APPROVAL_PREFIX,
    META,
    Texts,
    checked_checkpoints,
    checkpoint_item,
    checkpoint_sk,
    definition_item,
    key,
    meta_item,
    moment,
    number_of,
    owned_record,
    partition,
    record_item,
)
from stores.dynamodb.listing import list_runs
from stores.dynamodb.predicted_saves import save_predicted
from stores.dynamodb.requests import (
    ABSENT,
    Refused,
    Table,
    check_op,
    landed,
    put_op,
)
from stores.dynamodb.runs import ROUNDS, Rounds, RunReader, StoredRun, fence
from stores.event_log import check_page
from stores.records import (
    ApprovalDecision,
    Checkpoint,
    CheckpointInfo,
    EffectRecord,
    RunEvent,
    RunPage,
    RunRecord,
    RunStatus,
    copy_record,
    encode_record,
)
from stores.run_search import RunSearch
from stores.state_changes import StateChanges, apply_change, saving

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef

    from stores.dynamodb.s3 import S3BlobStore

# DynamoDB's item limit is 400 KB, attribute names and the other attributes included.
MAX_INLINE_LIMIT = 350_000
# Over this many stored bytes (compressed: `items.Texts`) a text goes to S3. The
# break-even, at us-east-1 on-demand prices (bench/aws_cost.py): a PUT ($0.005
# per 1,000) costs what 8 write units do ($0.625 per million), and the item
# keeping the reference still costs its first KB, 2 units in the transaction
# a checkpoint is, so S3 costs ~10 units (and ~20 ms of Lambda waiting for the
# PUT, ~0.4 more). Inline costs 2 units per started KB of the item: a text up
# to ~4.7 KB (with the item's ~300 other bytes) costs no more than S3, one
# over it more. Reading agrees: a GET costs what 3.2 read units do, and an
# inline item up to 4 KB reads for 1. So 4 KB; before, 64 KB bodies rode
# inline at up to 128 write units a checkpoint, and outputs up to 64 KB inline
# in META cost 124 a write and 16 read units a read.
DEFAULT_INLINE_LIMIT = 4 * 1024
# A store without a blob store keeps texts inline up to this (compressed), as
# every store did before: a smaller limit would refuse writes it used to take.
BLOBLESS_INLINE_LIMIT = 64 * 1024
DEFAULT_RETENTION = timedelta(days=90)
_STRIPES = 64

class _MetaWrite:
    """One round of a state change: the run's META as read or as a refusal returned it
    (`state_changes.RunWrite`). The commit is one transaction: META fenced on exactly
    what was read (`runs.fence`), the new checkpoint put only where none exists, and
    the peer (a sub-run's parent, the child a run suspends on) written or checked
    unchanged since its read, so a child's end and its parent's suspension on it
    never both commit without seeing each other."""

    def __init__(self, store: DynamoDbRunStore, rounds: Rounds, stored: StoredRun | None) -> None:
        self._store = store
        self._rounds = rounds
        self._stored = stored
        self._peer: StoredRun | None = None
        self.run = None if stored is None else stored.run
        self.latest_seq = 0 if self.run is None else self.run.checkpoint_seq or 0

    def stored_checkpoint(self, seq: int) -> Checkpoint | None:
        return self._store._reader.stored_checkpoint(self.run, seq)

    def peer(self, run_id: str, *, writes: bool) -> RunRecord | None:
        self._peer = self._store._reader.load(run_id)
        return None if self._peer is None else self._peer.run

    def commit(self, run: RunRecord, checkpoint: Checkpoint | None, *,
               lease_expires_at: datetime | None, peer: RunRecord | None = None) -> bool:
        beside: list[TransactWriteItemTypeDef] = []
        saved = None
        if checkpoint is not None and self._stored is not None:
            put, saved = self._store._checkpoint_put(self._stored, checkpoint)
            beside.append(put)
        peer_write = self._peer_write(peer)
        if peer_write is not None:
            beside.append(peer_write[0])
        try:
            written = self._store._put_run(self._stored, run, beside)
        except Refused as refusal:
            self._rounds.refused(refusal)
            return False
        if saved is not None:
            self._store._reader.save_lists(written.incarnation, saved)
        if peer_write is not None and peer_write[1] is not None:
            self._store._reader.remember(peer_write[1])
        return True

    def _peer_write(self, peer: RunRecord | None,
                    ) -> tuple[TransactWriteItemTypeDef, StoredRun | None] | None:
        """The peer's new META fenced on its read, or a check that it has not changed:
        None when nothing about it can change any more (gone, or finished)."""
        read = self._peer
        if read is None or (peer is None and read.run.status.terminal):
            return None
        store = self._store
        if peer is None:
            return check_op(store.table_name, key(read.run.run_id, META), fence(read)), None
        rev = secrets.token_hex(8)
        item = meta_item(peer, incarnation=read.incarnation, rev=rev, texts=store._texts,
                         retention=store.retention)
        return put_op(store.table_name, item, fence(read)), StoredRun(
            peer, read.incarnation, rev, int(item["due_at"]["N"]))


class DynamoDbRunStore(StateChanges):
    """A RunStore in one DynamoDB table (the layout of docs/design.md section 10).

    `blobs` keeps what is over `inline_limit` bytes (checkpoint bodies, large
    manifests or outputs); without it such a write raises `StoreError`. The
    limit is `DEFAULT_INLINE_LIMIT` with blobs, `BLOBLESS_INLINE_LIMIT` without.
    `retention` is how long a terminal run stays before its TTL (None: no TTL).
    `sleep` waits between the tries of a throttled request (tests inject it).
    """

    def __init__(self, table_name: str, *, blobs: S3BlobStore | None = None,
                 client: DynamoDBClient | None = None, inline_limit: int | None = None,
                 retention: timedelta | None = DEFAULT_RETENTION,
                 sleep: Callable[[float], None] | None = None) -> None:
        if inline_limit is None:
            inline_limit = DEFAULT_INLINE_LIMIT if blobs is not None else BLOBLESS_INLINE_LIMIT
        if not 0 < inline_limit <= MAX_INLINE_LIMIT:
            raise ValueError(f"inline_limit must be 1..{MAX_INLINE_LIMIT} bytes, "
                             f"not {inline_limit}")
        self.table_name = table_name
        self.client: DynamoDBClient = (client if client is not None
                                       else aws_clients.client("dynamodb"))
        self.blobs = blobs
        self.retention = retention
        self._table = Table(self.client, table_name, sleep=sleep)
        self._texts = Texts(blobs, inline_limit)
        self._reader = RunReader(self._table, self._texts)
        self._effects = EffectLedger(self._table, self._texts)
        self._stripes = [threading.Lock() for _ in range(_STRIPES)]
        self._held: tuple[str, str] | None = None  # (run id, lease owner): `owned_by`

    def owned_by(self, run_id: str, owner: str) -> DynamoDbRunStore:
        """This store (its table, caches, locks) for the slice `owner` holding `run_id`'s
        lease: a write of that run refused (`StaleAttempt`) once another holds it."""
        held = copy.copy(self)
        held._held = (run_id, owner)
        return held

    def _owner(self, run_id: str) -> str | None:  # the lease owner writes of `run_id` need
        return self._held[1] if self._held is not None and self._held[0] == run_id else None

    def _lock(self, run_id: str) -> threading.Lock:
        return self._stripes[hash(run_id) % _STRIPES]

    def _rounds(self, run_id: str) -> Rounds:
        return Rounds(self._reader, run_id, owner=self._owner(run_id))

    def _predicted(self, run_id: str, expected_attempt: int) -> Rounds:
        """Rounds starting from the remembered run when it predicts a running attempt."""
        known, owner = self._reader.remembered(run_id), self._owner(run_id)
        if (known is not None and known.run.attempt == expected_attempt and owner in (
                None, known.run.lease_owner) and known.run.status is RunStatus.RUNNING):
            return Rounds(self._reader, run_id, known, predicted=True, owner=owner)
        return self._rounds(run_id)

    def load_run(self, run_id: str) -> RunRecord | None:
        with self._lock(run_id):
            stored = self._reader.load(run_id)
        # A copy: the decoded record is remembered for the next write.
        return None if stored is None else copy_record(stored.run)

    def load_latest_checkpoint(self, run_id: str) -> Checkpoint | None:
        with self._lock(run_id):
            stored = self._reader.load(run_id)
            if stored is None or not stored.run.checkpoint_seq:
                return None
            found = self._reader.assemble(run_id, stored.run.checkpoint_seq)
            # A resumed owner loads before it saves: its first save then needs no read.
            self._reader.save_lists(stored.incarnation, found[1])
            return found[0]

    def load_checkpoint(self, run_id: str, seq: int) -> Checkpoint | None:
        with self._lock(run_id):
            stored = self._reader.load(run_id)
            return None if stored is None else self._reader.stored_checkpoint(stored.run, seq)

    def load_checkpoints(self, run_id: str, first_seq: int, last_seq: int) -> list[Checkpoint]:
        with self._lock(run_id):
            return self._reader.stored_checkpoints(run_id, first_seq, last_seq)

    def list_checkpoints(self, run_id: str) -> list[CheckpointInfo]:
        with self._lock(run_id):
            stored = self._reader.load(run_id)
            run = transitions.require_run(None if stored is None else stored.run, run_id)
            latest = run.checkpoint_seq or 0
            items = [] if not latest else list(self._table.query(
                partition(run_id), between=(checkpoint_sk(1), checkpoint_sk(latest)),
                projection=("seq", "attempt", "created_at", "size")))
            checked_checkpoints(items, run_id, latest)
        return [CheckpointInfo(seq=number_of(item, "seq"), attempt=number_of(item, "attempt"),
                               created_at=moment(number_of(item, "created_at")),
                               size_bytes=number_of(item, "size")) for item in items]

    def list_runs(self, *, statuses: Collection[RunStatus] | None = None,
                  lease_expired_before: datetime | None = None,
                  parent_run_id: str | None = None, tenant: str | None = None,
                  resume_requested_before: datetime | None = None, agent: str | None = None,
                  run_id_prefix: str | None = None, created_after: datetime | None = None,
                  created_before: datetime | None = None, newest_first: bool = False,
                  limit: int = 100, cursor: str | None = None) -> RunPage:
        return list_runs(self._reader, statuses=statuses, limit=limit, cursor=cursor,
                         lease_expired_before=lease_expired_before, parent_run_id=parent_run_id,
                         tenant=tenant, resume_requested_before=resume_requested_before,
                         search=RunSearch(agent, run_id_prefix, created_after,
                                                     created_before),
                         newest_first=newest_first)

    def list_events(self, run_id: str, *, after: int = 0, limit: int = 100) -> list[RunEvent]:
        check_page(after, limit)
        with self._lock(run_id):
            stored = self._reader.load(run_id)
            run = transitions.require_run(None if stored is None else stored.run, run_id)
            return self._reader.events(run_id, run.checkpoint_seq or 0, after=after, limit=limit)

    def list_effects(self, run_id: str) -> list[EffectRecord]:
        with self._lock(run_id):
            stored = self._reader.load(run_id)
            transitions.require_run(None if stored is None else stored.run, run_id)
            return self._effects.effects(run_id)

    # -- writing the run -----------------------------------------------------

    def _put_run(self, stored: StoredRun | None, updated: RunRecord,
                 beside: list[TransactWriteItemTypeDef] | None = None) -> StoredRun:
        """Write `updated` over `stored` (fenced), with `beside` in the same transaction."""
        if stored is None:  # the rules raised RunNotFound before: never reached
            raise StoreError(f"run {updated.run_id!r} was not read")
        rev = secrets.token_hex(8)
        item = meta_item(updated, incarnation=stored.incarnation, rev=rev, texts=self._texts,
                         retention=self.retention)
        try:
            self._table.transact([put_op(self.table_name, item, fence(stored)),
                                  *(beside or [])])
        except Refused as refused:
            if not landed(refused, "rev", rev):
                raise
        written = StoredRun(updated, stored.incarnation, rev, int(item["due_at"]["N"]))
        self._reader.remember(written)
        return written

    def create_run(self, run: RunRecord) -> None:
        incarnation = uuid.uuid4().hex
        meta = meta_item(run, incarnation=incarnation, rev=secrets.token_hex(8),
                         texts=self._texts, retention=self.retention)
        definition = definition_item(run, incarnation=incarnation, texts=self._texts)
        ops = [put_op(self.table_name, meta, ABSENT), put_op(self.table_name, definition, ABSENT)]
        stale: str | None = None  # the run a key item names that was found gone
        with self._lock(run.run_id):
            for _ in range(ROUNDS):
                if run.run_key is not None:
                    ops[2:] = [run_keys.claim_op(self.table_name, run.run_key, run.run_id,
                                                 stale)]
                try:
                    self._table.transact(ops)
                    return
                except Refused as refused:
                    if landed(refused, "incarnation", incarnation):
                        return
                    if refused.reasons[0].failed:
                        raise RunAlreadyExists(f"run {run.run_id!r} already exists") from None
                    if refused.reasons[1].failed:
                        # A definition without its META: what a TTL left of a
                        # run with this id. Clear it, then create.
                        clear_leftovers(self._reader, run.run_id)
                    if run.run_key is not None and refused.reasons[2].failed:
                        stale = self._key_taken(run.run_key, run.run_id)
            raise StoreError(f"run {run.run_id!r} could not be created")

    def _key_taken(self, run_key: str, run_id: str) -> str | None:
        """Raise RunKeyTaken naming the run that holds the key; else return the run
        the key's item names, found gone, for the next round to replace."""
        holder = run_keys.holder(self._reader, run_key)
        if holder is not None:
            raise RunKeyTaken(f"run {holder!r} holds the run key of run {run_id!r}",
                              run_id=holder)
        return run_keys.stale_holder(self._table, run_key)

    def find_run_key(self, run_key: str) -> str | None:
        return run_keys.holder(self._reader, run_key)

    def resume_run(self, run_id: str, *, owner: str, now: datetime, lease_seconds: float,
                   allow_running_takeover: bool = False,
                   expired_owner: str | None = None) -> RunRecord:
        with self._lock(run_id):
            rounds = self._rounds(run_id)
            for stored in rounds:
                updated = transitions.reserve_attempt(
                    None if stored is None else stored.run, run_id, owner=owner, now=now,
                    lease_seconds=lease_seconds, allow_running_takeover=allow_running_takeover,
                    expired_owner=expired_owner)
                try:
                    return copy_record(self._put_run(stored, updated).run)
                except Refused as refused:
                    rounds.refused(refused)
        raise AssertionError("unreachable: Rounds raises when it runs out")

    def change_lease(self, run_id: str, decide: Callable[[RunRecord | None], RunRecord | None],
                     *, owned: bool = True) -> None:
        """Write the lease `decide` makes of the run as read (None: no change), fenced;
        `owned=False` for a change by no slice (stores/dynamodb/slices.py)."""
        with self._lock(run_id):
            rounds = self._rounds(run_id) if owned else Rounds(self._reader, run_id)
            apply_change(self._round_writes(rounds), None, lambda run, _, __: decide(run))

    @contextmanager
    def _writes(self, run_id: str) -> Iterator[Iterator[_MetaWrite]]:
        with self._lock(run_id):
            yield self._round_writes(self._rounds(run_id))

    def _round_writes(self, rounds: Rounds) -> Iterator[_MetaWrite]:
        """One read-modify-write per round: a refused write is decided again on what
        the refusal returned (see the module doc)."""
        for stored in rounds:
            yield _MetaWrite(self, rounds, stored)

    # -- checkpoints ---------------------------------------------------------

    def _checkpoint_put(self, stored: StoredRun,
                        checkpoint: Checkpoint) -> tuple[TransactWriteItemTypeDef, SavedLists]:
        """The put of a new checkpoint body (a delta against seq - 1), never over another."""
        previous = self._reader.previous_lists(stored, checkpoint.seq)
        body, saved = encode_body(checkpoint, previous)
        item = checkpoint_item(checkpoint, body, self._texts)
        return put_op(self.table_name, item, ABSENT), saved

    def save_checkpoint(self, checkpoint: Checkpoint, *, expected_attempt: int,
                        lease_expires_at: datetime | None = None) -> None:
        with self._lock(checkpoint.run_id):
            outcome = save_predicted(
                self._table, self._reader, self._texts, checkpoint,
                expected_attempt=expected_attempt, lease_expires_at=lease_expires_at,
                owner=self._owner(checkpoint.run_id))
            if outcome is True:
                return
            rounds = self._rounds(checkpoint.run_id)
            if outcome:  # the refused prediction: the first round decides on what it returned
                rounds.refused(outcome)
            apply_change(self._round_writes(rounds), checkpoint,
                         saving(checkpoint, expected_attempt=expected_attempt,
                                lease_expires_at=lease_expires_at))

    def resolve_approval(self, run_id: str, approval_id: str, *, approved: bool, response: Any,
                         responded_by: str | None, at: datetime) -> None:
        sk = APPROVAL_PREFIX + approval_id
        what = f"approval {approval_id!r} of run {run_id!r}"
        with self._lock(run_id):
            rounds = self._rounds(run_id)
            for stored in rounds:
                found = None if stored is None else self._table.get(key(run_id, sk))
                existing = None if found is None else owned_record(
                    ApprovalDecision, found, self._texts, what)
                change = transitions.record_approval(
                    None if stored is None else stored.run, run_id, approval_id,
                    approved=approved, response=response, responded_by=responded_by, at=at,
                    existing=existing)
                if change is None:
                    return
                updated, decision = change
                item = record_item(run_id, sk, encode_record(decision), self._texts)
                try:
                    self._put_run(stored, updated, [put_op(self.table_name, item, ABSENT)])
                    return
                except Refused as refused:
                    rounds.refused(refused)

    def begin_effect(self, key_: str, *, run_id: str, expected_attempt: int,
                     at: datetime) -> EffectRecord:
        with self._lock(run_id):
            return self._effects.begin(self._predicted(run_id, expected_attempt), key_,
                                       run_id=run_id, expected_attempt=expected_attempt, at=at)

    def complete_effect(self, key_: str, *, run_id: str, expected_attempt: int, result: Any,
                        at: datetime) -> None:
        with self._lock(run_id):
            self._effects.complete(self._predicted(run_id, expected_attempt), key_,
                                   run_id=run_id, expected_attempt=expected_attempt,
                                   result=result, at=at)

    def delete_run(self, run_id: str) -> None:
        with self._lock(run_id):
            delete_run(self._reader, run_id, blobs=self.blobs)

    def close(self) -> None:  # nothing to release: botocore closes connections when collected
        pass

    def __enter__(self) -> DynamoDbRunStore:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()
