"""`serve`'s routes run on worker threads: a route waiting on its store holds only its own
request, and the event loop answers the others meanwhile. A request takes one hop to
one worker thread, its guard, validation and route all made there.

Driven in process through `build_app` (the app `serve` runs under uvicorn) with raw
ASGI messages, over a SQLite store whose reads of one run wait until the test lets
them go.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, MutableMapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar

import pytest
from routes_harness import ECHO, InlineLauncher, TokenAuthenticator, manifest_text

from agent_runtime.api import ApiServices, server
from agent_runtime.api.local_auth import HostCheck
from agent_runtime.api.server import build_app
from agent_runtime.api.submission import agent_from_request
from agent_runtime.engine import AgentRuntime
from agent_runtime.policy import HostPolicy
from agent_runtime.testing import FakeClock
from stores.records import RunRecord
from stores.sqlite import SqliteRunStore

# Only bounds how long a failing run of this test waits: a route that held the
# loop would keep the other request from being answered until then.
HELD_AT_MOST = 60.0


class GatedStore(SqliteRunStore):
    """A SQLite store whose `load_run` of `gated_id` waits for `gate`, noting that it waits."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.gated_id: str | None = None
        self.waiting = threading.Event()
        self.gate = threading.Event()

    def load_run(self, run_id: str) -> RunRecord | None:
        if run_id == self.gated_id:
            self.waiting.set()
            self.gate.wait(HELD_AT_MOST)
        return super().load_run(run_id)


def stored_run(runtime: AgentRuntime) -> str:
    record, _ = runtime.new_run(manifest=agent_from_request(manifest_text("hello.agent.yaml")),
                                options=ECHO, tenant="alice")
    runtime.store.create_run(record)
    return record.run_id


async def get(app: Any, path: str) -> tuple[int, dict[str, Any]]:
    scope = {"type": "http", "method": "GET", "path": path, "query_string": b"",
             "headers": [(b"host", b"127.0.0.1:8000"),
                         (b"authorization", b"Bearer alice-token")]}
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> MutableMapping[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    body = b"".join(message.get("body", b"") for message in sent[1:])
    return int(sent[0]["status"]), json.loads(body)


def test_a_route_waiting_on_its_store_does_not_hold_the_other_requests(tmp_path: Path) -> None:
    store = GatedStore(tmp_path / "runs.sqlite")
    runtime = AgentRuntime(store=store, clock=FakeClock(), owner="api-test", policy=HostPolicy())
    slow_id, other_id = stored_run(runtime), stored_run(runtime)
    store.gated_id = slow_id
    app = build_app(ApiServices(store=store, runtime=runtime, launcher=InlineLauncher(runtime),
                                authenticator=TokenAuthenticator()),
                    HostCheck("127.0.0.1", 8000))
    order: list[str] = []

    async def scenario() -> list[int]:
        slow = asyncio.create_task(get(app, f"/runs/{slow_id}"))
        # The slow request is inside its route, waiting on the store, before the other starts.
        while not store.waiting.is_set() and not slow.done():
            await asyncio.sleep(0.001)
        other_status, other = await get(app, f"/runs/{other_id}")
        order.append("other answered" if not slow.done() else "other answered after the slow one")
        assert other["run"]["runId"] == other_id
        store.gate.set()
        slow_status, held = await slow
        assert held["run"]["runId"] == slow_id
        return [slow_status, other_status]

    assert asyncio.run(scenario()) == [200, 200]
    assert order == ["other answered"]


class CountingPool(ThreadPoolExecutor):
    """The request pool `serve` sets on its loop, counting what is handed to it."""

    handed: ClassVar[list[str]] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any,
               **kwargs: Any) -> Future[Any]:
        CountingPool.handed.append(getattr(fn, "__name__", repr(fn)))
        return super().submit(fn, *args, **kwargs)


def test_a_request_is_answered_in_one_hop_to_one_worker_thread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server, "ThreadPoolExecutor", CountingPool)
    CountingPool.handed = []
    store = GatedStore(tmp_path / "runs.sqlite")
    runtime = AgentRuntime(store=store, clock=FakeClock(), owner="api-test", policy=HostPolicy())
    run_id = stored_run(runtime)
    loaded_on: list[int] = []
    real_load = store.load_run

    def load_run(wanted: str) -> RunRecord | None:
        loaded_on.append(threading.get_ident())
        return real_load(wanted)

    store.load_run = load_run  # type: ignore[method-assign]
    app = build_app(ApiServices(store=store, runtime=runtime, launcher=InlineLauncher(runtime),
                                authenticator=TokenAuthenticator()),
                    HostCheck("127.0.0.1", 8000))

    async def scenario() -> tuple[int, dict[str, Any], int]:
        status, body = await get(app, f"/runs/{run_id}")
        return status, body, threading.get_ident()

    status, body, loop_thread = asyncio.run(scenario())
    assert status == 200 and body["run"]["runId"] == run_id
    # The guard (which authenticates), validation and the route: one hand-off in all.
    assert len(CountingPool.handed) == 1
    assert loaded_on and loop_thread not in loaded_on
