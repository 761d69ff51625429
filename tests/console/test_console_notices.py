"""Messages and form errors in a real Chromium: a banner belongs to its page (the action
that leads to another page carries its message there once, a link does not); a form error
goes when the browser's own validation blocks the next submit; the runs page's new
controls (search, selection, bulk actions) are labelled and work by keyboard."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from browser import open_console, wait_in_page
from playwright.sync_api import expect

from tests.api.serve_process import Serve, approval_manifest, start, wait_for_status

pytestmark = pytest.mark.slow

BROKEN = "schemaVersion: '1.0'\nid: broken\nsteps:\n  - id: a\n    type: nonsense\n"
UNLABELLED = """() => [...document.querySelectorAll('input, select, textarea, button')]
    .filter(control => !control.hidden && control.offsetParent !== null)
    .filter(control => control.tagName === 'BUTTON'
        ? !control.textContent.trim() && !control.getAttribute('aria-label')
        : control.labels.length === 0 && !control.getAttribute('aria-label'))
    .map(control => control.outerHTML.slice(0, 80))"""


def test_a_banner_follows_its_action_once_and_not_a_link(page: Any, server: Serve) -> None:
    open_console(page, server, "#/start")
    page.get_by_label("Example manifest").select_option("hello.agent.yaml")
    expect(page.get_by_label("topic")).to_be_visible()
    page.get_by_label("Model override").fill("scripted/echo")
    page.get_by_role("button", name="Start run").click()
    wait_in_page(page, "() => location.hash.startsWith('#/runs/')")
    notice = page.locator("#notice")
    expect(notice).to_contain_text("Started run")  # carried by the action that moved here
    page.get_by_role("link", name="Runs", exact=True).click()  # at once, by a link
    expect(page.get_by_role("heading", name="Runs")).to_be_visible()
    expect(notice).to_be_empty()


def test_an_error_banner_stays_on_its_page(page: Any, server: Serve) -> None:
    open_console(page, server, "#/start")
    page.evaluate("""() => import('/console/notice.js')
        .then(notice => notice.announce('Something failed here.', 'error'))""")
    expect(page.locator("#notice")).to_contain_text("Something failed here.")
    page.get_by_role("link", name="Waiting for me").click()
    expect(page.get_by_role("heading", name="Waiting for me")).to_be_visible()
    expect(page.locator("#notice")).to_be_empty()


def test_a_form_error_goes_when_the_browser_blocks_the_next_submit(
        page: Any, server: Serve) -> None:
    open_console(page, server, "#/start")
    manifest = page.get_by_label("Agent manifest (YAML or JSON)")
    manifest.fill(BROKEN)
    page.get_by_role("button", name="Start run").click()
    problem = page.locator(".form-error")
    expect(problem).to_contain_text("steps[0]")
    manifest.fill("")  # required: the browser refuses the next submit itself
    page.get_by_role("button", name="Start run").click()
    expect(problem).to_be_empty()
    assert page.evaluate("() => document.querySelector('#manifest').validity.valueMissing")
    assert page.evaluate("() => location.hash") == "#/start"


def test_the_runs_pages_new_controls_are_labelled_and_work_by_keyboard(
        page: Any, server: Serve, client: httpx.Client) -> None:
    run_id = start(client, approval_manifest())["runId"]
    wait_for_status(client, run_id, "suspended")
    open_console(page, server)
    expect(page.locator(f"tr[data-run-id='{run_id}']")).to_be_visible()
    assert page.evaluate(UNLABELLED) == []
    # The search form, by keyboard: type, Tab to the next field, Enter submits.
    page.get_by_label("Run id or prefix").focus()
    page.keyboard.press("Tab")
    expect(page.get_by_label("Agent")).to_be_focused()
    page.keyboard.type("approval")
    page.keyboard.press("Tab")
    expect(page.get_by_label("Status")).to_be_focused()
    page.get_by_label("Agent").press("Enter")
    wait_in_page(page, "() => location.hash.includes('agent=approval')")
    # The selection and the bulk bar, with its confirmation open and its results shown.
    page.get_by_label(f"Select run {run_id}").check()
    page.get_by_role("button", name="Resume selected").click()
    assert page.evaluate(UNLABELLED) == []
    page.get_by_role("button", name="Keep them").click()
    page.get_by_role("button", name="Approve selected").click()
    page.get_by_role("button", name="Yes, approve 1 run").click()
    expect(page.locator(".bulk-summary")).to_contain_text("1 done")
    assert page.evaluate(UNLABELLED) == []
    # The results region is named by its heading, for a screen reader's landmarks.
    expect(page.get_by_role("region", name="Approve: 1 run")).to_be_visible()
