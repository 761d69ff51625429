"""Model clients (an SDK's, or `chat_http`'s) per event loop, shared by the calls in flight on it.

A client per call opens a new connection per call: a TCP and a TLS handshake
(two round trips to the provider, and the handshake's CPU on the loop every
run there waits on) before each request, and on a `serve` with many runs
waiting on models, most calls overlap others. A pooled connection belongs to
the loop that opened it, and a runtime may be driven by several loops (each
`run_sync`, each worker loop of `serve`), so a client is never shared across
loops. On one loop, the calls that overlap share a client and its keep-alive
connections. A client no call uses is kept `LINGER_SECONDS` for the calls
that follow (a run's next model call, made once its tools answer, reuses the
connection rather than opening another), then closed; a loop that ends
first (`asyncio.run` at a run's end, `serve` stopping) cancels the wait, and
the client is closed then, so no client outlives its loop.

A client takes at most `CALLS_PER_CLIENT` calls at once; the calls past that
on one loop open more clients. The HTTP library's connection pool looks at
each of its connections and waiting requests whenever a request starts or
ends, so one pool under a thousand calls at once (a `serve` whose runs share
their adapters) spent more CPU finding connections than the calls took, and
calls timed out waiting. Small pools keep that cost flat; each keeps its
connections alive for the calls that follow on it.

A shared client's pool is not capped (aiohttp's `limit=0`): a client per call
was not, and a cap would queue the calls of the runs on its loop. Every client of the
process verifies TLS with one context (`tls_context`): each client building
its own loaded the CA bundle again, ~50 ms of CPU on the loop.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import httpx

# The calls one client takes at once (see the module's doc).
CALLS_PER_CLIENT = 16
# Seconds a client no call uses stays open for the next call on its loop.
LINGER_SECONDS = 10.0


class Closable(Protocol):
    async def close(self) -> None: ...


ClientT = TypeVar("ClientT", bound=Closable)


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The TLS context of every model call (an SSLContext is safe to share between
    threads and loops); as httpx builds it by default, the environment's CA settings
    (`SSL_CERT_FILE`, `SSL_CERT_DIR`) included."""
    return httpx.create_ssl_context()


@dataclass
class _Shared(Generic[ClientT]):
    client: ClientT
    calls: int = 0
    # While no call uses the client: the task that closes it after the linger.
    closer: asyncio.Task[None] | None = None


class LoopClients(Generic[ClientT]):
    """The clients of one driver: on each event loop with calls in flight (or
    lately), one per `calls_per_client` of its calls at once."""

    def __init__(self, open_client: Callable[[], ClientT], *,
                 calls_per_client: int = CALLS_PER_CLIENT,
                 linger_seconds: float = LINGER_SECONDS) -> None:
        self._open = open_client
        self.calls_per_client = calls_per_client
        self.linger_seconds = linger_seconds
        # Loops of other threads lease too (serve's worker loops): the table is shared.
        self._lock = threading.Lock()
        self._by_loop: dict[asyncio.AbstractEventLoop, list[_Shared[ClientT]]] = {}

    @property
    def open_clients(self) -> int:
        """How many clients are open now (for tests and diagnostics)."""
        with self._lock:
            return sum(len(clients) for clients in self._by_loop.values())

    @asynccontextmanager
    async def lease(self) -> AsyncIterator[ClientT]:
        """A client of this loop for one call: the first with room (an idle one
        included), else a new one."""
        loop = asyncio.get_running_loop()
        with self._lock:
            clients = self._by_loop.setdefault(loop, [])
            shared = next((client for client in clients
                           if client.calls < self.calls_per_client), None)
            if shared is None:
                shared = _Shared(self._open())
                clients.append(shared)
            shared.calls += 1
            closer, shared.closer = shared.closer, None
        if closer is not None:
            closer.cancel()  # it finds itself replaced, and leaves the client open
        try:
            yield shared.client
        finally:
            with self._lock:
                shared.calls -= 1
                if shared.calls == 0:
                    shared.closer = loop.create_task(self._close_idle(loop, shared))

    async def _close_idle(self, loop: asyncio.AbstractEventLoop,
                          shared: _Shared[ClientT]) -> None:
        """Close `shared` once it has had no call for the linger, or when its loop
        cancels this task first (the loop is ending); not when a call took it."""
        try:
            await asyncio.sleep(self.linger_seconds)
        finally:
            with self._lock:
                idle = shared.closer is asyncio.current_task()
                if idle:
                    clients = self._by_loop[loop]
                    clients.remove(shared)  # a call starting now opens another
                    if not clients:
                        del self._by_loop[loop]
            if idle:
                await shared.client.close()
