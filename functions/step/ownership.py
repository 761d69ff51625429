"""How an Advance invocation comes to hold its attempt, and how it passes it on.

    take_attempt  before anything runs: a first slice reserves the attempt (what
                  `resume_run` does, a takeover when the reconciler said so), a later
                  slice claims the lease its predecessor handed to its execution; or
                  the status its execution ends with instead
    hand_over     a slice that stopped at its deadline with the run still running:
                  the lease to the next slice's execution, then that execution started
    free_slot     the attempt ended for good: its capacity slot freed

The rules of who may hold the lease, and what the reconciler makes of each
holder, are stores/dynamodb/slices.py's; the executions' names and inputs
functions/executions.py's.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from pydantic import BaseModel, ConfigDict, Field, model_validator

from functions import environment
from functions.capacity import slots_of
from functions.executions import execution_arn, execution_name, start_slice, state_machine_of
from functions.telemetry import count, logger
from stores.base import InvalidTransition, LeaseHeld, RunNotFound, RunTerminal, StaleAttempt
from stores.dynamodb import slices
from stores.records import RunRecord

CONTINUE = "continue"
SUPERSEDED = "superseded"
SKIPPED = "skipped"
HELD = "held"


class ExecutionInput(BaseModel):
    """The state machine's input (functions/executions.py `execution_input`), which it
    hands to every Advance whole."""

    model_config = ConfigDict(extra="forbid")

    run_id: str = Field(min_length=1)
    # The attempt the execution's chain runs (its first slice reserves it).
    attempt: int = Field(ge=1)
    # Set by the reconciler only, after Step Functions confirmed the previous
    # owner's execution ended: the first slice may take over a running run
    # whose lease expired.
    takeover: bool = False
    # A new token limit for this attempt (from the resume that started it); None
    # keeps the run's. The same in every slice, so applying it again is a no-op.
    max_total_tokens: int | None = Field(default=None, ge=0)
    # Which slice of the attempt this execution runs: 1 reserves it.
    slice: int = Field(default=1, ge=1)


class SliceRequest(BaseModel):
    """Advance's payload: the execution's input and the execution itself (the owner of
    the sub-runs it starts, and whose successor it starts)."""

    model_config = ConfigDict(extra="forbid")

    input: ExecutionInput
    execution_arn: str = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _before_slices(cls, data: Any) -> Any:
        """The previous state machine's payload, flat (`{run_id, attempt, execution_arn,
        max_total_tokens}`, its Reserve having run): sent by executions started
        before an upgrade, which run to their end on the definition they started
        with. Such an attempt is reserved already, so it is claimed as slice 1."""
        if isinstance(data, dict) and "input" not in data and "execution_arn" in data:
            flat = {key: value for key, value in data.items() if key != "execution_arn"}
            return {"input": flat, "execution_arn": data["execution_arn"]}
        return data


def take_attempt(services: environment.Services, request: SliceRequest,
                 owner: str) -> str | None:
    """Make the slice `owner` the holder of its attempt's lease before it executes
    anything; None when it is, else the status its execution ends with.

    A first slice reserves the attempt, unless the run has reached it already
    (a duplicate invocation of this execution, or another executor took
    attempts since the execution was named): then it claims it like a later
    slice. `skipped`: nothing to reserve (the run finished, is held by a live
    owner, or is gone). For the claim's statuses see `_claim`.
    """
    work = request.input
    if work.slice == 1:
        store = services.store
        try:
            record = slices.reserve_slice(store, work.run_id, attempt=work.attempt, owner=owner,
                                          now=services.clock.now(),
                                          lease_seconds=services.settings.lease_seconds,
                                          takeover=work.takeover)
        except (LeaseHeld, RunNotFound, RunTerminal, InvalidTransition,
                StaleAttempt) as refusal:
            return _skipped(services, request, store.load_run(work.run_id),
                            type(refusal).__name__)
        if record is not None:
            count("RunReserved")
            logger.info("run reserved", extra={"reserved_attempt": record.attempt,
                                               "takeover": work.takeover,
                                               "takeovers": record.takeovers})
            return None
    return _claim(services, request, owner)


def _skipped(services: environment.Services, request: SliceRequest, current: RunRecord | None,
             why: str) -> str:
    # The execution ends without an attempt: the capacity slot its starter took
    # for it is free again (functions/capacity.py).
    work = request.input
    free_slot(services, work.run_id, work.attempt)
    logger.info("run not reserved", extra={
        "reason": why, "run_status": None if current is None else current.status.value,
        "run_attempt": None if current is None else current.attempt})
    return SKIPPED


def _claim(services: environment.Services, request: SliceRequest, owner: str) -> str | None:
    """Claim the lease its execution holds for this invocation; the status to end
    with when it cannot, else None.

    `held`: another invocation of this execution (a Lambda retry after a lost
    response) is still advancing the attempt: this one ends its execution and
    leaves the attempt to it, which goes on, hands over or ends the attempt
    itself. `superseded`: the execution of a later slice holds it (this one
    is a late duplicate), or another owner does, or a slice died holding it
    (its lease expired): a crash, which the reconciler takes over with a new
    attempt once it finds the execution ended. The capacity slot is the
    attempt's: freed only for a holder that died, never while a live slice
    holds it. A run that is not running at this attempt any more is left to
    the engine's `advance` to report.
    """
    work = request.input
    now = services.clock.now()
    try:
        slices.claim_slice(services.store, work.run_id, expected_attempt=work.attempt,
                           execution=request.execution_arn, owner=owner, now=now,
                           lease_seconds=services.settings.lease_seconds)
    except LeaseHeld as held:
        sibling = slices.execution_of(held.owner or "") == request.execution_arn
        alive = held.expires_at is not None and held.expires_at > now
        logger.info("the attempt's lease is held", extra={"holder": held.owner,
                                                          "expired": not alive})
        if not alive:
            free_slot(services, work.run_id, work.attempt)
        return HELD if sibling and alive else SUPERSEDED
    except (RunNotFound, StaleAttempt, RunTerminal, InvalidTransition):
        return None
    return None


def hand_over(services: environment.Services, request: SliceRequest, owner: str) -> str:
    """The slice `owner` stopped at its deadline with the run still running: hand the
    attempt to the next slice's execution and start it; `continue`, or
    `superseded` when the slice no longer held the attempt (nothing is started).

    The lease goes first (a conditional write, renewing it), the start second,
    so the new execution never finds its lease held by this slice. Should the
    start fail (or this Lambda die in between), the lease names an execution
    that does not exist, which the reconciler takes for a crash once the lease
    has expired; the error is raised, so this execution fails visibly.
    """
    work = request.input
    machine = state_machine_of(request.execution_arn)
    following = work.slice + 1
    successor = execution_arn(machine, execution_name(work.run_id, work.attempt,
                                                      slice_=following))
    try:
        handed = slices.hand_over_slice(services.store, work.run_id,
                                        expected_attempt=work.attempt, owner=owner,
                                        successor=successor, now=services.clock.now(),
                                        lease_seconds=services.settings.lease_seconds)
    except (RunNotFound, StaleAttempt, RunTerminal, InvalidTransition) as lost:
        logger.info("the attempt moved on before it was handed over",
                    extra={"why": type(lost).__name__})
        return SUPERSEDED
    if not handed:
        return SUPERSEDED
    try:
        started = start_slice(services.stepfunctions, machine, work.run_id, work.attempt,
                              following, max_total_tokens=work.max_total_tokens)
    except (ClientError, BotoCoreError) as error:
        count("SliceNotStarted")
        logger.error("the next slice's execution was not started; the reconciler takes "
                     "the run over once its lease expires",
                     extra={"execution": successor, "error_type": type(error).__name__})
        raise
    logger.info("handed over to the next slice", extra={"execution": started.name,
                                                         "new": started.new})
    return CONTINUE


def free_slot(services: environment.Services, run_id: str, attempt: int) -> None:
    """The attempt ended (suspended, finished, superseded, never reserved): its capacity
    slot is free for a queued run. Conditional on this attempt holding it, so a
    slot a takeover moved to a newer attempt stays. Not done (the write failed),
    it frees itself once the run's lease has expired (functions/capacity.py)."""
    try:
        slots_of(services).release(run_id, attempt)
    except (ClientError, BotoCoreError) as error:
        count("CapacitySlotNotReleased")
        logger.warning("the capacity slot was not released; it frees itself after the lease",
                       extra={"error_type": type(error).__name__})
