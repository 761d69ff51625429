"""A webhook receiver on 127.0.0.1 that holds every request until the test releases it,
so a run stays `running` (inside its webhook step) for exactly as long as a test needs."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HOLD_LIMIT = 120.0  # a forgotten release must not hang a test run forever


@dataclass
class SlowReceiver:
    url: str
    release: threading.Event = field(default_factory=threading.Event)
    arrived: threading.Condition = field(default_factory=threading.Condition)
    requests: list[tuple[str, str | None]] = field(default_factory=list)  # (path, key)

    def paths(self) -> list[str]:
        with self.arrived:
            return [path for path, _ in self.requests]

    def wait_for(self, path: str, count: int = 1, timeout: float = 90.0) -> bool:
        with self.arrived:
            return self.arrived.wait_for(
                lambda: sum(seen == path for seen, _ in self.requests) >= count, timeout)

    def keys(self, path: str) -> list[str | None]:
        with self.arrived:
            return [key for seen, key in self.requests if seen == path]


@contextmanager
def slow_receiver() -> Iterator[SlowReceiver]:
    state = SlowReceiver(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            with state.arrived:
                state.requests.append((self.path, self.headers.get("Idempotency-Key")))
                state.arrived.notify_all()
            state.release.wait(HOLD_LIMIT)
            body = b'{"ok": true}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            with contextlib.suppress(OSError):  # the caller was killed meanwhile
                self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    host, port = server.server_address[:2]
    state.url = f"http://{host!s}:{port}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.release.set()
        server.shutdown()
        server.server_close()
        thread.join(10)

