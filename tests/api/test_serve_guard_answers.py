"""`ApiGuard` computes an answer in a request slot and sends it after the slot is free; the
public answers it was given are served without the routes; a body that does not arrive is
408. Driven in process with raw ASGI messages (`test_serve_slow_readers.py` shows the same
on a real `serve`)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import MutableMapping
from typing import Any

import pytest

from agent_runtime.api.answers import Answer
from agent_runtime.api.connections import CONNECTION_KEY, Connection
from agent_runtime.api.local_auth import HostCheck
from agent_runtime.api.server import CONCURRENT_REQUESTS, ApiGuard

TIMEOUT = 60.0
PUBLIC = Answer(200, [(b"content-type", b"application/json")], b'{"openapi": "3.1.0"}')


class Routes:
    """The app behind the guard: answers `{"n": N}`, counting its calls; or fails."""

    def __init__(self, *, fail_after_start: bool = False) -> None:
        self.calls = 0
        self.fail_after_start = fail_after_start

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await receive()
        self.calls += 1
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})
        if self.fail_after_start:
            raise RuntimeError("failed half way through the answer")
        await send({"type": "http.response.body", "body": json.dumps({"n": self.calls}).encode(),
                    "more_body": False})


def guard_for(routes: Routes, **kwargs: Any) -> ApiGuard:
    return ApiGuard(routes, max_body_bytes=1000, hosts=HostCheck("127.0.0.1", 8000), **kwargs)


def scope(method: str = "GET", path: str = "/runs", **extra: Any) -> dict[str, Any]:
    return {"type": "http", "method": method, "path": path, "query_string": b"",
            "headers": [(b"host", b"127.0.0.1:8000")], **extra}


async def whole_body() -> MutableMapping[str, Any]:
    return {"type": "http.request", "body": b"", "more_body": False}


class Sent:
    def __init__(self) -> None:
        self.messages: list[MutableMapping[str, Any]] = []

    async def __call__(self, message: MutableMapping[str, Any]) -> None:
        self.messages.append(message)

    @property
    def status(self) -> int:
        return int(self.messages[0]["status"])

    @property
    def headers(self) -> dict[bytes, bytes]:
        return dict(self.messages[0]["headers"])

    @property
    def body(self) -> bytes:
        return b"".join(message.get("body", b"") for message in self.messages[1:])


def test_a_client_that_never_takes_its_answer_holds_no_request_slot() -> None:
    async def scenario() -> Sent:
        guard = guard_for(Routes())
        never = asyncio.Event()

        async def stuck_send(message: MutableMapping[str, Any]) -> None:
            await never.wait()  # a client that reads nothing: the write never ends

        stuck = [asyncio.create_task(guard(scope(), whole_body, stuck_send))
                 for _ in range(CONCURRENT_REQUESTS * 2)]
        sent = Sent()
        await asyncio.wait_for(guard(scope(), whole_body, sent), TIMEOUT)
        for task in stuck:
            task.cancel()
        await asyncio.gather(*stuck, return_exceptions=True)
        return sent

    sent = asyncio.run(scenario())
    assert sent.status == 200
    assert json.loads(sent.body) == {"n": CONCURRENT_REQUESTS * 2 + 1}


def test_a_public_answer_is_served_without_the_routes() -> None:
    routes = Routes()
    guard = guard_for(routes, public={"/openapi.json": PUBLIC})
    sent = Sent()
    asyncio.run(guard(scope(path="/openapi.json"), whole_body, sent))
    assert (sent.status, sent.body) == (200, PUBLIC.body)
    assert routes.calls == 0
    other = Sent()  # another method is the routes' to answer
    asyncio.run(guard(scope(method="POST", path="/openapi.json"), whole_body, other))
    assert routes.calls == 1


def test_a_public_answer_still_checks_the_host() -> None:
    guard = guard_for(Routes(), public={"/openapi.json": PUBLIC})
    sent = Sent()
    wrong = scope(path="/openapi.json", headers=[(b"host", b"evil.example")])
    asyncio.run(guard(wrong, whole_body, sent))
    assert sent.status == 421


def test_a_body_that_does_not_arrive_in_time_is_408_and_closes() -> None:
    routes = Routes()
    guard = guard_for(routes, body_timeout=0.05)
    parts = [{"type": "http.request", "body": b'{"a": ', "more_body": True}]

    async def slow_body() -> MutableMapping[str, Any]:
        if parts:
            return parts.pop()
        await asyncio.sleep(TIMEOUT)
        raise AssertionError("the guard waited for the body past its timeout")

    sent = Sent()
    asyncio.run(guard(scope(method="POST"), slow_body, sent))
    assert sent.status == 408
    assert sent.headers[b"connection"] == b"close"
    assert "body" in json.loads(sent.body)["detail"]
    assert routes.calls == 0


def test_an_answer_that_fails_half_way_is_replaced_by_a_500(
        caplog: pytest.LogCaptureFixture) -> None:
    sent = Sent()
    asyncio.run(guard_for(Routes(fail_after_start=True))(scope(), whole_body, sent))
    assert sent.status == 500
    assert sent.headers[b"content-type"] == b"application/problem+json"
    assert "half way" not in sent.body.decode()


class Recorded(Connection):
    def __init__(self) -> None:
        self.events: list[str] = []

    def request_began(self) -> None:
        self.events.append("began")

    def request_ended(self) -> None:
        self.events.append("ended")


def test_the_connection_hears_when_a_request_begins_and_ends() -> None:
    connection = Recorded()
    state = {CONNECTION_KEY: connection}
    asyncio.run(guard_for(Routes())(scope(state=state), whole_body, Sent()))
    asyncio.run(guard_for(Routes(fail_after_start=True))(scope(state=state), whole_body,
                                                          Sent()))
    assert connection.events == ["began", "ended", "began", "ended"]
