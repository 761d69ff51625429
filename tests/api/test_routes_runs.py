"""Starting runs over HTTP and following them: approval, listing, timeline, cancel, resume, fork."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml
from routes_harness import ECHO, Api, manifest_text

from stores.base import RunStore


@pytest.mark.parametrize("kind", ["local", "aws"])
def test_a_run_suspends_at_its_approval_and_completes_once_approved(store: RunStore,
                                                                    kind: str) -> None:
    api = Api(store, kind=kind)
    run = api.start("approval.agent.yaml")
    assert run["status"] == "suspended" and run["tenant"] == "alice"
    assert run["agent"] == {"id": "approval", "name": "Approval flow"}
    suspension = run["suspension"]
    assert suspension["reason"] == "approval"
    assert suspension["details"]["prompt"] == "Approve the proposed response?"
    assert suspension["details"]["stepPath"] == "approve"
    approval_id = suspension["details"]["approvalId"]

    reply = api.post(f"/runs/{run['runId']}/approvals/{approval_id}",
                     {"approved": True, "response": {"note": "ship it"}})
    assert reply.status == 200, reply
    done = reply.run
    assert done["status"] == "completed" and done["attempt"] == 2
    assert isinstance(done["output"], str) and done["output"]
    # It waits on nothing now; what it waited on, and the answer, are kept apart.
    assert done["suspension"] is None
    assert done["lastSuspension"]["details"]["approvalId"] == approval_id
    assert done["lastSuspension"]["decision"]["approved"] is True
    assert done["lastSuspension"]["decision"]["response"] == {"note": "ship it"}
    assert done["lastSuspension"]["decision"]["respondedBy"] == "alice"
    assert api.launcher.resumed == [(run["runId"], "approval-recorded", None)]
    assert api.get(f"/runs/{run['runId']}").run == done


def test_the_run_shows_what_a_client_needs(api: Api) -> None:
    reply = api.post("/runs", {"manifest": manifest_text("hello.agent.yaml"), "options": ECHO,
                               "variables": {"topic": "leases"},
                               "budget": {"maxTotalTokens": 100_000}})
    assert reply.status == 201
    assert reply.headers["location"] == f"/runs/{reply.run['runId']}"
    run = reply.run
    assert set(run) == {"runId", "status", "attempt", "tenant", "manifestHash", "agent", "parent",
                        "suspension", "lastSuspension", "output", "outputRef", "outputBytes",
                        "error", "usage", "checkpointSeq", "createdAt", "updatedAt", "forkedFrom",
                        "traceId"}
    assert re.fullmatch(r"[0-9a-f]{32}", run["traceId"])
    assert run["status"] == "completed" and run["manifestHash"].startswith("sha256:")
    assert run["usage"]["maxTotalTokens"] == 100_000 and run["usage"]["consumedTokens"] > 0
    assert "leases" in json.dumps(run["output"])
    assert run["checkpointSeq"] >= 1 and run["parent"] is None and run["forkedFrom"] is None
    record = api.store.load_run(run["runId"])
    assert record is not None and record.options["model"] == "scripted/echo"


@pytest.mark.parametrize("form", ["object", "yaml", "json"])
def test_the_manifest_may_be_an_object_or_its_yaml_or_json_text(api: Api, form: str) -> None:
    data = yaml.safe_load(manifest_text("hello.agent.yaml"))
    manifest: Any = {"object": data, "yaml": manifest_text("hello.agent.yaml"),
                     "json": json.dumps(data)}[form]
    reply = api.post("/runs", {"manifest": manifest, "options": ECHO})
    assert reply.status == 201, reply
    assert reply.run["status"] == "completed"


def test_runs_list_newest_first_a_page_at_a_time(api: Api) -> None:
    ids = [api.start("hello.agent.yaml")["runId"] for _ in range(5)]
    waiting = api.start("approval.agent.yaml")["runId"]
    first = api.get("/runs", query={"limit": 4})
    assert first.status == 200
    assert [run["runId"] for run in first.body["runs"]] == [waiting, *reversed(ids)][:4]
    second = api.get("/runs", query={"limit": 4, "cursor": first.body["cursor"]})
    assert [run["runId"] for run in second.body["runs"]] == list(reversed(ids))[3:]
    assert second.body["cursor"] is None
    suspended = api.get("/runs", query={"status": "suspended"})
    assert [run["runId"] for run in suspended.body["runs"]] == [waiting]


def test_a_page_never_holds_more_than_the_servers_limit(store: RunStore) -> None:
    from agent_runtime.api import ApiLimits

    api = Api(store, limits=ApiLimits(max_page_size=2))
    for _ in range(3):
        api.start("hello.agent.yaml")
    page = api.get("/runs", query={"limit": 1000})
    assert len(page.body["runs"]) == 2 and page.body["cursor"]


def test_the_timeline_lists_checkpoints_with_their_steps_a_page_at_a_time(api: Api) -> None:
    run = api.start("prompt-chain.agent.yaml")
    assert run["status"] == "completed"
    reply = api.get(f"/runs/{run['runId']}/checkpoints", query={"limit": 2})
    assert reply.status == 200
    first = reply.body["checkpoints"]
    assert [(c["seq"], c["stepPath"], c["stepKind"]) for c in first] == [
        (1, "draft", "prompt"), (2, "review", "prompt")]
    assert first[0]["consumedTokens"] > 0 and first[0]["sizeBytes"] > 0
    assert first[1]["consumedTokens"] > first[0]["consumedTokens"]
    rest = api.get(f"/runs/{run['runId']}/checkpoints",
                   query={"limit": 50, "cursor": reply.body["cursor"]}).body
    assert [c["seq"] for c in rest["checkpoints"]] == list(range(3, run["checkpointSeq"] + 1))
    assert rest["checkpoints"][0]["stepPath"] == "revise" and rest["cursor"] is None


def test_a_checkpoint_shows_its_variables_step_results_cursor_and_budget(api: Api) -> None:
    run = api.start("prompt-chain.agent.yaml")
    reply = api.get(f"/runs/{run['runId']}/checkpoints/1")
    assert reply.status == 200
    checkpoint = reply.body["checkpoint"]
    assert checkpoint["seq"] == 1 and checkpoint["attempt"] == 1
    assert checkpoint["variables"]["topic"] == "durable agent execution"
    assert "articleDraft" in checkpoint["variables"]
    assert [r["stepPath"] for r in checkpoint["stepResults"]] == ["draft"]
    assert checkpoint["stepResults"][0]["status"] == "completed"
    assert checkpoint["cursor"][0]["stepId"] == "review"
    assert checkpoint["budget"]["consumedTokens"] > 0
    missing = api.get(f"/runs/{run['runId']}/checkpoints/999")
    assert missing.status == 404 and missing.problem["field"] == "seq"


def test_cancel_a_suspended_run_then_again(api: Api) -> None:
    run = api.start("approval.agent.yaml")
    reply = api.post(f"/runs/{run['runId']}/cancel")
    assert reply.status == 200 and reply.run["status"] == "cancelled"
    again = api.post(f"/runs/{run['runId']}/cancel")
    assert again.status == 200 and again.run["status"] == "cancelled"
    resume = api.post(f"/runs/{run['runId']}/resume")
    assert resume.status == 409 and "cancelled" in resume.problem["detail"]


def test_a_completed_run_cannot_be_cancelled_and_resuming_it_returns_it(api: Api) -> None:
    run = api.start("hello.agent.yaml")
    refused = api.post(f"/runs/{run['runId']}/cancel")
    assert refused.status == 409 and refused.problem["type"].endswith("conflict")
    reply = api.post(f"/runs/{run['runId']}/resume")
    assert reply.status == 200 and reply.run == api.get(f"/runs/{run['runId']}").run
    assert api.launcher.resumed == []


def test_resume_with_a_new_budget_continues_a_run_that_ran_out(api: Api) -> None:
    run = api.start("prompt-chain.agent.yaml", budget={"maxTotalTokens": 1})
    assert run["status"] == "suspended" and run["suspension"]["reason"] == "token-budget"
    assert run["suspension"]["details"]["maxTotalTokens"] == 1
    same = api.post(f"/runs/{run['runId']}/resume", {})
    assert same.status == 200 and same.run["status"] == "suspended"
    reply = api.post(f"/runs/{run['runId']}/resume", {"maxTotalTokens": 1_000_000})
    assert reply.status == 200, reply
    assert reply.run["status"] == "completed"
    assert [(reason, budget and budget.max_total_tokens)
            for _, reason, budget in api.launcher.resumed] == [
        ("resume-requested", None), ("resume-requested", 1_000_000)]


@pytest.mark.parametrize("kind", ["local", "aws"])
def test_the_run_shows_the_token_limit_a_resume_set(store: RunStore, kind: str) -> None:
    api = Api(store, kind=kind)
    run = api.start("prompt-chain.agent.yaml", budget={"maxTotalTokens": 1})
    assert run["status"] == "suspended" and run["usage"]["maxTotalTokens"] == 1
    reply = api.post(f"/runs/{run['runId']}/resume", {"maxTotalTokens": 1_000_000})
    assert reply.status == 200 and reply.run["status"] == "completed", reply
    shown = api.get(f"/runs/{run['runId']}").run
    assert shown["usage"]["maxTotalTokens"] == 1_000_000
    latest = api.get(f"/runs/{run['runId']}/checkpoints/{shown['checkpointSeq']}")
    assert latest.status == 200
    assert latest.body["checkpoint"]["budget"]["maxTotalTokens"] == 1_000_000


def test_resume_starts_a_run_that_never_started(store: RunStore) -> None:
    from routes_harness import RecordingLauncher

    runtime = Api(store).runtime
    api = Api(store, runtime=runtime, launcher=RecordingLauncher(runtime))
    run = api.start("hello.agent.yaml")
    assert run["status"] == "created" and api.launcher.started == [run["runId"]]
    refused = api.post(f"/runs/{run['runId']}/resume", {"maxTotalTokens": 5})
    assert refused.status == 409 and refused.problem["field"] == "maxTotalTokens"
    assert api.post(f"/runs/{run['runId']}/resume").status == 200
    assert api.launcher.started == [run["runId"]] * 2


def test_a_failed_run_is_not_resumed_but_forked(api: Api) -> None:
    run = api.start("approval.agent.yaml")
    approval_id = run["suspension"]["details"]["approvalId"]
    rejected = api.post(f"/runs/{run['runId']}/approvals/{approval_id}", {"approved": False})
    assert rejected.run["status"] == "failed"
    assert rejected.run["error"]["type"] == "approval_rejected"
    reply = api.post(f"/runs/{run['runId']}/resume")
    assert reply.status == 409 and "fork" in reply.problem["detail"]


def test_fork_starts_a_new_run_from_a_chosen_checkpoint(api: Api) -> None:
    run = api.start("prompt-chain.agent.yaml")
    reply = api.post(f"/runs/{run['runId']}/fork", {"seq": 1})
    assert reply.status == 201, reply
    fork = reply.run
    assert fork["runId"] != run["runId"] and fork["status"] == "completed"
    assert fork["forkedFrom"] == {"runId": run["runId"], "seq": 1}
    assert fork["tenant"] == "alice" and fork["output"] == run["output"]
    timeline = api.get(f"/runs/{fork['runId']}/checkpoints").body["checkpoints"]
    assert timeline[0]["seq"] == 1 and timeline[0]["stepPath"] == "draft"
    assert [c["stepPath"] for c in timeline[1:3]] == ["review", "revise"]
    latest = api.post(f"/runs/{run['runId']}/fork")
    assert latest.status == 201 and latest.run["forkedFrom"]["seq"] == run["checkpointSeq"]
    missing = api.post(f"/runs/{run['runId']}/fork", {"seq": 99})
    assert missing.status == 422 and missing.problem["field"] == "seq"


def test_fork_with_edited_variables_and_a_token_limit(api: Api) -> None:
    run = api.start("prompt-chain.agent.yaml")
    state = api.get(f"/runs/{run['runId']}/checkpoints/1").body["checkpoint"]
    edited = {**state["variables"], "articleDraft": "A draft a person rewrote."}
    reply = api.post(f"/runs/{run['runId']}/fork",
                     {"seq": 1, "variables": edited, "maxTotalTokens": 77_777})
    assert reply.status == 201, reply
    fork = reply.run
    assert fork["status"] == "completed" and fork["usage"]["maxTotalTokens"] == 77_777
    first = api.get(f"/runs/{fork['runId']}/checkpoints/1").body["checkpoint"]
    assert first["variables"] == edited
    # The steps after the fork point read the edit; the source is unchanged.
    assert "A draft a person rewrote." in json.dumps(fork["output"])
    assert "A draft a person rewrote." not in json.dumps(run["output"])
    source = api.get(f"/runs/{run['runId']}/checkpoints/1").body["checkpoint"]
    assert source["variables"] == state["variables"]
    for body, field in (({"variables": [1, 2]}, "variables"),
                        ({"maxTotalTokens": 0}, "maxTotalTokens"),
                        # `topic` is declared a string
                        ({"variables": {**state["variables"], "topic": 7}}, "variables.topic")):
        refused = api.post(f"/runs/{run['runId']}/fork", body)
        assert refused.status == 422 and field in json.dumps(refused.problem), refused


def test_sub_runs_belong_to_their_parents_tenant_and_list_under_it(api: Api) -> None:
    parent = {"schemaVersion": "1.0", "id": "parent", "steps": [
        {"id": "child", "type": "sub-run", "manifest": {
            "schemaVersion": "1.0", "id": "child",
            "steps": [{"id": "ask", "type": "approval", "prompt": "ok?"}]}}]}
    reply = api.post("/runs", {"manifest": parent, "options": ECHO})
    run = reply.run
    assert run["status"] == "suspended" and run["suspension"]["reason"] == "sub-run"
    child_id = run["suspension"]["details"]["childRunId"]
    children = api.get("/runs", query={"parent": run["runId"]}).body["runs"]
    assert [child["runId"] for child in children] == [child_id]
    assert children[0]["tenant"] == "alice"
    assert children[0]["parent"] == {"runId": run["runId"], "stepPath": "child"}
    assert api.get(f"/runs/{child_id}", token="bob-token").status == 404


def test_resume_crash_looped_resumes_the_callers_crash_looped_runs_a_page_at_a_time(
        api: Api) -> None:
    def crash_looped(token: str) -> str:
        run = api.start("approval.agent.yaml", token=token)
        # Suspended for its approval; make it look as the reconciler leaves a run
        # whose owners kept dying: suspended again, reason crash-loop.
        record = api.store.load_run(run["runId"])
        assert record is not None
        api.store.resume_run(record.run_id, owner="dead:1", now=record.updated_at,
                             lease_seconds=30)
        api.store.suspend_run(record.run_id, expected_attempt=record.attempt + 1,
                              reason="crash-loop", details={"takeovers": 3},
                              at=record.updated_at)
        return str(run["runId"])

    mine = [crash_looped("alice-token") for _ in range(3)]
    theirs = crash_looped("bob-token")
    waiting = api.start("approval.agent.yaml")  # suspended for its approval: not touched

    resumed: list[str] = []
    cursor = None
    pages = 0
    while True:
        query = {"limit": 2} | ({} if cursor is None else {"cursor": cursor})
        reply = api.post("/runs/resume-crash-looped", query=query)
        assert reply.status == 200, reply
        resumed += reply.body["resumed"]
        pages += 1
        cursor = reply.body["cursor"]
        if cursor is None:
            break
    assert pages == 2  # alice's 4 suspended runs, 2 a page
    assert sorted(resumed) == sorted(mine)
    assert sorted(run_id for run_id, reason, _ in api.launcher.resumed
                  if reason == "resume-requested") == sorted(mine)
    for run_id in [theirs, waiting["runId"]]:
        record = api.store.load_run(run_id)
        assert record is not None and record.status.value == "suspended"
