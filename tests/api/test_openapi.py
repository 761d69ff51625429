"""The OpenAPI document: generated from the routes, committed as docs/openapi.json, complete."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from routes_harness import Api

from agent_runtime.api import openapi_document
from agent_runtime.api.openapi import openapi_text
from stores.memory import MemoryRunStore

COMMITTED = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"
ROUTES = {
    "/runs": {"get", "post"},
    "/runs/{runId}": {"get"},
    "/runs/{runId}/output": {"get"},
    "/runs/{runId}/checkpoints": {"get"},
    "/runs/{runId}/checkpoints/{seq}": {"get"},
    "/runs/{runId}/events": {"get"},
    "/runs/{runId}/approvals/{approvalId}": {"post"},
    "/runs/{runId}/resume": {"post"},
    "/runs/{runId}/cancel": {"post"},
    "/runs/resume-crash-looped": {"post"},
    "/runs/{runId}/fork": {"post"},
    "/runs/{runId}/effects": {"get"},
    "/runs/{runId}/effects/{key}": {"post"},
    "/whoami": {"get"},
    "/manifests/validate": {"post"},
    "/openapi.json": {"get"},
}


# POST routes that take no body.
BODILESS = ("/cancel", "/resume-crash-looped")


def operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(path, method, operation) for path, item in document["paths"].items()
            for method, operation in item.items()]


def test_the_committed_document_is_what_the_routes_say() -> None:
    assert COMMITTED.read_text(encoding="utf-8") == openapi_text(), (
        "docs/openapi.json is stale: run `make openapi` and commit the result")


def test_the_document_is_deterministic_and_served_as_is() -> None:
    assert openapi_document() == openapi_document() == json.loads(openapi_text())
    reply = Api(MemoryRunStore()).get("/openapi.json", token=None)
    assert reply.status == 200 and reply.body == openapi_document()


def test_every_route_is_documented_with_its_parameters_and_bodies() -> None:
    document = openapi_document()
    assert document["openapi"].startswith("3.1")
    assert {path: set(item) for path, item in document["paths"].items()} == ROUTES
    ids = [operation["operationId"] for _, _, operation in operations(document)]
    assert len(ids) == len(set(ids))
    for path, method, operation in operations(document):
        named = {parameter["name"] for parameter in operation.get("parameters", [])
                 if parameter["in"] == "path"}
        assert named == {part[1:-1] for part in path.split("/") if part.startswith("{")}, path
        assert ("requestBody" in operation) == (
            method == "post" and not path.endswith(BODILESS)), (method, path)
    create = document["paths"]["/runs"]["post"]
    assert create["requestBody"]["required"] is True
    assert [p["name"].lower() for p in create["parameters"]] == ["idempotency-key"]
    listing = {p["name"] for p in document["paths"]["/runs"]["get"]["parameters"]}
    assert listing == {"status", "parent", "agent", "idPrefix", "createdAfter", "createdBefore",
                       "limit", "cursor"}


def test_every_route_documents_its_problems_as_problem_json() -> None:
    document = openapi_document()
    problem = {"$ref": "#/components/schemas/Problem"}
    for path, method, operation in operations(document):
        responses = operation["responses"]
        for status, response in responses.items():
            if not status.startswith("2"):
                assert response["content"] == {"application/problem+json": {"schema": problem}}
        if path == "/openapi.json":
            assert operation["security"] == []
            continue
        expected = {"400", "401", "404", "413", "422", "500"}
        if method == "post":
            expected |= {"415"} if not path.endswith(BODILESS) else set()
            # A conflict with a run's state: on one run, or a run to create.
            expected |= {"409"} if "{runId}" in path or path == "/runs" else set()
        assert expected <= set(responses), (method, path)
        for status in expected:
            content = responses[status]["content"]
            assert content == {"application/problem+json": {"schema": problem}}, (path, status)
        success = [status for status in responses if status.startswith("2")]
        assert success and all("application/json" in responses[s]["content"] for s in success)
    schema = document["components"]["schemas"]["Problem"]
    assert set(schema["required"]) == {"type", "title", "status", "detail"}


def test_the_security_scheme_is_bearer_and_says_what_aws_uses() -> None:
    document = openapi_document()
    scheme = document["components"]["securitySchemes"]["bearer"]
    assert scheme["type"] == "http" and scheme["scheme"] == "bearer"
    assert "SigV4" in scheme["description"] and "JWT" in scheme["description"]
    assert document["security"] == [{"bearer": []}]
