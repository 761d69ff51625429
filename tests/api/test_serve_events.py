"""A real `serve` answers the events route's waiting requests: Server-Sent Events
resumed from `Last-Event-ID`, and long-polls, each checked against the stored log."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from serve_process import REPO, TEST_TOKEN, Serve, running_serve, start, wait_for_status

from agent_runtime.client import AgentRuntimeClient
from stores.records import RunEvent
from stores.sqlite import SqliteRunStore

STEPS = 200
# Far more than any of it needs: a busy machine makes the test slower, never wrong.
HANG = 240.0


def many_steps(count: int) -> dict[str, Any]:
    return {"schemaVersion": "1.0", "id": "many", "steps": [
        {"id": f"step{n}", "type": "prompt", "prompt": f"Step {n}."} for n in range(count)]}


def stored_log(server: Serve, run_id: str) -> list[RunEvent]:
    logged: list[RunEvent] = []
    with SqliteRunStore(server.workdir / "runs.sqlite") as store:
        while page := store.list_events(run_id, after=len(logged), limit=1000):
            logged += page
    return logged


def sse_messages(lines: Iterator[str]) -> Iterator[dict[str, str]]:
    """The messages of an event stream (fields by name; comments left out)."""
    message: dict[str, str] = {}
    for line in lines:
        if not line:
            if message:
                yield message
            message = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            message[name] = value.removeprefix(" ")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    with running_serve(tmp_path_factory.mktemp("events")) as serve:
        yield serve


@pytest.mark.slow
def test_a_client_reconnecting_every_third_event_gets_every_event_once_in_order(
        server: Serve) -> None:
    with server.client() as http:
        run_id = start(http, many_steps(STEPS))["runId"]
        received: list[dict[str, Any]] = []
        last_id: str | None = None
        ended: dict[str, Any] | None = None
        connections = 0
        deadline = time.monotonic() + HANG
        while ended is None:
            assert time.monotonic() < deadline, f"the stream did not end: {len(received)}"
            headers = {"Accept": "text/event-stream"}
            if last_id is not None:
                headers["Last-Event-ID"] = last_id
            connections += 1
            with http.stream("GET", f"/runs/{run_id}/events", headers=headers,
                             timeout=HANG) as response:
                assert response.status_code == 200, response.read()
                assert response.headers["content-type"].startswith("text/event-stream")
                this_connection = 0
                for message in sse_messages(response.iter_lines()):
                    if message.get("event") == "end":
                        ended = json.loads(message["data"])
                        break
                    if "id" not in message:
                        continue  # retry:
                    received.append(json.loads(message["data"]))
                    last_id = message["id"]
                    assert int(last_id) == received[-1]["cursor"]
                    this_connection += 1
                    if this_connection == 3:
                        break  # hang up; the next connection resumes after last_id
        assert ended == {"status": "completed"}
        stored = stored_log(server, run_id)
    assert [event["cursor"] for event in received] == list(range(1, len(stored) + 1))
    assert [event["id"] for event in received] == [event.id for event in stored]
    assert sum(event["type"] == "step.completed" for event in received) == STEPS
    assert received[-1]["type"] == "run.completed"
    assert connections >= len(stored) // 3


@pytest.mark.slow
def test_a_long_poll_answers_once_the_next_event_commits(server: Serve) -> None:
    with server.client() as http:
        run_id = start(http, {"schemaVersion": "1.0", "id": "held", "steps": [
            {"id": "ask", "type": "approval", "prompt": "Go on?"},
            {"id": "say", "type": "prompt", "prompt": "Done."}]})["runId"]
        suspended = wait_for_status(http, run_id, "suspended")
        head = http.get(f"/runs/{run_id}/events").json()
        assert head["events"][-1]["type"] == "run.suspended"
        answers: list[httpx.Response] = []

        def long_poll() -> None:
            with server.client() as poller:
                answers.append(poller.get(f"/runs/{run_id}/events",
                                          params={"after": head["cursor"], "wait": 20},
                                          timeout=HANG))

        poll = threading.Thread(target=long_poll)
        poll.start()
        approval = suspended["suspension"]["details"]["approvalId"]
        assert http.post(f"/runs/{run_id}/approvals/{approval}",
                         json={"approved": True}).status_code == 200
        poll.join(timeout=HANG)
        assert not poll.is_alive()
        (answer,) = answers
        assert answer.status_code == 200, answer.text
        page = answer.json()
        assert page["events"], page  # answered with the events, not at the wait's end
        assert page["events"][0]["cursor"] == head["cursor"] + 1
        assert page["events"][0]["type"] == "run.resumed"


@pytest.mark.slow
def test_a_stream_is_answered_as_the_route_answers_a_refused_request(server: Serve) -> None:
    with server.client() as http:
        run_id = start(http, many_steps(1))["runId"]
        missing = http.get("/runs/run_missing/events", headers={"Accept": "text/event-stream"})
        assert missing.status_code == 404
        assert missing.headers["content-type"] == "application/problem+json"
    with server.client(token="another-token-of-serve-0123456789abcdef") as stranger:
        response = stranger.get(f"/runs/{run_id}/events",
                                headers={"Accept": "text/event-stream"})
    assert response.status_code == 401  # a token serve does not know names no tenant


@pytest.mark.slow
def test_the_client_and_the_cli_follow_a_run_to_its_end(server: Serve) -> None:



    with AgentRuntimeClient(server.base_url, token=TEST_TOKEN) as client:
        run = client.create_run(many_steps(5), model="scripted/echo")
        followed = list(client.events(run.run_id, follow=True, wait=5))
        assert followed[-1].type == "run.completed"
        stored = stored_log(server, run.run_id)
        assert [event.id for event in followed] == [event.id for event in stored]
        assert [event.cursor for event in client.events(run.run_id, after=3)] == list(
            range(4, len(stored) + 1))
    printed = subprocess.run(
        [sys.executable, "-m", "agent_runtime.cli", "events", run.run_id, "--url",
         server.base_url, "--follow", "--format", "ndjson"],
        env=dict(os.environ, PYTHONPATH=str(REPO), AGENT_RUNTIME_TOKEN=TEST_TOKEN),
        capture_output=True, text=True, timeout=HANG, check=False, cwd=server.workdir)
    assert printed.returncode == 0, printed.stderr
    lines = [json.loads(line) for line in printed.stdout.splitlines()]
    assert [line["id"] for line in lines] == [event.id for event in stored]
    assert lines[-1]["type"] == "run.completed" and lines[-1]["run_id"] == run.run_id
