"""A real `serve` bounds its connections: how many, and how long a client may take to send a
request's head or body, stay idle, or leave its answer unread (issue 31, "Low": header and
body reads had no timeout and connections no cap).

Every wait is a bounded poll with a generous deadline; the limits are set small so that
the tests are quick, and a busy machine only makes them slower.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from serve_process import Serve, running_serve, wait_until
from slow_clients import (
    connect,
    read_until_closed,
    request_head,
    send_what_fits,
    server_address,
)

from agent_runtime.api.connections import ConnectionLimits
from agent_runtime.cli.main import build_parser

pytestmark = pytest.mark.slow

TOKEN = "connections-test-token-0123456789abcdef"
GENEROUS = 30.0


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    workdir = tmp_path_factory.mktemp("connections")
    args = ["--header-timeout", "1", "--body-timeout", "1", "--idle-timeout", "1"]
    with running_serve(workdir, token=TOKEN, args=args) as server:
        yield server


def status_and_problem(received: bytes) -> tuple[int, dict[str, object]]:
    head, _, body = received.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    assert b"application/problem+json" in head.lower(), head
    assert b"connection: close" in head.lower(), head
    problem = json.loads(body)
    assert isinstance(problem, dict) and problem["status"] == status
    return status, problem


def test_a_request_head_that_trickles_in_is_cut_off_with_408(serve: Serve) -> None:
    address = server_address(serve.base_url)
    started = time.monotonic()
    with connect(address) as sock:
        sock.sendall(b"GET /runs HTTP/1.1\r\nHost: " + f"{address[0]}:{address[1]}".encode()
                     + b"\r\nX-Slow: ")
        received, closed = b"", False
        # A byte every 0.2 s: each one would restart uvicorn's own keep-alive timer.
        while not closed and time.monotonic() - started < GENEROUS:
            send_what_fits(sock, b"a")
            # The answer and the close may arrive in different turns: keep every byte.
            chunk, closed = read_until_closed(sock, timeout=0.2)
            received += chunk
        elapsed = time.monotonic() - started
    assert closed, "the connection was never closed"
    status, problem = status_and_problem(received)
    assert status == 408
    assert "head" in str(problem["detail"])
    print(f"\na request head trickling in was answered 408 after {elapsed:.2f}s "
          "(--header-timeout 1)")


def test_a_connection_that_says_nothing_is_closed(serve: Serve) -> None:
    with connect(server_address(serve.base_url)) as sock:
        received, closed = read_until_closed(sock, timeout=GENEROUS)
    assert closed
    assert received == b""


def test_a_body_that_does_not_arrive_is_cut_off_with_408(serve: Serve) -> None:
    address = server_address(serve.base_url)
    head = request_head("POST", "/runs", address, token=TOKEN,
                        extra=["Content-Type: application/json", "Content-Length: 100"])
    with connect(address) as sock:
        sock.sendall(head + b'{"manifest": ')
        received, closed = read_until_closed(sock, timeout=GENEROUS)
    assert closed
    status, problem = status_and_problem(received)
    assert status == 408
    assert "body" in str(problem["detail"])


def test_an_idle_connection_is_closed_after_its_answer(serve: Serve) -> None:
    address = server_address(serve.base_url)
    with connect(address) as sock:
        sock.sendall(request_head("GET", "/runs", address, token=TOKEN))
        received, closed = read_until_closed(sock, timeout=GENEROUS)
    assert closed
    assert received.startswith(b"HTTP/1.1 200")
    assert b"connection: close" not in received.lower()  # kept alive, then idle


def test_a_websocket_upgrade_is_answered_as_plain_http(serve: Serve) -> None:
    # An upgraded connection would leave the connection limits behind.
    address = server_address(serve.base_url)
    with connect(address) as sock:
        sock.sendall(request_head("GET", "/openapi.json", address, extra=[
            "Connection: Upgrade", "Upgrade: websocket", "Sec-WebSocket-Version: 13",
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="]))
        received, _ = read_until_closed(sock, timeout=GENEROUS)
    assert received.startswith(b"HTTP/1.1 200 OK\r\n")


def test_past_the_connection_cap_a_new_connection_is_answered_503(tmp_path: Path) -> None:
    cap = 4
    with running_serve(tmp_path, token=TOKEN, args=["--max-connections", str(cap)]) as serve:
        address = server_address(serve.base_url)
        held: list[socket.socket] = []
        try:
            held.extend(connect(address) for _ in range(cap))
            with connect(address) as extra:
                extra.sendall(request_head("GET", "/runs", address, token=TOKEN))
                received, closed = read_until_closed(extra, timeout=GENEROUS)
            assert closed
            status, problem = status_and_problem(received)
            assert status == 503
            assert b"retry-after: 1" in received.lower()
            assert "connections open" in str(problem["detail"])
        finally:
            for sock in held:
                sock.close()
        # The held connections are gone: a new one is served again.
        with serve.client() as http:
            wait_until(lambda: answers(http), what="serve answering below its cap again")
        assert "refused a connection" in serve.output()


def answers(http: httpx.Client) -> bool:
    try:
        return http.get("/runs").status_code == 200
    except httpx.TransportError:
        return False


def test_the_flags_defaults_are_the_connection_limits_defaults() -> None:
    args = build_parser().parse_args(["serve"])
    defaults = ConnectionLimits()
    assert (args.max_connections, args.header_timeout, args.body_timeout, args.idle_timeout,
            args.write_timeout) == (defaults.max_connections, defaults.header_timeout,
                                    defaults.body_timeout, defaults.idle_timeout,
                                    defaults.write_timeout)
