"""Fixtures of the console tests: one real `serve` and one Chromium per module,
a fresh browser tab per test (its dialogs, script errors and CSP refusals watched)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from browser import TIMEOUT_MS, TOKEN, PageWatch, chromium_path, unavailable

from tests.api.serve_process import (
    ALLOW_LOOPBACK_WEBHOOKS,
    UNMETERED_POLICY,
    Serve,
    running_serve,
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    workdir = tmp_path_factory.mktemp("console-serve")
    config = workdir / "runtime.config.yaml"
    # Tests start runs back to back; on a slow machine more than the default 8 per
    # tenant are still running when the next is posted. Quotas are tested in tests/api.
    config.write_text(ALLOW_LOOPBACK_WEBHOOKS + UNMETERED_POLICY, encoding="utf-8")
    with running_serve(workdir, token=TOKEN,
                       args=["--config", str(config), "--no-access-log"]) as serve:
        yield serve


@pytest.fixture
def client(server: Serve) -> Iterator[httpx.Client]:
    with server.client() as http:
        yield http


# Per module, not per session: Playwright's sync API keeps an event loop running
# in this thread while it is open, and later tests call asyncio.run().
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    executable = chromium_path()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("Playwright for Python is not installed")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, headless=True,
                                              args=["--no-sandbox", "--disable-gpu"])
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def watch() -> PageWatch:
    return PageWatch()


@pytest.fixture
def page(browser: Any, watch: PageWatch) -> Iterator[Any]:
    from playwright.sync_api import expect

    expect.set_options(timeout=TIMEOUT_MS)
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(TIMEOUT_MS)
    tab = context.new_page()
    watch.attach(tab)
    try:
        yield tab
    finally:
        context.close()
    assert not watch.errors, f"the console raised script errors: {watch.errors}"
    assert not watch.refusals, f"the CSP refused something the console did: {watch.refusals}"

