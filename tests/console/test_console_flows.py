"""The console's acceptance flows in a real headless Chromium against a real `serve`:
start from the form and approve, fork from a middle checkpoint, cancel a running
run, and the approve flow by keyboard alone. Screenshots go to build/console-screenshots/.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from browser import open_console, screenshot, wait_in_page
from playwright.sync_api import expect

from agent_runtime.telemetry.trace_ids import trace_id_for
from tests.api.serve_process import (
    FIXTURES,
    Serve,
    approval_manifest,
    run_of,
    start,
    wait_for_status,
    wait_until,
    webhook_manifest,
)
from tests.api.slow_receiver import SlowReceiver, slow_receiver

pytestmark = pytest.mark.slow


@pytest.fixture
def receiver() -> Iterator[SlowReceiver]:
    with slow_receiver() as state:
        yield state


def run_id_on_page(page: Any) -> str:
    wait_in_page(page, "() => location.hash.startsWith('#/runs/')")
    return str(page.evaluate("() => decodeURIComponent(location.hash.split('/')[2])"))


def status_of(page: Any) -> Any:
    return page.locator("[data-fact=status] .status")


def test_start_from_the_form_wait_approve_and_see_the_output(
        page: Any, server: Serve, client: httpx.Client) -> None:
    open_console(page, server)
    page.get_by_role("link", name="Start a run").first.click()
    page.get_by_label("Example manifest").select_option("approval.agent.yaml")
    # The variables form comes from the manifest's declarations.
    request = page.get_by_label("request")
    expect(request).to_have_attribute("placeholder", "Explain the planned release to customers.")
    request.fill("the Atlas 2 launch")
    expect(page.get_by_label("Model override")).to_have_value("scripted/echo")
    page.get_by_role("button", name="Start run").click()

    run_id = run_id_on_page(page)
    card = page.locator("section.suspension")
    expect(card.get_by_role("heading", name="Approval")).to_be_visible()
    expect(status_of(page)).to_have_text("suspended")
    expect(card).to_contain_text("Approve the proposed response?")
    screenshot(page, "approval-card", element=card)
    screenshot(page, "run-waiting-for-approval")

    card.get_by_label("Response (optional)").fill("ship it")
    card.get_by_role("button", name="Approve").click()
    expect(status_of(page)).to_have_text("completed")
    output = page.locator("section.result")
    expect(output.get_by_role("heading", name="Output")).to_be_visible()
    expect(output).to_contain_text("the Atlas 2 launch")
    expect(page.locator("#timeline .checkpoint")).to_have_count(
        run_of(client, run_id)["checkpointSeq"])
    screenshot(page, "run-page-with-timeline")

    run = run_of(client, run_id)
    assert run["status"] == "completed"
    assert run["lastSuspension"]["decision"]["approved"] is True
    assert run["lastSuspension"]["decision"]["response"] == "ship it"
    assert "the Atlas 2 launch" in str(run["output"])

    page.get_by_role("link", name="Runs", exact=True).click()
    row = page.locator(f"tr[data-run-id='{run_id}']")
    expect(row).to_contain_text("completed")
    screenshot(page, "runs-list")


def test_waiting_for_me_lists_suspended_runs_with_their_reason(
        page: Any, server: Serve, client: httpx.Client) -> None:
    run_id = start(client, approval_manifest())["runId"]
    wait_for_status(client, run_id, "suspended")
    open_console(page, server, "#/waiting")
    item = page.locator("li.waiting-run", has=page.locator(f"a:text-is('{run_id}')"))
    expect(item).to_contain_text("Approval")
    expect(item).to_contain_text("Approve the proposed response?")
    screenshot(page, "waiting-for-me")
    item.get_by_role("link", name=run_id).click()
    expect(page.locator("section.suspension")).to_be_visible()


def test_fork_a_finished_run_from_a_middle_checkpoint(
        page: Any, server: Serve, client: httpx.Client) -> None:
    source = start(client, approval_manifest())["runId"]
    approval = wait_for_status(client, source, "suspended")["suspension"]["details"]["approvalId"]
    answered = client.post(f"/runs/{source}/approvals/{approval}", json={"approved": True})
    assert answered.status_code == 200, answered.text
    finished = wait_for_status(client, source, "completed")
    middle = finished["checkpointSeq"] // 2
    assert 1 < middle < finished["checkpointSeq"]

    open_console(page, server, f"#/runs/{source}")
    page.get_by_role("link", name=f"Checkpoint {middle}", exact=True).click()
    expect(page.get_by_role("heading", name=f"Checkpoint {middle}")).to_be_visible()
    # The state at that point: the proposal the first prompt wrote.
    expect(page.locator(".variables-table")).to_contain_text("proposal")
    screenshot(page, "checkpoint-view")
    page.get_by_role("button", name="Fork from here").click()
    # Edit-then-fork: the form, its review, then the fork (tests/console/test_console_fork.py).
    form = page.locator("form.fork-form")
    expect(form.get_by_label("Variables (JSON)")).to_have_value(re.compile("proposal"))
    form.get_by_role("button", name="Review the fork").click()
    form.get_by_role("button", name="Yes, fork").click()

    wait_in_page(page, "id => !location.hash.includes(id)", source)
    fork_id = run_id_on_page(page)
    assert fork_id != source
    expect(page.locator("[data-fact='forked from']")).to_contain_text(
        f"{source} at checkpoint {middle}")
    fork = run_of(client, fork_id)
    assert fork["forkedFrom"] == {"runId": source, "seq": middle}
    # The run's trace id, as its spans carry it (docs/telemetry.md).
    expect(page.locator("[data-fact=trace]")).to_have_text(fork["traceId"])
    assert fork["traceId"] == f"{trace_id_for(fork_id):032x}"


def test_cancel_a_running_run(page: Any, server: Serve, client: httpx.Client,
                              receiver: SlowReceiver) -> None:
    run_id = start(client, webhook_manifest(receiver.url, "console-cancel"))["runId"]
    # The run is inside its first webhook call, held by the receiver.
    assert receiver.wait_for("/console-cancel/first")
    open_console(page, server, f"#/runs/{run_id}")
    expect(status_of(page)).to_have_text("running")
    page.get_by_role("button", name="Cancel run…").click()
    page.get_by_role("button", name="Yes, cancel this run").click()
    expect(status_of(page)).to_have_text("cancelled")
    expect(page.get_by_role("button", name="Cancel run…")).to_have_count(0)
    receiver.release.set()
    assert run_of(client, run_id)["status"] == "cancelled"
    # Cancelled for good: the held call finishing does not bring it back.
    wait_until(lambda: run_of(client, run_id)["attempt"] >= 1, what="the attempt recorded")
    assert "/console-cancel/second" not in receiver.paths()


def test_approve_by_keyboard_alone(page: Any, server: Serve, client: httpx.Client) -> None:
    run_id = start(client, approval_manifest())["runId"]
    wait_for_status(client, run_id, "suspended")
    open_console(page, server, f"#/runs/{run_id}")
    expect(page.locator("section.suspension")).to_be_visible()

    def tab_to(description: str, condition: str) -> None:
        for _ in range(60):
            if page.evaluate(f"() => {condition}"):
                return
            page.keyboard.press("Tab")
        raise AssertionError(f"Tab never reached {description}")

    tab_to("the response field", "document.activeElement?.id === 'approval-response'")
    page.keyboard.type("approved from the keyboard")
    tab_to("the Approve button",
           "document.activeElement?.tagName === 'BUTTON' "
           "&& document.activeElement.textContent === 'Approve'")
    assert page.evaluate("() => document.activeElement.closest('section.suspension') !== null")
    page.keyboard.press("Enter")
    expect(status_of(page)).to_have_text("completed")
    decision = run_of(client, run_id)["lastSuspension"]["decision"]
    assert decision["approved"] is True
    assert decision["response"] == "approved from the keyboard"


def test_resume_a_run_that_reached_its_token_budget_with_a_new_limit(
        page: Any, server: Serve, client: httpx.Client) -> None:
    chain = (FIXTURES / "prompt-chain.agent.yaml").read_text(encoding="utf-8")
    run_id = start(client, chain, budget={"maxTotalTokens": 5})["runId"]
    suspended = wait_for_status(client, run_id, "suspended")
    assert suspended["suspension"]["reason"] == "token-budget"
    open_console(page, server, f"#/runs/{run_id}")
    card = page.locator("section.suspension")
    expect(card.get_by_role("heading", name="Token budget reached")).to_be_visible()
    expect(page.get_by_label("Tokens used")).to_be_visible()  # the bar against the budget
    card.get_by_label("New token limit (replaces the old one)").fill("100000")
    card.get_by_role("button", name="Resume with this limit").click()
    expect(status_of(page)).to_have_text("completed")
    expect(page.locator("section.suspension")).to_have_count(0)
    # The new limit is the one the run continued with (its latest checkpoint's).
    latest = run_of(client, run_id)["checkpointSeq"]
    state = client.get(f"/runs/{run_id}/checkpoints/{latest}").json()["checkpoint"]
    assert state["budget"]["maxTotalTokens"] == 100000


def test_the_runs_list_filters_pages_and_finds_by_id(
        page: Any, server: Serve, client: httpx.Client) -> None:
    hello = (FIXTURES / "hello.agent.yaml").read_text(encoding="utf-8")
    waiting = start(client, approval_manifest())["runId"]
    wait_for_status(client, waiting, "suspended")
    started = [start(client, hello)["runId"] for _ in range(26)]
    for run_id in started:
        wait_for_status(client, run_id, "completed")

    open_console(page, server)
    rows = page.locator("table.runs tbody tr")
    expect(rows).to_have_count(25)
    # Newest first: the last one started heads the list.
    expect(rows.first).to_have_attribute("data-run-id", started[-1])
    page.get_by_role("button", name="Older runs").click()
    expect(page.get_by_text("Page 2")).to_be_visible()
    expect(page.locator(f"tr[data-run-id='{started[0]}']")).to_have_count(1)
    page.get_by_role("button", name="Newer runs").click()
    expect(rows.first).to_have_attribute("data-run-id", started[-1])

    page.get_by_label("Status").select_option("suspended")
    expect(page.locator(f"tr[data-run-id='{waiting}']")).to_be_visible()
    expect(page.locator("table.runs tbody tr", has_text="completed")).to_have_count(0)

    page.get_by_label("Run id or prefix").fill(started[3])
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name=f"Run {started[3]}")).to_be_visible()
    page.get_by_role("link", name="Runs", exact=True).click()
    page.get_by_label("Run id or prefix").fill("run_missing")
    page.get_by_role("button", name="Search").click()
    expect(page.locator("table.runs tbody")).to_contain_text("No run id starts with run_missing.")
