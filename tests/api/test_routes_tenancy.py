"""Tenancy: every route acts for the caller's tenant; another tenant's run does not exist."""

from __future__ import annotations

from typing import Any

import pytest
from routes_harness import Api


def every_route(run_id: str, approval_id: str) -> list[tuple[str, str, Any]]:
    return [
        ("GET", f"/runs/{run_id}", None),
        ("GET", f"/runs/{run_id}/output", None),
        ("GET", f"/runs/{run_id}/checkpoints", None),
        ("GET", f"/runs/{run_id}/checkpoints/1", None),
        ("GET", f"/runs/{run_id}/effects", None),
        ("POST", f"/runs/{run_id}/approvals/{approval_id}", {"approved": True}),
        ("POST", f"/runs/{run_id}/resume", {}),
        ("POST", f"/runs/{run_id}/cancel", None),
        ("POST", f"/runs/{run_id}/fork", {"seq": 1}),
        ("POST", f"/runs/{run_id}/effects/{approval_id}", {"action": "skip"}),
    ]


def test_each_tenant_lists_only_its_own_runs(api: Api) -> None:
    alice = {api.start("hello.agent.yaml")["runId"] for _ in range(2)}
    bob = {api.start("hello.agent.yaml", token="bob-token")["runId"]}
    assert {r["runId"] for r in api.get("/runs").body["runs"]} == alice
    assert {r["runId"] for r in api.get("/runs", token="bob-token").body["runs"]} == bob


def test_another_tenants_run_is_not_found_on_every_route(api: Api) -> None:
    run = api.start("approval.agent.yaml")
    approval_id = run["suspension"]["details"]["approvalId"]
    missing = every_route("run_0000000000000000000000000000000", approval_id)
    for (method, path, body), (_, missing_path, _) in zip(
            every_route(run["runId"], approval_id), missing, strict=True):
        theirs = api.request(method, path, token="bob-token",
                             **({} if body is None else {"json_body": body}))
        nothing = api.request(method, missing_path, token="bob-token",
                              **({} if body is None else {"json_body": body}))
        assert theirs.status == nothing.status == 404, (method, path, theirs)
        assert theirs.body == nothing.body  # the same answer: existence is not disclosed
    assert api.get(f"/runs/{run['runId']}").run["status"] == "suspended"  # untouched
    assert api.get("/runs", query={"parent": run["runId"]}, token="bob-token").body["runs"] == []


@pytest.mark.parametrize("token", [None, "wrong-token"])
def test_every_route_needs_credentials(api: Api, token: str | None) -> None:
    run = api.start("approval.agent.yaml")
    approval_id = run["suspension"]["details"]["approvalId"]
    for method, path, body in [("GET", "/runs", None), ("POST", "/runs", {"manifest": "x"}),
                               ("GET", "/whoami", None), *every_route(run["runId"], approval_id)]:
        reply = api.request(method, path, token=token,
                            **({} if body is None else {"json_body": body}))
        assert reply.status == 401, (method, path, reply)
        assert reply.headers["www-authenticate"] == "Bearer"
    assert api.get("/openapi.json", token=None).status == 200
    assert api.get(f"/runs/{run['runId']}").run["status"] == "suspended"


def test_whoami_names_the_callers_tenant(api: Api) -> None:
    assert api.get("/whoami").body == {"tenant": "alice"}
    assert api.get("/whoami", token="bob-token").body == {"tenant": "bob"}
