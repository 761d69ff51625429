"""Ports of packages/step-standard/src/index.test.ts: approval and webhook steps, through a run
(a local HTTP receiver on 127.0.0.1 stands in for the reference's `fetch`)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from reference_harness import Host, agent

from agent_runtime import RunStatus
from agent_runtime.config import parse_config
from tests.local_http import Answer, Request, serve_http

ALLOW_LOCAL = parse_config({"version": "1.0", "webhooks": {"allowPrivateNetworks": True}},
                           source="test-config")


class Receiver:
    def __init__(self) -> None:
        self.url = ""
        self.requests: list[tuple[dict[str, str], bytes]] = []
        self.answers: list[tuple[int, dict[str, str], bytes]] = []

    def respond(self, request: Request) -> Answer:
        self.requests.append((request.headers, request.body))
        return Answer(*self.answers.pop(0))


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    state = Receiver()
    with serve_http(state.respond) as url:
        state.url = url
        yield state


def events_text(host: Host) -> str:
    return json.dumps([event.to_json() for event in host.events.events])


def test_passes_approval_details_to_the_adapter_but_keeps_secrets_out_of_events() -> None:
    """step-standard/src/index.test.ts: "passes approval details to the adapter but keeps
    secrets out of events and metadata". Deliberate difference 4: the approval suspends the
    run; its request (prompt and details) is the run's suspension, kept in the store, which
    the HTTP API and the CLI read; the decision is recorded with `approve`."""
    host = Host()
    manifest = agent({"id": "approval-1", "type": "approval",
                      "prompt": "Approve secret acquisition?",
                      "metadata": {"privateContext": "board-eyes-only"},
                      "outputVariable": "approval", "action": "pause",
                      "includeInFinalOutput": True})
    suspended = host.run(manifest)
    assert suspended.status is RunStatus.SUSPENDED
    record = host.store.load_run(suspended.run_id)
    assert record is not None and record.suspension is not None
    details = record.suspension.details
    assert (details["step_id"], details["prompt"], details["details"]) == (
        "approval-1", "Approve secret acquisition?", {"privateContext": "board-eyes-only"})

    host.runtime.approve(suspended.run_id, response={"comment": "private approval response"})
    result = host.resume(suspended.run_id)
    assert result.output["approved"] is True
    assert result.output["response"] == {"comment": "private approval response"}
    assert host.variables(result.run_id)["approval"] == result.output
    text = events_text(host)
    for secret in ("secret acquisition", "board-eyes-only", "private approval response"):
        assert secret not in text


def test_stops_the_step_when_approval_is_rejected() -> None:
    """step-standard/src/index.test.ts: "stops the step when approval is rejected" (action
    cancel cancels the run)."""
    host = Host()
    suspended = host.run(agent({"id": "approval-rejected", "type": "approval",
                                "prompt": "Continue?", "action": "cancel"}))
    host.runtime.approve(suspended.run_id, approved=False, response="private rejection reason")
    result = host.resume(suspended.run_id)
    assert result.status is RunStatus.CANCELLED
    assert "private rejection reason" not in events_text(host)


def test_retries_sequentially_with_one_stable_idempotency_key_and_redacted_lifecycle_data(
        receiver: Receiver) -> None:
    """step-standard/src/index.test.ts: "retries sequentially with one stable idempotency key
    and redacted lifecycle data"."""
    receiver.answers += [(503, {"Retry-After": "0"}, b"private failure body"),
                         (200, {"Content-Type": "application/json"},
                          json.dumps({"received": "private response"}).encode())]
    host = Host(config=ALLOW_LOCAL)
    result = host.run(agent({"id": "webhook-1", "type": "webhook",
                             "url": f"{receiver.url}/private-token", "method": "POST",
                             "headers": {"Authorization": "Bearer private-token"},
                             "body": {"document": "private-body"}, "retries": 2,
                             "idempotencyKey": "stable-secret-key",
                             "outputVariable": "webhookResult"}))
    assert result.status is RunStatus.COMPLETED
    assert [headers["idempotency-key"] for headers, _ in receiver.requests] == [
        "stable-secret-key", "stable-secret-key"]
    first_headers, first_body = receiver.requests[0]
    assert first_headers["authorization"] == "Bearer private-token"
    assert json.loads(first_body) == {"document": "private-body"}
    # the output is the response body, as the reference's
    assert result.output == {"received": "private response"}
    assert host.variables(result.run_id)["webhookResult"] == {"received": "private response"}
    text = events_text(host)
    for secret in ("private-token", "private-body", "private response", "stable-secret-key"):
        assert secret not in text


def test_does_not_retry_non_retryable_http_failures_or_expose_their_body(
        receiver: Receiver) -> None:
    """step-standard/src/index.test.ts: "does not retry non-retryable HTTP failures or expose
    their body"."""
    receiver.answers.append((400, {"Content-Type": "text/plain"}, b"private validation details"))
    host = Host(config=ALLOW_LOCAL)
    result = host.run(agent({"id": "webhook-400", "type": "webhook", "url": f"{receiver.url}/",
                             "retries": 3}))
    assert result.status is RunStatus.FAILED
    assert (result.error["type"], result.error["details"]) == ("webhook_failed",
                                                               {"status": 400})
    assert len(receiver.requests) == 1
    assert "private validation details" not in json.dumps(result.error) + events_text(host)


def test_a_response_that_says_json_and_is_not_fails_the_step(receiver: Receiver) -> None:
    """step-standard/src/index.ts `readWebhookOutput`: a JSON content type with a body that
    does not parse is `invalid-json`; a text body is the output as text."""
    receiver.answers += [(200, {"Content-Type": "application/json"}, b"{not json"),
                         (200, {"Content-Type": "text/plain"}, b"accepted")]
    host = Host(config=ALLOW_LOCAL)
    failed = host.run(agent({"id": "hook", "type": "webhook", "url": f"{receiver.url}/a"}))
    assert (failed.status, failed.error["type"]) == (RunStatus.FAILED, "webhook_invalid_json")
    text = host.run(agent({"id": "hook", "type": "webhook", "url": f"{receiver.url}/b"}))
    assert text.output == "accepted"
