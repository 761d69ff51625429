"""A webhook cut by the end of an `advance` slice is sent again by the next one.

A real HTTP server on 127.0.0.1 takes longer than the slice to answer the
first request (it holds the answer). The engine abandons the request at the
slice's deadline (the fake clock does not move: the slice's 0.5 s is real
time the event loop measures); the run stays running; the next slice sends it again with the same
Idempotency-Key, which a receiver deduplicates, and the run completes.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from datetime import timedelta

import pytest
from engine_harness import ECHO, Harness, manifest

from agent_runtime import RunStatus
from agent_runtime.config import parse_config
from agent_runtime.manifest import manifest_hash, manifest_json
from stores.records import RunRecord
from tests.local_http import Answer, Request, serve_http

ALLOW_LOCAL = parse_config({"version": "1.0", "webhooks": {"allowPrivateNetworks": True}},
                           source="test-config")


class SlowFirst:
    """A local receiver that holds its first answer until `release` is set; it
    records each request's Idempotency-Key as the request arrives."""

    def __init__(self) -> None:
        self.keys: list[str | None] = []
        self.url = ""
        self.release = threading.Event()


@pytest.fixture
def receiver() -> Iterator[SlowFirst]:
    state = SlowFirst()

    def respond(request: Request) -> Answer:
        state.keys.append(request.headers.get("idempotency-key"))
        if len(state.keys) == 1:
            # held until the test releases it (at teardown at the latest); the bound
            # only keeps a broken test from hanging, so it is generous
            state.release.wait(timeout=300)
        return Answer(200, {"Content-Type": "application/json"}, b'{"ok": true}')

    with serve_http(respond) as url:
        state.url = f"{url}/hook"
        try:
            yield state
        finally:
            state.release.set()  # the held answer goes, so the server can stop


def test_a_webhook_cut_by_the_slice_is_sent_again_with_the_same_key(
        receiver: SlowFirst) -> None:
    h = Harness(config=ALLOW_LOCAL)
    agent = manifest({"id": "draft", "type": "prompt", "prompt": "Draft it."},
                     {"id": "notify", "type": "webhook", "url": receiver.url, "method": "POST",
                      "body": {"done": True}, "retries": 0, "includeInFinalOutput": True})
    h.store.create_run(RunRecord(run_id="hook", manifest_hash=manifest_hash(agent),
                                 manifest=manifest_json(agent), options=ECHO))
    h.store.resume_run("hook", owner="sfn", now=h.clock.now(), lease_seconds=60)

    cut = asyncio.run(h.runtime.advance(
        "hook", deadline=h.clock.now() + timedelta(seconds=0.5)))
    assert cut.status is RunStatus.RUNNING and cut.error is None
    assert len(receiver.keys) == 1

    done = asyncio.run(h.runtime.advance("hook", deadline=h.clock.now() + timedelta(seconds=5)))
    assert done.status is RunStatus.COMPLETED
    first, again = receiver.keys
    assert first is not None and first == again
    record = h.store.load_run("hook")
    assert record is not None and record.takeovers == 0 and record.attempt == 1
