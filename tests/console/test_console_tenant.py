"""Which tenant the console acts for: shown in its header, and never changed by a link alone.

Any page can link to `/#token=...`. Before, opening such a link silently
replaced the tab's token, so a tab signed in as one tenant went on as
another without a word. Now a different token in the address is taken out
of it at once and the console asks which token to keep, naming the tenant of
each; the header always names the tenant of the token in use.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from browser import PageWatch, wait_in_page
from playwright.sync_api import expect

from tests.api.serve_process import Serve, running_serve, write_tokens_file

pytestmark = pytest.mark.slow

TOKEN_A = "console-token-of-team-a-0123456789"
TOKEN_B = "console-token-of-team-b-0123456789"
UNKNOWN = "console-token-nobody-has-0123456789"
STORED = "() => sessionStorage.getItem('agent-runtime.token')"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    workdir = tmp_path_factory.mktemp("console-tenants")
    tokens = write_tokens_file(workdir / "tokens.yaml", {TOKEN_A: "team-a", TOKEN_B: "team-b"})
    with running_serve(workdir, token=None,
                       args=["--tokens", str(tokens), "--no-access-log"]) as serve:
        yield serve


def open_with(page: Any, server: Serve, token: str) -> None:
    page.goto(f"{server.base_url}/#token={token}")
    wait_in_page(page, "() => !window.location.hash.includes('token')")


def test_the_header_names_the_tenant_of_the_token(page: Any, server: Serve) -> None:
    open_with(page, server, TOKEN_A)
    expect(page.get_by_role("heading", name="Runs")).to_be_visible()
    expect(page.locator("header #tenant")).to_have_text("Tenant team-a")
    page.get_by_role("button", name="Forget token").click()
    expect(page.locator("header #tenant")).to_be_hidden()
    page.get_by_label("Bearer token").fill(TOKEN_B)
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("header #tenant")).to_have_text("Tenant team-b")


def test_a_link_with_another_token_asks_before_replacing_the_tabs(
        page: Any, server: Serve, watch: PageWatch) -> None:
    open_with(page, server, TOKEN_A)
    expect(page.locator("header #tenant")).to_have_text("Tenant team-a")

    open_with(page, server, TOKEN_B)  # a link some page offered
    expect(page.get_by_role("heading", name="Replace this tab's token?")).to_be_visible()
    assert "token" not in page.url and TOKEN_B not in page.content()
    assert page.evaluate(STORED) == TOKEN_A  # nothing replaced yet
    facts = page.locator("main .facts")
    expect(facts).to_contain_text("This tab's tokentenant team-a")
    expect(facts).to_contain_text("The link's tokentenant team-b")
    expect(page.get_by_role("button", name="Keep the current token")).to_be_focused()

    page.get_by_role("button", name="Keep the current token").click()
    expect(page.get_by_role("heading", name="Runs")).to_be_visible()
    assert page.evaluate(STORED) == TOKEN_A
    expect(page.locator("header #tenant")).to_have_text("Tenant team-a")

    open_with(page, server, TOKEN_B)
    page.get_by_role("button", name="Use the link's token").click()
    expect(page.get_by_role("heading", name="Runs")).to_be_visible()
    assert page.evaluate(STORED) == TOKEN_B
    expect(page.locator("header #tenant")).to_have_text("Tenant team-b")
    assert watch.dialogs == []  # asked on the page, not in a browser dialog


def test_a_link_with_a_token_the_server_refuses_says_so_and_keeps_the_tabs(
        page: Any, server: Serve) -> None:
    open_with(page, server, TOKEN_A)
    expect(page.locator("header #tenant")).to_have_text("Tenant team-a")
    open_with(page, server, UNKNOWN)
    expect(page.locator("main .facts")).to_contain_text("this server does not accept it")
    page.get_by_role("button", name="Keep the current token").click()
    expect(page.get_by_role("heading", name="Runs")).to_be_visible()
    assert page.evaluate(STORED) == TOKEN_A  # the refused token signed nobody out


def test_the_same_token_again_asks_nothing(page: Any, server: Serve) -> None:
    open_with(page, server, TOKEN_A)
    expect(page.get_by_role("heading", name="Runs")).to_be_visible()
    page.goto(f"{server.base_url}/#/start&token={TOKEN_A}")
    wait_in_page(page, "() => !window.location.hash.includes('token')")
    expect(page.get_by_role("heading", name="Start a run")).to_be_visible()
    assert page.evaluate("() => location.hash") == "#/start"


def test_a_new_tab_keeps_the_token_and_a_switch_names_both_tenants(
        page: Any, server: Serve) -> None:
    open_with(page, server, TOKEN_A)
    expect(page.locator("header #tenant")).to_have_text("Tenant team-a")

    # A run opened in a new tab (same browser): no sign-in again.
    second = page.context.new_page()
    second.goto(f"{server.base_url}/#/start")
    expect(second.get_by_role("heading", name="Start a run")).to_be_visible()
    expect(second.locator("header #tenant")).to_have_text("Tenant team-a")

    # A link with another token, in that tab: the choice names the change it makes.
    open_with(second, server, TOKEN_B)
    switch = second.get_by_role("button",
                                name="Use the link's token (switch from tenant team-a to team-b)")
    expect(switch).to_be_visible()
    switch.click()
    expect(second.locator("header #tenant")).to_have_text("Tenant team-b")
    # The first tab was not switched under its user's feet.
    page.reload()
    expect(page.locator("header #tenant")).to_have_text("Tenant team-a")
    assert page.evaluate(STORED) == TOKEN_A

    # Forgetting the token in one tab forgets it in every tab.
    second.get_by_role("button", name="Forget token").click()
    expect(page.get_by_label("Bearer token")).to_be_visible()
    assert page.evaluate(STORED) is None
    assert page.evaluate("() => localStorage.getItem('agent-runtime.token')") is None
    second.close()
