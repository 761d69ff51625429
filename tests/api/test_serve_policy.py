"""A real `serve` with two tenants applies its default host policy to every manifest of a
run tree: no tenant can make it read a file (another tenant's token, /etc/shadow,
/dev/zero) through a scripted model at any depth, and its limits answer 422 by name."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from serve_process import Serve, assert_problem, running_serve, start, wait_for_status

ALICE = "alice-token-0123456789abcdef0123456789"
BOB = "bob-token-fedcba9876543210fedcba98765432"


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    workdir = tmp_path_factory.mktemp("policy-serve")
    tokens = workdir / "tokens.yaml"
    tokens.write_text(f"{ALICE}: alice\n{BOB}: bob\n", encoding="utf-8")
    os.chmod(tokens, 0o600)
    with running_serve(workdir, token=None, args=["--tokens", str(tokens)]) as server:
        yield server


def agent(*steps: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"schemaVersion": "1.0", "id": "probe", "steps": list(steps), **extra}


def nested(inner: dict[str, Any], depth: int) -> dict[str, Any]:
    for level in range(depth):
        inner = agent({"id": f"level{level}", "type": "sub-run", "manifest": inner})
    return inner


def reads(path: str) -> dict[str, Any]:
    return agent({"id": "ask", "type": "prompt", "prompt": "hi"},
                 model={"provider": "scripted", "model": path})


@pytest.mark.parametrize("path", ["tokens.yaml", "/etc/shadow", "/dev/zero"])
@pytest.mark.parametrize("depth", [0, 1, 3])
def test_no_tenant_makes_serve_read_a_file_through_a_scripted_model(
        serve: Serve, path: str, depth: int) -> None:
    with serve.client(ALICE) as alice:
        reply = alice.post("/runs", json={"manifest": nested(reads(path), depth)})
        problem = assert_problem(reply, 422)
        assert problem["field"] == "steps[0].manifest." * depth + "model"  # the manifest's
        assert BOB not in reply.text and "root:" not in reply.text
        assert alice.get("/runs").json()["runs"] == []
    assert BOB not in serve.output()


def test_nor_through_the_model_option(serve: Serve) -> None:
    with serve.client(ALICE) as alice:
        reply = alice.post("/runs", json={
            "manifest": agent({"id": "ask", "type": "prompt", "prompt": "hi"}),
            "options": {"model": "scripted/tokens.yaml"}})
        assert assert_problem(reply, 422)["field"] == "steps[0].model"
        assert BOB not in reply.text


def test_the_default_limits_answer_422_naming_the_field(serve: Serve) -> None:
    loop = {"id": "spin", "type": "loop", "loop": {"maxIterations": 20_000_000},
            "steps": [{"id": "ask", "type": "prompt", "prompt": "hi"}]}
    with serve.client(ALICE) as alice:
        reply = alice.post("/runs", json={"manifest": agent(loop),
                                          "options": {"model": "scripted/echo"}})
        problem = assert_problem(reply, 422)
        assert problem["field"] == "steps[0].loop.maxIterations"
        assert "policy.maxLoopIterations" in problem["detail"]
        reply = alice.post("/runs", json={
            "manifest": agent({"id": "ask", "type": "prompt", "prompt": "hi"}),
            "options": {"model": "scripted/echo"}, "budget": {"maxTotalTokens": 10**12}})
        assert assert_problem(reply, 422)["field"] == "budget.maxTotalTokens"


def test_a_run_within_the_policy_runs_with_the_hosts_budget(serve: Serve,
                                                             tmp_path: Path) -> None:
    with serve.client(BOB) as bob:
        reply = bob.post("/runs", json={
            "manifest": nested(agent({"id": "ask", "type": "prompt", "prompt": "hi"},
                                     model={"provider": "scripted", "model": "echo"}), 1)})
        assert reply.status_code == 201, reply.text
        run = reply.json()["run"]
        assert run["usage"]["maxTotalTokens"] == 1_000_000


def test_a_run_that_remembers_a_script_is_neither_forked_nor_resumed_into_reading_it(
        serve: Serve) -> None:
    """Started before this host's policy (in this process, on serve's own store, as a
    local user could), it names tokens.yaml in its options: fork and resume over HTTP
    do not make serve read it."""
    from agent_runtime import AgentRuntime
    from stores.sqlite import SqliteRunStore

    manifest = agent({"id": "gate", "type": "approval", "prompt": "go?"},
                     {"id": "ask", "type": "prompt", "prompt": "hi"})
    with SqliteRunStore(serve.workdir / "runs.sqlite") as store:
        older = AgentRuntime(store=store, owner="older-host", base_dir=serve.workdir)
        run = older.run_sync(manifest=manifest, options={"model": "scripted/tokens.yaml"},
                             tenant="alice", run_id="remembers-a-script")
        assert run.status == "suspended"
    approval = run.suspension["details"]["approval_id"] if run.suspension else None
    with serve.client(ALICE) as alice:
        fork = alice.post(f"/runs/{run.run_id}/fork", json={})
        assert assert_problem(fork, 422)["field"] == "steps[1].model"
        answered = alice.post(f"/runs/{run.run_id}/approvals/{approval}",
                              json={"approved": True})
        assert answered.status_code == 200, answered.text
        done = wait_for_status(alice, run.run_id, "failed")
        assert done["error"]["type"] == "model_not_allowed"
        assert BOB not in fork.text and BOB not in str(done)
    assert BOB not in serve.output()


def test_echo_cannot_be_made_to_store_a_huge_output(serve: Serve) -> None:
    step = {"id": "big", "type": "prompt", "prompt": "hi",
            "outputSchema": {"type": "string", "minLength": 50_000_000}}
    with serve.client(ALICE) as alice:
        run = start(alice, agent(step))
        done = wait_for_status(alice, run["runId"], "failed")
        assert "echo_output_too_large" in str(done["error"])
        assert len(alice.get("/runs").content) < 64 * 1024
