"""A webhook receiver on 127.0.0.1 that holds every request until the test releases it,
so a run stays `running` (inside its webhook step) for exactly as long as a test needs."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from tests.local_http import Answer, Request, serve_http

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

    def respond(request: Request) -> Answer:
        with state.arrived:
            state.requests.append((request.path, request.headers.get("idempotency-key")))
            state.arrived.notify_all()
        state.release.wait(HOLD_LIMIT)
        return Answer(200, {"Content-Type": "application/json"}, b'{"ok": true}')

    with serve_http(respond) as url:
        state.url = url
        try:
            yield state
        finally:
            state.release.set()  # held answers go, so the server can stop
