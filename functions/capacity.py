"""Capacity: at most `MaxConcurrentRuns` attempts execute at once; the rest wait queued.

Admission is atomic: an attempt executes only while it holds one of
`MaxConcurrentRuns` capacity slots, items of the runs table
(pk `CAPACITY`, sk `SLOT#0000` ...), each naming the run and attempt that
holds it (`run_id`, `attempt_no`, `held_until`; not the table's TTL
attribute: a slot is reused, never expired away). A starter (the start
function, the reconciler) takes a slot before it starts the attempt's
execution, with one conditional write whose
condition is the whole rule — the slot is free, already this run's, or
expired — so two starters can never both take one slot. A run refused for
capacity is neither started nor failed: a created run stays `created`, a
resume request stays in the store's outbox, a dead owner's run stays as it
is, and the reconciler tries again on a later pass.

A slot is released (one conditional write) when the attempt ends: by Advance
when the attempt suspends, finishes or is superseded, or when its first
slice finds nothing to reserve. The slot is the attempt's, not an
execution's: it passes unchanged from slice to slice as each hands the
attempt to the next one's execution (functions/step/ownership.py). A
takeover of a run moves that run's own slot to the new attempt, so a dead
attempt's slot is never lost to a crash.

A slot's `held_until` bounds how long a starter trusts it without asking
the run: it is set to the lease's length past the start. Once it has
passed, a starter that needs room reads the holder's run: while that run is
running the slot's attempt under a lease that has not expired, the slot is
still held (and renewed for another hold, never past that lease, so the
next starters need not read again); otherwise the holder is gone and the
slot is taken. So a slot
left by a crashed holder frees itself with the run's lease.

The Advance function's reserved concurrency is `MaxConcurrentRuns` too. An
Advance throttled all the same (a local executor on the same store, a slot
taken from a stalled holder) waits and retries in the state machine without
end: throttling never fails an execution, so it is never a takeover.
The reconciler reads the slots once per pass (`room`: how many are free or
past their hold) and lists no more queued runs or due resumes than that; its
admissions go on from that read, reading again only when a conditional write
finds a slot changed since. So a backlog of queued runs costs it nothing per
run. Cost: an admission is one conditional write (after at most one eventually
consistent Query of at most `MaxConcurrentRuns` small items); a release is one
Query and one write.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from stores.base import RunStore
from stores.records import RunStatus

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

    from functions.environment import Services

PARTITION = "CAPACITY"
SLOT_PREFIX = "SLOT#"
_MICROS = 1_000_000


@dataclass(frozen=True)
class Slot:
    """One capacity slot as read: who holds it (None: free) until when."""

    number: int
    run_id: str | None = None
    attempt: int = 0
    held_until: int = 0  # epoch microseconds


def _micros(at: datetime) -> int:
    return int(at.timestamp() * _MICROS)


def _slot_key(number: int) -> dict[str, Any]:
    return {"pk": {"S": PARTITION}, "sk": {"S": f"{SLOT_PREFIX}{number:04d}"}}


def _conditional_failure(error: ClientError) -> bool:
    return str(error.response.get("Error", {}).get("Code")) == "ConditionalCheckFailedException"


class CapacitySlots:
    """The `limit` capacity slots of a DynamoDB run store's table.

    A limit of 0 or less means no limit: every attempt is admitted, nothing written.
    """

    def __init__(self, client: DynamoDBClient, table: str, store: RunStore, *,
                 limit: int, hold_seconds: float) -> None:
        self.client = client
        self.table = table
        self.store = store
        self.limit = limit
        self.hold_seconds = hold_seconds
        # Set once an admission found every slot held: the rest of this caller's
        # work (a reconciler pass) is refused without reading again.
        self.full: str | None = None
        # The slots as last read by this caller; each take updates it, so a pass
        # reads the partition once unless another starter changed a slot.
        self._seen: list[Slot] | None = None

    def room(self, now: datetime) -> int | None:
        """How many attempts may start now at most (None: no limit): the slots free
        or past their hold. Reads the slots; later admissions start from this read."""
        if self.limit <= 0:
            return None
        self._seen = self._read()
        now_us = _micros(now)
        return sum(1 for slot in self._seen if slot.run_id is None or slot.held_until < now_us)

    def admit(self, run_id: str, attempt: int, *, now: datetime) -> str | None:
        """Take a slot for `attempt` of `run_id`; None when taken, else why not (full).

        The run's own slot (a repeated start, a takeover) is taken again first.
        """
        if self.limit <= 0:
            return None
        fresh = self._seen is None
        slots = self._seen if self._seen is not None else self._read()
        while True:
            mine = [slot for slot in slots if slot.run_id == run_id]
            if self.full is not None and not mine:
                return self.full
            taken = self._admit_from(slots, mine, run_id, attempt, now)
            if taken is not None:
                self._seen = [taken if slot.number == taken.number else slot
                              for slot in slots]
                return None
            if fresh:
                break
            # A slot changed since this caller's read (another starter, a
            # release): read once more before calling the slots full.
            slots, fresh = self._read(), True
        self._seen = slots
        self.full = (f"all {self.limit} capacity slots are held by running attempts; "
                     f"MaxConcurrentRuns is {self.limit}")
        return self.full

    def _admit_from(self, slots: list[Slot], mine: list[Slot], run_id: str, attempt: int,
                    now: datetime) -> Slot | None:
        """The slot taken for `attempt` of `run_id` from `slots` as read, or None."""
        now_us = _micros(now)
        free = [slot for slot in slots if slot.run_id is None]
        for slot in mine + free:
            if self._take(slot, run_id, attempt, now_us):
                return self._held(slot, run_id, attempt, now_us)
        for slot in slots:
            if slot.run_id not in (None, run_id) and slot.held_until < now_us \
                    and not self._still_held(slot, now) \
                    and self._take(slot, run_id, attempt, now_us, replacing=slot):
                return self._held(slot, run_id, attempt, now_us)
        return None

    def _held(self, slot: Slot, run_id: str, attempt: int, now_us: int) -> Slot:
        return Slot(slot.number, run_id, attempt, now_us + int(self.hold_seconds * _MICROS))

    def release(self, run_id: str, attempt: int) -> bool:
        """Free the slot `attempt` of `run_id` holds; False when it holds none (it
        never took one, or a takeover moved it to a newer attempt)."""
        if self.limit <= 0:
            return False
        for slot in self._read():
            if slot.run_id == run_id and slot.attempt == attempt:
                try:
                    self.client.update_item(
                        TableName=self.table, Key=_slot_key(slot.number),
                        UpdateExpression="REMOVE run_id, attempt_no, held_until",
                        ConditionExpression="run_id = :run AND attempt_no = :attempt",
                        ExpressionAttributeValues={":run": {"S": run_id},
                                                   ":attempt": {"N": str(attempt)}})
                except ClientError as error:
                    if not _conditional_failure(error):
                        raise
                    return False
                return True
        return False

    def _read(self) -> list[Slot]:
        """The slots numbered below the limit, free ones included (a slot never
        written is free). Eventually consistent: a stale read only costs a failed
        conditional write, never a second holder."""
        answer = self.client.query(
            TableName=self.table, KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": PARTITION}})
        held: dict[int, Slot] = {}
        for item in answer.get("Items", []):
            number = int(item["sk"]["S"].removeprefix(SLOT_PREFIX))
            if number < self.limit and "run_id" in item:
                held[number] = Slot(number, item["run_id"]["S"],
                                    int(item["attempt_no"]["N"]), int(item["held_until"]["N"]))
        return [held.get(number, Slot(number)) for number in range(self.limit)]

    def _take(self, slot: Slot, run_id: str, attempt: int, now_us: int, *,
              replacing: Slot | None = None) -> bool:
        expires = now_us + int(self.hold_seconds * _MICROS)
        values: dict[str, Any] = {":run": {"S": run_id}, ":attempt": {"N": str(attempt)},
                                  ":expires": {"N": str(expires)}}
        if replacing is None:
            # Free, or already this run's: the rule a stale read cannot get round.
            condition = "attribute_not_exists(run_id) OR run_id = :run"
        else:
            # The holder was found gone: only while nobody renewed or took it since.
            condition = "run_id = :holder AND attempt_no = :held AND held_until = :seen"
            values |= {":holder": {"S": replacing.run_id or ""},
                       ":held": {"N": str(replacing.attempt)},
                       ":seen": {"N": str(replacing.held_until)}}
        try:
            self.client.update_item(
                TableName=self.table, Key=_slot_key(slot.number),
                UpdateExpression="SET run_id = :run, attempt_no = :attempt, held_until = :expires",
                ConditionExpression=condition, ExpressionAttributeValues=values)
        except ClientError as error:
            if not _conditional_failure(error):
                raise
            return False
        return True

    def _still_held(self, slot: Slot, now: datetime) -> bool:
        """Whether the holder of an expired slot is still executing its attempt: its
        run is running that attempt under a live lease. Then the slot is renewed for
        another hold (never past the lease), to be asked about again after it."""
        run = self.store.load_run(slot.run_id or "")
        lease = None if run is None else run.lease_expires_at
        if run is None or run.status is not RunStatus.RUNNING or run.attempt != slot.attempt \
                or lease is None or lease <= now:
            return False
        try:
            self.client.update_item(
                TableName=self.table, Key=_slot_key(slot.number),
                UpdateExpression="SET held_until = :lease",
                ConditionExpression="run_id = :holder AND held_until = :seen",
                ExpressionAttributeValues={":lease": {"N": str(min(
                    _micros(lease), _micros(now) + int(self.hold_seconds * _MICROS)))},
                                           ":holder": {"S": slot.run_id or ""},
                                           ":seen": {"N": str(slot.held_until)}})
        except ClientError as error:
            if not _conditional_failure(error):
                raise
        return True


def slots_of(services: Services) -> CapacitySlots:
    """The capacity slots of a Lambda container's services (functions.environment)."""
    store = services.store
    settings = services.settings
    return CapacitySlots(store.client, store.table_name, store,
                         limit=settings.max_concurrent_runs,
                         hold_seconds=settings.lease_seconds)
