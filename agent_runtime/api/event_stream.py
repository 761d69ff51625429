"""`serve`'s answers of `GET /runs/{runId}/events` that wait: long-polls and event streams.

The route answers one page at once (`wait=0`). A request that waits for events
(`?wait=N`, or `Accept: text/event-stream`) is answered here, on the server's
event loop, by asking the route again at each poll
(`ApiLimits.events_poll_seconds`) with `wait=0`: each ask holds a request slot
and a worker thread for one page's read, and nothing is held while waiting, so
clients that follow runs never starve the requests that start them. Tenancy,
validation and errors are the route's own: the first answer that is not a
page is the answer.

Reading a page folds the run's checkpoint bodies; between pages the follower
only watches the run itself (`GET /runs/{runId}`: its checkpoint seq and
status, one record read) and asks for the next page once they moved, since
events commit only with checkpoints.

A stream is Server-Sent Events: each event of the run's log as `id: <cursor>`,
`event: <type>` and `data: <the event's JSON>`; a client that reconnects
sends `Last-Event-ID` and continues after it. A comment is sent every
`event_stream_keepalive_seconds` without events; the stream ends when the
run has ended and its log was sent whole (after an `event: end` naming the
status), when the client goes, or after `max_event_stream_seconds` (the
client reconnects).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode

from stores.records import TERMINAL_STATUSES

from agent_runtime.api.answers import SECURITY_HEADERS, Answer, Receive, Scope, Send
from agent_runtime.api.services import ApiLimits

EVENTS_PATH = re.compile(r"/runs/[^/]+/events")
EVENT_STREAM = "text/event-stream"
_TERMINAL = frozenset(status.value for status in TERMINAL_STATUSES)
# A `Last-Event-ID` or `after` this server would take: a cursor, as the route bounds it.
_CURSOR = re.compile(r"\d{1,16}")

# Asks the routes for one answer (a request slot held only meanwhile).
Ask = Callable[[Scope], Awaitable[Answer]]
# What moves when events commit: the run's checkpoint seq and status (None: unknown).
Mark = tuple[Any, Any] | None


def _query(scope: Scope) -> dict[str, str]:
    text = scope.get("query_string", b"").decode("utf-8", errors="replace")
    return dict(parse_qsl(text, keep_blank_values=True))


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return str(value.decode("utf-8", errors="replace"))
    return None


def _asking(scope: Scope, **query: str) -> Scope:
    """`scope` with these query parameters replaced (and the rest kept)."""
    merged = {**_query(scope), **query}
    return {**scope, "query_string": urlencode(merged).encode("ascii")}


def _page(answer: Answer) -> dict[str, Any] | None:
    """The page an answer holds, or None when it is not one (a problem, say)."""
    if answer.status != 200:
        return None
    try:
        page = json.loads(answer.body)
    except ValueError:
        return None
    return page if isinstance(page, dict) and isinstance(page.get("events"), list) else None


@dataclass(frozen=True)
class EventFollower:
    """Answers the waiting requests of the events route (see the module doc)."""

    limits: ApiLimits
    clock: Callable[[], float] = time.monotonic

    @staticmethod
    def follows(scope: Scope) -> bool:
        """Whether this request waits: a GET of the events route with `wait` over 0 or
        asking for an event stream. Anything malformed is the route's to refuse."""
        if scope.get("method") != "GET" or not EVENTS_PATH.fullmatch(scope.get("path", "")):
            return False
        if EVENT_STREAM in (_header(scope, b"accept") or ""):
            return True
        wait = _query(scope).get("wait", "0")
        return wait.isdigit() and 0 < int(wait) <= 60

    async def answer(self, scope: Scope, receive: Receive,
                     ask: Ask) -> Answer | EventStreamAnswer:
        """A waiting request's answer: a long-poll's page, or a stream to send."""
        if EVENT_STREAM not in (_header(scope, b"accept") or ""):
            return await self.long_poll(scope, ask)
        first, after, mark = await self.first_answer(scope, ask)
        if _page(first) is None:  # refused (404, 422, ...): answered as the route did
            return first
        return EventStreamAnswer(self, scope, ask, first, after=after, mark=mark,
                                 receive=receive)

    async def mark(self, scope: Scope, ask: Ask) -> Mark:
        """The run's checkpoint seq and status, as `GET /runs/{runId}` answers the caller
        (None when it does not: the next page will say why)."""
        path = scope.get("path", "").removesuffix("/events")
        answer = await ask({**scope, "path": path, "raw_path": path.encode("utf-8"),
                            "query_string": b""})
        if answer.status != 200:
            return None
        try:
            run = json.loads(answer.body)["run"]
            return run.get("checkpointSeq"), run.get("status")
        except (ValueError, KeyError, TypeError, AttributeError):
            return None

    async def moved(self, scope: Scope, ask: Ask, mark: Mark, *, until: float,
                    gone: asyncio.Event | None = None) -> tuple[bool, Mark]:
        """Watch the run every poll until its mark moves (True, the new mark), or `until`
        (monotonic) passes or the client is `gone` (False)."""
        while (left := until - self.clock()) > 0:
            pause = min(self.limits.events_poll_seconds, left)
            if gone is None:
                await asyncio.sleep(pause)
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(gone.wait(), pause)
                if gone.is_set():
                    return False, mark
            current = await self.mark(scope, ask)
            if current is None or current != mark:
                return True, current
        return False, mark

    async def long_poll(self, scope: Scope, ask: Ask) -> Answer:
        """The first page with events, or the run's end, or the empty page at the wait's end."""
        wait = min(int(_query(scope)["wait"]), self.limits.max_events_wait_seconds)
        deadline = self.clock() + wait
        once = _asking(scope, wait="0")
        mark = await self.mark(scope, ask)  # before the page: no commit goes unseen
        while True:
            answer = await ask(once)
            page = _page(answer)
            if page is None or page["events"] or page.get("status") in _TERMINAL:
                return answer
            changed, mark = await self.moved(scope, ask, mark, until=deadline)
            if not changed:
                return answer

    async def first_answer(self, scope: Scope, ask: Ask) -> tuple[Answer, int, Mark]:
        """The stream's first page (or the problem that answers it), its cursor and the
        run's mark taken before it."""
        resumed = _header(scope, b"last-event-id")
        after = _query(scope).get("after", "0")
        if resumed is not None and _CURSOR.fullmatch(resumed.strip()):
            after = resumed.strip()
        mark = await self.mark(scope, ask)
        answer = await ask(_asking(scope, wait="0", after=after))
        return answer, int(after) if _CURSOR.fullmatch(after) else 0, mark


class EventStreamAnswer:
    """A stream of a run's events, sent after the request slot is free (`Answer.send`)."""

    def __init__(self, follower: EventFollower, scope: Scope, ask: Ask, first: Answer, *,
                 after: int, mark: Mark, receive: Receive) -> None:
        self._follower = follower
        self._mark = mark
        self._scope = scope
        self._ask = ask
        self._first = first
        self._after = after
        self._receive = receive

    async def send(self, send: Send) -> None:
        limits, clock = self._follower.limits, self._follower.clock
        gone = asyncio.Event()
        watcher = asyncio.create_task(self._watch(gone))
        try:
            await send({"type": "http.response.start", "status": 200, "headers": [
                (b"content-type", b"text/event-stream; charset=utf-8"),
                (b"x-accel-buffering", b"no"), *SECURITY_HEADERS]})
            await self._events(send, gone, ends=clock() + limits.max_event_stream_seconds)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher

    async def _events(self, send: Send, gone: asyncio.Event, *, ends: float) -> None:
        follower, clock = self._follower, self._follower.clock
        answer, after, mark = self._first, self._after, self._mark
        quiet_since = clock()
        await _chunk(send, "retry: 1000\n\n")
        while not gone.is_set():
            page = _page(answer)
            if page is None:  # the run went (retention): the stream ends
                return
            for event in page["events"]:
                after = int(event["cursor"])
                data = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
                await _chunk(send, f"id: {after}\nevent: {event['type']}\ndata: {data}\n\n")
                quiet_since = clock()
            if not page["events"] and page.get("status") in _TERMINAL:
                await _chunk(send, f"event: end\ndata: {json.dumps({'status': page['status']})}"
                                   "\n\n")
                return
            if clock() >= ends:
                return
            if page["events"]:
                mark = await follower.mark(self._scope, self._ask)
            else:
                while not gone.is_set():  # until the run moves: a keep-alive now and then
                    keepalive = quiet_since + follower.limits.event_stream_keepalive_seconds
                    changed, mark = await follower.moved(self._scope, self._ask, mark,
                                                         until=min(keepalive, ends), gone=gone)
                    if changed:
                        break
                    if gone.is_set() or clock() >= ends:
                        return
                    await _chunk(send, ": keep-alive\n\n")
                    quiet_since = clock()
                if gone.is_set():
                    return
            answer = await self._ask(_asking(self._scope, wait="0", after=str(after)))

    async def _watch(self, gone: asyncio.Event) -> None:
        """Notice the client going (the request's body was read already)."""
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                gone.set()
                return


async def _chunk(send: Send, text: str) -> None:
    await send({"type": "http.response.body", "body": text.encode("utf-8"), "more_body": True})
