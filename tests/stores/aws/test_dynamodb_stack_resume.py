"""The CLI on the DynamoDB store asks the stack to resume a run (docs/design.md sections 7, 10):
`approve --resume`, `resume` and `effects resolve` record the request in the
store (the reconciler's outbox) and put the `resume-requested` event the
stack's rule routes to its start function, instead of executing the run on
the operator's machine; `--here` executes it locally on purpose. Under moto:
the event is read back from an SQS queue the bus's rule targets."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from aws_template import REGION, AwsResources
from conftest import unique

from agent_runtime.cli import main
from functions.resume_requests import DETAIL_TYPE, SOURCE, ResumeRequested
from stores import resume_events
from stores.dynamodb.location import open_dynamodb_store

REPO = Path(__file__).resolve().parents[3]
APPROVAL = REPO / "tests" / "fixtures" / "manifests" / "approval.agent.yaml"


@pytest.fixture
def bus(aws: AwsResources) -> Iterator[tuple[str, Any, str]]:
    """A bus whose resume-requested events land in an SQS queue: (bus, sqs, queue url)."""
    events, sqs = boto3.client("events", region_name=REGION), boto3.client(
        "sqs", region_name=REGION)
    name = unique("bus")
    events.create_event_bus(Name=name)
    queue = sqs.create_queue(QueueName=unique("q"))["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])[
        "Attributes"]["QueueArn"]
    events.put_rule(Name="resume", EventBusName=name, EventPattern=json.dumps(
        {"source": [SOURCE], "detail-type": [DETAIL_TYPE]}))
    events.put_targets(Rule="resume", EventBusName=name, Targets=[{"Id": "q", "Arn": arn}])
    yield name, sqs, queue


def _events(sqs: Any, queue: str) -> list[dict[str, Any]]:
    messages = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10).get("Messages", [])
    return [json.loads(message["Body"]) for message in messages]


def _suspended_run(store: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["run", str(APPROVAL), "--model", "scripted/echo", "--events", "none",
                 "--artifacts", "none", "--format", "json", *store]) == 10
    run_id: str = json.loads(capsys.readouterr().out)["run_id"]
    return run_id


def test_the_event_contract_is_the_stacks() -> None:
    assert (resume_events.SOURCE, resume_events.DETAIL_TYPE) == (SOURCE, DETAIL_TYPE)


def test_approve_resume_requests_the_resume_from_the_stack(
        aws: AwsResources, bus: tuple[str, Any, str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    name, sqs, queue = bus
    location = f"{aws.table}?event_bus={name}"
    store = ["--store-driver", "dynamodb", "--store", location]
    run_id = _suspended_run(store, capsys)

    assert main(["approve", run_id, "--resume", "--format", "json", *store]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer == {"run_id": run_id, "status": "suspended", "attempt": 1,
                      "resume_requested": True, "event_bus": name}
    with open_dynamodb_store(aws.table) as opened:
        record = opened.load_run(run_id)
        assert record is not None and record.status.value == "suspended"  # not run here
        assert record.resume_requested_at is not None  # the reconciler's outbox
    (event,) = _events(sqs, queue)
    request = ResumeRequested.model_validate(event["detail"])  # what the stack's start reads
    assert (request.run_id, request.attempt, request.reason) == (run_id, 1, "approval-recorded")

    # --here executes it on this machine, on purpose.
    assert main(["resume", run_id, "--here", "--format", "json", "--events", "none",
                 "--artifacts", "none", *store]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "completed"
    assert _events(sqs, queue) == []


def test_resume_without_a_known_bus_leaves_it_to_the_reconciler(
        aws: AwsResources, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AGENT_RUNTIME_EVENT_BUS", raising=False)
    store = ["--store-driver", "dynamodb", "--store", aws.table]
    run_id = _suspended_run(store, capsys)
    assert main(["approve", run_id, *store]) == 0
    capsys.readouterr()
    assert main(["resume", run_id, "--max-total-tokens", "5000", *store]) == 0
    out = capsys.readouterr().out
    assert f"resume of run {run_id} requested from its stack" in out
    assert "reconciler resumes it on its next pass" in out and "--here" in out
    with open_dynamodb_store(aws.table) as opened:
        record = opened.load_run(run_id)
        assert record is not None and record.resume_requested_at is not None
