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

    def commit(self, run: RunRecord, checkpoint: Checkpoint | None, *,
               lease_expires_at: datetime | None) -> bool:
        """Write `run` over the run as read, with `checkpoint` appended (as seq
        `latest_seq + 1`) in the same atomic commit when given. `lease_expires_at` is
        the lease the checkpoint renews, for a backend that keeps it beside the
        checkpoint. False when a concurrent change refused the write and the change
        is to be decided again on a new read; every other failure raises.
        """
        ...


def apply_change(writes: Iterable[RunWrite], checkpoint: Checkpoint | None, decide: Decide,
                 *, lease_expires_at: datetime | None = None) -> RunRecord | None:
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
        if write.commit(updated, new, lease_expires_at=lease_expires_at):
            return updated
    raise AssertionError("unreachable: a backend's reads raise when they run out")


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
                lease_expires_at: datetime | None = None) -> RunRecord | None:
        transitions.check_checkpoint_owner(run_id, checkpoint)
        with self._writes(run_id) as writes:
            return apply_change(writes, checkpoint, decide, lease_expires_at=lease_expires_at)

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
            at=at, checkpoint=checkpoint))

    def _finish(self, run_id: str, status: RunStatus, *, expected_attempt: int, at: datetime,
                checkpoint: Checkpoint | None, output: Any = None,
                error: RunError | None = None) -> None:
        self._change(run_id, checkpoint, lambda run, _, at_seq: transitions.finish(
            run, run_id, status=status, expected_attempt=expected_attempt, at=at,
            output=output, error=error, stored_checkpoint=at_seq, checkpoint=checkpoint))

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
            run, run_id, at=at, expected_attempt=expected_attempt))

    def request_resume(self, run_id: str, *, at: datetime, reason: str) -> None:
        self._change(run_id, None, lambda run, _, __: transitions.request_resume(
            run, run_id, at=at, reason=reason))
