"""One owner per attempt on AWS: the slices of a Step Functions execution.

Reserve leases an attempt to its execution (the lease owner is the execution
ARN). Each Advance invocation, a slice, then claims the lease for itself —
owner `<execution ARN>#<invocation id>` — before it executes, and hands it
back to the execution when its slice ends with the run still running. A
store held by a slice (`DynamoDbRunStore.owned_by`) conditions every write of
that run on the slice holding the lease, so two invocations of one attempt (a
Lambda retried after its response was lost, while the first still runs) can
never both write or dispatch an effect: the second finds the lease held and
stops before doing anything.

A slice that died holding the lease (its Lambda killed after its response
was lost and a retry took its place) is a crash: a tool it dispatched has an
unknown outcome, which only a new attempt's effect ledger check reports
(docs/design.md section 6). So no slice claims a lease a sibling left to expire; the
execution ends (`superseded`) and the reconciler, finding the lease expired
and the execution ended, takes the run over with the next attempt. The
decisions are pure functions of the run as read; `DynamoDbRunStore` writes
them fenced.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from stores import transitions
from stores.base import LeaseHeld
from stores.records import RunRecord

if TYPE_CHECKING:
    from stores.dynamodb.store import DynamoDbRunStore

SLICE_SEPARATOR = "#"


def slice_owner(execution: str, invocation: str) -> str:
    """The lease owner of one slice (invocation) of `execution`."""
    return f"{execution}{SLICE_SEPARATOR}{invocation}"


def execution_of(owner: str) -> str:
    """The execution a lease owner is, or is a slice of."""
    return owner.split(SLICE_SEPARATOR, 1)[0]


def claimed(run: RunRecord | None, run_id: str, *, expected_attempt: int, execution: str,
            owner: str, now: datetime, lease_seconds: float) -> RunRecord | None:
    """The run with its lease held by the slice `owner` of `execution`; None when it
    already is. LeaseHeld when another slice (live, or dead with its lease left
    to expire) or another owner holds it."""
    run = transitions.require_run(run, run_id)
    transitions.check_fence(run, expected_attempt)
    transitions.check_running(run, "claim its lease")
    holder = run.lease_owner or ""
    if holder == owner:
        return None
    if holder != execution:
        raise LeaseHeld(f"run {run_id!r}: attempt {run.attempt}'s lease is held by {holder} "
                        f"until {run.lease_expires_at}", owner=holder,
                        expires_at=run.lease_expires_at)
    return run.model_copy(update={"lease_owner": owner, "updated_at": now,
                                  "lease_expires_at": now + timedelta(seconds=lease_seconds)})


def released(run: RunRecord | None, run_id: str, *, expected_attempt: int, owner: str,
             now: datetime) -> RunRecord | None:
    """The run with the slice `owner`'s lease handed back to its execution; None when
    the slice no longer holds it (nothing to hand back)."""
    run = transitions.require_run(run, run_id)
    transitions.check_fence(run, expected_attempt)
    if run.status.terminal or run.lease_owner != owner:
        return None
    transitions.check_running(run, "release its lease")
    return run.model_copy(update={"lease_owner": execution_of(owner), "updated_at": now})


def claim_slice(store: DynamoDbRunStore, run_id: str, *, expected_attempt: int,
                execution: str, owner: str, now: datetime, lease_seconds: float) -> None:
    """Move the attempt's lease from `execution` to its slice `owner`: `LeaseHeld`
    while another live slice holds it; `StaleAttempt`, `RunTerminal` or
    `InvalidTransition` when the attempt is not running any more."""
    store.change_lease(run_id, lambda run: claimed(
        run, run_id, expected_attempt=expected_attempt, execution=execution, owner=owner,
        now=now, lease_seconds=lease_seconds), owned=False)


def release_slice(store: DynamoDbRunStore, run_id: str, *, expected_attempt: int, owner: str,
                  now: datetime) -> None:
    """Hand the slice `owner`'s lease back to its execution, if it still holds it."""
    store.change_lease(run_id, lambda run: released(
        run, run_id, expected_attempt=expected_attempt, owner=owner, now=now), owned=False)
