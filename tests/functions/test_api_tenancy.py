"""Tenants of the HTTP API on AWS: who API Gateway says calls, and what each may see.

Requests go through the real `functions.api.app.handler` with the identity
API Gateway's authorizer put in the event: an IAM principal (a role session
is its role) or a JWT's claims. A tenant sees only its runs; another
tenant's run is 404, exactly like a missing one.
"""

from __future__ import annotations

from typing import Any

from aws_stack import Deployment, HttpAnswer, http_event, iam_caller, jwt_caller

ALICE = "arn:aws:sts::123456789012:assumed-role/agent-runtime-client/alice"
BOB = "arn:aws:sts::123456789012:assumed-role/agent-runtime-client/bob"  # same role
ROLE = "arn:aws:iam::123456789012:role/agent-runtime-client"
MALLORY = "arn:aws:iam::123456789012:user/mallory"
ISSUER = "https://cognito-idp.us-east-1.amazonaws.com/us-east-1_EXAMPLE"


def call(deployment: Deployment, name: str, caller: dict[str, Any] | None,
         **options: Any) -> HttpAnswer:
    return deployment.stack.call_api(http_event(name, caller=caller, **options))


def start(deployment: Deployment, caller: dict[str, Any]) -> dict[str, Any]:
    answer = call(deployment, "api-start-run.json", caller)
    assert answer.status == 201, answer.body
    run: dict[str, Any] = answer.body["run"]
    return run


def test_iam_principals_and_jwt_subjects_are_tenants(deployment: Deployment) -> None:
    assert start(deployment, iam_caller(ALICE))["tenant"] == ROLE
    assert start(deployment, iam_caller(MALLORY))["tenant"] == MALLORY
    assert start(deployment, jwt_caller(sub="user-1", iss=ISSUER))["tenant"] == "user-1"
    # The sample JWT event's caller is its token's subject.
    sample = deployment.stack.call_api(http_event("api-start-run-jwt.json"))
    assert sample.status == 201
    assert sample.body["run"]["tenant"] == "8f0c2b1e-9a7d-4c3b-8e61-0d2f4a6b8c10"


def test_a_tenant_sees_and_changes_only_its_own_runs(deployment: Deployment) -> None:
    store = deployment.services.store
    run_id = start(deployment, iam_caller(ALICE))["runId"]
    # Another session of the same role is the same tenant.
    assert call(deployment, "api-get-run.json", iam_caller(BOB), runId=run_id).status == 200
    for stranger in (iam_caller(MALLORY), jwt_caller(sub="user-1")):
        for name in ("api-get-run.json", "api-list-checkpoints.json", "api-list-effects.json"):
            answer = call(deployment, name, stranger, runId=run_id)
            assert answer.status == 404, (name, answer.body)
            assert answer.headers["Content-Type"] == "application/problem+json"
        cancelled = call(deployment, "api-cancel.json", stranger, runId=run_id)
        assert cancelled.status == 404
        resumed = call(deployment, "api-resume.json", stranger, runId=run_id)
        assert resumed.status == 404
        assert call(deployment, "api-list-runs.json", stranger, query={}).body["runs"] == []
    record = store.load_run(run_id)
    assert record is not None and record.status == "created"
    # Missing and foreign runs answer alike.
    missing = call(deployment, "api-get-run.json", iam_caller(MALLORY), runId="run_missing")
    foreign = call(deployment, "api-get-run.json", iam_caller(MALLORY), runId=run_id)
    assert {**missing.body, "detail": None} == {**foreign.body, "detail": None}


def test_a_request_without_a_verified_identity_is_401(deployment: Deployment) -> None:
    for caller in (None, {"iam": {"userArn": None}}, jwt_caller(iss=ISSUER)):
        answer = call(deployment, "api-list-runs.json", caller)
        assert answer.status == 401, (caller, answer.body)
        assert answer.headers["Content-Type"] == "application/problem+json"
    assert deployment.services.store.list_runs().runs == []
    # The API's description is public.
    assert deployment.stack.call_api(http_event("api-openapi.json")).status == 200


def test_listing_a_tenants_runs_queries_its_index_and_never_scans(
        deployment: Deployment) -> None:
    mine = [start(deployment, iam_caller(ALICE))["runId"] for _ in range(3)]
    start(deployment, iam_caller(MALLORY))
    start(deployment, jwt_caller(sub="user-1"))
    requests: list[tuple[str, dict[str, Any]]] = []

    def record(params: dict[str, Any], model: Any, **_: Any) -> None:
        requests.append((model.name, dict(params)))

    events = deployment.services.store.client.meta.events
    events.register("before-parameter-build.dynamodb", record)
    try:
        listed = call(deployment, "api-list-runs.json", iam_caller(BOB), query={})
    finally:
        events.unregister("before-parameter-build.dynamodb", record)
    assert listed.status == 200, listed.body
    assert [run["runId"] for run in listed.body["runs"]] == sorted(mine, reverse=True)
    operations = [name for name, _ in requests]
    assert "Scan" not in operations
    queries = [params for name, params in requests if name == "Query"]
    assert queries and all(params.get("IndexName") == "by-tenant" for params in queries)

    suspended = call(deployment, "api-list-runs.json", iam_caller(ALICE),
                     query={"status": "suspended"})
    assert suspended.status == 200 and suspended.body["runs"] == []
