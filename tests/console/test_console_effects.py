"""Settling a tool call whose outcome is unknown, from the browser.

The run is made to wait the way it does after a crash: a non-idempotent tool
dies mid-call in this process (over the server's own SQLite store), and a
takeover finds the effect reserved without a result. The console then shows
what it waits for, and the settlement resumes it on the server.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from browser import TOKEN, open_console, screenshot
from playwright.sync_api import expect

from agent_runtime import AgentRuntime, ToolContext, tool
from agent_runtime.testing import FakeClock
from stores.sqlite import SqliteRunStore
from tests.api.serve_process import Serve, run_of, running_serve, wait_for_status

pytestmark = pytest.mark.slow

PAY = {"schemaVersion": "1.0", "id": "pay", "name": "Pay", "steps": [
    {"id": "pay", "type": "prompt", "prompt": "Pay.", "tools": ["charge"],
     "includeInFinalOutput": True}]}
TOOLS = '''
from agent_runtime import ToolContext, tool


@tool(idempotent=False)
def charge(amount: int, ctx: ToolContext) -> str:
    """Charge a card."""
    return f"charged {amount}"
'''


SCRIPT = """\
responses:
  - toolCalls: [{name: charge, arguments: {amount: 5}}]
  - text: paid, as the bank confirmed
"""


class Crash(BaseException):
    """The process dies mid-call: after the effect was reserved, before its result was saved."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    workdir = tmp_path_factory.mktemp("console-effects")
    tools = workdir / "payments.py"
    tools.write_text(TOOLS, encoding="utf-8")
    # The host trusts the script the run replays (its policy lists it).
    config = workdir / "agent-runtime.config.yaml"
    config.write_text("version: '1.0'\npolicy: {scriptFiles: [pay.script.yaml]}\n",
                      encoding="utf-8")
    # No reconciler pass while the test stages the crash and the takeover itself.
    with running_serve(workdir, token=TOKEN, args=["--tools", str(tools), "--no-access-log",
                                                   "--config", str(config),
                                                   "--reconcile-interval", "3600"]) as serve:
        yield serve


def wait_on_an_unknown_effect(workdir: Path, run_id: str) -> None:
    @tool(idempotent=False)
    def charge(amount: int, ctx: ToolContext) -> str:
        """Charge a card."""
        raise Crash()

    clock = FakeClock(datetime.now(UTC))
    # One script for both processes: the call here, the answer after it on the server
    # (which resumes the run with the model it remembers).
    script = workdir / "pay.script.yaml"
    script.write_text(SCRIPT, encoding="utf-8")
    with SqliteRunStore(workdir / "runs.sqlite") as store:
        runtime = AgentRuntime(store=store, tools=[charge], clock=clock, lease_seconds=30,
                               owner="console-test")
        with pytest.raises(Crash):
            runtime.run_sync(manifest=PAY, options={"model": f"scripted/{script}"},
                             tenant="local", run_id=run_id)
        clock.advance(31)  # the dead owner's lease expires
        result = runtime.run_sync(run_id=run_id, resume=True, allow_running_takeover=True)
    assert result.suspension is not None
    assert result.suspension["reason"] == "effect-unknown"


@pytest.fixture(scope="module")
def waiting_run(server: Serve) -> str:
    # Staged before the module's browser starts: Playwright's sync API runs an
    # event loop in this thread, and the runtime's run_sync needs none running.
    run_id = "pay-console"
    wait_on_an_unknown_effect(server.workdir, run_id)
    return run_id


def test_supply_the_result_of_a_tool_call_whose_outcome_is_unknown(
        waiting_run: str, page: Any, server: Serve, client: httpx.Client) -> None:
    run_id = waiting_run

    open_console(page, server, f"#/runs/{run_id}")
    card = page.locator("section.suspension")
    expect(card.get_by_role("heading", name="Tool call outcome unknown")).to_be_visible()
    expect(card).to_contain_text("A call of tool charge")
    screenshot(page, "effect-unknown-card", element=card)
    card.get_by_label("Or supply the call's result").fill("charged 5 (the bank says)")
    card.get_by_role("button", name="Record this result").click()

    expect(page.locator("[data-fact=status] .status")).to_have_text("completed")
    expect(page.locator("section.result")).to_contain_text("paid, as the bank confirmed")
    wait_for_status(client, run_id, "completed")
    effects = client.get(f"/runs/{run_id}/effects").json()["effects"]
    assert [effect["result"] for effect in effects] == [{"output": "charged 5 (the bank says)"}]
    assert run_of(client, run_id)["attempt"] == 3
