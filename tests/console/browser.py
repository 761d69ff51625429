"""A real headless Chromium for the console tests: Debian's `chromium`, driven by Playwright.

Playwright's own browser download is never used: the browser is the
system's (`apt-get install chromium`; `.ci/run` installs it), found on PATH
or named by `CHROMIUM`. When it or Playwright is missing the tests fail,
saying what to install; only `AGENT_RUNTIME_SKIP_BROWSER_TESTS=1` (a local
opt-out) turns that into a skip.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.api.serve_process import Serve

REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "build" / "console-screenshots"
OPT_OUT = "AGENT_RUNTIME_SKIP_BROWSER_TESTS"
# Generous: a loaded 2-core machine makes a test slower, never wrong.
TIMEOUT_MS = 30_000
TOKEN = "console-test-token-0123456789abcdef"


def unavailable(reason: str) -> None:
    message = (f"the console tests need a headless Chromium: {reason} (Debian: apt-get install "
               f"chromium; then pip install -e '.[dev]'). Set {OPT_OUT}=1 to skip them locally.")
    if os.environ.get(OPT_OUT) == "1":
        pytest.skip(message)
    pytest.fail(message, pytrace=False)


def chromium_path() -> str:
    named = os.environ.get("CHROMIUM")
    if named:
        if not Path(named).is_file():
            unavailable(f"CHROMIUM={named} is not a file")
        return named
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    unavailable("no `chromium` on PATH")
    raise AssertionError("unreachable")


@dataclass
class PageWatch:
    """What a page did that a test must know about: dialogs, script errors, CSP refusals."""

    dialogs: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)

    def attach(self, page: Any) -> None:
        def on_dialog(dialog: Any) -> None:
            self.dialogs.append(f"{dialog.type}: {dialog.message}")
            dialog.dismiss()

        def on_console(message: Any) -> None:
            text = message.text
            if message.type == "error" and ("Content Security Policy" in text
                                            or "TrustedHTML" in text or "Trusted Type" in text):
                self.refusals.append(text)

        page.on("dialog", on_dialog)
        page.on("pageerror", lambda error: self.errors.append(str(error)))
        page.on("console", on_console)


def screenshot(page: Any, name: str, *, element: Any = None, full_page: bool = True) -> Path:
    """Save a screenshot under build/console-screenshots/ (an artifact, gitignored)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    if element is not None:
        element.screenshot(path=str(path))
    else:
        page.screenshot(path=str(path), full_page=full_page)
    return path


def wait_in_page(page: Any, expression: str, arg: Any = None, *,
                 timeout: float = TIMEOUT_MS / 1000) -> Any:
    """Poll a JavaScript expression (a function of `arg`) until it is truthy.

    Not `page.wait_for_function`: it evaluates its predicate with `eval`,
    which the console's CSP refuses, as it should.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = page.evaluate(expression, arg)
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {expression}")
        time.sleep(0.05)


def open_console(page: Any, server: Serve, hash_path: str = "/") -> None:
    """Load the console as a person does the first time: the token in the fragment."""
    page.goto(f"{server.base_url}/#token={TOKEN}")
    wait_in_page(page, "() => !window.location.hash.includes('token')")
    if hash_path != "/":
        page.evaluate("path => { window.location.hash = path; }", hash_path)
