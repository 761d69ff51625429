"""The stack's own event bus under moto: resume requests reach only this stack's
start function, and runs that end or suspend publish `run-finished` events a
client's rule receives (functions/run_events.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest
from aws_stack import Deployment, create_resume_route, sample_event
from botocore.exceptions import ClientError

from agent_runtime import AgentRuntime, RunResult, RunStatus
from functions.executions import execution_name
from functions.run_events import RunFinished, announce_run_finished
from stores.memory import MemoryRunStore
from stores.records import RunRecord
from tests.stores.aws.aws_template import Names, load_template

MANIFESTS = Path(__file__).resolve().parents[1] / "fixtures" / "manifests"
ECHO = {"model": "scripted/echo"}
# A client's subscription: what the README shows.
RUN_FINISHED = {"source": ["agent-runtime"], "detail-type": ["run-finished"]}


def messages(sqs: Any, queue_url: str) -> list[dict[str, Any]]:
    """Every message on the queue (bodies as JSON), taken off it."""
    found = []
    while True:
        received = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10,
                                       WaitTimeSeconds=0).get("Messages", [])
        if not received:
            return found
        for message in received:
            found.append(json.loads(message["Body"]))
            sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])


def subscribe(deployment: Deployment, pattern: dict[str, Any]) -> str:
    """A client's rule on the stack's bus, delivering to a queue: its URL."""
    stack = deployment.stack
    url: str = stack.sqs.create_queue(QueueName="client-run-finished")["QueueUrl"]
    arn = stack.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])[
        "Attributes"]["QueueArn"]
    stack.events.put_rule(Name="client-run-finished", EventBusName=stack.route.bus,
                          EventPattern=json.dumps(pattern))
    stack.events.put_targets(Rule="client-run-finished", EventBusName=stack.route.bus,
                             Targets=[{"Id": "client", "Arn": arn}])
    return url


def create_run(deployment: Deployment, manifest: str) -> str:
    return deployment.services.runtime().create_run(manifest=MANIFESTS / manifest,
                                                    options=ECHO).run_id


def test_each_stack_has_its_bus_and_an_event_starts_only_its_own_runs(
        deployment: Deployment) -> None:
    stack = deployment.stack
    assert stack.environment["AGENT_RUNTIME_EVENT_BUS"] == stack.route.bus != "default"
    # A second stack in the same account: its bus, rule and queues from the
    # same template properties, under another stack name.
    template = load_template()
    other = create_resume_route(boto3.session.Session(), Names(
        refs={}, attributes={}, stack="agent-runtime-other",
        parameters={name: spec.get("Default") for name, spec in template["Parameters"].items()}))
    assert other.bus != stack.route.bus

    run_id = create_run(deployment, "hello.agent.yaml")
    stack.put_resume_request(run_id, attempt=0, reason="run-created")
    assert messages(stack.sqs, other.queue_url) == []
    (started,) = stack.deliver_resume_requests()
    assert started["status"] == "started"
    assert stack.wait_for(execution_name(run_id, 1))["status"] == "SUCCEEDED"

    # And the other way round: an event on the other stack's bus never
    # reaches this stack's start function.
    stack.events.put_events(Entries=[{
        "Source": "agent-runtime", "DetailType": "resume-requested", "EventBusName": other.bus,
        "Detail": json.dumps({"run_id": "run_other", "attempt": 0, "reason": "run-created"})}])
    assert stack.deliver_resume_requests() == []
    (delivered,) = messages(stack.sqs, other.queue_url)
    assert delivered["detail"]["run_id"] == "run_other"
    assert stack.executions() == {execution_name(run_id, 1): "SUCCEEDED"}


@pytest.mark.slow
def test_a_suspension_and_the_end_of_a_run_are_published_on_the_stacks_bus(
        deployment: Deployment) -> None:
    stack, store = deployment.stack, deployment.services.store
    client = subscribe(deployment, RUN_FINISHED)
    run_id = create_run(deployment, "approval.agent.yaml")
    stack.put_resume_request(run_id, attempt=0, reason="run-created")
    stack.deliver_resume_requests()
    assert stack.wait_for(execution_name(run_id, 1))["status"] == "SUCCEEDED"
    (suspended,) = messages(stack.sqs, client)
    assert (suspended["source"], suspended["detail-type"]) == ("agent-runtime", "run-finished")
    assert suspended["detail"] == {"run_id": run_id, "attempt": 1, "status": "suspended",
                                   "reason": "approval"}

    AgentRuntime(store=store).approve(run_id)
    stack.put_resume_request(run_id, attempt=1, reason="approval-recorded")
    # The resume-requested rule does not match run-finished events.
    (resumed,) = stack.deliver_resume_requests()
    assert resumed["status"] == "started"
    assert stack.wait_for(execution_name(run_id, 2))["status"] == "SUCCEEDED"
    (completed,) = messages(stack.sqs, client)
    # Ids and status only: the output stays in the store.
    assert completed["detail"] == {"run_id": run_id, "attempt": 2, "status": "completed"}
    # The sample a client's target is tested with has the same shape.
    sample = sample_event("run-finished.json", run_id=run_id)
    assert set(suspended["detail"]) <= set(sample["detail"])
    assert RunFinished.model_validate(sample["detail"]).model_dump(exclude_none=True) == \
        sample["detail"]


class RefusingRunFinished:
    """The functions' EventBridge client, failing every run-finished event."""

    def __init__(self, events: Any) -> None:
        self.events = events
        self.refused = 0

    def put_events(self, Entries: list[dict[str, Any]]) -> Any:  # boto3's parameter name
        if Entries[0]["DetailType"] == "run-finished":
            self.refused += 1
            raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "no"}},
                              "PutEvents")
        return self.events.put_events(Entries=Entries)


def test_a_run_finished_event_that_cannot_be_put_does_not_fail_the_step(
        deployment: Deployment) -> None:
    stack = deployment.stack
    refusing = RefusingRunFinished(deployment.services.events)
    deployment.services.events = refusing  # type: ignore[assignment]
    run_id = create_run(deployment, "hello.agent.yaml")
    stack.put_resume_request(run_id, attempt=0, reason="run-created")
    stack.deliver_resume_requests()
    assert stack.wait_for(execution_name(run_id, 1))["status"] == "SUCCEEDED"
    done = deployment.services.store.load_run(run_id)
    assert done is not None and done.status is RunStatus.COMPLETED
    assert refusing.refused == 1
    (advance,) = stack.lambdas.calls("AdvanceFunction")
    assert advance.error is None and advance.result["status"] == "completed"


class RecordingEvents:
    def __init__(self, answer: dict[str, Any] | None = None) -> None:
        self.answer = answer or {"FailedEntryCount": 0, "Entries": [{"EventId": "1"}]}
        self.entries: list[dict[str, Any]] = []

    def put_events(self, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        self.entries.extend(Entries)
        return self.answer


def test_run_finished_names_the_tenant_and_a_failure_by_its_type_only() -> None:
    store = MemoryRunStore()
    store.create_run(RunRecord(run_id="run_1", manifest_hash="h", tenant="acme"))
    events = RecordingEvents()
    failed = RunResult(run_id="run_1", status=RunStatus.FAILED, attempt=3, output="secret",
                       error={"type": "crash_loop", "message": "secret"})
    assert announce_run_finished(events, store, failed, bus="bus-1")  # type: ignore[arg-type]
    (entry,) = events.entries
    assert (entry["Source"], entry["DetailType"], entry["EventBusName"]) == (
        "agent-runtime", "run-finished", "bus-1")
    assert json.loads(entry["Detail"]) == {"run_id": "run_1", "attempt": 3, "status": "failed",
                                           "reason": "crash_loop", "tenant": "acme"}
    assert "secret" not in entry["Detail"]


def test_run_finished_is_not_put_for_a_run_still_running_and_a_refusal_is_not_raised() -> None:
    store = MemoryRunStore()
    events = RecordingEvents({"FailedEntryCount": 1, "Entries": [{"ErrorCode": "Internal"}]})
    running = RunResult(run_id="run_1", status=RunStatus.RUNNING, attempt=1)
    assert not announce_run_finished(events, store, running, bus="b")  # type: ignore[arg-type]
    assert events.entries == []
    cancelled = RunResult(run_id="run_1", status=RunStatus.CANCELLED, attempt=1)
    assert not announce_run_finished(events, store, cancelled, bus="b")  # type: ignore[arg-type]
    assert json.loads(events.entries[0]["Detail"]) == {"run_id": "run_1", "attempt": 1,
                                                       "status": "cancelled"}
