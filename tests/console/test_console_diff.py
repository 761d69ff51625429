"""The run page's Compare tab (issue 39), in a real headless Chromium against a real
`serve`: two checkpoints chosen (the latest two by default), and what changed between
them, in the run's variables and its step results; the waterfall of steps from the
event log, the running step's bar moving."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from browser import open_console, screenshot
from playwright.sync_api import expect

from tests.api.serve_process import (
    Serve,
    approval_manifest,
    run_of,
    start,
    wait_for_status,
    webhook_manifest,
)
from tests.api.slow_receiver import SlowReceiver, slow_receiver

pytestmark = pytest.mark.slow

LIVE_TIMEOUT_MS = 60_000


@pytest.fixture
def receiver() -> Iterator[SlowReceiver]:
    with slow_receiver() as state:
        yield state


def test_compare_two_checkpoints(page: Any, server: Serve, client: httpx.Client) -> None:
    run_id = start(client, approval_manifest())["runId"]
    suspended = wait_for_status(client, run_id, "suspended")
    approval = suspended["suspension"]["details"]["approvalId"]
    assert client.post(f"/runs/{run_id}/approvals/{approval}",
                       json={"approved": True}).status_code == 200
    latest = wait_for_status(client, run_id, "completed")["checkpointSeq"]
    listed = client.get(f"/runs/{run_id}/checkpoints").json()["checkpoints"]
    prepared = next(each["seq"] for each in listed if each["stepPath"] == "prepare")

    open_console(page, server, f"#/runs/{run_id}")
    page.get_by_role("tab", name="Compare").click()
    panel = page.locator("#panel-compare")
    expect(panel.get_by_label("From checkpoint")).to_have_value(str(latest - 1))
    expect(panel.get_by_label("To checkpoint")).to_have_value(str(latest))

    panel.get_by_label("From checkpoint").fill(str(prepared))
    panel.get_by_role("button", name="Compare").click()
    diff = panel.locator(".diff")
    expect(diff).to_contain_text(f"From checkpoint {prepared} to {latest}")
    # `finalize` wrote `response`; `proposal` was there already and did not change.
    response = diff.locator("tr[data-key='response']")
    expect(response.locator(".change")).to_have_text("added")
    expect(response.locator("td").nth(1)).to_have_text("—")
    expect(response).to_contain_text("Return the approved proposal")
    expect(diff.locator("tr[data-key='proposal']")).to_have_count(0)
    # The step results the later checkpoint has and the earlier did not.
    expect(diff.locator("tr[data-step='approve'] .change")).to_have_text("added")
    expect(diff.locator("tr[data-step='finalize'] .change")).to_have_text("added")
    expect(diff.locator("tr[data-step='prepare']")).to_have_count(0)
    page.set_viewport_size({"width": 1280, "height": 800})
    diff.scroll_into_view_if_needed()
    screenshot(page, "checkpoint-diff-1280", full_page=False)
    page.set_viewport_size({"width": 390, "height": 844})
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 390
    screenshot(page, "checkpoint-diff-390", full_page=False)

    # Either order: the earlier is always "from"; the same checkpoint twice: no change.
    panel.get_by_label("From checkpoint").fill(str(latest))
    panel.get_by_label("To checkpoint").fill(str(latest))
    panel.get_by_role("button", name="Compare").click()
    expect(diff).to_contain_text("No variable changed.")
    expect(diff).to_contain_text("No step result changed.")
    # A checkpoint past the run's latest: refused by the field, not asked for.
    panel.get_by_label("To checkpoint").fill(str(latest + 50))
    panel.get_by_role("button", name="Compare").click()
    assert not page.evaluate("() => document.getElementById('diff-to').validity.valid")
    expect(diff).to_contain_text("No variable changed.")


def test_the_waterfall_shows_the_running_step_and_finished_ones_with_bars(
        page: Any, server: Serve, client: httpx.Client, receiver: SlowReceiver) -> None:
    run_id = start(client, webhook_manifest(receiver.url, "console-waterfall"))["runId"]
    assert receiver.wait_for("/console-waterfall/first")
    open_console(page, server, f"#/runs/{run_id}")
    waterfall = page.locator("table.steps.waterfall")
    running = waterfall.locator("tr[data-step='call']")
    expect(running.locator(".step-status")).to_have_text("running", timeout=LIVE_TIMEOUT_MS)
    expect(running).to_have_class("step-row step-row-running")
    expect(running.locator(".bar")).to_have_class("bar bar-running")
    page.set_viewport_size({"width": 1280, "height": 800})
    screenshot(page, "waterfall-running-1280", full_page=False)
    page.set_viewport_size({"width": 390, "height": 844})
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 390
    screenshot(page, "waterfall-running-390", full_page=False)
    receiver.release.set()
    expect(page.locator("[data-fact=status] .status")).to_have_text(
        "completed", timeout=LIVE_TIMEOUT_MS)
    for step in ("call", "after"):
        row = waterfall.locator(f"tr[data-step='{step}']")
        expect(row.locator(".step-status")).to_have_text("completed")
        expect(row.locator(".bar")).to_have_class("bar bar-completed")
        # A box of its own (width and height above 0), asked until it holds: the live
        # page may redraw the table meanwhile, and a row it replaced has no box.
        expect(row.locator(".bar")).to_be_visible()
    # The later step's bar starts where the earlier one's ends, or after.
    starts = waterfall.locator(".bar").evaluate_all(
        "bars => bars.map(bar => bar.getBoundingClientRect().left)")
    assert starts == sorted(starts), starts
    assert run_of(client, run_id)["status"] == "completed"
