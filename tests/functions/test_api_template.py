"""What template.yaml promises about the HTTP API, read from the template itself.

(`sam validate --lint` and `cfn-lint` check that it is valid; these are the
project's own rules: every route authenticated, IAM or JWT by one switch,
access logs, throttling, and what a client needs to call it.)
"""

from __future__ import annotations

import json
from typing import Any

from tests.stores.aws.aws_template import load_template

# docs/design.md section 12's routes, as API Gateway names them.
ROUTES = {("POST", "/runs"), ("GET", "/runs"), ("GET", "/runs/{runId}"),
          ("GET", "/runs/{runId}/output"),
          ("GET", "/runs/{runId}/checkpoints"), ("GET", "/runs/{runId}/checkpoints/{seq}"),
          ("GET", "/runs/{runId}/events"),
          ("POST", "/runs/{runId}/approvals/{approvalId}"), ("POST", "/runs/{runId}/resume"),
          ("POST", "/runs/{runId}/cancel"), ("POST", "/runs/{runId}/fork"),
          ("POST", "/runs/resume-crash-looped"),
          ("GET", "/runs/{runId}/effects"), ("POST", "/runs/{runId}/effects/{key}"),
          ("GET", "/whoami"), ("GET", "/openapi.json"),
          ("POST", "/manifests/validate")}
# The web console's files (agent_runtime/console): served by the same function,
# public, and not part of the API's OpenAPI document.
CONSOLE_ROUTES = {("GET", "/"), ("GET", "/console/{asset}"), ("GET", "/console/examples/{name}")}


def jwt_or_iam(scope: str) -> dict[str, Any]:
    """A route's security: IAM, or a JWT with the `Api{scope}Scope` parameter's scope."""
    scopes = {"Fn::If": [f"Checks{scope}Scope", [{"Ref": f"Api{scope}Scope"}], []]}
    return {"Fn::If": ["UsesJwt", [{"jwt": scopes}], [{"sigv4": []}]]}


def resource(name: str) -> dict[str, Any]:
    found: dict[str, Any] = load_template()["Resources"][name]
    return found


def api_routes() -> dict[tuple[str, str], dict[str, Any]]:
    paths = resource("Api")["Properties"]["DefinitionBody"]["paths"]
    return {(method.upper(), path): operation for path, methods in paths.items()
            for method, operation in methods.items()}


def test_every_route_is_served_by_the_api_function() -> None:
    assert resource("Api")["Type"] == "AWS::Serverless::HttpApi"
    assert set(api_routes()) == ROUTES | CONSOLE_ROUTES
    function = resource("ApiFunction")["Properties"]
    assert function["Handler"] == "functions.api.app.handler"
    events = function["Events"].values()
    assert all(event["Type"] == "HttpApi" and event["Properties"]["ApiId"] == {"Ref": "Api"}
               for event in events)
    assert {(event["Properties"]["Method"], event["Properties"]["Path"])
            for event in events} == ROUTES | CONSOLE_ROUTES


def test_the_routes_are_those_of_the_openapi_document() -> None:
    from agent_runtime.api import openapi_document

    documented = {(method.upper(), path)
                  for path, methods in openapi_document()["paths"].items()
                  for method in methods}
    assert documented == ROUTES


def test_every_route_but_the_description_needs_iam_unless_a_jwt_issuer_is_given() -> None:
    template = load_template()
    parameters = template["Parameters"]
    for name in ("JwtIssuer", "JwtAudience", "TenantClaim"):
        assert parameters[name]["Default"] == "", name
    assert template["Conditions"]["UsesJwt"] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "JwtIssuer"}, ""]}]}
    body = resource("Api")["Properties"]["DefinitionBody"]
    condition, jwt, iam = body["components"]["securitySchemes"]["Fn::If"]
    assert condition == "UsesJwt"
    assert iam == {"sigv4": {"type": "apiKey", "name": "Authorization", "in": "header",
                             "x-amazon-apigateway-authtype": "awsSigv4"}}
    authorizer = jwt["jwt"]["x-amazon-apigateway-authorizer"]
    assert authorizer["type"] == "jwt"
    assert authorizer["jwtConfiguration"] == {"issuer": {"Ref": "JwtIssuer"},
                                              "audience": {"Ref": "JwtAudience"}}
    for route, operation in api_routes().items():
        # The API's description is public, as `serve` serves it.
        public = route == ("GET", "/openapi.json") or route in CONSOLE_ROUTES
        # Reading needs the read scope; starting or changing a run, the write scope.
        scope = "Read" if route[0] == "GET" else "Write"
        expected = {} if public else {"security": jwt_or_iam(scope)}
        assert operation == expected, route
    # A JWT authorizer without an audience would accept any token of the issuer.
    assert template["Rules"]["JwtNeedsAudience"]["Assertions"]
    variables = resource("ApiFunction")["Properties"]["Environment"]["Variables"]
    assert variables["AGENT_RUNTIME_TENANT_CLAIM"] == {"Ref": "TenantClaim"}
    assert variables["AGENT_RUNTIME_READ_SCOPE"] == {"Ref": "ApiReadScope"}
    assert variables["AGENT_RUNTIME_WRITE_SCOPE"] == {"Ref": "ApiWriteScope"}
    assert parameters["ApiReadScope"]["Default"] == "agent-runtime/runs.read"
    assert parameters["ApiWriteScope"]["Default"] == "agent-runtime/runs.write"


def test_the_api_logs_every_request_and_throttles() -> None:
    props = resource("Api")["Properties"]
    logs = props["AccessLogSettings"]
    assert logs["DestinationArn"] == {"Fn::GetAtt": ["ApiAccessLogGroup", "Arn"]}
    assert resource("ApiAccessLogGroup")["Properties"]["RetentionInDays"] == {
        "Ref": "LogRetentionDays"}
    line = json.loads(logs["Format"])
    assert {"requestId", "routeKey", "status", "principal", "subject"} <= set(line)
    assert all(value.startswith("$context.") for value in line.values())
    throttling = props["DefaultRouteSettings"]
    assert throttling == {"ThrottlingRateLimit": {"Ref": "ApiThrottlingRateLimit"},
                          "ThrottlingBurstLimit": {"Ref": "ApiThrottlingBurstLimit"}}
    parameters = load_template()["Parameters"]
    assert parameters["ApiThrottlingRateLimit"]["Default"] > 0
    assert parameters["ApiThrottlingBurstLimit"]["Default"] > 0


def test_the_api_function_reads_and_writes_runs_and_puts_only_its_own_events() -> None:
    role = resource("ApiRole")["Properties"]
    assert [entry["Fn::If"][0] for entry in role["ManagedPolicyArns"]] == ["TracingOn"]
    statements = role["Policies"][0]["PolicyDocument"]["Statement"]
    (put,) = [entry for entry in statements
              if isinstance(entry, dict) and entry.get("Action") == "events:PutEvents"]
    assert put["Resource"] == {"Fn::GetAtt": ["EventBus", "Arn"]}
    # resume-requested to start and resume runs; run-finished for a run a client cancels.
    assert put["Condition"] == {"StringEquals": {
        "events:source": "agent-runtime",
        "events:detail-type": ["resume-requested", "run-finished"]}}
    (indexes,) = [entry for entry in statements if entry.get("Sid") == "RunIndexes"]
    assert {"Fn::Sub": "${RunsTable.Arn}/index/by-tenant"} in indexes["Resource"]
    assert {"Fn::Sub": "${RunsTable.Arn}/index/by-agent"} in indexes["Resource"]


def test_the_stack_outputs_the_api_url_and_a_client_policy() -> None:
    outputs = load_template()["Outputs"]
    assert "${Api}.execute-api." in outputs["ApiUrl"]["Value"]["Fn::Sub"]
    assert outputs["ApiClientPolicyArn"]["Value"] == {"Ref": "ApiClientPolicy"}
    policy = resource("ApiClientPolicy")
    # Under JWT auth API Gateway does not check execute-api:Invoke: no policy then.
    assert policy["Type"] == "AWS::IAM::ManagedPolicy"
    assert policy["Condition"] == outputs["ApiClientPolicyArn"]["Condition"] == "UsesIamAuth"
    (statement,) = policy["Properties"]["PolicyDocument"]["Statement"]
    assert statement["Action"] == "execute-api:Invoke"
    granted = {arn["Fn::Sub"].split("${Api}/*/", 1)[1] for arn in statement["Resource"]}
    assert granted == {"POST/runs", "GET/runs", "GET/runs/*", "POST/runs/*", "GET/whoami",
                       "POST/manifests/validate"}
