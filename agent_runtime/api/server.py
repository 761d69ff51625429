"""The local HTTP server of `agent-runtime serve`: the API's routes under uvicorn.

    app = build_app(services, HostCheck("127.0.0.1", 8000))
    serve_until_stopped(app, bind_socket("127.0.0.1", 8000), launcher=..., reconcile=...)

The routes are a Powertools `HttpResolverLocal` (an ASGI app) with
`build_api`, the same routes API Gateway serves on AWS, each request answered
on one worker thread (`one_hop_resolver`), so a route's store work never holds
the event loop and the other requests behind it. In front of it,
`ApiGuard` does what API Gateway does there and a bare ASGI app does not:

* refuses a `Host` this server is not bound to (421; DNS rebinding), and
  header or query bytes that are not UTF-8 (400);
* enforces the body limit while reading: 413 as soon as `Content-Length`
  or the bytes received pass `limits.max_body_bytes`, never buffering more;
* refuses a body that is not UTF-8 (400) instead of letting the resolver
  fail decoding it;
* answers an exception nothing else handled with a 500 problem that carries
  no traceback, and logs it (a client's input should never get there);
* holds one of `CONCURRENT_REQUESTS` request slots only while the routes
  compute an answer (`answers`), and sends it after the slot is free;
* answers the public routes (`/openapi.json`, the console's files) from
  answers computed at start (`public_pages`), outside the slots;
* times the body out (408) after `ConnectionLimits.body_timeout`;
* answers the events route's waiting requests (long-polls, event streams) on
  the event loop, holding a slot only for each page's read (`event_stream`).

Every error it writes is `application/problem+json` (RFC 9457). Below it, each
connection is a `GuardedConnection` (`connections`): a cap on open
connections, and timeouts for a request's head, an idle connection and a
client that does not read its answer.

Stopping (SIGINT or SIGTERM): at the signal, every run stops starting model
requests, tool calls and steps (`LocalLauncher.interrupt`); a call in flight
may end, and each run suspends `interrupted` at its next commit point, its
lease released and its resume requested for the next server. Meanwhile the
server stops accepting connections and finishes the requests in flight
(a request that would start a run is answered 503), and the reconciler loop
stops. The runs get `grace_seconds` in all to suspend; then the server exits
0. A run still executing after that, or after a second signal, is abandoned
as in a crash (exit 1): its checkpoint is kept, and the next server takes it
over at once, this process being gone.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from types import FrameType
from typing import TYPE_CHECKING, Any

from stores.thread_placement import adopt

from agent_runtime.api.access_log import hide_query_strings
from agent_runtime.api.answers import (
    Answer,
    AsgiApp,
    Receive,
    Scope,
    Send,
    compute_answer,
    problem_answer,
)
from agent_runtime.api.connections import ConnectionLimits, connection_of, guarded_protocol
from agent_runtime.api.event_stream import EventFollower, EventStreamAnswer
from agent_runtime.api.local_auth import HostCheck
from agent_runtime.api.local_launcher import LocalLauncher
from agent_runtime.api.local_reconcile import ReconcileLoop
from agent_runtime.api.problems import excerpt
from agent_runtime.api.public_pages import capture_public_answers, public_paths
from agent_runtime.api.run_loops import loop_kind
from agent_runtime.api.services import ApiServices

if TYPE_CHECKING:
    import uvicorn

logger = logging.getLogger("agent_runtime.serve")

# A request's routes and middlewares run on one worker thread of the event
# loop's pool (`one_hop_resolver`), which is sized here, and requests wait for
# a slot in it rather than queueing in the pool unseen. A request holds its
# slot only while the routes compute its answer: sending it, to a client that
# may never read, happens after the slot is free.
CONCURRENT_REQUESTS = 16
# How much longer than the guard's idle timeout uvicorn's keep-alive timeout is
# (seconds): the guard closes idle connections (`uvicorn_config`).
KEEP_ALIVE_MARGIN = 3600
# How many of the runs left executing at a forced stop the log line names: a
# server stopped with a thousand runs waiting on their models would otherwise
# write one line of tens of kilobytes. `agent-runtime list --status running`
# names them all.
NAMED_RUNS_LEFT = 20


class _TooLarge(Exception):
    pass


class _Disconnected(Exception):
    pass


class ApiGuard:
    """ASGI middleware in front of the resolver: Host, encoding, body size and time, the
    request slots, the public answers, last-resort 500."""

    def __init__(self, app: AsgiApp, *, max_body_bytes: int, hosts: HostCheck,
                 body_timeout: float = ConnectionLimits.body_timeout,
                 public: Mapping[str, Answer] | None = None,
                 events: EventFollower | None = None) -> None:
        self.app = app
        self.events = events
        self.max_body_bytes = max_body_bytes
        self.hosts = hosts
        self.body_timeout = body_timeout
        self.public: Mapping[str, Answer] = public or {}
        self._slots: asyncio.Semaphore | None = None

    def _request_slots(self) -> asyncio.Semaphore:
        if self._slots is None:  # first request: on the server's own event loop
            # Threads of ours: a group commit may wake one on its leader's CPU.
            asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(
                max_workers=CONCURRENT_REQUESTS, thread_name_prefix="serve-request",
                initializer=adopt))
            self._slots = asyncio.Semaphore(CONCURRENT_REQUESTS)
        return self._slots

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        connection = connection_of(scope)
        if connection is not None:
            connection.request_began()
        try:
            answer = await self._answer(scope, receive)
            if answer is not None:
                # No slot held: a client that reads slowly, or never, delays only
                # itself, until the connection's write timeout ends it.
                await answer.send(send)
        finally:
            if connection is not None:
                connection.request_ended()

    async def _answer(self, scope: Scope, receive: Receive) -> Answer | EventStreamAnswer | None:
        refusal = self._refusal(scope)
        if refusal is not None:
            return problem_answer(*refusal)
        if scope.get("method") == "GET":
            public = self.public.get(scope.get("path", ""))
            if public is not None:
                return public
        try:
            async with asyncio.timeout(self.body_timeout):
                body = await self._read_body(receive)
        except TimeoutError:
            return problem_answer(408, f"the request body did not arrive within "
                                       f"{self.body_timeout:g} seconds", close=True)
        except _TooLarge:
            return problem_answer(413, f"the request body is larger than "
                                       f"{self.max_body_bytes} bytes", close=True)
        except _Disconnected:
            return None
        try:
            body.decode("utf-8")
        except UnicodeDecodeError:
            return problem_answer(400, "the request body is not UTF-8 text")
        if self.events is not None and self.events.follows(scope):
            return await self.events.answer(scope, receive, self._ask)
        async with self._request_slots():
            try:
                answer = await compute_answer(self.app, scope, body, receive)
            except Exception:
                logger.exception("%s %s: unhandled error", scope.get("method"),
                                 scope.get("path"))
                answer = None
        if answer is None:
            return problem_answer(500, "the server failed to answer this request; the "
                                       "error is in its log")
        return answer

    async def _ask(self, scope: Scope) -> Answer:
        """The routes' answer to a bodiless request, in a request slot (`event_stream`)."""
        async def no_more() -> dict[str, Any]:
            return {"type": "http.disconnect"}

        async with self._request_slots():
            try:
                answer = await compute_answer(self.app, scope, b"", no_more)
            except Exception:
                logger.exception("%s %s: unhandled error", scope.get("method"),
                                 scope.get("path"))
                answer = None
        return answer or problem_answer(500, "the server failed to answer this request; "
                                             "the error is in its log")

    def _refusal(self, scope: Scope) -> tuple[int, str] | None:
        headers: list[tuple[bytes, bytes]] = scope.get("headers", [])
        try:
            for name, value in headers:
                name.decode("utf-8")
                value.decode("utf-8")
            scope.get("query_string", b"").decode("utf-8")
        except UnicodeDecodeError:
            return 400, "request headers and the query string must be UTF-8"
        hosts = [value.decode("utf-8") for name, value in headers if name.lower() == b"host"]
        if len(hosts) != 1:
            return 400, "the request needs exactly one Host header"
        if not self.hosts.allows(hosts[0]):
            # Not an address this server answers to: a DNS rebinding page, or a
            # proxy forwarding a name it should not.
            return 421, (f"this server answers to {self.hosts.describe()}, not "
                         f"{excerpt(hosts[0])!r}")
        lengths = [value for name, value in headers if name.lower() == b"content-length"]
        if lengths and lengths[0].strip().isdigit() \
                and int(lengths[0].strip()) > self.max_body_bytes:
            return 413, f"the request body is larger than {self.max_body_bytes} bytes"
        return None

    async def _read_body(self, receive: Receive) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _Disconnected
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                raise _TooLarge
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


def build_app(services: ApiServices, hosts: HostCheck,
              limits: ConnectionLimits | None = None) -> ApiGuard:
    """The routes on an `HttpResolverLocal`, behind `ApiGuard`, with the public routes'
    answers computed now (`public_pages`)."""
    from agent_runtime.api.one_hop_resolver import (  # noqa: PLC0415 - the serve extra
        OneHopResolver,
    )
    from agent_runtime.api.routes import build_api  # noqa: PLC0415 - imports Powertools

    resolver = OneHopResolver(enable_validation=True)
    build_api(resolver, services)
    public = capture_public_answers(resolver, public_paths())
    return ApiGuard(resolver, max_body_bytes=services.limits.max_body_bytes, hosts=hosts,
                    body_timeout=(limits or ConnectionLimits()).body_timeout, public=public,
                    events=EventFollower(services.limits))


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening socket on `host:port` (port 0: a free one, read it from the socket)."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


class _Stop:
    """The signals of one server: the first stops it gracefully, a second at once."""

    def __init__(self, launcher: LocalLauncher) -> None:
        self.launcher = launcher
        self.requested = threading.Event()
        self.forced = threading.Event()
        self.server: Any = None
        self.at: float | None = None  # when the first signal came (monotonic)

    def interrupt(self) -> None:
        """Every run stops starting calls, at the first signal (see the module doc)."""
        if self.at is None:
            self.at = time.monotonic()
        self.launcher.interrupt()

    def handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested.is_set():
            self.forced.set()
        self.requested.set()
        self.interrupt()
        if self.server is not None:
            self.server.should_exit = True


def uvicorn_config(app: AsgiApp, host: str, port: int, *, limits: ConnectionLimits,
                   access_log: bool, grace_seconds: float) -> uvicorn.Config:
    """How `serve` runs uvicorn."""
    import uvicorn  # noqa: PLC0415 - the serve extra

    # h11 always (never httptools, even when installed): `GuardedConnection`
    # wraps it, and its limits are the ones its module describes. No WebSockets
    # (the API has none): an upgraded connection would leave the wrapper. The
    # loop is of the run loops' kind (`run_loops.loop_kind`). The guard closes
    # idle connections (`idle_timeout`), so uvicorn's keep-alive timer is set
    # past any deadline: it fires on time only, and on a loop running late it
    # closed connections whose next request had arrived (on uvloop a timer
    # runs before the socket is polled), which a client sees reset.
    return uvicorn.Config(app, host=host, port=port, lifespan="off", access_log=access_log,
                          loop=loop_kind(), server_header=False,
                          timeout_graceful_shutdown=math.ceil(grace_seconds),
                          log_config=None, http=guarded_protocol(limits), ws="none",
                          timeout_keep_alive=math.ceil(limits.idle_timeout) + KEEP_ALIVE_MARGIN)


def serve_until_stopped(app: ApiGuard, sock: socket.socket, *, launcher: LocalLauncher,
                        reconcile: ReconcileLoop | None,
                        grace_seconds: float,
                        access_log: bool = True,
                        limits: ConnectionLimits | None = None) -> int:
    """Serve on `sock` until SIGINT or SIGTERM; then stop as the module says. Exit code."""
    import uvicorn  # noqa: PLC0415 - the serve extra

    limits = limits or ConnectionLimits()
    host, port = sock.getsockname()[:2]
    hide_query_strings()  # a `?token=` must not reach the access log
    config = uvicorn_config(app, host, port, limits=limits, access_log=access_log,
                            grace_seconds=grace_seconds)
    stop = _Stop(launcher)

    class Server(uvicorn.Server):
        # While serving, uvicorn's handlers take the signals and pass them on
        # only after the requests in flight ended: the runs must stop at once.
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            stop.interrupt()
            super().handle_exit(sig, frame)

    server = Server(config)
    stop.server = server
    # Installed before uvicorn's: it restores them after serving and passes
    # on the signals it caught, and a signal during the drain must count.
    previous = {sig: signal.signal(sig, stop.handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        if reconcile is not None:
            reconcile.start()
        if not stop.requested.is_set():
            server.run(sockets=[sock])
        stop.requested.set()
        return _drain(stop, launcher, reconcile, grace_seconds,
                      time.monotonic() if stop.at is None else stop.at)
    finally:
        sock.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _named(run_ids: list[str]) -> str:
    """The first `NAMED_RUNS_LEFT` run ids, and how many more there are."""
    named = ", ".join(run_ids[:NAMED_RUNS_LEFT])
    more = len(run_ids) - NAMED_RUNS_LEFT
    return f"{named} and {more} more (agent-runtime list --status running)" if more > 0 \
        else named


def _drain(stop: _Stop, launcher: LocalLauncher, reconcile: ReconcileLoop | None,
           grace_seconds: float, started: float) -> int:
    """Wait for the interrupted runs to suspend, within the grace counted from the
    signal (`started`, monotonic); the exit code."""
    launcher.interrupt()  # already, unless serving ended otherwise
    if reconcile is not None:
        reconcile.stop(timeout=max(0.0, started + grace_seconds - time.monotonic()))
    left = launcher.running()
    if left:
        logger.info("stopping: waiting up to %ss for %d run(s) to suspend (a second signal "
                    "stops at once)", grace_seconds, len(left))
    deadline = started + grace_seconds
    while left and not stop.forced.is_set() and (remaining := deadline - time.monotonic()) > 0:
        # Short waits, so that a second signal is noticed at once.
        left = launcher.wait(timeout=min(0.2, remaining))
    if not left:
        launcher.close(timeout=grace_seconds)
        logger.info("stopped")
        return 0
    logger.warning("stopping with %d run(s) still executing: %s; each keeps its latest "
                   "checkpoint and is taken over at once by the next `agent-runtime serve` "
                   "(or `agent-runtime reconcile`) on this host", len(left), _named(left))
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    # A call in flight (a tool's thread, a store call) cannot be taken back and
    # would hold the process open; leaving now is the crash every run survives.
    logging.shutdown()
    os._exit(1)
