"""The other direction of least privilege: what the handlers call is granted.

conftest's `calls_are_granted` checks every function test's calls against
template.yaml's roles; here, a run whose state is large enough to live in S3
blobs goes through the API, start and Advance, and the check itself
is shown to refuse what a role does not allow.
"""

from __future__ import annotations

import hashlib
import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
import pytest
from aws_stack import Deployment, http_event
from granted_calls import Call, CallRecorder, refused
from grants import grants, role_of
from moto import mock_aws

from functions.executions import execution_name
from stores.dynamodb.store import DEFAULT_INLINE_LIMIT
from tests.stores.aws.aws_template import REGION

pytestmark = pytest.mark.slow


def test_a_run_kept_in_blobs_calls_only_what_each_role_grants(
        deployment: Deployment, calls_are_granted: CallRecorder) -> None:
    stack = deployment.stack
    sample = json.loads(http_event("api-start-run.json")["body"])
    # Past the inline limit: the run's variables, prompt and output are blobs.
    # (hex digits of hashes: compression only halves them).
    topic = "".join(hashlib.sha256(n.to_bytes(4, "big")).hexdigest()
                    for n in range(DEFAULT_INLINE_LIMIT // 16))
    body = {"manifest": sample["manifest"], "options": sample["options"],
            "variables": {"topic": topic}}
    created = stack.call_api(http_event("api-start-run.json", body=body))
    assert created.status == 201, created.body
    run_id = created.body["run"]["runId"]
    stack.deliver_resume_requests()
    assert stack.wait_for(execution_name(run_id, 1))["status"] == "SUCCEEDED"
    answer = stack.call_api(http_event("api-get-run.json", runId=run_id))
    assert answer.status == 200 and answer.body["run"]["status"] == "completed"

    blob_calls = {(call.function, call.operation) for call in calls_are_granted.calls
                  if call.service == "s3"}
    assert {("ApiFunction", "PutObject"), ("AdvanceFunction", "PutObject"),
            ("AdvanceFunction", "GetObject")} <= blob_calls
    assert all(call.params["Key"].startswith("checkpoints/") for call in calls_are_granted.calls
               if call.service == "s3" and "Key" in call.params)
    assert calls_are_granted.ungranted() == []


def _why(function: str, service: str, operation: str, params: dict[str, Any]) -> list[str]:
    return refused(Call(function, service, operation, params), grants(role_of(function)))


def test_the_check_refuses_what_a_role_does_not_grant() -> None:
    deletion = {"TransactItems": [{"Delete": {"TableName": "runs", "Key": {}}},
                                  {"Delete": {"TableName": "runs", "Key": {}}}]}
    assert _why("ApiFunction", "dynamodb", "TransactWriteItems", deletion) == [
        "dynamodb:DeleteItem is not granted"] * 2
    assert _why("AdvanceFunction", "dynamodb", "Query", {"IndexName": "by-status-shard"}) == [
        "dynamodb:Query is granted, but not on what it touches: by-status-shard"]
    assert _why("ApiFunction", "s3", "PutObject", {"Key": "artifacts/run_1/a"}) == [
        "s3:PutObject is granted, but not on what it touches: artifacts/run_1/a"]
    finished = {"Entries": [{"Source": "agent-runtime", "DetailType": "run-finished"}]}
    assert _why("StartFunction", "events", "PutEvents", finished) == [
        "events:PutEvents is not granted"]
    forged = {"Entries": [{"Source": "someone-else", "DetailType": "run-finished"}]}
    assert _why("ReconcilerFunction", "events", "PutEvents", forged) == [
        "events:PutEvents is granted, but not on what it touches: "
        "[('someone-else', 'run-finished')]"]
    assert _why("RetentionFunction", "s3", "DeleteObjects", {
        "Delete": {"Objects": [{"Key": "checkpoints/run_1/x"}]}}) == []
    assert _why("AdvanceFunction", "dynamodb", "TransactWriteItems", {"TransactItems": [
        {"ConditionCheck": {}}, {"Put": {}}]}) == []


def test_a_call_a_handler_makes_on_a_worker_thread_is_recorded(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The store's listing reads partitions on a thread pool: the handler's frame is
    # on the submitting thread's stack, not on the worker's.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    recorder = CallRecorder()
    recorder._handlers = {("tests/functions/test_granted_calls.py", "pretend_handler"):
                          "ApiFunction"}

    def pretend_handler(client: Any) -> None:
        with ThreadPoolExecutor(max_workers=2) as pool:
            list(pool.map(lambda _: client.list_tables(), range(2)))

    with mock_aws(), recorder.recording():
        client = boto3.client("dynamodb", region_name=REGION)
        pretend_handler(client)
        with ThreadPoolExecutor(max_workers=1) as pool:  # no handler submitted this one
            pool.submit(client.describe_limits).result()
        client.list_tables()  # nor this: no handler on the stack
    assert [(call.function, call.operation) for call in recorder.calls] == [
        ("ApiFunction", "ListTables")] * 2
