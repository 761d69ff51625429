"""Bulk actions on the runs list in a real Chromium: select runs (one by one or the whole
page), cancel / resume / fork / approve them, and read one result per run; a run already
finished is reported as such, not as an error."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from browser import screenshot, wait_in_page
from playwright.sync_api import expect

from tests.api.serve_process import (
    ALLOW_LOOPBACK_WEBHOOKS,
    FIXTURES,
    UNMETERED_POLICY,
    Serve,
    approval_manifest,
    run_of,
    running_serve,
    start,
    wait_for_status,
)

pytestmark = pytest.mark.slow

ROWS = "table.runs tbody tr[data-run-id]"
# This module starts about 80 runs in a minute, past the default per-tenant rate, and
# 45 of them back to back: on a slow machine more than the default 8 are still running
# towards their approval when the next is posted.


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    from browser import TOKEN

    workdir = tmp_path_factory.mktemp("console-bulk")
    config = workdir / "runtime.config.yaml"
    config.write_text(ALLOW_LOOPBACK_WEBHOOKS + UNMETERED_POLICY, encoding="utf-8")
    with running_serve(workdir, token=TOKEN,
                       args=["--config", str(config), "--no-access-log"]) as serve:
        yield serve


def hello() -> str:
    return (FIXTURES / "hello.agent.yaml").read_text(encoding="utf-8")


def open_runs(page: Any, server: Serve, hash_path: str) -> None:
    from browser import open_console

    open_console(page, server, hash_path)
    expect(page.get_by_role("heading", name="Runs")).to_be_visible()


def result_of(page: Any, run_id: str) -> Any:
    return page.locator(f".bulk-list li[data-run-id='{run_id}'] .outcome")


def test_bulk_cancel_of_50_runs_reports_each_run(
        page: Any, server: Serve, client: httpx.Client) -> None:
    waiting = [start(client, approval_manifest())["runId"] for _ in range(45)]
    finished = [start(client, hello())["runId"] for _ in range(5)]
    for run_id in waiting:
        wait_for_status(client, run_id, "suspended")
    for run_id in finished:
        wait_for_status(client, run_id, "completed")

    open_runs(page, server, "#/?limit=50")
    expect(page.get_by_label("Runs per page")).to_have_value("50")
    wait_in_page(page, f"() => document.querySelectorAll('{ROWS}').length === 50")
    page.get_by_label("Select all runs on this page").check()
    expect(page.locator(".bulk-count")).to_have_text("50 selected")
    page.get_by_role("button", name="Cancel selected").click()
    confirm = page.get_by_role("button", name="Yes, cancel 50 runs")
    expect(confirm).to_be_focused()
    confirm.click()

    summary = page.locator(".bulk-summary")
    expect(summary).to_have_text("Cancel: 45 done, 5 not needed, 0 failed, of 50.",
                                 timeout=120_000)
    expect(page.locator(".bulk-list li")).to_have_count(50)
    for run_id in waiting:
        expect(result_of(page, run_id)).to_have_text("cancelled")
    for run_id in finished:
        expect(result_of(page, run_id)).to_have_text("already completed")
    expect(page.locator(".bulk-list li.outcome-error")).to_have_count(0)
    screenshot(page, "runs-bulk-cancel-results")
    assert {run_of(client, run_id)["status"] for run_id in waiting} == {"cancelled"}
    assert {run_of(client, run_id)["status"] for run_id in finished} == {"completed"}


def test_bulk_approve_resume_and_fork_use_each_runs_own_route(
        page: Any, server: Serve, client: httpx.Client) -> None:
    approvals = [start(client, approval_manifest())["runId"] for _ in range(2)]
    done = start(client, hello())["runId"]
    for run_id in approvals:
        wait_for_status(client, run_id, "suspended")
    wait_for_status(client, done, "completed")
    open_runs(page, server, "#/")
    wait_in_page(page, f"() => !!document.querySelector(\"tr[data-run-id='{done}']\")")
    for run_id in [*approvals, done]:
        page.get_by_label(f"Select run {run_id}").check()
    expect(page.locator(".bulk-count")).to_have_text("3 selected")

    page.get_by_role("button", name="Approve selected").click()
    page.get_by_role("button", name="Yes, approve 3 runs").click()
    expect(page.locator(".bulk-summary")).to_contain_text("2 done, 1 not needed, 0 failed")
    for run_id in approvals:
        expect(result_of(page, run_id)).to_contain_text("approved")
        wait_for_status(client, run_id, "completed")
    expect(result_of(page, done)).to_have_text("already completed")

    page.get_by_role("button", name="Resume selected").click()
    page.get_by_role("button", name="Yes, resume 3 runs").click()
    expect(page.locator(".bulk-summary")).to_contain_text("0 done, 3 not needed, 0 failed")
    expect(result_of(page, done)).to_have_text("already completed")

    for run_id in [*approvals, done]:
        page.get_by_label(f"Select run {run_id}").uncheck()
    expect(page.locator(".bulk-count")).to_have_text("No runs selected")
    expect(page.get_by_role("button", name="Fork selected")).to_be_disabled()
    page.get_by_label(f"Select run {done}").check()
    page.get_by_role("button", name="Fork selected").click()
    page.get_by_role("button", name="Yes, fork 1 run").click()
    expect(page.locator(".bulk-summary")).to_contain_text("1 done, 0 not needed, 0 failed")
    fork_link = page.locator(f".bulk-list li[data-run-id='{done}'] .outcome a")
    fork_id = fork_link.inner_text()
    assert fork_id != done
    assert run_of(client, fork_id)["forkedFrom"]["runId"] == done


def test_bulk_actions_by_keyboard_alone(page: Any, server: Serve,
                                        client: httpx.Client) -> None:
    run_id = start(client, approval_manifest())["runId"]
    wait_for_status(client, run_id, "suspended")
    open_runs(page, server, "#/")
    box = page.get_by_label(f"Select run {run_id}")
    expect(box).to_be_visible()
    box.focus()
    page.keyboard.press("Space")
    expect(box).to_be_checked()
    # Only the bulk bar's enabled buttons lie between: Tab reaches "Cancel selected".
    page.get_by_role("button", name="Cancel selected").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("button", name="Yes, cancel 1 run")).to_be_focused()
    page.keyboard.press("Tab")
    expect(page.get_by_role("button", name="Keep them")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.get_by_role("button", name="Cancel selected")).to_be_focused()
    assert run_of(client, run_id)["status"] == "suspended"  # kept
    page.keyboard.press("Enter")
    page.keyboard.press("Enter")  # "Yes, cancel 1 run" has the focus
    expect(result_of(page, run_id)).to_have_text("cancelled")
    wait_for_status(client, run_id, "cancelled")


def count_matching(client: httpx.Client, **search: str) -> int:
    count, cursor = 0, None
    while True:
        page = client.get("/runs", params={**search, "limit": 100,
                                           **({"cursor": cursor} if cursor else {})}).json()
        count += len(page["runs"])
        cursor = page["cursor"]
        if not cursor:
            return count


def test_a_bulk_action_over_every_match_of_a_search_not_only_the_page(
        page: Any, server: Serve, client: httpx.Client) -> None:
    for run_id in [start(client, hello())["runId"] for _ in range(27)]:
        wait_for_status(client, run_id, "completed")
    matching = count_matching(client, agent="hello", status="completed")
    assert matching > 25  # more than one page
    open_runs(page, server, "#/?agent=hello&status=completed")
    wait_in_page(page, f"() => document.querySelectorAll('{ROWS}').length === 25")
    page.get_by_role("button", name="Select all matching (up to 500)").click()
    expect(page.locator(".bulk-count")).to_have_text(f"{matching} selected")
    expect(page.locator("#notice")).to_contain_text(f"Selected all {matching} matching runs.")
    page.get_by_role("button", name="Resume selected").click()
    page.get_by_role("button", name=f"Yes, resume {matching} runs").click()
    expect(page.locator(".bulk-summary")).to_have_text(
        f"Resume: 0 done, {matching} not needed, 0 failed, of {matching}.", timeout=120_000)
    expect(page.locator(".bulk-list li.outcome-skipped")).to_have_count(matching)
    page.get_by_role("button", name="Clear selection").click()
    expect(page.locator(".bulk-count")).to_have_text("No runs selected")
