"""`ApiGuard`, the ASGI layer in front of the routes: Host, encodings, body limit, last-resort 500.

Driven with raw ASGI messages, so a streamed body, a lying Content-Length and
a client that disconnects are exactly what the test says.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest

from agent_runtime.api.local_auth import HostCheck
from agent_runtime.api.server import ApiGuard

LIMIT = 100


class Inner:
    """The app behind the guard: echoes the body it was given, or does what it is told."""

    def __init__(self, *, status: int = 200, fail: bool = False) -> None:
        self.status = status
        self.fail = fail
        self.bodies: list[bytes] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        message = await receive()
        self.bodies.append(message["body"])
        if self.fail:
            raise RuntimeError("secret internal detail")
        await send({"type": "http.response.start", "status": self.status,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": message["body"] or b"{}"})


def call(guard: ApiGuard, *, chunks: list[bytes] | None = None, host: bytes = b"127.0.0.1:8000",
         headers: list[tuple[bytes, bytes]] | None = None, query: bytes = b"",
         disconnect: bool = False) -> tuple[int, dict[bytes, bytes], bytes]:
    scope = {"type": "http", "method": "POST", "path": "/runs", "query_string": query,
             "headers": [(b"host", host), *(headers or [])]}
    pending = chunks if chunks is not None else [b""]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if disconnect and not pending:
            return {"type": "http.disconnect"}
        if not pending:
            await asyncio.sleep(3600)
        chunk = pending.pop(0)
        return {"type": "http.request", "body": chunk,
                "more_body": bool(pending) or disconnect}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(guard(scope, receive, send))
    if not sent:
        return 0, {}, b""
    start, body = sent[0], b"".join(m.get("body", b"") for m in sent[1:])
    return start["status"], dict(start["headers"]), body


def guard_for(inner: Inner) -> ApiGuard:
    return ApiGuard(inner, max_body_bytes=LIMIT, hosts=HostCheck("127.0.0.1", 8000))


def problem(status: int, headers: dict[bytes, bytes], body: bytes,
            expected: int) -> dict[str, Any]:
    assert status == expected
    assert headers[b"content-type"] == b"application/problem+json"
    document = json.loads(body)
    assert set(document) >= {"type", "title", "status", "detail"}
    assert document["status"] == expected
    return document


def test_a_body_within_the_limit_reaches_the_routes_whole() -> None:
    inner = Inner()
    status, headers, body = call(guard_for(inner), chunks=[b'{"a":', b' "\xc3\xa9"}'])
    assert (status, body) == (200, b'{"a": "\xc3\xa9"}')
    assert inner.bodies == [b'{"a": "\xc3\xa9"}']
    assert headers[b"x-content-type-options"] == b"nosniff"


def test_a_declared_length_over_the_limit_is_413_before_reading() -> None:
    inner = Inner()
    answer = call(guard_for(inner), chunks=[b"x" * 10],
                  headers=[(b"content-length", str(LIMIT + 1).encode())])
    problem(*answer, 413)
    assert inner.bodies == []


def test_a_streamed_body_over_the_limit_is_413_without_reading_the_rest() -> None:
    inner = Inner()
    chunks = [b"x" * 60, b"x" * 60, b"never read"]
    answer = call(guard_for(inner), chunks=chunks)
    problem(*answer, 413)
    assert chunks == [b"never read"]
    assert inner.bodies == []


def test_a_body_of_exactly_the_limit_is_accepted() -> None:
    status, _, _ = call(guard_for(Inner()), chunks=[b"x" * LIMIT])
    assert status == 200


def test_a_body_that_is_not_utf8_is_400() -> None:
    inner = Inner()
    document = problem(*call(guard_for(inner), chunks=[b'{"a": "\xff\xfe"}']), 400)
    assert "UTF-8" in document["detail"]
    assert inner.bodies == []


def test_header_or_query_bytes_that_are_not_utf8_are_400() -> None:
    problem(*call(guard_for(Inner()), headers=[(b"x-name", b"\xff")]), 400)
    problem(*call(guard_for(Inner()), query=b"status=\xff"), 400)


@pytest.mark.parametrize("host", [b"evil.example:8000", b"127.0.0.1:9999", b"localhost"])
def test_a_host_this_server_is_not_bound_to_is_refused(host: bytes) -> None:
    inner = Inner()
    document = problem(*call(guard_for(inner), host=host), 421)
    assert "127.0.0.1:8000" in document["detail"]
    assert inner.bodies == []


def test_two_host_headers_are_refused() -> None:
    problem(*call(guard_for(Inner()), headers=[(b"host", b"127.0.0.1:8000")]), 400)


def test_an_unhandled_error_is_a_500_problem_without_its_detail(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="agent_runtime.serve"):
        status, headers, body = call(guard_for(Inner(fail=True)), chunks=[b"{}"])
    document = problem(status, headers, body, 500)
    assert "secret internal detail" not in body.decode()
    assert "Traceback" not in document["detail"]
    assert "secret internal detail" in caplog.text


def test_a_401_carries_a_bearer_challenge() -> None:
    status, headers, _ = call(guard_for(Inner(status=401)), chunks=[b"{}"])
    assert status == 401
    assert headers[b"www-authenticate"].startswith(b"Bearer")


def test_a_client_that_disconnects_mid_body_gets_no_answer() -> None:
    inner = Inner()
    assert call(guard_for(inner), chunks=[b"{"], disconnect=True) == (0, {}, b"")
    assert inner.bodies == []


def test_non_http_scopes_pass_through() -> None:
    seen: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope["type"])

    guard = ApiGuard(app, max_body_bytes=LIMIT, hosts=HostCheck("127.0.0.1", 8000))
    asyncio.run(guard({"type": "lifespan"}, None, None))  # type: ignore[arg-type]
    assert seen == ["lifespan"]
