"""Raw-socket HTTP clients that misbehave on purpose, for tests against a real `serve` on
127.0.0.1: clients that pipeline requests and never read the answers, that send a request
head or body a byte at a time, or that connect and say nothing.

Every socket has a deadline on every call, and every wait is bounded.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from urllib.parse import urlsplit

# A small receive buffer: the kernel holds little of what the server sends to a
# client that never reads, so the server's own buffers fill after a few answers.
SMALL_RECEIVE_BUFFER = 4096
SOCKET_TIMEOUT = 10.0


def server_address(base_url: str) -> tuple[str, int]:
    parts = urlsplit(base_url)
    assert parts.hostname == "127.0.0.1" and parts.port is not None, base_url
    return parts.hostname, parts.port


def request_head(method: str, path: str, address: tuple[str, int], *,
                 token: str | None = None, extra: Sequence[str] = ()) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {address[0]}:{address[1]}"]
    if token is not None:
        lines.append(f"Authorization: Bearer {token}")
    lines.extend(extra)
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii")


def connect(address: tuple[str, int], *, small_buffer: bool = False) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if small_buffer:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SMALL_RECEIVE_BUFFER)
    sock.settimeout(SOCKET_TIMEOUT)
    sock.connect(address)
    return sock


def send_what_fits(sock: socket.socket, data: bytes) -> int:
    """Send `data`, or as much of it as the server takes before the socket's timeout
    (a server that stops reading a pipelining client is allowed to). Bytes sent."""
    sent = 0
    try:
        while sent < len(data):
            sent += sock.send(data[sent:])
    except (TimeoutError, OSError):
        pass
    return sent


def has_answer(sock: socket.socket) -> bool:
    """Whether the server wrote something this client has not read (without reading it)."""
    try:
        return bool(sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
    except BlockingIOError:
        return False
    except OSError:
        return True  # reset: the server answered by closing


@contextmanager
def slow_readers(address: tuple[str, int], count: int, pipeline: bytes) -> Iterator[
        list[socket.socket]]:
    """`count` connections, each sending `pipeline` (many requests) and never reading."""
    with ExitStack() as stack:
        sockets: list[socket.socket] = []
        for _ in range(count):
            sock = stack.enter_context(connect(address, small_buffer=True))
            sock.settimeout(0.5)  # a full pipeline must not hold the test up
            send_what_fits(sock, pipeline)
            sockets.append(sock)
        yield sockets


def read_until_closed(sock: socket.socket, *, timeout: float) -> tuple[bytes, bool]:
    """Read until the server closes the connection or `timeout` passes: (bytes, closed)."""
    received = bytearray()
    deadline = time.monotonic() + timeout
    while (remaining := deadline - time.monotonic()) > 0:
        sock.settimeout(min(remaining, 1.0))
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        except ConnectionResetError:
            return bytes(received), True
        if not chunk:
            return bytes(received), True
        received += chunk
    return bytes(received), False
