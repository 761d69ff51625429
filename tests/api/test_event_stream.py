"""serve's event streams (`agent_runtime.api.event_stream`) over the real routes, with
short host limits: ids are cursors, Last-Event-ID resumes, keep-alives come while the
run waits, the stream ends with the run or after its lifetime, and when the client goes."""

from __future__ import annotations

import asyncio
from typing import Any

from routes_harness import ECHO, Api, manifest_text

from agent_runtime.api import ApiLimits
from agent_runtime.api.answers import Answer, compute_answer
from agent_runtime.api.event_stream import EventFollower
from stores.memory import MemoryRunStore

QUICK = ApiLimits(events_poll_seconds=0.02, event_stream_keepalive_seconds=0.05,
                  max_event_stream_seconds=0.5)


def started(api: Api, manifest: str) -> str:
    reply = api.post("/runs", {"manifest": manifest_text(manifest), "options": ECHO})
    assert reply.status == 201, reply.text
    run_id: str = reply.run["runId"]
    return run_id


def stream(api: Api, run_id: str, *, last_id: str | None = None,
           leave_after: float | None = None) -> tuple[Answer | None, str]:
    """The stream's answer (when not a stream) and the text it sent."""
    headers = [(b"accept", b"text/event-stream"), (b"authorization", b"Bearer alice-token")]
    if last_id is not None:
        headers.append((b"last-event-id", last_id.encode()))
    scope: dict[str, Any] = {"type": "http", "method": "GET", "path": f"/runs/{run_id}/events",
                             "query_string": b"", "headers": headers}
    sent: list[bytes] = []

    async def ask(asked: dict[str, Any]) -> Answer:
        async def ended() -> dict[str, Any]:
            return {"type": "http.disconnect"}

        answer = await compute_answer(api.resolver, asked, b"", ended)  # type: ignore[arg-type]
        assert answer is not None
        return answer

    async def receive() -> dict[str, Any]:
        if leave_after is None:
            await asyncio.Event().wait()  # the client stays
        await asyncio.sleep(leave_after or 0)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(bytes(message.get("body", b"")))

    async def follow() -> Answer | None:
        answer = await EventFollower(QUICK).answer(scope, receive, ask)
        if isinstance(answer, Answer):
            return answer
        await asyncio.wait_for(answer.send(send), timeout=60)
        return None

    refused = asyncio.run(follow())
    return refused, b"".join(sent).decode()


def ids(text: str) -> list[int]:
    return [int(line[4:]) for line in text.splitlines() if line.startswith("id: ")]


def test_a_finished_runs_stream_sends_its_log_then_ends() -> None:
    api = Api(MemoryRunStore(), limits=QUICK)
    run_id = started(api, "hello.agent.yaml")
    refused, text = stream(api, run_id)
    assert refused is None
    logged = api.store.list_events(run_id, limit=1000)
    assert ids(text) == [event.cursor for event in logged]
    assert text.rstrip().endswith('event: end\ndata: {"status": "completed"}')
    _, resumed = stream(api, run_id, last_id="3")
    assert ids(resumed) == [event.cursor for event in logged][3:]


def test_a_waiting_runs_stream_keeps_alive_and_ends_after_its_lifetime() -> None:
    api = Api(MemoryRunStore(), limits=QUICK)
    run_id = started(api, "approval.agent.yaml")  # suspended: nothing more comes
    _, text = stream(api, run_id)
    assert ids(text) == [event.cursor for event in api.store.list_events(run_id, limit=1000)]
    assert ": keep-alive" in text and "event: end" not in text


def test_a_stream_ends_when_the_client_goes() -> None:
    api = Api(MemoryRunStore(), limits=ApiLimits(events_poll_seconds=0.02,
                                                 max_event_stream_seconds=300))
    run_id = started(api, "approval.agent.yaml")
    _, text = stream(api, run_id, leave_after=0.1)  # well before the 300 s lifetime
    assert ids(text) and "event: end" not in text


def test_a_refused_stream_is_the_routes_problem() -> None:
    api = Api(MemoryRunStore(), limits=QUICK)
    refused, text = stream(api, "run_missing")
    assert refused is not None and refused.status == 404 and text == ""
