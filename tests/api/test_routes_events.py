"""`GET /runs/{runId}/events` through the real routes: pages of the run's durable event
log after a cursor, the long-poll's end, tenancy and bounds."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from routes_harness import ECHO, Api, RecordingLauncher, manifest_text

from agent_runtime.api import ApiLimits
from stores.memory import MemoryRunStore
from stores.sqlite import SqliteRunStore

# A long-poll that must end early is given far more than it can need: a busy machine
# makes the test slower, never wrong.
HANG = 20


def started(api: Api, manifest: str = "approval.agent.yaml") -> str:
    reply = api.post("/runs", {"manifest": manifest_text(manifest), "options": ECHO})
    assert reply.status == 201, reply.text
    run_id: str = reply.run["runId"]
    return run_id


def events(api: Api, run_id: str, **query: Any) -> dict[str, Any]:
    reply = api.get(f"/runs/{run_id}/events", query=query)
    assert reply.status == 200, reply.text
    page: dict[str, Any] = reply.body
    return page


@pytest.mark.parametrize("kind", ["local", "aws"])
def test_pages_follow_the_stored_log_by_cursor(kind: str) -> None:
    api = Api(MemoryRunStore(), kind=kind)
    run_id = started(api)
    stored = api.store.list_events(run_id, limit=1000)
    whole = events(api, run_id)
    assert whole["status"] == "suspended"
    assert [event["cursor"] for event in whole["events"]] == [e.cursor for e in stored]
    assert [event["id"] for event in whole["events"]] == [e.id for e in stored]
    assert whole["cursor"] == stored[-1].cursor
    types = [event["type"] for event in whole["events"]]
    assert types[0] == "run.started" and types[-1] == "run.suspended"
    step = next(event for event in whole["events"] if event["type"] == "step.completed")
    assert {"durationMs", "tokens"} <= set(step["data"])  # camelCase on the wire
    paged: list[int] = []
    after = 0
    while True:
        page = events(api, run_id, after=after, limit=2)
        assert len(page["events"]) <= 2
        if not page["events"]:
            assert page["cursor"] == after
            break
        paged += [event["cursor"] for event in page["events"]]
        after = page["cursor"]
    assert paged == [e.cursor for e in stored]


def test_the_log_continues_across_attempts_without_gaps(tmp_path: Any) -> None:
    api = Api(SqliteRunStore(tmp_path / "runs.sqlite"))
    run_id = started(api)
    first = events(api, run_id)
    approval_id = api.get(f"/runs/{run_id}").run["suspension"]["details"]["approvalId"]
    assert api.post(f"/runs/{run_id}/approvals/{approval_id}", {"approved": True}).status == 200
    rest = events(api, run_id, after=first["cursor"])
    assert rest["status"] == "completed"
    assert [event["cursor"] for event in rest["events"]] == list(
        range(first["cursor"] + 1, first["cursor"] + 1 + len(rest["events"])))
    assert {event["attempt"] for event in rest["events"]} == {2}
    assert rest["events"][0]["type"] == "run.resumed"
    assert rest["events"][-1]["type"] == "run.completed"


def test_another_tenants_events_are_404_like_a_missing_run() -> None:
    api = Api(MemoryRunStore())
    run_id = started(api)
    foreign = api.get(f"/runs/{run_id}/events", token="bob-token")
    missing = api.get("/runs/run_missing/events", token="bob-token")
    assert foreign.status == missing.status == 404
    assert {**foreign.problem, "detail": None} == {**missing.problem, "detail": None}
    assert api.get(f"/runs/{run_id}/events", token=None).status == 401


@pytest.mark.parametrize("query", [{"after": -1}, {"limit": 0}, {"limit": 1001},
                                   {"wait": 61}, {"after": "x"}])
def test_a_query_out_of_bounds_is_refused_by_name(query: dict[str, Any]) -> None:
    api = Api(MemoryRunStore())
    run_id = started(api)
    reply = api.get(f"/runs/{run_id}/events", query=query)
    assert reply.status == 422, reply.text
    assert next(iter(query)) in reply.text


def test_a_page_holds_at_most_the_hosts_page_size() -> None:
    api = Api(MemoryRunStore(), limits=ApiLimits(max_page_size=3))
    run_id = started(api)
    assert len(events(api, run_id, limit=1000)["events"]) == 3


def test_a_long_poll_of_a_finished_run_answers_at_once() -> None:
    api = Api(MemoryRunStore(), limits=ApiLimits(max_events_wait_seconds=HANG))
    run_id = started(api, "hello.agent.yaml")
    whole = events(api, run_id)
    assert whole["status"] == "completed"
    began = time.monotonic()
    tail = events(api, run_id, after=whole["cursor"], wait=HANG)
    assert tail["events"] == [] and tail["status"] == "completed"
    assert time.monotonic() - began < HANG  # it did not wait for more


def test_a_long_poll_answers_once_the_next_event_commits() -> None:
    store = MemoryRunStore()
    launcher_api = Api(store)
    api = Api(store, runtime=launcher_api.runtime,
              launcher=RecordingLauncher(launcher_api.runtime),
              limits=ApiLimits(max_events_wait_seconds=HANG, events_poll_seconds=0.05))
    run_id = started(api)  # recorded, not executed: no events yet
    assert events(api, run_id)["events"] == []
    answers: list[dict[str, Any]] = []
    poll = threading.Thread(target=lambda: answers.append(events(api, run_id, wait=HANG)))
    poll.start()
    launcher_api.launcher.start(store.load_run(run_id))  # type: ignore[arg-type]
    poll.join(timeout=HANG * 3)
    assert not poll.is_alive()
    (page,) = answers
    assert page["events"] and page["events"][0]["cursor"] == 1
    assert page["events"][0]["type"] == "run.started"
