"""JWT scopes on AWS: a token reads with the read scope and changes runs with the write scope.

Requests go through the real `functions.api.app.handler` with the claims API
Gateway's JWT authorizer verified. The deployed environment holds
template.yaml's defaults (`ApiReadScope` agent-runtime/runs.read,
`ApiWriteScope` agent-runtime/runs.write); a token without the route's scope
is 403 problem+json naming the route and the scope.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEventV2
from aws_stack import Deployment, HttpAnswer, http_event, iam_caller, jwt_caller

from agent_runtime.api.problems import ApiProblem
from functions.api.authenticator import HttpApiAuthenticator, token_scopes

READ = "agent-runtime/runs.read"
WRITE = "agent-runtime/runs.write"
MALLORY = "arn:aws:iam::123456789012:user/mallory"
TOKEN = "Bearer eyJraWQiOiJFWEFNUExFIn0.EXAMPLE.EXAMPLE"  # events/api-*-jwt.json


def call(deployment: Deployment, name: str, caller: dict[str, Any], **options: Any
         ) -> HttpAnswer:
    return deployment.stack.call_api(http_event(name, caller=caller, **options))


def test_a_token_that_may_only_read_reads_and_changes_nothing(deployment: Deployment) -> None:
    writer = jwt_caller(sub="user-1", scope=f"openid {WRITE}")
    created = call(deployment, "api-start-run.json", writer)
    assert created.status == 201, created.body
    run_id = created.body["run"]["runId"]

    reader = jwt_caller(sub="user-1", scope=READ)
    assert call(deployment, "api-get-run.json", reader, runId=run_id).status == 200
    assert call(deployment, "api-list-runs.json", reader, query={}).status == 200
    for name, route in (("api-start-run.json", "POST /runs"),
                        ("api-cancel.json", "POST /runs/{runId}/cancel"),
                        ("api-fork.json", "POST /runs/{runId}/fork"),
                        ("api-resume.json", "POST /runs/{runId}/resume")):
        refused = call(deployment, name, reader, runId=run_id)
        assert refused.status == 403, (name, refused.body)
        assert refused.headers["Content-Type"] == "application/problem+json"
        assert refused.body["detail"] == (f"{route} needs the scope {WRITE!r}, which the "
                                          "token does not grant")
        assert "EXAMPLE" not in str(refused.body)  # the token is never echoed
    # Nothing was changed by the refused requests.
    runs = call(deployment, "api-list-runs.json", reader, query={}).body["runs"]
    assert [run["runId"] for run in runs] == [run_id]
    assert runs[0]["status"] != "cancelled"


def test_a_token_that_may_only_write_reads_nothing(deployment: Deployment) -> None:
    writer = jwt_caller(sub="user-1", scope=WRITE)
    created = call(deployment, "api-start-run.json", writer)
    assert created.status == 201, created.body
    refused = call(deployment, "api-get-run.json", writer, runId=created.body["run"]["runId"])
    assert refused.status == 403
    assert refused.body["detail"] == (f"GET /runs/{{runId}} needs the scope {READ!r}, which "
                                      "the token does not grant")
    no_scope = call(deployment, "api-list-runs.json", jwt_caller(sub="user-1", scope=""),
                  query={})
    assert no_scope.status == 403


def test_scopes_are_read_from_scp_and_the_authorizers_scopes(deployment: Deployment) -> None:
    # An issuer that sends a list claim: API Gateway renders it `[a b]`.
    listed = {"jwt": {"claims": {"sub": "user-2", "scp": f"[{READ} {WRITE}]"},
                      "scopes": None}}
    assert call(deployment, "api-start-run.json", listed).status == 201
    granted = {"jwt": {"claims": {"sub": "user-2"}, "scopes": [READ]}}
    assert call(deployment, "api-list-runs.json", granted, query={}).status == 200


def test_iam_callers_need_no_scope(deployment: Deployment) -> None:
    assert call(deployment, "api-start-run.json", iam_caller(MALLORY)).status == 201
    assert call(deployment, "api-list-runs.json", iam_caller(MALLORY), query={}).status == 200


def _event(method: str, route: str, claims: dict[str, Any]) -> APIGatewayProxyEventV2:
    return APIGatewayProxyEventV2({
        "routeKey": f"{method} {route}", "headers": {"authorization": TOKEN},
        "requestContext": {"http": {"method": method, "path": route},
                           "authorizer": {"jwt": {"claims": claims, "scopes": None}}}})


def test_an_empty_scope_parameter_checks_nothing() -> None:
    open_api = HttpApiAuthenticator(read_scope="", write_scope="")
    assert open_api.tenant(_event("POST", "/runs", {"sub": "user-3"})) == "user-3"
    assert open_api.tenant(_event("GET", "/runs", {"sub": "user-3"})) == "user-3"
    writes_only = HttpApiAuthenticator(read_scope="", write_scope=WRITE)
    assert writes_only.tenant(_event("GET", "/runs", {"sub": "user-3"})) == "user-3"
    try:
        writes_only.tenant(_event("POST", "/runs", {"sub": "user-3", "scope": READ}))
    except ApiProblem as problem:
        assert problem.status == 403
    else:
        raise AssertionError("a token without the write scope was let through")


def test_token_scopes_split_every_form_issuers_send() -> None:
    assert token_scopes({"claims": {"scope": "a b  c"}}) == {"a", "b", "c"}
    assert token_scopes({"claims": {"scp": ["a", "b"]}}) == {"a", "b"}
    assert token_scopes({"claims": {"scp": "[a b]"}, "scopes": ["c"]}) == {"a", "b", "c"}
    assert token_scopes({"claims": {"scope": 7}, "scopes": None}) == set()
