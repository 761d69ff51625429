"""`agent_runtime.client` against a real `serve`, as an application uses it, and its
wire handling (parts, problems, SigV4) against a transport that records requests."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from datetime import UTC, datetime

import httpx
import pytest
from serve_process import TEST_TOKEN, Serve, approval_manifest, running_serve

from agent_runtime.client import AgentRuntimeClient, ApiError, SigV4Auth
from stores.records import RunStatus

HELLO = {"schemaVersion": "1.0", "id": "hello", "steps": [
    {"id": "greet", "type": "prompt", "prompt": "Say hello to {{ name }}.",
     "outputVariable": "greeting", "includeInFinalOutput": True}],
    "variables": [{"key": "name", "type": "string", "value": "world"}]}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    with running_serve(tmp_path_factory.mktemp("client")) as serve:
        yield serve


@pytest.fixture
def client(server: Serve) -> Iterator[AgentRuntimeClient]:
    with AgentRuntimeClient(server.base_url, token=TEST_TOKEN) as api:
        yield api


@pytest.mark.slow
def test_an_approval_run_from_start_to_output(client: AgentRuntimeClient) -> None:
    run = client.create_run(approval_manifest(), model="scripted/echo")
    suspended = client.wait(run.run_id, timeout=120, interval=0.05)
    assert suspended.status is RunStatus.SUSPENDED
    assert suspended.suspension is not None and suspended.suspension.reason == "approval"

    answered = client.approve(run.run_id, suspended.suspension.details["approvalId"],
                              response={"note": "ship it"})
    done = client.wait(run.run_id, past=answered, timeout=120, interval=0.05)
    assert done.status is RunStatus.COMPLETED and done.attempt == 2
    assert client.output(run.run_id) == done.output and done.output
    timeline = list(client.checkpoints(run.run_id, page_size=2))  # pages followed
    assert [c.seq for c in timeline] == list(range(1, len(timeline) + 1))
    assert client.checkpoint(run.run_id, timeline[-1].seq).seq == timeline[-1].seq
    assert client.effects(run.run_id) == []
    assert run.run_id in {listed.run_id for listed in client.list_runs(page_size=1)}

    fork = client.fork(run.run_id, seq=1)
    assert fork.forked_from is not None and fork.forked_from.run_id == run.run_id
    assert client.whoami() == "local"


@pytest.mark.slow
def test_idempotency_cancel_and_the_errors_a_caller_handles(client: AgentRuntimeClient) -> None:
    first = client.create_run(HELLO, model="scripted/echo", idempotency_key="greet-1")
    again = client.create_run(HELLO, model="scripted/echo", idempotency_key="greet-1")
    assert again.run_id == first.run_id
    assert client.wait(first.run_id, timeout=120, interval=0.05).status is RunStatus.COMPLETED

    with pytest.raises(ApiError) as reused:
        client.create_run(HELLO, variables={"name": "you"}, model="scripted/echo",
                          idempotency_key="greet-1")
    assert reused.value.status == 409 and reused.value.field == "Idempotency-Key"

    with pytest.raises(ApiError) as refused:
        client.create_run({"schemaVersion": "1.0", "id": "x", "steps": [{"id": "a"}]})
    assert refused.value.status == 422 and refused.value.field == "steps[0].type"

    with pytest.raises(ApiError) as missing:
        client.get_run("run_does_not_exist")
    assert missing.value.status == 404

    waiting = client.create_run(approval_manifest(), model="scripted/echo")
    client.wait(waiting.run_id, timeout=120, interval=0.05)
    assert client.cancel(waiting.run_id).status is RunStatus.CANCELLED


# -- the wire, against a recording transport --------------------------------------------


def _recorded(answers: list[httpx.Response]) -> tuple[AgentRuntimeClient, list[httpx.Request]]:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return answers.pop(0)

    return AgentRuntimeClient("http://api.test", token="t",
                              transport=httpx.MockTransport(answer)), seen


def test_an_output_answered_in_parts_is_put_back_together() -> None:
    text = json.dumps({"report": "é" * 40}, ensure_ascii=False).encode("utf-8")
    half = len(text) // 2

    def part(offset: int, data: bytes, after: str | None) -> httpx.Response:
        return httpx.Response(200, json={"runId": "run_1", "status": "completed",
                                         "output": None, "outputBytes": len(text),
                                         "offset": offset,
                                         "data": base64.b64encode(data).decode(),
                                         "next": after})

    first = httpx.Response(200, json={"runId": "run_1", "status": "completed", "output": None,
                                      "outputBytes": len(text),
                                      "next": "/runs/run_1/output?offset=0"})
    client, seen = _recorded([first, part(0, text[:half], f"/runs/run_1/output?offset={half}"),
                              part(half, text[half:], None)])
    assert client.output("run_1") == {"report": "é" * 40}
    assert [str(request.url) for request in seen] == [
        "http://api.test/runs/run_1/output", "http://api.test/runs/run_1/output?offset=0",
        f"http://api.test/runs/run_1/output?offset={half}"]


def test_a_problem_becomes_an_api_error_with_its_field_and_retry_after() -> None:
    client, seen = _recorded([httpx.Response(
        429, headers={"Retry-After": "7", "Content-Type": "application/problem+json"},
        json={"type": "urn:agent-runtime:problem:too-many-requests", "title": "Too Many "
              "Requests", "status": 429, "detail": "this tenant started 60 runs",
              "field": None})])
    with pytest.raises(ApiError) as busy:
        client.create_run(HELLO, idempotency_key="k-1")
    assert (busy.value.status, busy.value.retry_after) == (429, 7.0)
    assert "60 runs" in str(busy.value)
    [request] = seen
    assert request.headers["Authorization"] == "Bearer t"
    assert request.headers["Idempotency-Key"] == "k-1"
    assert json.loads(request.content)["manifest"]["id"] == "hello"


def test_ids_that_would_change_the_path_are_refused_before_sending() -> None:
    client, seen = _recorded([])
    for bad in ("../whoami", "run 1", "", "run/1"):
        with pytest.raises(ValueError, match="not a run id"):
            client.get_run(bad)
    assert seen == []


def test_wait_gives_up_after_its_timeout_by_the_injected_clock() -> None:
    now = [0.0]
    running = {"run": {"runId": "run_1", "status": "running", "attempt": 1,
                       "manifestHash": "h", "usage": {"consumedTokens": 0},
                       "createdAt": "2026-12-03T00:00:00Z", "updatedAt": "2026-12-03T00:00:00Z"}}
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=running)

    def sleep(seconds: float) -> None:
        now[0] += seconds

    client = AgentRuntimeClient("http://api.test", token="t", sleep=sleep,
                                clock=lambda: now[0], transport=httpx.MockTransport(answer))
    with pytest.raises(TimeoutError, match="still running after 3 s"):
        client.wait("run_1", timeout=3, interval=1)
    assert len(seen) == 4  # at 0, 1, 2 and 3 seconds


def test_sigv4_signs_for_execute_api_in_the_region() -> None:
    from botocore.credentials import Credentials

    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"tenant": "team-a"})

    auth = SigV4Auth("eu-west-1", credentials=Credentials("AKIDEXAMPLE", "secret", "session"))
    client = AgentRuntimeClient("https://abc.execute-api.eu-west-1.amazonaws.com/prod",
                                auth=auth, transport=httpx.MockTransport(answer))
    before = datetime.now(UTC).strftime("%Y%m%d")
    assert client.whoami() == "team-a"
    after = datetime.now(UTC).strftime("%Y%m%d")
    [request] = seen
    authorization = request.headers["Authorization"]
    assert any(authorization.startswith(f"AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/{day}/"
                                        "eu-west-1/execute-api/aws4_request")
               for day in (before, after))
    assert "SignedHeaders=host;x-amz-date;x-amz-security-token" in authorization
    assert request.headers["X-Amz-Security-Token"] == "session"
    assert request.url.path == "/prod/whoami"


def test_a_token_and_an_auth_are_not_both_taken() -> None:
    with pytest.raises(ValueError, match="token or auth"):
        AgentRuntimeClient("http://api.test", token="t", auth=httpx.BasicAuth("a", "b"))
