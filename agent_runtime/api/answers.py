"""An answer of `agent-runtime serve`, computed whole before any of it is sent.

The routes' answers are bounded (a page of runs is at most `ApiLimits.max_page_bytes`,
a run's view shows a large output only by reference), so `serve` keeps each one in
memory: a request holds a request slot only while its answer is computed, and the
slot is free again before the first byte is sent to a client that may never read
it (`agent_runtime.api.server.ApiGuard`; the connection's write timeout ends such a
client, `agent_runtime.api.connections`). A streaming route would need another path.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent_runtime.api.problems import PROBLEM_JSON, problem_response

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
AsgiApp = Callable[[Scope, Receive, Send], Awaitable[None]]
Headers = list[tuple[bytes, bytes]]

SECURITY_HEADERS: Headers = [(b"x-content-type-options", b"nosniff"),
                             (b"cache-control", b"no-store")]
BEARER_CHALLENGE = (b"www-authenticate", b'Bearer realm="agent-runtime"')
CLOSE = (b"connection", b"close")


@dataclass(frozen=True)
class Answer:
    """A whole HTTP answer: status, headers and body."""

    status: int
    headers: Headers
    body: bytes

    async def send(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status,
                    "headers": self.headers})
        await send({"type": "http.response.body", "body": self.body})


def with_security_headers(status: int, headers: Sequence[tuple[bytes, bytes]]) -> Headers:
    """`headers`, plus the ones every answer of `serve` carries (and a 401's challenge)."""
    out = list(headers)
    names = {name.lower() for name, _ in out}
    out.extend(header for header in SECURITY_HEADERS if header[0] not in names)
    if status == 401 and b"www-authenticate" not in names:
        out.append(BEARER_CHALLENGE)
    return out


def problem_answer(status: int, detail: str, *, close: bool = False) -> Answer:
    """A problem document, as the routes write them (`problems.problem_response`);
    `close` when the request was not read to its end (the connection cannot be reused)."""
    body = str(problem_response(status, detail).body).encode("utf-8")
    headers: Headers = [(b"content-type", PROBLEM_JSON.encode("ascii")),
                        (b"content-length", str(len(body)).encode("ascii")),
                        *SECURITY_HEADERS]
    if close:
        headers.append(CLOSE)
    return Answer(status, headers, body)


async def compute_answer(app: AsgiApp, scope: Scope, body: bytes,
                         receive: Receive) -> Answer | None:
    """Run `app` on a request whose body was read already; its answer, whole, or None
    when it ended without one. What the app raises is raised."""
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    start: Message | None = None
    chunks: list[bytes] = []
    complete = False

    async def keep(message: Message) -> None:
        nonlocal start, complete
        if message["type"] == "http.response.start" and start is None:
            start = message
        elif message["type"] == "http.response.body" and start is not None and not complete:
            chunks.append(bytes(message.get("body", b"")))
            complete = not message.get("more_body", False)
        else:
            raise RuntimeError(f"unexpected ASGI message {message['type']!r} from the routes")

    await app(scope, replay, keep)
    if start is None or not complete:
        return None
    status = int(start["status"])
    return Answer(status, with_security_headers(status, start.get("headers", [])),
                  b"".join(chunks))
