"""A real HTTP server on 127.0.0.1 for tests whose subject makes HTTP calls
(webhook steps, schema references that must never be fetched): the test
decides each answer, and sees every request as it arrived."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]  # names lowercased
    body: bytes


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


Respond = Callable[[Request], Answer]


class _Server(ThreadingHTTPServer):
    # Python's default listen backlog is 5; a resumed serve sends the webhooks of
    # all its runs at once (20 in the handover test), and on a loaded machine a
    # full accept queue can cost a connection.
    request_queue_size = 128


@contextmanager
def serve_http(respond: Respond) -> Iterator[str]:
    """Serve on a free port of 127.0.0.1 until the block ends; yields the base URL
    (`http://127.0.0.1:PORT`). `respond` runs on the server's thread, once per
    request, whatever the method."""

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            answer = respond(Request(self.command, self.path,
                                     {k.lower(): v for k, v in self.headers.items()},
                                     self.rfile.read(length)))
            self.send_response(answer.status)
            for name, value in {**answer.headers,
                                "Content-Length": str(len(answer.body))}.items():
                self.send_header(name, value)
            self.end_headers()
            with contextlib.suppress(OSError):  # the caller was killed meanwhile
                self.wfile.write(answer.body)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

        def log_message(self, format: str, *args: Any) -> None:
            pass  # a test's output is its assertions, not an access log

    server = _Server(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
