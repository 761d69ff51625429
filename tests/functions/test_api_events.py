"""`GET /runs/{runId}/events` on the deployed stack under moto: the real API handler
(invoked as API Gateway invokes it) pages the DynamoDB event log by cursor, long-polls
until the next event commits, and keeps tenants apart."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from aws_stack import Deployment, HttpAnswer, http_event, iam_caller

from functions.executions import execution_name

MANIFESTS = Path(__file__).resolve().parents[1] / "fixtures" / "manifests"
ECHO = {"model": "scripted/echo"}
MALLORY = "arn:aws:iam::123456789012:user/mallory"
# Far more than the test needs: a busy machine makes it slower, never wrong.
HANG = 120.0

pytestmark = pytest.mark.slow


def events(deployment: Deployment, run_id: str, **query: Any) -> HttpAnswer:
    return deployment.stack.call_api(http_event(
        "api-list-events.json", runId=run_id,
        query={name: str(value) for name, value in {"after": 0, **query}.items()}))


def suspended_run(deployment: Deployment) -> str:
    stack = deployment.stack
    answer = stack.call_api(http_event(
        "api-start-run.json", body={"manifest": (MANIFESTS / "approval.agent.yaml").read_text(),
                                    "options": ECHO}))
    assert answer.status == 201, answer.body
    run_id = str(answer.body["run"]["runId"])
    stack.deliver_resume_requests()
    assert stack.wait_for(execution_name(run_id, 1))["status"] == "SUCCEEDED"
    return run_id


def test_pages_by_cursor_and_a_long_poll_that_answers_with_the_next_commit(
        deployment: Deployment) -> None:
    stack, store = deployment.stack, deployment.services.store
    run_id = suspended_run(deployment)
    first = events(deployment, run_id)
    assert first.status == 200, first.body
    logged = store.list_events(run_id, limit=1000)
    assert [event["cursor"] for event in first.body["events"]] == [e.cursor for e in logged]
    assert [event["id"] for event in first.body["events"]] == [e.id for e in logged]
    assert first.body["status"] == "suspended"
    assert first.body["events"][-1]["type"] == "run.suspended"
    # A page after a cursor, bounded by `limit`.
    middle = events(deployment, run_id, after=2, limit=3)
    assert [event["cursor"] for event in middle.body["events"]] == [3, 4, 5]

    # The approval is recorded (the run stays suspended until its next attempt runs);
    # nothing is after the last cursor yet. While the request waits, the next attempt
    # runs (the start and Advance functions: the API function serves one request at a
    # time, as a Lambda container does) and commits its first events.
    approval_id = store.load_run(run_id).suspension.details["approval_id"]  # type: ignore[union-attr]
    answered = stack.call_api(http_event("api-approve.json", runId=run_id,
                                         approvalId=approval_id, body={"approved": True}))
    assert answered.status == 200, answered.body
    resumed: list[str] = []

    def next_attempt() -> None:
        # Most likely after the request began waiting (what it answers holds either way).
        time.sleep(1.0)
        stack.deliver_resume_requests()
        resumed.append(stack.wait_for(execution_name(run_id, 2))["status"])

    attempt = threading.Thread(target=next_attempt)
    attempt.start()
    answer = events(deployment, run_id, after=first.body["cursor"], wait=20)
    attempt.join(timeout=HANG)
    assert not attempt.is_alive() and resumed == ["SUCCEEDED"]
    assert answer.status == 200, answer.body
    assert answer.body["events"], answer.body  # woken by the commit, not the wait's end
    assert answer.body["events"][0]["cursor"] == first.body["cursor"] + 1
    assert answer.body["events"][0]["type"] == "run.resumed"

    # The rest of the log, and then a long-poll of the finished run answers at once.
    rest = events(deployment, run_id, after=first.body["cursor"], limit=1000)
    whole = [*first.body["events"], *rest.body["events"]]
    assert [event["cursor"] for event in whole] == list(range(1, len(whole) + 1))
    assert [event["id"] for event in whole] == [e.id for e in store.list_events(
        run_id, limit=1000)]
    done = events(deployment, run_id, after=len(whole), wait=20)
    assert done.body == {"events": [], "cursor": len(whole), "status": "completed"}


def test_another_tenants_events_are_404_like_a_missing_run(deployment: Deployment) -> None:
    run_id = suspended_run(deployment)
    stranger = deployment.stack.call_api(http_event(
        "api-list-events.json", runId=run_id, caller=iam_caller(MALLORY)))
    missing = deployment.stack.call_api(http_event(
        "api-list-events.json", runId="run_missing", caller=iam_caller(MALLORY)))
    assert stranger.status == missing.status == 404
    assert stranger.headers["Content-Type"] == "application/problem+json"
    assert {**stranger.body, "detail": None} == {**missing.body, "detail": None}
