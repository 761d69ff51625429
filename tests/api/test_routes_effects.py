"""Effects over HTTP: a tool call whose outcome is unknown is listed, settled and resumed.

The settlement travels through the store only (`resolve_approval` on the
`effect-unknown` suspension), as it does on AWS, where the attempt that
settles it runs in another process than the request that asked.
"""

from __future__ import annotations

from typing import Any

import pytest
from routes_harness import Api

from agent_runtime import AgentRuntime, ToolContext, tool
from agent_runtime.testing import FakeClock, scripted
from stores.base import RunStore

PAY = {"schemaVersion": "1.0", "id": "pay", "steps": [
    {"id": "pay", "type": "prompt", "prompt": "Pay.", "tools": ["charge"],
     "includeInFinalOutput": True}]}
SCRIPT = [{"toolCalls": [{"name": "charge", "arguments": {"amount": 5}}]}, {"text": "paid"}]


class Crash(BaseException):
    """The process dies mid-call: after the effect was reserved, before its result was saved."""


class Payments:
    def __init__(self, store: RunStore) -> None:
        self.calls: list[str] = []
        self.clock = FakeClock()

        @tool(idempotent=False)
        def charge(amount: int, ctx: ToolContext) -> str:
            """Charge a card."""
            self.calls.append(ctx.idempotency_key)
            if len(self.calls) == 1:
                raise Crash()
            return f"charged {amount}"

        self.runtime = AgentRuntime(store=store, models={"scripted": scripted(SCRIPT)},
                                    tools=[charge], clock=self.clock, lease_seconds=30,
                                    owner="payments")

    def waiting_on_an_unknown_effect(self) -> str:
        with pytest.raises(Crash):
            self.runtime.run_sync(manifest=PAY, options={"model": "scripted/test"},
                                  tenant="alice", run_id="pay-1")
        self.clock.advance(31)  # the dead owner's lease expires
        result = self.runtime.run_sync(run_id="pay-1", resume=True, allow_running_takeover=True)
        assert result.suspension is not None
        assert result.suspension["reason"] == "effect-unknown"
        return str(result.suspension["details"]["key"])


@pytest.mark.parametrize(("settle", "tool_calls", "seen"), [
    ({"action": "retry"}, 2, {"output": "charged 5"}),
    ({"action": "result", "result": "charged 5 (the bank says)"}, 1,
     {"output": "charged 5 (the bank says)"}),
    ({"action": "skip"}, 1, {"error": {"type": "skipped",
                                       "message": "an operator skipped this tool call"}}),
])
def test_an_unknown_effect_is_listed_settled_and_the_run_completes(
        store: RunStore, settle: dict[str, Any], tool_calls: int, seen: dict[str, Any]) -> None:
    payments = Payments(store)
    key = payments.waiting_on_an_unknown_effect()
    api = Api(store, runtime=payments.runtime)
    run = api.get("/runs/pay-1").run
    assert run["suspension"]["details"]["key"] == key
    assert run["suspension"]["details"]["tool"] == "charge"

    listed = api.get("/runs/pay-1/effects").body["effects"]
    assert [(e["key"], e["status"], e["attempt"], e["tool"]) for e in listed] == [
        (key, "reserved", 1, "charge")]

    reply = api.post(f"/runs/pay-1/effects/{key}", settle)
    assert reply.status == 200, reply
    assert reply.run["status"] == "completed" and reply.run["output"] == "paid"
    # Finished: it waits on nothing, so no suspension is shown (the record keeps the last).
    assert reply.run["suspension"] is None
    assert reply.run["lastSuspension"]["reason"] == "effect-unknown"
    assert len(payments.calls) == tool_calls
    assert set(payments.calls) == {key}  # one idempotency key throughout
    assert api.launcher.resumed == [("pay-1", "effect-settled", None)]
    settled = api.get("/runs/pay-1/effects").body["effects"]
    # Named by the tool call the transcript records, waiting on it or not.
    assert [(e["status"], e["result"], e["tool"], e["stepPath"]) for e in settled] == [
        ("completed", seen, "charge", "pay")]
    assert settled[0]["completedAt"] is not None


def test_a_settlement_is_checked_against_its_action(store: RunStore) -> None:
    payments = Payments(store)
    key = payments.waiting_on_an_unknown_effect()
    api = Api(store, runtime=payments.runtime)
    missing = api.post(f"/runs/pay-1/effects/{key}", {"action": "result"})
    assert missing.status == 422 and missing.problem["field"] == "result"
    extra = api.post(f"/runs/pay-1/effects/{key}", {"action": "skip", "result": 1})
    assert extra.status == 422 and extra.problem["field"] == "result"
    other = api.post("/runs/pay-1/effects/another-key", {"action": "skip"})
    assert other.status == 409
    assert api.get("/runs/pay-1").run["status"] == "suspended"
    null = api.post(f"/runs/pay-1/effects/{key}", {"action": "result", "result": None})
    assert null.status == 200 and null.run["status"] == "completed"


def test_another_tenant_cannot_see_or_settle_the_effect(store: RunStore) -> None:
    payments = Payments(store)
    key = payments.waiting_on_an_unknown_effect()
    api = Api(store, runtime=payments.runtime)
    assert api.get("/runs/pay-1/effects", token="bob-token").status == 404
    assert api.post(f"/runs/pay-1/effects/{key}", {"action": "retry"},
                    token="bob-token").status == 404
    assert len(payments.calls) == 1
