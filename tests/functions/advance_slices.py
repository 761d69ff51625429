"""Advance's payloads and the chain of executions an attempt runs as.

An attempt runs as executions of one slice each: `<run_id>-a<attempt>` (or
`-r<n>`), then `-s2`, `-s3`, ... each started by the slice before it
(functions/executions.py). `advance_event` is events/advance*.json for a
test's run and execution; `wait_for_chain` follows an attempt's executions to
the last, each once it has ended.
"""

from __future__ import annotations

import json
from typing import Any

from aws_stack import EVENTS, Stack

from functions.executions import execution_name


def advance_event(sample: str = "advance.json", *, execution_arn: str | None = None,
                  **fields: Any) -> dict[str, Any]:
    """The state machine's payload of events/`sample`, its input's `fields` replaced."""
    event: dict[str, Any] = json.loads((EVENTS / sample).read_text())
    event["input"].update(fields)
    if execution_arn is not None:
        event["execution_arn"] = execution_arn
    return event


def slice_arn(stack: Stack, run_id: str, attempt: int, slice_: int) -> str:
    return stack.execution_arn(execution_name(run_id, attempt, slice_=slice_))


def wait_for_chain(stack: Stack, run_id: str, attempt: int, *, retry: int = 1,
                   timeout: float = 60.0) -> list[dict[str, Any]]:
    """Every execution of the attempt's chain, in order, each described once it has
    ended: the next one is waited for while the last answered `continue`."""
    chain = [stack.wait_for(execution_name(run_id, attempt, retry), timeout)]
    while json.loads(chain[-1].get("output") or "{}").get("status") == "continue":
        name = execution_name(run_id, attempt, slice_=len(chain) + 1)
        chain.append(stack.wait_for(name, timeout))
    return chain


def transitions(stack: Stack, execution_arn: str) -> list[str]:
    """The states an execution entered, in order (each a billed state transition)."""
    history = stack.stepfunctions.get_execution_history(executionArn=execution_arn,
                                                        maxResults=1000)
    return [event["stateEnteredEventDetails"]["name"] for event in history["events"]
            if "stateEnteredEventDetails" in event]
