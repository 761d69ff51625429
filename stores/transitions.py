"""The run lifecycle rules, shared by every backend.

Each function takes the stored state a backend read (inside its transaction or
lock) and either returns the new state to write or raises the contract's error.
Backends only store; the rules live here once, so every store raises the same
error for the same situation, in the order `base` documents.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timedelta
from typing import Any

from stores.base import (
    SUB_RUN_FINISHED,
    ApprovalConflict,
    CheckpointConflict,
    InvalidTransition,
    LeaseHeld,
    RunNotFound,
    RunTerminal,
    StaleAttempt,
)
from stores.records import (
    ApprovalDecision,
    Checkpoint,
    EffectRecord,
    EffectStatus,
    RunError,
    RunPage,
    RunRecord,
    RunStatus,
    Suspension,
    dumps,
)
from stores.run_search import RunSearch


def require_run(run: RunRecord | None, run_id: str) -> RunRecord:
    if run is None:
        raise RunNotFound(f"run {run_id!r} does not exist")
    return run


def check_fence(run: RunRecord, expected_attempt: int) -> None:
    """StaleAttempt before anything else: a superseded owner learns it first."""
    if run.attempt != expected_attempt:
        raise StaleAttempt(
            f"run {run.run_id!r} is at attempt {run.attempt}; "
            f"this write belongs to attempt {expected_attempt}"
        )


def check_running(run: RunRecord, action: str) -> None:
    if run.status.terminal:
        raise RunTerminal(f"run {run.run_id!r} is {run.status.value}; cannot {action}")
    if run.status is not RunStatus.RUNNING:
        raise InvalidTransition(
            f"run {run.run_id!r} is {run.status.value}, not running; cannot {action}"
        )


def reserve_attempt(run: RunRecord | None, run_id: str, *, owner: str, now: datetime,
                    lease_seconds: float, allow_running_takeover: bool,
                    expired_owner: str | None = None) -> RunRecord:
    run = require_run(run, run_id)
    if run.status.terminal:
        raise RunTerminal(f"run {run_id!r} is {run.status.value}; it cannot be resumed")
    if run.status is RunStatus.RUNNING:
        expires = run.lease_expires_at
        holder = f"{run.lease_owner or 'an unknown owner'}"
        until = f" until {expires.isoformat()}" if expires else ""
        if not allow_running_takeover:
            raise LeaseHeld(
                f"run {run_id!r} is running under a lease held by {holder}{until}; "
                "if that owner died, wait for the lease to expire and take over explicitly",
                owner=run.lease_owner, expires_at=expires,
            )
        # A caller that confirmed the holder dead (same host, its pid gone) need
        # not wait for the lease: but only while that holder still holds it, so
        # a live owner that took over meanwhile is never displaced.
        confirmed_dead = expired_owner is not None and run.lease_owner == expired_owner
        if expires is not None and expires > now and not confirmed_dead:
            raise LeaseHeld(
                f"run {run_id!r} is running under a lease held by {holder}{until}; "
                "takeover is allowed only after it expires",
                owner=run.lease_owner, expires_at=expires,
            )
    return run.model_copy(update={
        "status": RunStatus.RUNNING,
        "attempt": run.attempt + 1,
        # The request this reservation answers is served: out of the outbox.
        "resume_requested_at": None,
        "resume_reason": None,
        "lease_owner": owner,
        "lease_expires_at": now + timedelta(seconds=lease_seconds),
        "takeovers": _takeovers_after_reserving(run),
        "updated_at": now,
    })


# The suspension a reconciler gives a run whose owners keep dying before any
# checkpoint (agent_runtime/reconcile.py): an operator resumes it after a fix.
CRASH_LOOP = "crash-loop"


def _takeovers_after_reserving(run: RunRecord) -> int:
    """A takeover counts one more; resuming a crash-loop suspension starts the count
    again (an operator resumed it after a fix), any other resume keeps it."""
    if run.status is RunStatus.RUNNING:
        return run.takeovers + 1
    if run.status is RunStatus.SUSPENDED and run.suspension is not None \
            and run.suspension.reason == CRASH_LOOP:
        return 0
    return run.takeovers


def renew(run: RunRecord | None, run_id: str, *, expected_attempt: int, now: datetime,
          lease_seconds: float) -> RunRecord:
    run = require_run(run, run_id)
    check_fence(run, expected_attempt)
    check_running(run, "renew its lease")
    return run.model_copy(update={
        "lease_expires_at": now + timedelta(seconds=lease_seconds), "updated_at": now,
    })


def next_checkpoint(run: RunRecord | None, checkpoint: Checkpoint, *, expected_attempt: int,
                    lease_expires_at: datetime | None, latest_seq: int,
                    stored_at_seq: Checkpoint | None) -> RunRecord | None:
    """The run record to write with a new checkpoint, or None for an identical re-save.

    `stored_at_seq` is the stored checkpoint with the same seq, when one exists.
    """
    run = require_run(run, checkpoint.run_id)
    check_fence(run, expected_attempt)
    check_running(run, "save a checkpoint")
    check_sequence(checkpoint, latest_seq, stored_at_seq)
    if stored_at_seq is not None:
        return None
    update: dict[str, Any] = {
        "checkpoint_seq": checkpoint.seq,
        "consumed_tokens": checkpoint.budget.consumed_tokens,
        "updated_at": checkpoint.created_at,
        # Progress: the attempt that saved it is alive, so the takeovers that
        # led here are not a crash loop (`takeovers` counts consecutive ones).
        "takeovers": 0,
        **_budget_field(run, checkpoint),
    }
    if lease_expires_at is not None:
        update["lease_expires_at"] = lease_expires_at
    return run.model_copy(update=update)


def check_sequence(checkpoint: Checkpoint, latest_seq: int,
                   stored_at_seq: Checkpoint | None) -> None:
    """seq is exactly latest + 1; a used seq is fine only for an identical re-save."""
    if stored_at_seq is not None:
        if not stored_at_seq.same_content(checkpoint):
            raise CheckpointConflict(
                f"run {checkpoint.run_id!r} already has a different checkpoint {checkpoint.seq}"
            )
        return
    if checkpoint.seq != latest_seq + 1:
        raise CheckpointConflict(
            f"run {checkpoint.run_id!r}: checkpoint seq {checkpoint.seq} is not "
            f"latest + 1 ({latest_seq + 1})"
        )


def _terminal_repeat(run: RunRecord, status: RunStatus, expected_attempt: int, *,
                     output: Any = None, error: RunError | None = None) -> bool:
    """A repeat of the identical terminal write by the same attempt is a no-op."""
    if run.status is not status or run.attempt != expected_attempt:
        return False
    if status is RunStatus.COMPLETED:
        return dumps(run.output) == dumps(output)
    return run.error == error


def finish(run: RunRecord | None, run_id: str, *, status: RunStatus, expected_attempt: int,
           at: datetime, output: Any = None, error: RunError | None = None,
           stored_checkpoint: Checkpoint | None = None,
           checkpoint: Checkpoint | None = None) -> RunRecord | None:
    """The record for `complete_run` / `fail_run`, or None for an identical repeat."""
    run = require_run(run, run_id)
    check_fence(run, expected_attempt)
    if run.status.terminal:
        same = _terminal_repeat(run, status, expected_attempt, output=output, error=error)
        if same and (checkpoint is None or (
                stored_checkpoint is not None and stored_checkpoint.same_content(checkpoint))):
            return None
        raise RunTerminal(f"run {run_id!r} is already {run.status.value}")
    if status is RunStatus.COMPLETED and run.status is not RunStatus.RUNNING:
        raise InvalidTransition(
            f"run {run_id!r} is {run.status.value}; only a running run completes")
    return _ended(run, status, at, output=output, error=error, checkpoint=checkpoint)


def _ended(run: RunRecord, status: RunStatus, at: datetime, *, output: Any = None,
           error: RunError | None = None, checkpoint: Checkpoint | None = None) -> RunRecord:
    # A finished run has nothing left to resume: a pending request goes too.
    update: dict[str, Any] = {
        "status": status, "output": output, "error": error, "lease_owner": None,
        "lease_expires_at": None, "resume_requested_at": None, "resume_reason": None,
        "updated_at": at,
    }
    update.update(_checkpoint_fields(run, checkpoint))
    return run.model_copy(update=update)


def _checkpoint_fields(run: RunRecord, checkpoint: Checkpoint | None) -> dict[str, Any]:
    """What a checkpoint passed with a state change moves forward on the record.

    An identical re-save of an older checkpoint must not move it backwards.
    """
    if checkpoint is None or checkpoint.seq < (run.checkpoint_seq or 0):
        return {}
    fields: dict[str, Any] = {"checkpoint_seq": checkpoint.seq,
                              "consumed_tokens": checkpoint.budget.consumed_tokens}
    if checkpoint.seq > (run.checkpoint_seq or 0):
        fields["takeovers"] = 0  # progress, as in next_checkpoint
    return fields | _budget_field(run, checkpoint)


def _budget_field(run: RunRecord, checkpoint: Checkpoint) -> dict[str, Any]:
    """The token limit in force is the latest checkpoint's: a resume may replace it."""
    if not budget_changes(run, checkpoint):
        return {}
    return {"budget": run.budget.model_copy(
        update={"max_total_tokens": checkpoint.budget.max_total_tokens})}


def budget_changes(run: RunRecord, checkpoint: Checkpoint) -> bool:
    """Whether saving `checkpoint` changes the run's token limit (a store's fast path,
    which writes no record text, then steps aside)."""
    return run.budget.max_total_tokens != checkpoint.budget.max_total_tokens


def suspend(run: RunRecord | None, run_id: str, *, expected_attempt: int, reason: str,
            details: dict[str, Any], at: datetime,
            checkpoint: Checkpoint | None = None) -> RunRecord:
    run = require_run(run, run_id)
    check_fence(run, expected_attempt)
    check_running(run, "suspend")
    update: dict[str, Any] = {
        "status": RunStatus.SUSPENDED,
        "suspension": Suspension(reason=reason, details=details),
        "lease_owner": None, "lease_expires_at": None, "updated_at": at,
    }
    update.update(_checkpoint_fields(run, checkpoint))
    return run.model_copy(update=update)


def cancel(run: RunRecord | None, run_id: str, *, at: datetime,
           expected_attempt: int | None) -> RunRecord | None:
    """The cancelled record, or None when the run was already cancelled."""
    run = require_run(run, run_id)
    if expected_attempt is not None:
        check_fence(run, expected_attempt)
    if run.status is RunStatus.CANCELLED:
        return None
    if run.status.terminal:
        raise RunTerminal(f"run {run_id!r} is already {run.status.value}")
    return _ended(run, RunStatus.CANCELLED, at)


def check_checkpoint_owner(run_id: str, checkpoint: Checkpoint | None) -> None:
    if checkpoint is not None and checkpoint.run_id != run_id:
        raise InvalidTransition(
            f"checkpoint belongs to run {checkpoint.run_id!r}, not {run_id!r}"
        )


# The suspension reasons whose question `resolve_approval` answers, and the
# detail naming the question: an approval by its id, an unknown effect by its key.
ANSWERABLE: dict[str, str] = {"approval": "approval_id", "effect-unknown": "key"}
APPROVAL_RECORDED = "approval-recorded"


def _requested(run: RunRecord, *, at: datetime, reason: str) -> dict[str, Any] | None:
    """The update that files a resume request, or None when an earlier one is pending.

    The earliest pending request stands (its time and reason): asking again
    must never push the reconciler's grace period further out.
    """
    pending = run.resume_requested_at
    if pending is not None and pending <= at:
        return None
    return {"resume_requested_at": at, "resume_reason": reason}


def request_resume(run: RunRecord | None, run_id: str, *, at: datetime,
                   reason: str) -> RunRecord | None:
    """The run with a resume request filed, or None when an earlier one is pending."""
    run = require_run(run, run_id)
    if run.status.terminal:
        raise RunTerminal(f"run {run_id!r} is {run.status.value}; it cannot be resumed")
    if run.status is not RunStatus.SUSPENDED:
        raise InvalidTransition(
            f"run {run_id!r} is {run.status.value}; only a suspended run can be asked to resume")
    update = _requested(run, at=at, reason=reason)
    return None if update is None else run.model_copy(update={**update, "updated_at": at})


# A run suspended on a sub-run waits for the child its `details` name; the child's
# end files a request (`SUB_RUN_FINISHED`) on it (`child_ended`).
SUB_RUN = "sub-run"


def child_of(suspension: Suspension | None) -> str | None:
    """The child a `sub-run` suspension waits on, or None."""
    if suspension is None or suspension.reason != SUB_RUN:
        return None
    child = suspension.details.get("child_run_id")
    return child if isinstance(child, str) else None


def child_ended(parent: RunRecord | None, child: RunRecord, *, at: datetime) -> RunRecord | None:
    """The parent with a resume request filed because `child` has ended, or None when
    the parent waits on no such child (not suspended on it: running, suspended on
    another question, gone) or an earlier request is pending."""
    if parent is None or parent.status is not RunStatus.SUSPENDED \
            or child_of(parent.suspension) != child.run_id:
        return None
    update = _requested(parent, at=at, reason=SUB_RUN_FINISHED)
    return None if update is None else parent.model_copy(update={**update, "updated_at": at})


def waiting_for_child(suspended: RunRecord, child: RunRecord | None, *,
                      at: datetime) -> RunRecord:
    """A run just suspended on a sub-run, with a resume request filed when its child
    has already ended: it ended after the engine looked, and would never tell it."""
    if child is None or not child.status.terminal \
            or child_of(suspended.suspension) != child.run_id:
        return suspended
    update = _requested(suspended, at=at, reason=SUB_RUN_FINISHED)
    return suspended if update is None else suspended.model_copy(update=update)


def waiting_on(run: RunRecord, question: str) -> Suspension | None:
    """The run's suspension when it waits on `question` (an approval's id, an
    unknown effect's key), else None."""
    suspension = run.suspension
    if run.status is not RunStatus.SUSPENDED or suspension is None:
        return None
    detail = ANSWERABLE.get(suspension.reason)
    if detail is None or suspension.details.get(detail) != question:
        return None
    return suspension


def record_approval(run: RunRecord | None, run_id: str, approval_id: str, *, approved: bool,
                    response: Any, responded_by: str | None, at: datetime,
                    existing: ApprovalDecision | None) -> tuple[RunRecord, ApprovalDecision] | None:
    """The run and decision to write, or None when the same answer was recorded before.

    `approval_id` names the question the run is suspended on: an approval's id
    (reason `approval`) or an unknown effect's key (reason `effect-unknown`).
    A new decision also files a resume request (see `request_resume`).
    """
    run = require_run(run, run_id)
    if run.status.terminal:
        raise RunTerminal(f"run {run_id!r} is {run.status.value}; it takes no more answers")
    if existing is not None:
        if existing.approved == approved and dumps(existing.response) == dumps(response):
            return None
        raise ApprovalConflict(
            f"run {run_id!r}: {approval_id!r} was already answered "
            f"({'approved' if existing.approved else 'rejected'}); a different answer is refused"
        )
    suspension = waiting_on(run, approval_id)
    if suspension is None:
        raise InvalidTransition(
            f"run {run_id!r} is not waiting for an answer to {approval_id!r}"
        )
    decision = ApprovalDecision(run_id=run_id, approval_id=approval_id, approved=approved,
                                response=response, responded_by=responded_by, responded_at=at)
    updated = run.model_copy(update={
        "suspension": suspension.model_copy(
            update={"decision": decision.model_dump(mode="json", exclude={"run_id"})}),
        **(_requested(run, at=at, reason=APPROVAL_RECORDED) or {}),
        "updated_at": at,
    })
    return updated, decision


def reserve_effect(run: RunRecord | None, run_id: str, key: str, *, expected_attempt: int,
                   at: datetime) -> EffectRecord:
    run = require_run(run, run_id)
    check_fence(run, expected_attempt)
    check_running(run, "begin an effect")
    return EffectRecord(key=key, run_id=run_id, attempt=expected_attempt, created_at=at)


def reserve_new_effect(run: RunRecord | None, run_id: str, key: str, *, expected_attempt: int,
                       at: datetime, existing: EffectRecord | None) -> EffectRecord:
    """A reservation that rides in a checkpoint (`SettlesInCheckpoint`): of a key new
    to the run, so an existing one is refused rather than returned."""
    effect = reserve_effect(run, run_id, key, expected_attempt=expected_attempt, at=at)
    if existing is not None:
        raise InvalidTransition(f"run {run_id!r} already has effect {key!r}: a checkpoint "
                                "reserves only keys new to the run")
    return effect


def settle_effect(run: RunRecord | None, run_id: str, key: str, *, expected_attempt: int,
                  result: Any, at: datetime, existing: EffectRecord | None) -> EffectRecord | None:
    """The completed effect to write, or None for an identical repeat."""
    run = require_run(run, run_id)
    check_fence(run, expected_attempt)
    check_running(run, "complete an effect")
    if existing is None:
        raise InvalidTransition(f"run {run_id!r} has no effect {key!r} to complete")
    if existing.status is EffectStatus.COMPLETED:
        if dumps(existing.result) == dumps(result):
            return None
        raise InvalidTransition(
            f"effect {key!r} of run {run_id!r} already completed with a different result"
        )
    return existing.model_copy(update={
        "status": EffectStatus.COMPLETED, "result": result, "completed_at": at,
    })


def check_deletable(run: RunRecord) -> None:
    if not run.status.terminal:
        raise InvalidTransition(
            f"run {run.run_id!r} is {run.status.value}; only finished runs can be deleted"
        )


def matches(run: RunRecord, *, statuses: Collection[RunStatus] | None,
            lease_expired_before: datetime | None, parent_run_id: str | None,
            tenant: str | None = None, resume_requested_before: datetime | None = None,
            agent: str | None = None, run_id_prefix: str | None = None,
            created_after: datetime | None = None,
            created_before: datetime | None = None) -> bool:
    """The `list_runs` filters, for stores that filter in Python. All of them hold (AND)."""
    if statuses is not None and run.status not in {RunStatus(s) for s in statuses}:
        return False
    if not RunSearch(agent, run_id_prefix, created_after, created_before).matches(run):
        return False
    if parent_run_id is not None and (run.parent is None or run.parent.run_id != parent_run_id):
        return False
    if tenant is not None and run.tenant != tenant:
        return False
    if resume_requested_before is not None and not (
            run.status is RunStatus.SUSPENDED and run.resume_requested_at is not None
            and run.resume_requested_at < resume_requested_before):
        return False
    if lease_expired_before is not None:
        if run.status is RunStatus.RUNNING:
            return run.lease_expires_at is not None and run.lease_expires_at < lease_expired_before
        if run.status is RunStatus.CREATED:
            return run.created_at < lease_expired_before
        return False
    return True


def beyond(run_id: str, cursor: str | None, *, newest_first: bool) -> bool:
    """Whether `run_id` comes after `cursor` in a listing's order (every id does without one)."""
    if cursor is None:
        return True
    return run_id < cursor if newest_first else run_id > cursor


def page_of(found: list[RunRecord], limit: int) -> RunPage:
    """The first `limit` of `found` (fetched one past a page, to tell whether more follow)."""
    page = found[:max(limit, 0)]
    return RunPage(runs=page, cursor=page[-1].run_id if len(found) > limit and page else None)
