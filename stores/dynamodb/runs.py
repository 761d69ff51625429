"""What DynamoDbRunStore knows of its runs: how it reads them, what it remembers,
and the rounds of a read-modify-write with the conditions its writes carry.

`RunReader` reads a run's META (and its definition, once per incarnation) and
its checkpoint bodies, and remembers per run the state it last read or wrote:
the prediction an owner's next write is conditioned on (see `stores.dynamodb`).
Everything it remembers is keyed so that a stale entry can only make a
conditioned write fail, never succeed wrongly: runs by id with their
incarnation and revision, definitions and delta bases by incarnation.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from stores.base import CorruptRecord, StaleAttempt, StoreError
from stores.deltas import SavedLists, SavedListsCache, assemble, assemble_each
from stores.dynamodb.items import (
    DEFINITION_SK,
    META,
    Item,
    Texts,
    checked_checkpoints,
    checkpoint_body,
    checkpoint_sk,
    decode_definition,
    decode_run,
    key,
    n,
    names,
    number_of,
    partition,
    run_id_of,
    s,
    text_of,
)
from stores.dynamodb.requests import Condition, Refused, Table
from stores.event_log import events_fold
from stores.records import Checkpoint, RunEvent, RunRecord, RunStatus

_T = TypeVar("_T")
ROUNDS = 12  # read-modify-write rounds lost to concurrent writers before giving up


@dataclass(frozen=True)
class StoredRun:
    """A run as its META item held it: the record, its incarnation and revision, and
    the status index's `due_at` it has (None: not known; a checkpoint then writes it)."""

    run: RunRecord
    incarnation: str
    rev: str
    due_at: int | None = None


class Unread:
    """The next round must read the run: nothing known about it is current."""


UNREAD = Unread()


class RunReader:
    """Reads runs and checkpoints from the table and remembers what it read."""

    def __init__(self, table: Table, texts: Texts) -> None:
        self.table = table
        self.texts = texts
        self._lock = threading.Lock()
        self._known: OrderedDict[str, StoredRun] = OrderedDict()
        self._definitions: OrderedDict[str, dict[str, Any]] = OrderedDict()  # by incarnation
        self._saved = SavedListsCache()  # by incarnation

    # -- what it remembers -----------------------------------------------------

    def remember(self, stored: StoredRun) -> None:
        with self._lock:
            self._known[stored.run.run_id] = stored
            self._known.move_to_end(stored.run.run_id)
            while len(self._known) > 1024:
                self._known.popitem(last=False)

    def remembered(self, run_id: str) -> StoredRun | None:
        with self._lock:
            return self._known.get(run_id)

    def forget(self, run_id: str) -> None:
        with self._lock:
            self._known.pop(run_id, None)

    def _definition(self, incarnation: str) -> dict[str, Any] | None:
        with self._lock:
            return self._definitions.get(incarnation)

    def _keep_definition(self, incarnation: str, definition: dict[str, Any]) -> None:
        with self._lock:
            self._definitions[incarnation] = definition
            while len(self._definitions) > 256:
                self._definitions.popitem(last=False)

    def save_lists(self, incarnation: str, saved: SavedLists) -> None:
        with self._lock:
            self._saved.put(incarnation, saved)

    def saved_lists(self, incarnation: str, seq: int) -> SavedLists | None:
        with self._lock:
            return self._saved.get(incarnation, seq)

    # -- runs --------------------------------------------------------------------

    def load(self, run_id: str) -> StoredRun | None:
        """The run as stored now (consistent): META, and its definition unless known.

        One request either way: a GetItem when the definition is cached, else a
        Query for both items.
        """
        known = self.remembered(run_id)
        if known is not None and self._definition(known.incarnation) is not None:
            item = self.table.get(key(run_id, META))
            return None if item is None else self.decode(item)
        items = {text_of(item, "sk"): item
                 for item in self.table.query(partition(run_id), prefix=META)}
        if META not in items:
            return None
        definition = items.get(DEFINITION_SK)
        if definition is not None:
            self._keep_definition(text_of(definition, "incarnation"),
                                  decode_definition(definition, self.texts))
        return self.decode(items[META])

    def decode(self, meta: Item) -> StoredRun:
        """A META item (read, or returned by a refused write) with its definition."""
        run_id = run_id_of(text_of(meta, "pk"))
        incarnation = text_of(meta, "incarnation")
        definition = self._definition(incarnation)
        if definition is None:
            item = self.table.get(key(run_id, DEFINITION_SK))
            if item is None or item.get("incarnation", {}).get("S") != incarnation:
                raise CorruptRecord(f"run {run_id!r} has no definition of its incarnation")
            definition = decode_definition(item, self.texts)
            self._keep_definition(incarnation, definition)
        stored = StoredRun(decode_run(meta, definition, self.texts), incarnation,
                           text_of(meta, "rev"), stored_due_at(meta))
        self.remember(stored)
        return stored

    def runs(self, run_ids: list[str], *, consistent: bool = True) -> list[RunRecord]:
        """The runs with these ids that exist, in the order given (one BatchGetItem per 50).

        They are remembered with their definitions: a run listed is often read next
        (the reconciler decides on a fresh read), which then costs a GetItem of META
        alone. What an eventually consistent read remembers may be stale; a write
        predicted on it is refused and decided again (see the module doc).
        """
        items = self.table.batch_get([key(run_id, sk) for run_id in run_ids
                                      for sk in (META, DEFINITION_SK)], consistent=consistent)
        by_key = {(text_of(item, "pk"), text_of(item, "sk")): item for item in items}
        runs = []
        for run_id in run_ids:
            meta = by_key.get((partition(run_id), META))
            definition = by_key.get((partition(run_id), DEFINITION_SK))
            if meta is None:
                continue  # deleted since the index was read, or what a TTL left
            if definition is None or definition.get("incarnation") != meta.get("incarnation"):
                if consistent:
                    raise CorruptRecord(f"run {run_id!r} has no definition of its incarnation")
                # An eventually consistent read may catch a run mid-creation (or
                # deleted and created again): what is stored now decides.
                stored = self.load(run_id)
                if stored is not None:
                    runs.append(stored.run)
                continue
            incarnation = text_of(meta, "incarnation")
            decoded = self._definition(incarnation)
            if decoded is None:
                decoded = decode_definition(definition, self.texts)
                self._keep_definition(incarnation, decoded)
            run = decode_run(meta, decoded, self.texts)
            self.remember(StoredRun(run, incarnation, text_of(meta, "rev"),
                                    stored_due_at(meta)))
            runs.append(run)
        return runs

    # -- checkpoints -------------------------------------------------------------

    def assemble(self, run_id: str, seq: int) -> tuple[Checkpoint, SavedLists]:
        """The checkpoint at `seq` (at most the run's checkpoint_seq, so it exists) from
        every body up to it."""
        checkpoint, saved = self._folded(run_id, seq, assemble)
        _check_identity(run_id, checkpoint, seq)
        return checkpoint, saved

    def stored_checkpoints(self, run_id: str, first: int, last: int) -> list[Checkpoint]:
        """The run's checkpoints `first`..`last` (cut to 1..checkpoint_seq) in one fold."""
        stored = self.load(run_id)
        last = 0 if stored is None else min(last, stored.run.checkpoint_seq or 0)
        if max(first, 1) > last:
            return []
        checkpoints = self._folded(run_id, last,
                                   lambda bodies: list(assemble_each(bodies, first=first)))
        for seq, checkpoint in enumerate(checkpoints, start=max(first, 1)):
            _check_identity(run_id, checkpoint, seq)
        return checkpoints

    def _folded(self, run_id: str, seq: int, fold: Callable[[Iterator[str]], _T]) -> _T:
        items = list(self.table.query(partition(run_id),
                                      between=(checkpoint_sk(1), checkpoint_sk(seq))))
        checked_checkpoints(items, run_id, seq)
        current = 0

        def bodies() -> Iterator[str]:
            nonlocal current
            for item in items:
                current = number_of(item, "seq")
                yield checkpoint_body(item, self.texts, run_id)

        try:
            return fold(bodies())
        # A body of the wrong shape surfaces as a lookup, type or attribute
        # error, a bad head as a pydantic ValidationError (a ValueError).
        except (ValueError, LookupError, TypeError, AttributeError) as error:
            raise CorruptRecord(f"checkpoint {current} of run {run_id!r} did not decode: "
                                f"{error}") from error

    def events(self, run_id: str, latest: int, *, after: int, limit: int) -> list[RunEvent]:
        """The page of the run's event log after `after`, from its checkpoints 1..`latest`."""
        return self._folded(run_id, latest, events_fold(run_id, after, limit)) if latest else []

    def stored_checkpoint(self, run: RunRecord | None, seq: int) -> Checkpoint | None:
        """The stored checkpoint at `seq`, if any (only a re-save reads one back)."""
        if run is None or not 0 < seq <= (run.checkpoint_seq or 0):
            return None
        return self.assemble(run.run_id, seq)[0]

    def previous_lists(self, stored: StoredRun, seq: int) -> SavedLists | None:
        """What checkpoint `seq` is a delta against: remembered, else rebuilt once."""
        previous = self.saved_lists(stored.incarnation, seq - 1)
        if previous is None and seq > 1:
            previous = self.assemble(stored.run.run_id, seq - 1)[1]
        return previous


def stored_due_at(meta: Item) -> int | None:
    value = meta.get("due_at", {}).get("N")
    return None if value is None else int(value)


def fence(stored: StoredRun) -> Condition:
    """The condition of a write of the run decided on `stored`.

    attempt and status are the contract's fence; rev makes the write exact:
    nothing at all changed since `stored` was read.
    """
    return Condition("#rev = :rev AND #attempt = :attempt AND #status = :status",
                     names("rev", "attempt", "status"),
                     {":rev": s(stored.rev), ":attempt": n(stored.run.attempt),
                      ":status": s(stored.run.status.value)})


def running_at(stored: StoredRun, attempt: int, owner: str | None = None) -> Condition:
    """The condition of a write beside the run (an effect, an owner's checkpoint):
    the same incarnation, running at `attempt` (under `owner`'s lease, when the
    store is held by one: `DynamoDbRunStore.owned_by`); other changes do not matter."""
    condition = Condition("#incarnation = :incarnation AND #attempt = :attempt AND "
                          "#status = :running", names("incarnation", "attempt", "status"),
                          {":incarnation": s(stored.incarnation), ":attempt": n(attempt),
                           ":running": s(RunStatus.RUNNING.value)})
    if owner is None:
        return condition
    return condition & Condition("#lease_owner = :owner", names("lease_owner"),
                                 {":owner": s(owner)})


def check_owner(stored: StoredRun | None, owner: str | None) -> None:
    """Refuse a write of `owner` (a slice of an attempt) to a run whose lease another holds."""
    if owner is None or stored is None or stored.run.lease_owner == owner \
            or stored.run.status is not RunStatus.RUNNING:
        return  # no lease to hold: the rules decide (RunTerminal, InvalidTransition)
    raise StaleAttempt(f"run {stored.run.run_id!r}: attempt {stored.run.attempt}'s lease is "
                       f"held by {stored.run.lease_owner or 'no one'}, not by {owner}")


class Rounds:
    """The states a read-modify-write decides on, one per round.

    The first round starts from `start`: a consistent read, unless the caller
    passes the remembered run as a prediction (`predicted=True`). After a
    refused write the next round decides on the image the refusal returned
    (ALL_OLD of the run's META, the first item of every write); after a
    transaction conflict or a refusal about another item, on a fresh read. A
    decision taken on a prediction counts only when its conditioned write
    succeeds: any other outcome (an error, a no-op) is decided again on a read
    (`confirm`).
    """

    def __init__(self, reader: RunReader, run_id: str,
                 start: StoredRun | Unread | None = UNREAD, *, predicted: bool = False,
                 owner: str | None = None) -> None:
        self._reader = reader
        self._run_id = run_id
        self._next = start
        self._predicted = predicted
        # The lease holder every write of these rounds is for (`check_owner`).
        self.owner = owner

    def __iter__(self) -> Iterator[StoredRun | None]:
        for round_ in range(ROUNDS):
            if round_ > 1:
                time.sleep(min(0.2, 0.005 * 2 ** round_))  # back off under contention
            state = self._next
            if isinstance(state, Unread):
                state = self._reader.load(self._run_id)
                self._predicted = False
            self._next = UNREAD
            check_owner(state, self.owner)
            yield state
            self._predicted = False
        raise StoreError(f"run {self._run_id!r}: gave up after {ROUNDS} concurrent changes")

    def refused(self, refused: Refused) -> None:
        """Decide the next round on what the refusal says of the run's META."""
        meta = refused.reasons[0]
        if meta.failed:
            self._next = None if meta.item is None else self._reader.decode(meta.item)

    def confirm(self) -> bool:
        """True when this round's outcome must be decided again on a read."""
        return self._predicted


def _check_identity(run_id: str, checkpoint: Checkpoint, seq: int) -> None:
    if checkpoint.run_id != run_id or checkpoint.seq != seq:
        raise CorruptRecord(f"checkpoint {seq} of run {run_id!r} holds checkpoint "
                            f"{checkpoint.seq} of run {checkpoint.run_id!r}")
