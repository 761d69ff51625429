"""`agent-runtime serve` over real HTTP, as a client uses it: start, watch, approve, inspect,
fork and cancel runs; bearer tokens, tenants, the Host check; the body limits; the token
file.

Every server is a child process on 127.0.0.1 (`serve_process`); every wait is
a bounded poll with a generous deadline, never a timing assertion.
"""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from serve_process import (
    ALLOW_LOOPBACK_WEBHOOKS,
    ECHO,
    Serve,
    approval_manifest,
    assert_problem,
    run_of,
    running_serve,
    start,
    start_serve,
    wait_for_status,
    wait_until,
    webhook_manifest,
    write_tokens_file,
)
from slow_receiver import SlowReceiver

pytestmark = pytest.mark.slow

TOKEN = "serve-test-token-0123456789abcdef"
TOKEN_OF_A = "token-of-tenant-a-0123456789abcdef"
TOKEN_OF_B = "token-of-tenant-b-0123456789abcdef"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    workdir = tmp_path_factory.mktemp("serve")
    config = workdir / "runtime.config.yaml"
    config.write_text(ALLOW_LOOPBACK_WEBHOOKS, encoding="utf-8")
    with running_serve(workdir, token=TOKEN, args=["--config", str(config)]) as serve:
        yield serve


@pytest.fixture
def client(server: Serve) -> Iterator[httpx.Client]:
    with server.client() as http:
        yield http


# -- the acceptance flow --------------------------------------------------------------


def test_approve_inspect_and_fork_a_run_over_http(client: httpx.Client) -> None:
    created = start(client, approval_manifest())
    # A fast worker may already have reached the approval when the answer is built.
    assert created["status"] in ("created", "running", "suspended")
    run_id = created["runId"]

    suspended = wait_for_status(client, run_id, "suspended")
    suspension = suspended["suspension"]
    assert suspension["reason"] == "approval"
    approval_id = suspension["details"]["approvalId"]

    answered = client.post(f"/runs/{run_id}/approvals/{approval_id}",
                           json={"approved": True, "response": {"note": "ship it"}})
    assert answered.status_code == 200, answered.text
    completed = wait_for_status(client, run_id, "completed")
    assert isinstance(completed["output"], str) and completed["output"]
    assert completed["attempt"] == 2

    timeline = client.get(f"/runs/{run_id}/checkpoints")
    assert timeline.status_code == 200, timeline.text
    checkpoints = timeline.json()["checkpoints"]
    assert [c["seq"] for c in checkpoints] == list(range(1, len(checkpoints) + 1))
    # The latest checkpoint of each step (the approval has two: asked, answered).
    by_step = {c["stepPath"]: c for c in checkpoints if c["stepPath"]}
    assert {"prepare", "approve", "finalize"} <= set(by_step)
    assert by_step["approve"]["stepKind"] == "approval"
    assert by_step["approve"]["attempt"] == 2

    prepared = client.get(f"/runs/{run_id}/checkpoints/{by_step['prepare']['seq']}")
    assert prepared.status_code == 200, prepared.text
    state = prepared.json()["checkpoint"]
    assert state["seq"] == by_step["prepare"]["seq"]
    assert "proposal" in state["variables"]

    # From the checkpoint that recorded the answer, a fork finishes on its own.
    forked = client.post(f"/runs/{run_id}/fork", json={"seq": by_step["approve"]["seq"]})
    assert forked.status_code == 201, forked.text
    fork = forked.json()["run"]
    assert fork["runId"] != run_id
    assert fork["forkedFrom"] == {"runId": run_id, "seq": by_step["approve"]["seq"]}
    fork_done = wait_for_status(client, fork["runId"], "completed")
    assert fork_done["output"] == completed["output"]

    listed = client.get("/runs", params={"status": "completed"})
    assert listed.status_code == 200
    assert {run_id, fork["runId"]} <= {run["runId"] for run in listed.json()["runs"]}


def test_cancel_a_running_run_stops_its_worker(client: httpx.Client, server: Serve,
                                               receiver: SlowReceiver) -> None:
    run_id = start(client, webhook_manifest(receiver.url, "cancelled"))["runId"]
    assert receiver.wait_for("/cancelled/first"), "the webhook step never called"
    assert run_of(client, run_id)["status"] == "running"

    cancelled = client.post(f"/runs/{run_id}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["run"]["status"] == "cancelled"

    # The worker is inside the webhook call; once it returns, its next write
    # finds the run cancelled and the attempt ends without another step.
    receiver.release.set()
    superseded = wait_until(
        lambda: [e for e in server.events()
                 if e["run_id"] == run_id and e["type"] == "run.superseded"],
        what="the worker to stop")
    assert superseded[0]["data"]["status"] == "cancelled"
    assert run_of(client, run_id)["status"] == "cancelled"
    assert "/cancelled/second" not in receiver.paths()
    again = client.post(f"/runs/{run_id}/resume")
    assert_problem(again, 409)


# -- auth -----------------------------------------------------------------------------


def test_requests_without_the_token_are_401(server: Serve) -> None:
    with server.client(auth=False) as anonymous:
        refused = anonymous.get("/runs")
        assert_problem(refused, 401)
        assert refused.headers["www-authenticate"].lower().startswith("bearer")
        assert_problem(anonymous.post("/runs", json={"manifest": approval_manifest()}), 401)
        assert anonymous.get("/openapi.json").status_code == 200
    with server.client(token="not-the-token") as wrong:
        assert_problem(wrong.get("/runs"), 401)
    with server.client(auth=False, headers={"Authorization": f"Basic {TOKEN}"}) as basic:
        assert_problem(basic.get("/runs"), 401)


def test_a_foreign_host_header_is_refused(server: Serve) -> None:
    port = httpx.URL(server.base_url).port
    for host in (f"evil.example:{port}", f"127.0.0.1:{port}.evil.example", "127.0.0.1:1"):
        with server.client(headers={"Host": host}) as rebinding:
            problem = assert_problem(rebinding.get("/runs"), 421)
            assert f"127.0.0.1:{port}" in problem["detail"]
    with server.client(headers={"Host": f"localhost:{port}"}) as local:
        assert local.get("/runs").status_code == 200


def test_tenants_see_only_their_own_runs(tmp_path: Path) -> None:
    tokens = write_tokens_file(tmp_path / "tokens.yaml", {TOKEN_OF_A: "team-a",
                                                          TOKEN_OF_B: "team-b"})
    with running_serve(tmp_path, token=None, args=["--tokens", str(tokens)]) as serve, \
            serve.client(TOKEN_OF_A) as a, serve.client(TOKEN_OF_B) as b:
        mine = start(a, approval_manifest())["runId"]
        theirs = start(b, approval_manifest())["runId"]
        suspended = wait_for_status(a, mine, "suspended")
        approval_id = suspended["suspension"]["details"]["approvalId"]
        wait_for_status(b, theirs, "suspended")

        assert [run["runId"] for run in a.get("/runs").json()["runs"]] == [mine]
        assert [run["runId"] for run in b.get("/runs").json()["runs"]] == [theirs]
        assert run_of(a, mine)["tenant"] == "team-a"

        for response in (b.get(f"/runs/{mine}"),
                         b.post(f"/runs/{mine}/approvals/{approval_id}", json={"approved": True}),
                         b.post(f"/runs/{mine}/cancel"),
                         b.post(f"/runs/{mine}/fork", json={}),
                         b.post(f"/runs/{mine}/resume", json={}),
                         b.get(f"/runs/{mine}/effects"),
                         b.get(f"/runs/{mine}/checkpoints"),
                         b.get(f"/runs/{mine}/checkpoints/1")):
            problem = assert_problem(response, 404)
            assert mine not in problem["detail"]
        still = run_of(a, mine)
        assert still["status"] == "suspended"
        assert still["suspension"]["decision"] is None
        assert [run["runId"] for run in a.get("/runs").json()["runs"]] == [mine]


# -- bodies ---------------------------------------------------------------------------


def test_an_oversize_body_is_413(client: httpx.Client) -> None:
    huge = {"manifest": "x" * 1_100_000, "options": ECHO}
    assert_problem(client.post("/runs", json=huge), 413)

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit holds while streaming
        yield b'{"manifest": "'
        for _ in range(40):
            yield b"y" * 32_768
        yield b'"}'

    assert_problem(client.post("/runs", content=chunks(),
                               headers={"Content-Type": "application/json"}), 413)
    assert client.get("/runs").status_code == 200  # the server is fine afterwards


@pytest.mark.parametrize("body", [b"{not json", b"", b'{"manifest": ', b"[1, 2"])
def test_a_body_that_is_not_json_is_400(client: httpx.Client, body: bytes) -> None:
    response = client.post("/runs", content=body, headers={"Content-Type": "application/json"})
    if body == b"":
        assert response.status_code in (400, 422), response.text
        assert_problem(response, response.status_code)
    else:
        assert_problem(response, 400)


def test_a_body_that_is_not_utf8_is_400(client: httpx.Client) -> None:
    response = client.post("/runs", content=b'{"manifest": "\xff\xfe"}',
                           headers={"Content-Type": "application/json"})
    assert "UTF-8" in assert_problem(response, 400)["detail"]


# -- the generated token ----------------------------------------------------------------


def test_the_generated_token_file_is_private_and_works(tmp_path: Path) -> None:
    with running_serve(tmp_path, token=None) as serve:
        path = tmp_path / ".agent-runtime" / "serve.token"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        token = path.read_text(encoding="utf-8").strip()
        with serve.client(token) as http:
            assert http.get("/runs").status_code == 200
        assert token not in serve.output()
        assert ".agent-runtime/serve.token" in serve.output()
        assert serve.stop() == 0
    assert "stopped" in serve.output()


def test_serve_refuses_a_bad_tokens_file(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text("just-a-token\n", encoding="utf-8")
    tokens.chmod(0o600)
    with pytest.raises(AssertionError, match="serve exited with 2"):
        start_serve(tmp_path, token=None, args=["--tokens", str(tokens)])


@pytest.mark.parametrize(("tokens", "mode", "reason"), [
    ({TOKEN_OF_A: "team-a", "x": "team-b"}, 0o600, "token #2 is 1 characters long"),
    ({TOKEN_OF_A: "team-a", "a" * 40: "team-b"}, 0o600, "token #2 has only 1 different"),
    ({TOKEN_OF_A: "team-a"}, 0o644, "mode 0644"),
    ({TOKEN_OF_A: "team-a"}, 0o640, "mode 0640"),
])
def test_serve_refuses_a_tokens_file_with_a_weak_token_or_loose_mode(
        tmp_path: Path, tokens: dict[str, str], mode: int, reason: str) -> None:
    path = write_tokens_file(tmp_path / "tokens.yaml", tokens)
    path.chmod(mode)
    with pytest.raises(AssertionError, match="serve exited with 2") as refused:
        start_serve(tmp_path, token=None, args=["--tokens", str(path)])
    message = str(refused.value)
    assert str(path) in message and reason in message
    assert TOKEN_OF_A not in message and "Traceback" not in message


def test_serve_refuses_a_short_token_flag(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match="serve exited with 2") as refused:
        start_serve(tmp_path, token="short-token")
    assert "--token" in str(refused.value) and "at least 32" in str(refused.value)
