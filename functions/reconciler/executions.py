"""The reconciler's hooks on AWS: whether a lease owner's execution still runs, and
how a run's next attempt starts (as an execution of the run state machine).

Kept apart from functions/executions.py, which every function imports, so the
start and Advance functions do not load the reconciler (agent_runtime.reconcile)
for its base classes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from agent_runtime.clock import Clock, SystemClock
from agent_runtime.reconcile import Liveness, LostRace, OwnerStatus, Resumed
from functions.capacity import CapacitySlots
from functions.executions import ALIVE, describe, error_code, is_execution_arn, start_attempt
from stores.base import RunStore
from stores.dynamodb.slices import execution_of
from stores.records import RunRecord, RunStatus

if TYPE_CHECKING:
    from mypy_boto3_stepfunctions.client import SFNClient

_ENDED = frozenset({"SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED"})


class ExecutionLiveness:
    """The reconciler's LivenessCheck: is the execution holding the lease still running?

    RUNNING (or waiting to be redriven) is alive; SUCCEEDED, FAILED,
    TIMED_OUT and ABORTED is gone, and so is no such execution: a slice that
    died between handing the lease to its successor and starting it leaves an
    owner that was never started (stores/dynamodb/slices.py). An owner that is
    not an execution ARN (a local process on this store), or an execution Step
    Functions will not describe to us, is unknown: the run is left alone. The
    reconciler asks only once the lease has expired: a live slice renews it,
    whatever its execution's state.
    """

    def __init__(self, stepfunctions: SFNClient) -> None:
        self.stepfunctions = stepfunctions

    def __call__(self, run: RunRecord) -> OwnerStatus:
        # A slice of an execution holds the lease as `<execution ARN>#<invocation>`.
        owner = execution_of(run.lease_owner or "")
        if not is_execution_arn(owner):
            return OwnerStatus(Liveness.UNKNOWN, "the owner is not a Step Functions execution")
        try:
            found = describe(self.stepfunctions, owner)
        except ClientError as error:
            return OwnerStatus(Liveness.UNKNOWN, f"DescribeExecution failed: {error_code(error)}")
        if found is None:
            return OwnerStatus(Liveness.GONE, "the owner execution does not exist")
        status = str(found["status"])
        if status in ALIVE:
            return OwnerStatus(Liveness.ALIVE, f"the owner execution is {status}")
        if status in _ENDED:
            # The error name only: a cause may quote a handler's exception message.
            name = f" ({found['error']})" if found.get("error") else ""
            return OwnerStatus(Liveness.GONE, f"the owner execution ended {status}{name}")
        return OwnerStatus(Liveness.UNKNOWN, f"the owner execution is {status}")


class StartExecution:
    """The reconciler's ResumeAction on AWS: start the execution of the next attempt,
    once it holds a capacity slot (`slots`; None: no limit). A takeover moves the
    dead attempt's slot to the new one; a run that gets no slot is left as it is
    (`AtCapacity`) for a later pass, and once the slots are full the rest of the
    pass is refused without reading them again."""

    def __init__(self, stepfunctions: SFNClient, state_machine_arn: str,
                 store: RunStore, *, slots: CapacitySlots | None = None,
                 clock: Clock | None = None) -> None:
        self.stepfunctions = stepfunctions
        self.state_machine_arn = state_machine_arn
        self.store = store
        self.slots = slots
        self.clock: Clock = clock or SystemClock()

    async def __call__(self, run: RunRecord) -> Resumed:
        attempt = run.attempt + 1
        takeover = run.status is RunStatus.RUNNING
        if self.slots is not None:
            full = self.slots.admit(run.run_id, attempt, now=self.clock.now())
            if full is not None:
                raise AtCapacity(f"left as it is: {full}")
        try:
            started = start_attempt(self.stepfunctions, self.state_machine_arn, self.store,
                                    run.run_id, attempt, takeover=takeover)
        except BaseException:
            if self.slots is not None:
                self.slots.release(run.run_id, attempt)  # not started: not used
            raise
        if not started.new:
            raise LostRace(f"execution {started.name} of attempt {attempt} was already started")
        return Resumed(attempt, None, detail=started.execution_arn)


class AtCapacity(LostRace):
    """Not started for capacity (functions/capacity.py): a later pass starts it."""
