"""A run with 500 checkpoints, made by running an agent: its page renders at its latest
page of checkpoints, then every page is visited; both times, as the test browser saw
them, are printed (figures to watch, not tight assertions).

The timeline is paged (100 checkpoints a page, the latest first; see
test_console_long_run.py for 10,000), so the page is usable after one page is read.
A run whose output is too large for its view (`outputRef`) still shows it, fetched
apart."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from browser import SCREENSHOTS, TOKEN, open_console, screenshot, wait_in_page
from playwright.sync_api import expect

from tests.api.serve_process import Serve, run_of, start, wait_for_status, wait_until

pytestmark = pytest.mark.slow

# Every iteration checkpoints once (its prompt's completion is the iteration's
# commit point); the loop's end, the run's last step, is committed with the run's
# completion: 499 items make 500 checkpoints.
ITEMS = 499
CHECKPOINTS = ITEMS + 1


def long_loop() -> dict[str, Any]:
    return {"schemaVersion": "1.0", "id": "long-loop", "name": "Long loop",
            "variables": [{"key": "items", "type": "array", "value": list(range(ITEMS))}],
            "steps": [{"id": "each", "type": "loop",
                       "loop": {"source": "items", "itemVariable": "item",
                                "maxIterations": ITEMS},
                       "steps": [{"id": "say", "type": "prompt", "prompt": "Item {{ item }}"}]}]}


def test_a_run_with_500_checkpoints_renders_its_page(
        page: Any, server: Serve, client: httpx.Client) -> None:
    run_id = start(client, long_loop())["runId"]

    def finished() -> dict[str, Any] | None:
        run = run_of(client, run_id)
        return run if run["status"] in ("completed", "failed") else None

    run = wait_until(finished, what=f"run {run_id} to finish", timeout=300.0)
    assert run["status"] == "completed", run
    assert run["checkpointSeq"] == CHECKPOINTS

    # A fresh page load straight onto the run: timed from navigation start until the
    # latest checkpoint is in the page, then until every page has been shown.
    page.goto(f"{server.base_url}/?#token={TOKEN}")
    wait_in_page(page, "() => !location.hash.includes('token')")
    page.goto(f"{server.base_url}/?load=run#/runs/{run_id}")
    first_ms = wait_in_page(page, """n => document.querySelector('[data-fact=status] .status')
        && document.querySelector(`#timeline .checkpoint[data-seq="${n}"]`)
        && performance.now()""", CHECKPOINTS, timeout=120.0)
    seen: set[int] = set()
    groups = 0
    pager = page.locator(".timeline-pager")
    for index in range(CHECKPOINTS // 100):
        if index:
            pager.get_by_role("button", name="Earlier page").click()
        low = CHECKPOINTS - 100 * (index + 1) + 1
        expect(page.locator("#timeline .checkpoint").first).to_have_attribute(
            "data-seq", str(low))
        rows = page.locator("#timeline .checkpoint")
        expect(rows).to_have_count(100)
        seen.update(int(seq) for seq in rows.evaluate_all("rows => rows.map(r => r.dataset.seq)"))
        groups += page.locator("#timeline li.iteration").count()
    whole_ms = page.evaluate("() => performance.now()")
    assert seen == set(range(1, CHECKPOINTS + 1))
    assert groups == ITEMS
    api_ms = page.evaluate("""() => performance.getEntriesByType('resource')
        .filter(entry => entry.name.includes('/checkpoints'))
        .reduce((sum, entry) => sum + entry.duration, 0)""")
    figure = (f"console: run page with {CHECKPOINTS} checkpoints ({groups} loop iterations): "
              f"status and latest timeline page after {first_ms:.0f} ms, every page shown "
              f"after {whole_ms:.0f} ms from navigation start ({api_ms:.0f} ms of it waiting "
              f"for GET /runs/{{id}}/checkpoints pages)")
    print(figure)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    (SCREENSHOTS / "timing.txt").write_text(figure + "\n", encoding="utf-8")
    page.locator("#timeline").scroll_into_view_if_needed()
    screenshot(page, "run-500-checkpoints", full_page=False)
    # Generous: a loaded CI machine is slower; this only catches a page that never settles.
    assert whole_ms < 120_000


def test_an_output_too_large_for_the_runs_view_is_fetched_and_shown(
        page: Any, server: Serve, client: httpx.Client) -> None:
    # scripted/echo answers the schema with a 20,000-character `body`: past the
    # 16 KiB a run's view shows, so GET /runs/{id} names it by reference.
    schema = {"type": "object", "required": ["body"],
              "properties": {"body": {"type": "string", "minLength": 20_000}}}
    run_id = start(client, {"schemaVersion": "1.0", "id": "large-output", "steps": [
        {"id": "write", "type": "prompt", "prompt": "Write at length.", "outputSchema": schema,
         "includeInFinalOutput": True}]})["runId"]
    run = wait_for_status(client, run_id, "completed")
    assert run["output"] is None and run["outputRef"] == f"/runs/{run_id}/output", run

    open_console(page, server, f"#/runs/{run_id}")
    result = page.locator("section.result")
    expect(result.get_by_role("heading", name="Output")).to_be_visible()
    body = result.locator("dl.output-fields dd")
    expect(body.locator("summary")).to_have_text("Show all (20,000 characters)")
    body.locator("summary").click()
    expect(body.locator(".markdown")).to_have_text("x" * 20_000)
    assert page.evaluate("""() => performance.getEntriesByType('resource')
        .some(entry => entry.name.endsWith('/output'))""")
