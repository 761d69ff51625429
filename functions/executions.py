"""Step Functions executions of the run state machine: names, starts, liveness.

An attempt of a run runs as a chain of executions, one slice each (one
Advance invocation, "continued as new": docs/design.md section 10). The first
is named `<run_id>-a<attempt>` (`execution_name`), where `attempt` is the
attempt it will reserve, so every starter of the same attempt — a repeated
resume-requested event, two reconcilers, a starter and a reconciler — names
the same execution, and Step Functions runs it once: a start of a name in use
either returns the running execution (same input) or is refused
(`ExecutionAlreadyExists`). Both mean "already started" (`start_attempt`).

One case needs more: an execution that ended before it reserved its attempt
(its Advance failed, or found the run held by another owner) keeps its name
for 90 days, and the attempt still has to start. When the name is taken by a
closed execution and the run has not reached that attempt, the next name is
used: `<run_id>-a<attempt>-r2`, `-r3`, ... up to `MAX_NAMES_PER_ATTEMPT`.
Every starter walks the same sequence, so they still agree on one execution.

A slice that stops at its deadline with the run still running starts the
next one, `<run_id>-a<attempt>-s<slice>` (`start_slice`; slice 2, 3, ...),
with the same input plus its number. Only the execution that reserved the
attempt, and its successors, ever hold it, so these names need no `-r`:
no two chains of one attempt both run. Its only starter is the slice
handing over, and a repeated start of the same name and input is answered
with the same execution.

A run id that is not a valid execution name (over 80 characters with its
suffix, or characters other than letters, digits, `.`, `_` and `-`) is
replaced by its safe characters and a hash of the id, deterministically.

The lease owner of an attempt names its execution (a slice holds it as
`<execution ARN>#<invocation>`, a hand-over leaves it to the next
execution's ARN: stores/dynamodb/slices.py), so the reconciler asks Step
Functions whether that execution still runs (`ExecutionLiveness`, with the
reconciler's other hooks in functions/reconciler/executions.py, so the start
and Advance functions do not load the reconciler): the owner string is the
engine reference on AWS.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

if TYPE_CHECKING:
    from mypy_boto3_stepfunctions.client import SFNClient

    from stores.base import RunStore

MAX_NAME_LENGTH = 80
MAX_NAMES_PER_ATTEMPT = 5
_SAFE = re.compile(r"[A-Za-z0-9._-]+")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
# What Step Functions calls a running execution (or one waiting to be redriven).
ALIVE = frozenset({"RUNNING", "PENDING_REDRIVE"})


def execution_name(run_id: str, attempt: int, retry: int = 1, *, slice_: int = 1) -> str:
    """The name of the execution that runs `attempt` of `run_id` (`retry` > 1: a later
    name of the same attempt, after an execution that ended without reserving it;
    `slice_` > 1: the execution of a later slice of the attempt)."""
    suffix = f"-a{attempt}" + ("" if retry == 1 else f"-r{retry}") + (
        "" if slice_ == 1 else f"-s{slice_}")
    if _SAFE.fullmatch(run_id) and len(run_id) + len(suffix) <= MAX_NAME_LENGTH:
        return run_id + suffix
    digest = hashlib.sha256(run_id.encode()).hexdigest()[:16]
    readable = _UNSAFE.sub("_", run_id)[:MAX_NAME_LENGTH - len(suffix) - len(digest) - 1]
    return f"{readable}-{digest}{suffix}"


def execution_input(run_id: str, attempt: int, *, takeover: bool,
                    max_total_tokens: int | None = None, slice_: int = 1) -> str:
    """The state machine's input, which it hands to Advance whole: the same for every
    start of this execution, so a repeated start of a running one is answered
    with it.

    `max_total_tokens` is a new token limit for the attempt (None keeps the
    run's), in every slice's input; `slice` is there from the second slice on
    (a first slice's input is what it always was)."""
    body: dict[str, Any] = {"run_id": run_id, "attempt": attempt, "takeover": takeover,
                            "max_total_tokens": max_total_tokens}
    if slice_ > 1:
        body["slice"] = slice_
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def execution_arn(state_machine_arn: str, name: str) -> str:
    """`arn:...:stateMachine:M` -> `arn:...:execution:M:name`."""
    prefix, marker, machine = state_machine_arn.partition(":stateMachine:")
    if not marker or not machine:
        raise ValueError(f"not a state machine ARN: {state_machine_arn!r}")
    return f"{prefix}:execution:{machine}:{name}"


def state_machine_of(execution: str) -> str:
    """`arn:...:execution:M:name` -> `arn:...:stateMachine:M`: the state machine an
    execution belongs to, so a slice starts its successor without being told
    (the state machine names the function it invokes, so the function cannot be
    given the state machine's ARN without a cycle in the template)."""
    prefix, marker, rest = execution.partition(":execution:")
    machine, colon, name = rest.partition(":")
    if not marker or not colon or not machine or not name:
        raise ValueError(f"not an execution ARN: {execution!r}")
    return f"{prefix}:stateMachine:{machine}"


def is_execution_arn(owner: str) -> bool:
    return owner.startswith("arn:") and ":states:" in owner and ":execution:" in owner


def error_code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def describe(stepfunctions: SFNClient, arn: str) -> dict[str, Any] | None:
    """DescribeExecution's answer, or None when there is no such execution."""
    try:
        return dict(stepfunctions.describe_execution(executionArn=arn))
    except ClientError as error:
        if error_code(error) == "ExecutionDoesNotExist":
            return None
        raise


@dataclass(frozen=True)
class Started:
    """The execution of an attempt: started now (`new`), or found already started."""

    execution_arn: str
    name: str
    new: bool


class NoExecutionName(Exception):
    """Every name of the attempt is held by an execution that ended without reserving it."""


def start_attempt(stepfunctions: SFNClient, state_machine_arn: str, store: RunStore,
                  run_id: str, attempt: int, *, takeover: bool,
                  max_total_tokens: int | None = None) -> Started:
    """Start the execution that reserves `attempt` of `run_id`, unless it was started.

    `takeover` tells its first slice the reconciler confirmed the previous owner dead
    (`allow_running_takeover`); `max_total_tokens` is a new token limit for
    the attempt (None keeps the run's). Raises `NoExecutionName` when the
    attempt's names are used up (the run keeps failing before it reserves).
    """
    body = execution_input(run_id, attempt, takeover=takeover,
                           max_total_tokens=max_total_tokens)
    for retry in range(1, MAX_NAMES_PER_ATTEMPT + 1):
        name = execution_name(run_id, attempt, retry)
        arn = execution_arn(state_machine_arn, name)
        found = describe(stepfunctions, arn)
        if found is None:
            try:
                started = stepfunctions.start_execution(stateMachineArn=state_machine_arn,
                                                        name=name, input=body)
                return Started(started["executionArn"], name, new=True)
            except ClientError as error:
                if error_code(error) != "ExecutionAlreadyExists":
                    raise
            found = describe(stepfunctions, arn)  # another starter won the race
        if found is None or found["status"] in ALIVE:
            return Started(arn, name, new=False)
        run = store.load_run(run_id)
        if run is None or run.attempt >= attempt:
            return Started(arn, name, new=False)  # it reserved its attempt (or the run moved on)
        # It ended before it reserved: the attempt still needs an execution.
    raise NoExecutionName(f"run {run_id!r}: the {MAX_NAMES_PER_ATTEMPT} execution names of "
                          f"attempt {attempt} are used by executions that ended without "
                          "reserving it")


def start_slice(stepfunctions: SFNClient, state_machine_arn: str, run_id: str, attempt: int,
                slice_: int, *, max_total_tokens: int | None = None) -> Started:
    """Start the execution of slice `slice_` of `attempt` (named and given its input as
    `execution_name` and `execution_input` make them). Called once the lease was
    handed to it; a name already used (a repeated start that found the execution
    ended) is an execution already started."""
    name = execution_name(run_id, attempt, slice_=slice_)
    body = execution_input(run_id, attempt, takeover=False, max_total_tokens=max_total_tokens,
                           slice_=slice_)
    try:
        started = stepfunctions.start_execution(stateMachineArn=state_machine_arn, name=name,
                                                input=body)
    except ClientError as error:
        if error_code(error) != "ExecutionAlreadyExists":
            raise
        return Started(execution_arn(state_machine_arn, name), name, new=False)
    return Started(started["executionArn"], name, new=True)
