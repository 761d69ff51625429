"""The event log costs no DynamoDB request of its own: a run's writes grow by one
request per checkpoint, whatever number of events its iterations emit (they ride in
the checkpoints' items)."""

from __future__ import annotations

from typing import Any

from aws_template import AwsResources
from conftest import open_store, unique
from test_dynamodb_requests import requests

from agent_runtime import AgentRuntime

WRITES = ("dynamodb:TransactWriteItems", "dynamodb:PutItem", "dynamodb:UpdateItem",
          "dynamodb:DeleteItem", "dynamodb:BatchWriteItem", "s3:PutObject")


def loop(iterations: int) -> dict[str, Any]:
    return {"schemaVersion": "1.0", "id": "spin", "steps": [
        {"id": "spin", "type": "loop", "loop": {"maxIterations": iterations},
         "steps": [{"id": "ask", "type": "prompt",
                    "prompt": "iteration {{ loop.iteration }}"}]}]}


def measured(aws: AwsResources, iterations: int) -> tuple[int, int, int]:
    """(write requests, checkpoints, events) of one run of `iterations`; prints the
    stored size of an iteration's checkpoint."""
    store = open_store(aws, prefix=f"{unique('events')}/")
    runtime = AgentRuntime(store=store)
    with requests(aws.dynamodb, aws.s3) as counted:
        result = runtime.run_sync(manifest=loop(iterations), options={"model": "scripted/echo"})
    run = store.load_run(result.run_id)
    assert run is not None and run.checkpoint_seq is not None
    events = store.list_events(result.run_id, limit=1000)
    sizes = [info.size_bytes for info in store.list_checkpoints(result.run_id)][2:-1]
    print(f"\n{iterations} iterations: a checkpoint item's stored body "
          f"{sum(sizes) / len(sizes):.0f} bytes")
    return sum(counted[name] for name in WRITES), run.checkpoint_seq, len(events)


def test_events_add_no_write_request_per_iteration(aws: AwsResources) -> None:
    writes, checkpoints, events = measured(aws, 10)
    more_writes, more_checkpoints, more_events = measured(aws, 30)
    per_iteration = (more_writes - writes) / 20
    print(f"\nDynamoDB writes per iteration: {per_iteration:g}; checkpoints per iteration: "
          f"{(more_checkpoints - checkpoints) / 20:g}; events per iteration: "
          f"{(more_events - events) / 20:g}")
    # Each iteration is one checkpoint, and each checkpoint one request, with its events.
    assert more_writes - writes == more_checkpoints - checkpoints == 20
    assert more_events - events >= 3 * 20
    events_seen = events + more_events
    assert events_seen > 0
