"""One owner per attempt on AWS: the slices of an attempt, one execution each.

An attempt runs as a chain of Step Functions executions, one Advance
invocation (a slice) each, "continued as new" (docs/design.md section 10):

* The first slice reserves the attempt (`reserve_slice`): `resume_run`'s
  reservation, for the slice itself — owner `<execution ARN>#<invocation
  id>` — and only while the run has not reached that attempt, so a
  duplicate invocation of the same execution never reserves a second one.
* A later slice claims the lease its predecessor handed to its execution
  (`claim_slice`: owner `<execution ARN>` becomes `<execution ARN>#<invocation
  id>`) before it executes anything.
* A slice that stops at its deadline with the run still running hands the
  lease to the next slice's execution (`hand_over_slice`: owner `<next
  execution ARN>`, lease renewed), and only then starts that execution: a
  new execution never finds its lease held by the slice before it.

A store held by a slice (`DynamoDbRunStore.owned_by`) conditions every write
of that run on the slice holding the lease, so two invocations of one
execution (a Lambda retried after its response was lost, while the first
still runs) can never both write or dispatch an effect: the second finds
the lease held and stops before doing anything.

Who holds the lease, and what the reconciler makes of it (it acts on a
running run only once its lease has expired, then asks Step Functions about
the execution the owner names, `functions.reconciler.executions.ExecutionLiveness`):

* a live slice renews the lease at every checkpoint and during long calls,
  so the reconciler never looks at it, whatever its execution's state;
* a duplicate invocation that finds a live sibling holding the lease ends
  its execution at once (`held`): the sibling goes on alone, hands over or
  ends the attempt itself. Its owner string then names an execution that has
  ended, which is harmless: the reconciler only asks about it once the lease
  has expired, that is once the sibling stopped renewing it — died — and
  then an ended execution is the right answer: a crash;
* a lease handed to the next execution is renewed by the hand-over, and that
  execution claims it when its Advance runs. While Lambda throttles that
  Advance the execution waits, RUNNING, so it is a live owner after the
  lease expires too: never a takeover for a throttle. If the slice died
  between the hand-over and the start, the owner names an execution that
  does not exist: once the lease expires that is a dead owner (a crash);
* a slice that died holding the lease (its Lambda killed after its response
  was lost and a retry took its place) is a crash: a tool it dispatched has
  an unknown outcome, which only a new attempt's effect ledger check reports
  (docs/design.md section 6). So no slice claims a lease another slice left
  to expire; the execution ends (`superseded`) and the reconciler, finding
  the lease expired and the execution ended, takes the run over with the
  next attempt.

Sub-runs a slice runs in process are leased to its execution's ARN (the
runtime's owner). A child runs to its suspension or end inside the parent's
slice (it has no deadline of its own), so no hand-over leaves one running;
one left running by a slice that died is judged by the same rules: its
execution has ended, so once the child's lease expires the reconciler takes
it over, and the parent, suspended on it meanwhile, is resumed by its end.

The decisions are pure functions of the run as read; `DynamoDbRunStore`
writes them fenced (`change_lease`: a conditional write on exactly what was
read).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from stores import transitions
from stores.base import LeaseHeld, StaleAttempt
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


def reserved(run: RunRecord | None, run_id: str, *, attempt: int, owner: str, now: datetime,
             lease_seconds: float, takeover: bool) -> RunRecord | None:
    """The run with `attempt` reserved for the slice `owner`; None when the run has
    reached that attempt already (this execution reserved it, or another
    executor took attempts since the execution was named). `LeaseHeld`,
    `RunTerminal`, `InvalidTransition` as `resume_run` raises them;
    `StaleAttempt` for a run attempts behind (no starter names an attempt
    past the next one: the reservation is exactly the execution's attempt)."""
    run = transitions.require_run(run, run_id)
    if run.attempt >= attempt:
        return None
    if run.attempt + 1 != attempt:
        raise StaleAttempt(f"run {run_id!r} is at attempt {run.attempt}; this execution "
                           f"reserves attempt {attempt}")
    return transitions.reserve_attempt(run, run_id, owner=owner, now=now,
                                       lease_seconds=lease_seconds,
                                       allow_running_takeover=takeover)


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


def handed_over(run: RunRecord | None, run_id: str, *, expected_attempt: int, owner: str,
                successor: str, now: datetime, lease_seconds: float) -> RunRecord | None:
    """The run with the slice `owner`'s lease handed to the execution `successor` and
    renewed (time for it to start and claim it); None when the slice no longer
    holds it (nothing to hand over)."""
    run = transitions.require_run(run, run_id)
    transitions.check_fence(run, expected_attempt)
    if run.status.terminal or run.lease_owner != owner:
        return None
    transitions.check_running(run, "hand its lease over")
    return run.model_copy(update={"lease_owner": successor, "updated_at": now,
                                  "lease_expires_at": now + timedelta(seconds=lease_seconds)})


def _changed(store: DynamoDbRunStore, run_id: str,
             decide: Callable[[RunRecord | None], RunRecord | None]) -> RunRecord | None:
    """Write what `decide` makes of the run (fenced, decided again on a refusal);
    the record written, or None when it decided on no change."""
    decided: list[RunRecord | None] = [None]

    def deciding(run: RunRecord | None) -> RunRecord | None:
        decided[0] = decide(run)
        return decided[0]

    store.change_lease(run_id, deciding, owned=False)
    return decided[0]


def reserve_slice(store: DynamoDbRunStore, run_id: str, *, attempt: int, owner: str,
                  now: datetime, lease_seconds: float, takeover: bool) -> RunRecord | None:
    """Reserve `attempt` for the first slice `owner` of its execution; None when the
    run already reached it (`reserved`). `takeover` (the reconciler confirmed the
    previous owner's execution ended) allows a running run whose lease expired."""
    return _changed(store, run_id, lambda run: reserved(
        run, run_id, attempt=attempt, owner=owner, now=now, lease_seconds=lease_seconds,
        takeover=takeover))


def claim_slice(store: DynamoDbRunStore, run_id: str, *, expected_attempt: int,
                execution: str, owner: str, now: datetime, lease_seconds: float) -> None:
    """Move the attempt's lease from `execution` to its slice `owner`: `LeaseHeld`
    while another slice holds it; `StaleAttempt`, `RunTerminal` or
    `InvalidTransition` when the attempt is not running any more."""
    store.change_lease(run_id, lambda run: claimed(
        run, run_id, expected_attempt=expected_attempt, execution=execution, owner=owner,
        now=now, lease_seconds=lease_seconds), owned=False)


def hand_over_slice(store: DynamoDbRunStore, run_id: str, *, expected_attempt: int,
                    owner: str, successor: str, now: datetime, lease_seconds: float) -> bool:
    """Hand the slice `owner`'s lease to the execution `successor`; False when the
    slice no longer holds it. `StaleAttempt`, `RunTerminal`, `InvalidTransition`
    when the attempt is not running any more."""
    return _changed(store, run_id, lambda run: handed_over(
        run, run_id, expected_attempt=expected_attempt, owner=owner, successor=successor,
        now=now, lease_seconds=lease_seconds)) is not None
