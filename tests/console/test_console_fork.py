"""Edit, then fork (issue 39), in a real headless Chromium against a real `serve`: the
fork button opens a form (the checkpoint, its variables as JSON, the token limit), a
review states what the new run starts with (tokens consumed, of the budget) before
anything is sent, and the new run carries the edit and the budget. Also: the API's
fork takes the same overrides; rejecting an approval says how the run ends."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest
import yaml
from browser import open_console, screenshot, wait_in_page
from playwright.sync_api import expect

from tests.api.serve_process import Serve, approval_manifest, run_of, start, wait_for_status

pytestmark = pytest.mark.slow

EDITED = "An edited proposal, written by a person."


def approve(client: httpx.Client, run_id: str) -> None:
    suspended = wait_for_status(client, run_id, "suspended")
    approval = suspended["suspension"]["details"]["approvalId"]
    answered = client.post(f"/runs/{run_id}/approvals/{approval}", json={"approved": True})
    assert answered.status_code == 200, answered.text


def checkpoint_after(client: httpx.Client, run_id: str, step: str) -> dict[str, Any]:
    listed = client.get(f"/runs/{run_id}/checkpoints").json()["checkpoints"]
    found: dict[str, Any] = next(each for each in listed if each["stepPath"] == step)
    return found


def finished_approval_run(client: httpx.Client) -> str:
    run_id = str(start(client, approval_manifest())["runId"])
    approve(client, run_id)
    wait_for_status(client, run_id, "completed")
    return run_id


def test_the_fork_route_takes_variables_and_a_token_limit(client: httpx.Client) -> None:
    source = finished_approval_run(client)
    prepared = checkpoint_after(client, source, "prepare")
    state = client.get(f"/runs/{source}/checkpoints/{prepared['seq']}").json()["checkpoint"]
    variables = {**state["variables"], "proposal": EDITED}
    forked = client.post(f"/runs/{source}/fork", json={
        "seq": prepared["seq"], "variables": variables, "maxTotalTokens": 123_456})
    assert forked.status_code == 201, forked.text
    fork_id = forked.json()["run"]["runId"]
    approve(client, fork_id)
    done = wait_for_status(client, fork_id, "completed")
    assert EDITED in json.dumps(done["output"])
    assert done["usage"]["maxTotalTokens"] == 123_456
    first = client.get(f"/runs/{fork_id}/checkpoints/1").json()["checkpoint"]
    assert first["variables"]["proposal"] == EDITED
    # The source is as it was.
    assert EDITED not in json.dumps(run_of(client, source)["output"])
    # Not an object: refused by name.
    refused = client.post(f"/runs/{source}/fork", json={"variables": ["not", "an", "object"]})
    assert refused.status_code == 422, refused.text
    assert "variables" in refused.text


def test_edit_then_fork_from_the_run_page_with_a_stated_cost(
        page: Any, server: Serve, client: httpx.Client) -> None:
    source = finished_approval_run(client)
    prepared = checkpoint_after(client, source, "prepare")
    state = client.get(f"/runs/{source}/checkpoints/{prepared['seq']}").json()["checkpoint"]
    consumed = state["budget"]["consumedTokens"]
    posted: list[str] = []
    page.on("request", lambda request: posted.append(request.url)
            if request.method == "POST" and request.url.endswith("/fork") else None)

    open_console(page, server, f"#/runs/{source}")
    page.get_by_role("button", name="Fork…").click()
    form = page.locator("form.fork-form")
    latest = run_of(client, source)["checkpointSeq"]
    expect(form.get_by_label("Fork from checkpoint")).to_have_value(str(latest))
    expect(form.get_by_label("Variables (JSON)")).to_have_value(re.compile("response"))

    # The checkpoint after `prepare`: its variables load into the form.
    form.get_by_label("Fork from checkpoint").fill(str(prepared["seq"]))
    form.get_by_label("Fork from checkpoint").press("Tab")
    variables = form.get_by_label("Variables (JSON)")
    expect(variables).not_to_have_value(re.compile('"response"'))
    expect(variables).to_have_value(re.compile("proposal"))

    # Not JSON: said in the form, nothing sent.
    variables.fill("{ not json")
    form.get_by_role("button", name="Review the fork").click()
    expect(form.locator("[role=alert]")).to_contain_text("Variables: not JSON")
    assert not posted

    variables.fill(json.dumps({**state["variables"], "proposal": EDITED}, indent=2))
    form.get_by_label("Token limit").fill("50000")
    form.get_by_role("button", name="Review the fork").click()
    cost = form.locator(".fork-confirm .cost")
    expect(cost).to_have_text(
        f"The new run starts from checkpoint {prepared['seq']} with {consumed:,} tokens "
        f"already consumed of its 50,000-token budget ({50_000 - consumed:,} left).")
    expect(form.locator(".fork-confirm")).to_contain_text("Its variables are the ones you edited.")
    assert not posted, "the fork was sent before it was confirmed"
    page.set_viewport_size({"width": 1280, "height": 800})
    form.scroll_into_view_if_needed()
    screenshot(page, "fork-form-1280", full_page=False)
    page.set_viewport_size({"width": 390, "height": 844})
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 390
    form.locator(".fork-confirm").scroll_into_view_if_needed()
    screenshot(page, "fork-form-390", full_page=False)

    form.get_by_role("button", name="Yes, fork").click()
    wait_in_page(page, "id => !location.hash.includes(id)", source)
    fork_id = page.evaluate("() => decodeURIComponent(location.hash.split('/')[2])")
    assert len(posted) == 1
    fork = run_of(client, fork_id)
    assert fork["forkedFrom"] == {"runId": source, "seq": prepared["seq"]}
    assert fork["usage"]["maxTotalTokens"] == 50_000
    approve(client, fork_id)
    done = wait_for_status(client, fork_id, "completed")
    assert EDITED in json.dumps(done["output"])


@pytest.mark.parametrize("case", [
    ("pause", "the run ends failed (approval_rejected)", "failed", "approval_rejected"),
    ("cancel", "the run is cancelled", "cancelled", None),
], ids=["pause", "cancel"])
def test_rejecting_an_approval_says_how_the_run_ends(
        page: Any, server: Serve, client: httpx.Client,
        case: tuple[str, str, str, str | None]) -> None:
    action, outcome, status, error = case
    manifest = yaml.safe_load(approval_manifest())
    manifest["id"] = f"reject-{action}"
    manifest["steps"][1]["action"] = action
    run_id = start(client, manifest)["runId"]
    wait_for_status(client, run_id, "suspended")
    open_console(page, server, f"#/runs/{run_id}")
    card = page.locator("section.suspension")
    expect(card.locator(".reject-outcome")).to_have_text(f"Rejecting ends the run: {outcome}.")
    if action == "pause":
        page.set_viewport_size({"width": 390, "height": 844})
        card.scroll_into_view_if_needed()
        screenshot(page, "approval-reject-390", full_page=False)
    card.get_by_role("button", name="Reject").click()
    expect(page.locator("#notice")).to_contain_text(f"Rejected; {outcome}.")
    expect(page.locator("#notice")).not_to_contain_text("continues")
    expect(page.locator("[data-fact=status] .status")).to_have_text(status)
    ended = run_of(client, run_id)
    assert ended["status"] == status
    if error:
        assert ended["error"]["type"] == error
        expect(page.locator("section.result")).to_contain_text(error)
