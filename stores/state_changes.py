"""The run's state changes, written once for every backend.

Every state change of the contract has one shape: read the run (and, when a
checkpoint comes with the change, the stored checkpoint at its seq), let the
rules in `stores.transitions` decide, and commit the new record together with
the checkpoint when it is new. The rules are shared; so is that sequence,
here. A backend supplies only `RunWrite`, one read of a run under its lock or
transaction and the commit of what was decided on it, and inherits
`renew_lease`, `save_checkpoint`, `suspend_run`, `complete_run`, `fail_run`,
`cancel_run` and `request_resume` from `StateChanges`.

A lock or a transaction makes the read and the commit one step, so a
lock-based backend offers one `RunWrite`. A backend with optimistic writes
(DynamoDB) offers one per round: a commit refused by a concurrent change
returns False, and the change is decided again on the next round's read.

Two changes also involve a second run, read (`RunWrite.peer`) and, for the
first, written in the same atomic commit: a sub-run's end (`complete_run`,
`fail_run`, `cancel_run`) files a resume request on its parent when the parent
is suspended on it, and a run suspending on a sub-run whose child has already
ended files one on itself. So the two never miss each other: whichever commits
second sees what the first committed, and the reconciler finds the parent by
its request alone, never by reading every suspended run.

`resume_run`, `resolve_approval` and the effect writes stay with each
backend: they write records of their own beside the run (a decision, an
effect), or do work of their own under the same lock (the file store sweeps
what a crashed attempt left; the memory store returns the run with its
definition, which its state changes never read).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, Protocol

from stores import transitions
from stores.records import Checkpoint, RunError, RunRecord, RunStatus

# decide(run as read, its latest checkpoint seq, the stored checkpoint at the seq of the
# one passed with the change) -> the record to commit, or None when nothing changes.
Decide = Callable[[RunRecord | None, int, Checkpoint | None], RunRecord | None]


class RunWrite(Protocol):
    """A run as a backend read it for a change, and the commit of that change."""

    @property
    def run(self) -> RunRecord | None:
        """The run as read (None: no such run)."""
        ...

    @property
    def latest_seq(self) -> int:
        """The run's latest committed checkpoint seq, as the backend keeps it (0: none)."""
        ...

    def stored_checkpoint(self, seq: int) -> Checkpoint | None:
        """The committed checkpoint with this seq, when the run has one."""
        ...

    def peer(self, run_id: str, *, writes: bool) -> RunRecord | None:
        """Another run (None: no such run), read for this change: a sub-run's parent
        (`writes=True`: the commit may write it, as `peer=`) or the child a run
        suspends on (`writes=False`: only read).

        The commit must not land on a peer that changed since this read in a way
        that matters: the backend either holds what makes the read current until
        the commit (a lock, a transaction) or conditions the commit on the peer as
        read (then a change refuses the commit, which returns False). A
        lock-based backend with one lock per run may instead read an only-read peer
        unlocked: the run that writes it holds the reader's own lock while it
        commits (see FileRunStore), so one of the two always sees the other.
        """
        ...

    def commit(self, run: RunRecord, checkpoint: Checkpoint | None, *,
               lease_expires_at: datetime | None, peer: RunRecord | None = None) -> bool:
        """Write `run` over the run as read, with `checkpoint` appended (as seq
        `latest_seq + 1`) in the same atomic commit when given. `lease_expires_at` is
        the lease the checkpoint renews, for a backend that keeps it beside the
        checkpoint. `peer` is the new record of the run read with `peer(...,
        writes=True)`, written in the same commit. False when a concurrent change
        refused the write and the change is to be decided again on a new read;
        every other failure raises.
        """
        ...


# linked(write, the record decided) -> (the record to commit, the peer's new record or
# None): what a change that involves a second run adds to a round (`RunWrite.peer`).
Linked = Callable[[RunWrite, RunRecord], tuple[RunRecord, RunRecord | None]]


def apply_change(writes: Iterable[RunWrite], checkpoint: Checkpoint | None, decide: Decide,
                 *, lease_expires_at: datetime | None = None,
                 linked: Linked | None = None) -> RunRecord | None:
    """Decide on each read in turn until a commit lands; the record committed, or None
    when `decide` found nothing to change (an identical repeat)."""
    for write in writes:
        at_seq = None if checkpoint is None else write.stored_checkpoint(checkpoint.seq)
        updated = decide(write.run, write.latest_seq, at_seq)
        if updated is None:
            return None
        new = None
        if checkpoint is not None:
            transitions.check_sequence(checkpoint, write.latest_seq, at_seq)
            # A used seq is an identical re-save: the state change commits alone.
            new = checkpoint if checkpoint.seq > write.latest_seq else None
        peer = None
        if linked is not None:
            updated, peer = linked(write, updated)
        if write.commit(updated, new, lease_expires_at=lease_expires_at, peer=peer):
            return updated
    raise AssertionError("unreachable: a backend's reads raise when they run out")


def tell_parent(at: datetime) -> Linked:
    """A run's end files a resume request on the parent suspended on it (`child_ended`)."""

    def linked(write: RunWrite, ended: RunRecord) -> tuple[RunRecord, RunRecord | None]:
        parent_id = None if ended.parent is None else ended.parent.run_id
        if not ended.status.terminal or parent_id is None or parent_id == ended.run_id:
            return ended, None
        parent = write.peer(parent_id, writes=True)
        return ended, transitions.child_ended(parent, ended, at=at)

    return linked


def mind_child(at: datetime) -> Linked:
    """A run suspending on a sub-run whose child already ended files a request on
    itself (`waiting_for_child`)."""

    def linked(write: RunWrite, suspended: RunRecord) -> tuple[RunRecord, RunRecord | None]:
        child_id = transitions.child_of(suspended.suspension)
        if child_id is None or child_id == suspended.run_id:
            return suspended, None
        child = write.peer(child_id, writes=False)
        return transitions.waiting_for_child(suspended, child, at=at), None

    return linked


def saving(checkpoint: Checkpoint, *, expected_attempt: int,
           lease_expires_at: datetime | None) -> Decide:
    """The decision of `save_checkpoint`, for a backend that saves on a path of its own."""
    return lambda run, latest, at_seq: transitions.next_checkpoint(
        run, checkpoint, expected_attempt=expected_attempt, lease_expires_at=lease_expires_at,
        latest_seq=latest, stored_at_seq=at_seq)


class StateChanges(ABC):
    """The lifecycle writes of `RunStore`, for a backend that supplies `_writes`."""

    @abstractmethod
    def _writes(self, run_id: str) -> AbstractContextManager[Iterable[RunWrite]]:
        """Hold what makes a change of `run_id` atomic (a lock, a transaction) and yield
        the reads to decide it on: one, or one per round of an optimistic write."""

    def _change(self, run_id: str, checkpoint: Checkpoint | None, decide: Decide, *,
                lease_expires_at: datetime | None = None,
                linked: Linked | None = None) -> RunRecord | None:
        transitions.check_checkpoint_owner(run_id, checkpoint)
        with self._writes(run_id) as writes:
            return apply_change(writes, checkpoint, decide, lease_expires_at=lease_expires_at,
                                linked=linked)

    def renew_lease(self, run_id: str, *, expected_attempt: int, now: datetime,
                    lease_seconds: float) -> None:
        self._change(run_id, None, lambda run, _, __: transitions.renew(
            run, run_id, expected_attempt=expected_attempt, now=now,
            lease_seconds=lease_seconds))

    def save_checkpoint(self, checkpoint: Checkpoint, *, expected_attempt: int,
                        lease_expires_at: datetime | None = None) -> None:
        self._change(checkpoint.run_id, checkpoint,
                     saving(checkpoint, expected_attempt=expected_attempt,
                            lease_expires_at=lease_expires_at),
                     lease_expires_at=lease_expires_at)

    def suspend_run(self, run_id: str, *, expected_attempt: int, reason: str,
                    details: dict[str, Any], at: datetime,
                    checkpoint: Checkpoint | None = None) -> None:
        self._change(run_id, checkpoint, lambda run, _, __: transitions.suspend(
            run, run_id, expected_attempt=expected_attempt, reason=reason, details=details,
            at=at, checkpoint=checkpoint), linked=mind_child(at))

    def _finish(self, run_id: str, status: RunStatus, *, expected_attempt: int, at: datetime,
                checkpoint: Checkpoint | None, output: Any = None,
                error: RunError | None = None) -> None:
        self._change(run_id, checkpoint, lambda run, _, at_seq: transitions.finish(
            run, run_id, status=status, expected_attempt=expected_attempt, at=at,
            output=output, error=error, stored_checkpoint=at_seq, checkpoint=checkpoint),
            linked=tell_parent(at))

    def complete_run(self, run_id: str, *, expected_attempt: int, output: Any, at: datetime,
                     checkpoint: Checkpoint | None = None) -> None:
        self._finish(run_id, RunStatus.COMPLETED, expected_attempt=expected_attempt, at=at,
                     checkpoint=checkpoint, output=output)

    def fail_run(self, run_id: str, *, expected_attempt: int, error: RunError, at: datetime,
                 checkpoint: Checkpoint | None = None) -> None:
        self._finish(run_id, RunStatus.FAILED, expected_attempt=expected_attempt, at=at,
                     checkpoint=checkpoint, error=error)

    def cancel_run(self, run_id: str, *, at: datetime, expected_attempt: int | None = None) -> None:
        self._change(run_id, None, lambda run, _, __: transitions.cancel(
            run, run_id, at=at, expected_attempt=expected_attempt), linked=tell_parent(at))

    def request_resume(self, run_id: str, *, at: datetime, reason: str) -> None:
        self._change(run_id, None, lambda run, _, __: transitions.request_resume(
            run, run_id, at=at, reason=reason))
