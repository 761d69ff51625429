"""The console on a desktop (1280x800) and a phone (390x844) screen: the page never scrolls
sideways; the runs table scrolls inside its own box; the search and start forms fit.
Screenshots of each go to build/console-screenshots/ (looked at when the layout changes)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from browser import TIMEOUT_MS, PageWatch, open_console, screenshot
from playwright.sync_api import expect

from tests.api.serve_process import FIXTURES, Serve, approval_manifest, start, wait_for_status

pytestmark = pytest.mark.slow

SCREENS = {"desktop": {"width": 1280, "height": 800}, "phone": {"width": 390, "height": 844}}
# How far past the screen's right edge each element reaches (0: nothing does).
OVERFLOW = """() => {
  const width = document.documentElement.clientWidth;
  return {
    page: document.documentElement.scrollWidth - width,
    wide: [...document.querySelectorAll('main *, header *')]
      .filter(element => !element.closest('.table-scroll'))
      .filter(element => element.getBoundingClientRect().right > width + 1)
      .map(element => element.tagName + '.' + element.className).slice(0, 5),
  };
}"""


@pytest.fixture(params=sorted(SCREENS))
def screen(request: pytest.FixtureRequest, browser: Any, watch: PageWatch) -> Iterator[Any]:
    name: str = request.param
    context = browser.new_context(viewport=SCREENS[name])
    context.set_default_timeout(TIMEOUT_MS)
    tab = context.new_page()
    tab.screen_name = name  # which of SCREENS it is
    watch.attach(tab)
    try:
        yield tab
    finally:
        context.close()
    assert not watch.errors, f"the console raised script errors: {watch.errors}"


def assert_fits(page: Any) -> None:
    found = page.evaluate(OVERFLOW)
    assert found == {"page": 0, "wide": []}, found


def test_the_runs_list_fits_and_its_table_scrolls_in_its_own_box(
        screen: Any, server: Serve, client: httpx.Client) -> None:
    done = start(client, (FIXTURES / "hello.agent.yaml").read_text(encoding="utf-8"))["runId"]
    wait_for_status(client, done, "completed")
    waiting = start(client, approval_manifest())["runId"]
    wait_for_status(client, waiting, "suspended")
    open_console(screen, server)
    expect(screen.locator(f"tr[data-run-id='{waiting}']")).to_be_visible()
    screen.get_by_label(f"Select run {waiting}").check()
    assert_fits(screen)
    box = screen.locator(".table-scroll")
    sizes = box.evaluate("element => ({scroll: element.scrollWidth, client: element.clientWidth,"
                         " right: element.getBoundingClientRect().right})")
    assert sizes["right"] <= SCREENS[screen.screen_name]["width"]
    if screen.screen_name == "phone":
        assert sizes["scroll"] > sizes["client"]  # the table scrolls, inside its box
        box.evaluate("element => { element.scrollLeft = element.scrollWidth; }")
        expect(screen.locator(f"tr[data-run-id='{waiting}'] time").last).to_be_in_viewport()
    screenshot(screen, f"runs-{screen.screen_name}", full_page=False)
    # The bulk bar's confirmation and its results fit too.
    screen.get_by_role("button", name="Cancel selected").click()
    expect(screen.get_by_role("button", name="Yes, cancel 1 run")).to_be_visible()
    assert_fits(screen)
    screen.get_by_role("button", name="Yes, cancel 1 run").click()
    expect(screen.locator(".bulk-summary")).to_contain_text("1 done")
    assert_fits(screen)
    screenshot(screen, f"runs-{screen.screen_name}-full")


def test_the_start_form_fits(screen: Any, server: Serve) -> None:
    open_console(screen, server, "#/start")
    screen.get_by_label("Example manifest").select_option("release-brief.agent.yaml")
    expect(screen.get_by_label("audience")).to_be_visible()
    assert_fits(screen)
    form = screen.locator("form.start").evaluate(
        "element => element.getBoundingClientRect().width")
    assert form <= SCREENS[screen.screen_name]["width"]
    screenshot(screen, f"start-{screen.screen_name}")


def test_the_sign_in_and_token_pages_fit(screen: Any, server: Serve) -> None:
    screen.goto(server.base_url + "/")
    expect(screen.get_by_label("Bearer token")).to_be_visible()
    assert_fits(screen)
    screenshot(screen, f"sign-in-{screen.screen_name}")
