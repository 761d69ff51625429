"""The run page driven by the run's event log (issue 35, acceptance 5), in a real headless
Chromium against a real `serve`: the step in progress while a slow webhook step waits,
the steps' durations once it is released, the Events tab listing the log in order, and
the page following the log from its cursor (long-polled, never from 0 again) instead of
reading the run's checkpoints every second.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from browser import open_console, screenshot
from playwright.sync_api import expect

from tests.api.serve_process import Serve, start, wait_for_status, webhook_manifest
from tests.api.slow_receiver import SlowReceiver, slow_receiver

pytestmark = pytest.mark.slow

# A long-poll answers within the server's wait (15 s asked, 20 s cap); a busy machine
# may add to it. Generous, so a slow run is slower, never wrong.
LIVE_TIMEOUT_MS = 60_000


@pytest.fixture
def receiver() -> Iterator[SlowReceiver]:
    with slow_receiver() as state:
        yield state


def requests_to(page: Any, suffix: str) -> list[str]:
    """The URLs of the page's API requests whose path ends with `suffix`, as they go."""
    seen: list[str] = []
    page.on("request", lambda request: seen.append(request.url)
            if urlsplit(request.url).path.endswith(suffix) else None)
    return seen


def shown_duration(ms: int) -> str:
    """A duration as the console writes it (events.js, formatDuration)."""
    if ms < 1000:
        return f"{ms} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    seconds = round(ms / 1000)
    return f"{seconds // 60} min {seconds % 60:02d} s"


def test_the_running_step_its_duration_and_the_event_log(
        page: Any, server: Serve, client: httpx.Client, receiver: SlowReceiver) -> None:
    run_id = start(client, webhook_manifest(receiver.url, "console-events"))["runId"]
    events_asked = requests_to(page, f"/runs/{run_id}/events")
    checkpoints_asked = requests_to(page, f"/runs/{run_id}/checkpoints")
    # The run is inside its first webhook step, held by the receiver.
    assert receiver.wait_for("/console-events/first")
    open_console(page, server, f"#/runs/{run_id}")

    running = page.locator(".running-now")
    expect(running).to_contain_text("Running now: call", timeout=LIVE_TIMEOUT_MS)
    expect(page.locator("[data-fact=status] .status")).to_have_text("running")
    screenshot(page, "run-page-running-step")
    # While the step waits the page long-polls the log; one long-poll ends empty after
    # the wait it asked for (seconds), in which the old page would have read the run's
    # checkpoints every second. It read them at most once, when it opened (not at all
    # while the run has no checkpoint yet).
    with page.expect_response(lambda response: urlsplit(response.url).path.endswith(
            f"/runs/{run_id}/events") and "wait=0" not in response.url,
            timeout=LIVE_TIMEOUT_MS) as long_poll:
        pass
    assert long_poll.value.json()["events"] == []
    assert len(checkpoints_asked) <= 1, checkpoints_asked
    expect(running).to_contain_text("Running now: call")

    receiver.release.set()
    wait_for_status(client, run_id, "completed")
    expect(page.locator("[data-fact=status] .status")).to_have_text(
        "completed", timeout=LIVE_TIMEOUT_MS)
    expect(running).to_be_hidden()
    expect(page.locator("#event-log")).to_have_attribute("data-log", "whole")

    # Each step with how long it took, as its step.completed event says (the webhook
    # step waited for the release).
    stored = client.get(f"/runs/{run_id}/events", params={"limit": 1000}).json()["events"]
    durations = {event["stepPath"]: event["data"]["durationMs"] for event in stored
                 if event["type"] == "step.completed"}
    assert set(durations) == {"call", "after"}
    for path, duration_ms in durations.items():
        row = page.locator(f"table.steps tr[data-step='{path}']")
        expect(row.locator(".step-status")).to_have_text("completed")
        expect(row.locator(".duration")).to_have_text(shown_duration(duration_ms))

    # The Events tab: the whole log, in order, as the route stores it.
    page.get_by_role("tab", name="Events").click()
    rows = page.locator("#event-log tr.event")
    expect(rows).to_have_count(len(stored))
    expect(rows.locator(".event-type")).to_have_text([event["type"] for event in stored])
    assert [int(cursor) for cursor in rows.evaluate_all(
        "rows => rows.map(row => row.dataset.cursor)")] == [e["cursor"] for e in stored]
    expect(rows.first).to_contain_text("run.started")
    expect(page.locator("#event-log")).to_contain_text("kind=webhook")
    screenshot(page, "run-page-events-tab")

    # The log was read from its cursor on: `after` started at 0, never went back, and
    # was always an event's cursor (0 again only while the log was still empty); the
    # rows above hold each event once.
    afters = [int(parse_qs(urlsplit(url).query)["after"][0]) for url in events_asked]
    assert afters and afters[0] == 0, events_asked
    assert afters == sorted(afters), afters
    assert set(afters) <= {0} | {event["cursor"] for event in stored}, afters


def test_a_finished_run_reads_its_log_once(
        page: Any, server: Serve, client: httpx.Client, receiver: SlowReceiver) -> None:
    receiver.release.set()
    run_id = start(client, webhook_manifest(receiver.url, "console-events-done"))["runId"]
    wait_for_status(client, run_id, "completed")
    events_asked = requests_to(page, f"/runs/{run_id}/events")
    open_console(page, server, f"#/runs/{run_id}")
    stored = client.get(f"/runs/{run_id}/events").json()["events"]
    after = next(event for event in stored
                 if event["type"] == "step.completed" and event["stepPath"] == "after")
    expect(page.locator("table.steps tr[data-step='after'] .duration")).to_have_text(
        shown_duration(after["data"]["durationMs"]))
    expect(page.locator(".running-now")).to_be_hidden()
    page.get_by_role("tab", name="Events").click()
    expect(page.locator("#event-log tr.event").last).to_contain_text("run.completed")
    # The log's page, then the empty page that says it is whole; then no more reads.
    expect(page.locator("#event-log")).to_have_attribute("data-log", "whole")
    expect(page.locator("#event-log")).to_contain_text("this is its whole log")
    assert len(events_asked) == 2, events_asked


def test_a_failed_read_of_the_log_is_asked_again_from_the_same_cursor(
        page: Any, server: Serve, client: httpx.Client, receiver: SlowReceiver) -> None:
    receiver.release.set()
    run_id = start(client, webhook_manifest(receiver.url, "console-events-retry"))["runId"]
    wait_for_status(client, run_id, "completed")
    stored = client.get(f"/runs/{run_id}/events").json()["events"]
    events_asked = requests_to(page, f"/runs/{run_id}/events")
    dropped: list[str] = []

    def drop_the_first_read_after_the_start(route: Any) -> None:
        if "after=0" not in route.request.url and not dropped:
            dropped.append(route.request.url)
            route.abort("connectionreset")
        else:
            route.continue_()

    page.route(f"**/runs/{run_id}/events?*", drop_the_first_read_after_the_start)
    open_console(page, server, f"#/runs/{run_id}")
    expect(page.locator("#event-log")).to_have_attribute("data-log", "whole")
    assert dropped, "the second read of the log was not made"
    afters = [int(parse_qs(urlsplit(url).query)["after"][0]) for url in events_asked]
    last = stored[-1]["cursor"]
    assert afters == [0, last, last], afters  # the dropped read, asked again as it was
    page.get_by_role("tab", name="Events").click()
    expect(page.locator("#event-log tr.event")).to_have_count(len(stored))


def test_inside_a_loop_the_running_step_is_the_iterations_and_finished_steps_have_durations(
        page: Any, server: Serve, client: httpx.Client, receiver: SlowReceiver) -> None:
    manifest = {"schemaVersion": "1.0", "id": "console-events-loop",
                "variables": [{"key": "items", "type": "array", "value": ["one"]}],
                "steps": [{"id": "each", "type": "loop",
                           "loop": {"source": "items", "itemVariable": "item",
                                    "maxIterations": 5},
                           "steps": [{"id": "draft", "type": "prompt",
                                      "prompt": "Say {{ item }}"},
                                     {"id": "call", "type": "webhook",
                                      "url": f"{receiver.url}/console-events/loop",
                                      "timeoutMs": 120_000, "retries": 0}]}]}
    run_id = start(client, manifest)["runId"]
    assert receiver.wait_for("/console-events/loop")
    open_console(page, server, f"#/runs/{run_id}")
    # From the log while the webhook waits: the loop open, its first step done, with
    # its duration; the running step is the iteration's webhook, not the loop.
    expect(page.locator(".running-now")).to_contain_text("Running now: each/0/call",
                                                        timeout=LIVE_TIMEOUT_MS)
    loop = page.locator("table.steps tr[data-step='each']")
    expect(loop.locator(".step-status")).to_have_text("running")
    expect(loop.locator(".duration")).to_have_text("running…")
    stored = client.get(f"/runs/{run_id}/events").json()["events"]
    draft = next(event for event in stored if event["type"] == "step.completed"
                 and event["stepPath"] == "each/0/draft")
    expect(page.locator("table.steps tr[data-step='each/0/draft'] .duration")).to_have_text(
        shown_duration(draft["data"]["durationMs"]))
    receiver.release.set()
    expect(loop.locator(".step-status")).to_have_text("completed", timeout=LIVE_TIMEOUT_MS)
    expect(page.locator(".running-now")).to_be_hidden()
