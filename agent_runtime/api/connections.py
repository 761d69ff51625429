"""The connections of `agent-runtime serve`: how many, and how long a client may stall one.

What uvicorn's h11 protocol bounds and what it does not (read from its source):

* the request head's size (h11: 16 KiB), but not its time: the keep-alive
  timer runs only between requests and any byte received cancels it, so a
  client sending a byte every few seconds holds a connection forever, and one
  that connects and sends nothing is never timed out at all;
* not the time a client takes to read an answer: a response is written into
  the transport's buffer and the next `send` waits for it to drain, without a
  timeout; closing such a transport waits for the client to read too;
* `limit_concurrency` answers 503 to requests past it, but accepts and keeps
  every connection.

`GuardedConnection` wraps uvicorn's h11 protocol, one per connection, and adds
what is missing (`ConnectionLimits`, each a setting with a safe default):

* a cap on open connections: past `max_connections`, a new connection is
  answered 503 and closed at once instead of being served;
* the request head within `header_timeout` of the connection's start or of its
  first byte after an idle spell, however it trickles in: else 408 and close;
* an idle connection (no request in progress, no byte received) closed after
  `idle_timeout`;
* a write stall: a transport whose buffer stays above its high-water mark
  without shrinking, or a closing one that still holds unsent bytes, for
  `write_timeout`, is aborted; the kernel's send buffer of each connection is
  fixed at `send_buffer_bytes`, so a client that reads nothing is noticed after
  a few hundred KiB rather than megabytes.

A connection checks its deadlines every `check_interval` and closes it for a
read deadline only when two checks in a row found that deadline passed: the
event loop polls the socket between them, so a loop that ran late never takes
bytes the kernel already holds for silence.

The request body's timeout is `ApiGuard`'s (`agent_runtime.api.server`), which
reads the body; it also tells the connection when a request begins and ends
(`connection_of(scope)`), since only the app sees a request's head complete.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import Any, ClassVar, cast

from agent_runtime.api.problems import PROBLEM_JSON, PROBLEM_TYPE, Problem

logger = logging.getLogger("agent_runtime.serve")

# Where a request's ASGI scope finds its connection: uvicorn copies the
# protocol's app state into every scope's "state".
CONNECTION_KEY = "agent_runtime.connection"


@dataclass(frozen=True)
class ConnectionLimits:
    """How many connections `serve` keeps open, and how long each may stall."""

    # Open connections at once; past it a new one is answered 503 and closed.
    max_connections: int = 256
    # Seconds from a connection's start (or its first byte after an idle spell)
    # to the end of the request's head.
    header_timeout: float = 10.0
    # Seconds for a request's body to arrive, once its head has.
    body_timeout: float = 30.0
    # Seconds a connection with no request in progress may stay silent.
    idle_timeout: float = 5.0
    # Seconds a client may read nothing of an answer (or of a closing connection's
    # last bytes) before the connection is aborted.
    write_timeout: float = 30.0
    # The kernel's send buffer of each connection (fixed: no autotuning to megabytes).
    send_buffer_bytes: int = 256 * 1024

    def __post_init__(self) -> None:
        if self.max_connections < 1:
            raise ValueError("max_connections must be 1 or more")
        for name in ("header_timeout", "body_timeout", "idle_timeout", "write_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be a positive number of seconds")
        if self.send_buffer_bytes < 4096:
            raise ValueError("send_buffer_bytes must be 4096 or more")

    @property
    def check_interval(self) -> float:
        """How often a connection checks its deadlines: a fraction of the shortest one."""
        shortest = min(self.header_timeout, self.idle_timeout, self.write_timeout)
        return min(1.0, max(0.02, shortest / 4))


class Connection:
    """What `ApiGuard` tells a connection: a request of it began, or ended."""

    def request_began(self) -> None:
        """The request's head is complete and the app has it: no read deadline until it ends."""

    def request_ended(self) -> None:
        """The answer was handed to the transport: the connection is idle again."""


def connection_of(scope: MutableMapping[str, Any]) -> Connection | None:
    """The connection a request arrived on, when it is a `GuardedConnection`."""
    state = scope.get("state")
    found = state.get(CONNECTION_KEY) if isinstance(state, dict) else None
    return found if isinstance(found, Connection) else None


def raw_problem(status: int, reason: str, slug: str, detail: str,
                headers: tuple[str, ...] = ()) -> bytes:
    """A whole HTTP/1.1 problem+json answer that closes the connection, written by the
    connection itself (no request reached the app, so no one else can answer)."""
    body = Problem(type=PROBLEM_TYPE + slug, title=reason, status=status,
                   detail=detail).model_dump_json(exclude_none=True).encode("utf-8")
    head = [f"HTTP/1.1 {status} {reason}", f"content-type: {PROBLEM_JSON}",
            f"content-length: {len(body)}", "connection: close",
            "x-content-type-options: nosniff", "cache-control: no-store", *headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode("ascii") + body


class _OpenConnections:
    """The count every `GuardedConnection` of one server shares (on its event loop)."""

    def __init__(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        self.count = 0
        self.refused = 0


class GuardedConnection(asyncio.Protocol, Connection):
    """One connection: uvicorn's h11 protocol inside, the limits around it.

    Build the class for a server with `guarded_protocol(limits)`; uvicorn
    creates one instance per connection, as it would its own protocol.
    """

    _open: ClassVar[_OpenConnections]

    def __init__(self, config: Any, server_state: Any, app_state: dict[str, Any],
                 _loop: asyncio.AbstractEventLoop | None = None) -> None:
        from uvicorn.protocols.http.h11_impl import H11Protocol  # noqa: PLC0415 - serve extra

        self.limits = self._open.limits
        self.loop = _loop or asyncio.get_running_loop()
        self.inner = H11Protocol(config, server_state, {**app_state, CONNECTION_KEY: self},
                                 _loop=self.loop)
        self.transport: asyncio.Transport | None = None
        self.counted = False
        self.active = 0  # requests of this connection the app is answering
        self.read_deadline: float | None = None
        self.idle = False  # the deadline is the idle one (no byte since the last answer)
        self.received = False  # bytes of a request arrived since it became idle
        # The read deadline a check found passed: the next check expires it if it holds.
        self.overdue: float | None = None
        self.write_paused = False
        self.stalled_size = 0  # the transport's buffer when the write stall was last seen
        self.stalled_since = 0.0
        self.closing_since: float | None = None
        self.timer: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol ----------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport, though not always a subclass of asyncio.Transport
        # (uvloop's, which uvicorn picks when it is installed, is not).
        transport = cast(asyncio.Transport, transport)
        self.transport = transport
        opened = self._open
        if opened.count >= self.limits.max_connections:
            opened.refused += 1
            if opened.refused == 1 or opened.refused % 100 == 0:
                logger.warning("refused a connection: %d are open, the most this server keeps "
                               "(--max-connections); %d refused so far",
                               opened.count, opened.refused)
            transport.write(raw_problem(
                503, "Service Unavailable", "too-many-connections",
                f"this server has {opened.count} connections open, as many as it keeps; "
                "try again shortly", ("retry-after: 1",)))
            transport.close()
            return
        opened.count += 1
        self.counted = True
        # asyncio hands out a wrapper of the socket that allows setsockopt.
        sock = transport.get_extra_info("socket")
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.limits.send_buffer_bytes)
        except (AttributeError, OSError):  # not fatal: the write timeout still bounds it
            logger.debug("could not set the send buffer of a connection", exc_info=True)
        self._await_head(idle=False)
        self.inner.connection_made(transport)
        self._schedule()

    def data_received(self, data: bytes) -> None:
        if not self.counted:
            return  # refused: closing
        if self.active == 0:
            if self.idle:  # the head's time starts with its first byte
                self._await_head(idle=False)
            self.received = True
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        if self.counted:
            self.inner.eof_received()
        return None  # the transport closes itself once the client's half is closed

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.counted:
            self.counted = False
            self._open.count -= 1
            self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self.transport is not None and not self.write_paused:
            self.write_paused = True
            self.stalled_size = self.transport.get_write_buffer_size()
            self.stalled_since = self.loop.time()
        if self.counted:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.write_paused = False
        if self.active == 0 and self.idle and not self.received:
            # It was reading the last answer all along: idle from now.
            self._await_head(idle=True)
        if self.counted:
            self.inner.resume_writing()

    # -- what ApiGuard tells it --------------------------------------------------------

    def request_began(self) -> None:
        self.active += 1
        self.read_deadline = None

    def request_ended(self) -> None:
        self.active = max(0, self.active - 1)
        if self.active == 0:
            self._await_head(idle=True)

    # -- the deadlines -------------------------------------------------------------------

    def _await_head(self, *, idle: bool) -> None:
        self.idle = idle
        self.received = False
        timeout = self.limits.idle_timeout if idle else self.limits.header_timeout
        self.read_deadline = self.loop.time() + timeout

    def _schedule(self) -> None:
        self.timer = self.loop.call_later(self.limits.check_interval, self._check)

    def _check(self) -> None:
        self.timer = None
        transport = self.transport
        if transport is None or not self.counted:
            return
        now = self.loop.time()
        if transport.is_closing():
            # Closed with unsent bytes (by uvicorn or here): gone once they are sent,
            # or aborted if the client does not read them.
            self.closing_since = self.closing_since or now
            if now - self.closing_since >= self.limits.write_timeout:
                self._abort("a closed connection's client read nothing of its last answer")
                return
        elif self.write_paused:
            size = transport.get_write_buffer_size()
            if size < self.stalled_size:  # the client read some: progress
                self.stalled_size, self.stalled_since = size, now
            elif now - self.stalled_since >= self.limits.write_timeout:
                self._abort("its client read nothing of the answer")
                return
        elif self.active == 0 and self.read_deadline is not None and now >= self.read_deadline:
            # Expired at the next check, if this deadline still holds then: a loop that
            # ran late may have passed the deadline after its last poll of the socket,
            # with the awaited bytes already received by the kernel. Between two checks
            # the loop polls the socket, delivering them (which moves or clears it).
            if self.overdue == self.read_deadline:
                self._expire_read(transport)
            else:
                self.overdue = self.read_deadline
        self._schedule()

    def _expire_read(self, transport: asyncio.Transport) -> None:
        self.read_deadline = None
        if self.received:
            # Part of a request arrived, never all of its head.
            timeout = self.limits.header_timeout
            transport.write(raw_problem(
                408, "Request Timeout", "request-timeout",
                f"the request's head did not arrive within {timeout:g} seconds"))
            logger.info("closed a connection from %s: its request's head did not arrive "
                        "within %gs", _peer(transport), timeout)
        transport.close()

    def _abort(self, why: str) -> None:
        assert self.transport is not None
        logger.info("aborted a connection from %s after %gs: %s", _peer(self.transport),
                    self.limits.write_timeout, why)
        self.transport.abort()


def _peer(transport: asyncio.BaseTransport) -> str:
    peer = transport.get_extra_info("peername")
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return "a client"


def guarded_protocol(limits: ConnectionLimits) -> type[GuardedConnection]:
    """A `GuardedConnection` class for one server (its connections share one count);
    give it to uvicorn as `Config(http=...)`."""

    class ServerConnection(GuardedConnection):
        _open = _OpenConnections(limits)

    return ServerConnection
