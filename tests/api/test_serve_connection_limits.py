"""`GuardedConnection`, the limits around each connection of `serve`, on a fake transport and
a fake loop clock: the deadlines are exactly what the test advances, never the wall clock.

(`test_serve_connections.py` shows the same limits on a real `serve`.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from uvicorn.config import Config
from uvicorn.server import ServerState

from agent_runtime.api.connections import (
    ConnectionLimits,
    GuardedConnection,
    connection_of,
    guarded_protocol,
)
from agent_runtime.api.run_loops import loop_kind
from agent_runtime.api.server import uvicorn_config

LIMITS = ConnectionLimits(max_connections=2, header_timeout=10.0, idle_timeout=5.0,
                          write_timeout=30.0)
# A read deadline is acted on at the second check past it: at most this long after it passed.
LATE = 0.5 + 2 * LIMITS.check_interval


class FakeTimer:
    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeLoop:
    """`time()` and `call_later()` on a clock the test advances."""

    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[tuple[float, Callable[[], None], FakeTimer]] = []

    def time(self) -> float:
        return self.now

    def call_later(self, delay: float, callback: Callable[[], None]) -> FakeTimer:
        handle = FakeTimer()
        self.timers.append((self.now + delay, callback, handle))
        return handle

    def advance(self, seconds: float, step: float = 0.25) -> None:
        end = self.now + seconds
        while self.now < end:
            self.now = min(end, self.now + step)
            due = [timer for timer in self.timers if timer[0] <= self.now]
            self.timers = [timer for timer in self.timers if timer[0] > self.now]
            for _, callback, handle in due:
                if not handle.cancelled:
                    callback()


class FakeTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.buffered = 0
        self.closing = False
        self.aborted = False
        self.protocol: GuardedConnection | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += bytes(data)

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def is_closing(self) -> bool:
        return self.closing or self.aborted

    def close(self) -> None:
        self.closing = True

    def abort(self) -> None:
        self.aborted = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 50000), "sockname": ("127.0.0.1", 8000)}.get(
            name, default)


class Server:
    """One server's connection class, and connections made on fake transports."""

    def __init__(self, limits: ConnectionLimits = LIMITS) -> None:
        async def app(scope: Any, receive: Any, send: Any) -> None:
            raise AssertionError("no request reaches the app in these tests")

        self.config = Config(app, lifespan="off", log_config=None)
        self.config.load()
        self.state = ServerState()
        self.protocol = guarded_protocol(limits)
        self.loop = FakeLoop()

    def connect(self) -> tuple[GuardedConnection, FakeTransport]:
        connection = self.protocol(self.config, self.state, {},
                                   _loop=self.loop)  # type: ignore[arg-type]
        transport = FakeTransport()
        connection.connection_made(transport)
        return connection, transport


@pytest.fixture
def server() -> Server:
    return Server()


def test_past_the_cap_a_connection_is_answered_503_and_closed(server: Server) -> None:
    first, _ = server.connect()
    server.connect()
    _, refused = server.connect()
    assert refused.written.startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
    assert b"retry-after: 1" in refused.written
    assert refused.closing
    first.connection_lost(None)  # one closes: the next is served
    _, served = server.connect()
    assert not served.closing and served.written == b""


class OtherLoopTransport:
    """A stream transport that is not an `asyncio.Transport` subclass, as uvloop's are
    (uvicorn runs on uvloop when it is installed)."""

    def __init__(self) -> None:
        self.fake = FakeTransport()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fake, name)


def test_a_transport_of_another_loop_kind_is_guarded_too(server: Server) -> None:
    connection = server.protocol(server.config, server.state, {},
                                 _loop=server.loop)  # type: ignore[arg-type]
    transport = OtherLoopTransport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    connection.data_received(b"GET /runs HTTP/1.1\r\n")
    server.loop.advance(LIMITS.header_timeout + LATE)
    assert transport.fake.written.startswith(b"HTTP/1.1 408")


def test_a_request_that_arrived_while_the_loop_ran_late_is_served(server: Server) -> None:
    connection, transport = server.connect()
    connection.request_began()
    connection.request_ended()  # idle: the next head is due within the idle timeout
    # The loop runs late: its check finds the deadline passed, though the client's
    # next request is already in the kernel, read at the loop's next poll.
    server.loop.now += LIMITS.idle_timeout + 3.0
    server.loop.advance(0.0001)
    assert not transport.closing
    connection.data_received(b"GET /runs HTTP/1.1\r\nHost: 127.0.0.1:8000\r\n")
    server.loop.advance(LATE)
    assert not transport.closing  # its head's time runs from that byte on
    server.loop.advance(LIMITS.header_timeout)
    assert transport.written.startswith(b"HTTP/1.1 408")


def test_a_silent_connection_is_closed_after_the_header_timeout(server: Server) -> None:
    _, transport = server.connect()
    server.loop.advance(LIMITS.header_timeout - 0.5)
    assert not transport.closing
    server.loop.advance(LATE)
    assert transport.closing
    assert transport.written == b""  # nothing was asked: nothing to answer


def test_a_trickling_head_is_answered_408_when_its_time_is_up(server: Server) -> None:
    connection, transport = server.connect()  # its head's time starts now
    server.loop.advance(3.0)
    connection.data_received(b"GET /runs HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nX-Slow: ")
    while server.loop.now < LIMITS.header_timeout - 1:
        connection.data_received(b"a")  # a byte a second does not buy more time
        server.loop.advance(1.0)
    assert not transport.closing
    connection.data_received(b"a")
    server.loop.advance(LATE)
    assert transport.closing
    assert transport.written.startswith(b"HTTP/1.1 408 Request Timeout\r\n")
    assert b"application/problem+json" in transport.written


def test_no_read_deadline_while_a_request_is_answered_then_the_idle_one(server: Server) -> None:
    connection, transport = server.connect()
    connection.request_began()
    server.loop.advance(LIMITS.header_timeout * 3)
    assert not transport.closing
    connection.request_ended()
    server.loop.advance(LIMITS.idle_timeout - 0.5)
    assert not transport.closing
    server.loop.advance(LATE)
    assert transport.closing and transport.written == b""


def test_the_next_requests_first_byte_starts_its_head_timeout(server: Server) -> None:
    connection, transport = server.connect()
    connection.request_began()
    connection.request_ended()
    server.loop.advance(LIMITS.idle_timeout - 1)
    connection.data_received(b"GET /runs HTTP/1.1\r\n")
    server.loop.advance(LIMITS.header_timeout - 0.5)
    assert not transport.closing  # past the idle timeout, within the head's
    server.loop.advance(LATE)
    assert transport.written.startswith(b"HTTP/1.1 408")


def test_a_client_that_reads_nothing_is_aborted_after_the_write_timeout(
        server: Server) -> None:
    connection, transport = server.connect()
    connection.request_began()
    transport.buffered = 300_000
    connection.pause_writing()
    server.loop.advance(LIMITS.write_timeout - 0.5)
    assert not transport.aborted
    server.loop.advance(LATE)
    assert transport.aborted


def test_a_client_that_reads_slowly_keeps_its_connection(server: Server) -> None:
    connection, transport = server.connect()
    connection.request_began()
    transport.buffered = 300_000
    connection.pause_writing()
    for _ in range(int(LIMITS.write_timeout * 3)):
        transport.buffered -= 1_000  # it reads a little every second
        server.loop.advance(1.0)
    assert not transport.aborted
    server.loop.advance(LIMITS.write_timeout + LATE)  # then stops
    assert transport.aborted


def test_a_closed_connection_whose_client_never_reads_its_last_bytes_is_aborted(
        server: Server) -> None:
    _, transport = server.connect()
    transport.buffered = 10_000  # below the high-water mark: writing never paused
    transport.close()
    server.loop.advance(LIMITS.write_timeout - LIMITS.check_interval)
    assert not transport.aborted
    server.loop.advance(LATE + LIMITS.check_interval)  # noticed at a check after the close
    assert transport.aborted


def test_a_request_finds_its_connection_in_its_scope(server: Server) -> None:
    connection, _ = server.connect()
    scope = {"type": "http", "state": {**connection.inner.app_state}}
    assert connection_of(scope) is connection
    assert connection_of({"type": "http"}) is None


@pytest.mark.parametrize("bad", [{"max_connections": 0}, {"header_timeout": 0},
                                 {"write_timeout": -1}, {"send_buffer_bytes": 10}])
def test_limits_are_checked(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        ConnectionLimits(**bad)


def test_idle_connections_are_closed_by_the_guard_not_by_uvicorns_keep_alive_timer() -> None:
    # uvicorn's timer does not wait for a loop running late to poll the socket
    # (on uvloop it runs before the poll), so it must never be the one that fires.
    limits = ConnectionLimits(idle_timeout=7.5)
    config = uvicorn_config(_no_app, "127.0.0.1", 0, limits=limits,
                            access_log=False, grace_seconds=1.0)
    assert config.timeout_keep_alive >= limits.idle_timeout + 3600
    assert issubclass(config.http, GuardedConnection)  # type: ignore[arg-type]
    assert config.loop == loop_kind()


async def _no_app(scope: Any, receive: Any, send: Any) -> None:
    raise AssertionError("never called")
