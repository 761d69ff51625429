"""Webhook steps against a real HTTP server on 127.0.0.1, through the real engine:
destination checks, the Idempotency-Key header, retries, the response cap, and
crash-and-resume through the effect ledger."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from engine_harness import Harness, manifest

from agent_runtime import RunStatus
from agent_runtime.config import RuntimeConfig, WebhookPolicy, parse_config
from agent_runtime.errors import ConfigError, ManifestError
from agent_runtime.events import Event
from agent_runtime.http_retry import Backoff
from agent_runtime.steps import webhook
from agent_runtime.steps.webhook import destination_refusal, host_allowed
from stores.memory import MemoryRunStore
from stores.records import EffectStatus
from tests.local_http import Answer, Request, serve_http

ALLOW_LOCAL = parse_config({"version": "1.0", "webhooks": {"allowPrivateNetworks": True}},
                           source="test-config")


@dataclass
class Receiver:
    """A local HTTP server answering with queued responses (then 200 `{"ok": true}`)."""

    url: str
    requests: list[Request] = field(default_factory=list)
    answers: list[Answer] = field(default_factory=list)

    def answer(self, status: int, body: Any = None, headers: dict[str, str] | None = None,
               raw: bytes | None = None) -> None:
        data = raw if raw is not None else json.dumps(body).encode()
        self.answers.append(Answer(status, {"Content-Type": "application/json",
                                            **(headers or {})}, data))

    def keys(self) -> list[str | None]:
        return [request.headers.get("idempotency-key") for request in self.requests]

    def respond(self, request: Request) -> Answer:
        self.requests.append(request)
        answer = (self.answers.pop(0) if self.answers else
                  Answer(200, {"Content-Type": "application/json"}, b'{"ok": true}'))
        # A cookie the step must never hand back to anyone.
        return Answer(answer.status, {**answer.headers, "Set-Cookie": "session=secret"},
                      answer.body)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    state = Receiver(url="")
    with serve_http(state.respond) as url:
        state.url = url
        yield state


@pytest.fixture(autouse=True)
def fast_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(webhook, "WEBHOOK_BACKOFF",
                        Backoff(base_delay=0.01, max_delay=0.05, max_retry_after=60.0))


def hook(url: str, **extra: Any) -> dict[str, Any]:
    return {"id": "notify", "type": "webhook", "url": url, "includeInFinalOutput": True, **extra}


def data_of(h: Harness, type_: str) -> list[dict[str, Any]]:
    return [event.data for event in h.events.events if event.type == type_]


# -- destinations --------------------------------------------------------------


@pytest.mark.parametrize(("url", "kind"), [
    ("http://127.0.0.1:8080/x", "a loopback"),
    ("http://[::1]/x", "a loopback"),
    ("http://[::ffff:127.0.0.1]/x", "a loopback"),
    ("http://10.1.2.3/x", "a private"),
    ("https://192.168.0.10/x", "a private"),
    ("http://169.254.169.254/latest/meta-data", "a link-local"),
    ("http://0.0.0.0/x", "an unspecified"),
    ("http://100.64.0.1/x", "a non-public"),
])
def test_non_public_ip_destinations_are_refused_by_default(url: str, kind: str) -> None:
    refusal = destination_refusal(url, WebhookPolicy())
    assert refusal is not None and f"is {kind} address" in refusal
    assert "webhooks.allowPrivateNetworks" in refusal
    assert destination_refusal(url, WebhookPolicy(allowPrivateNetworks=True)) is None


def test_public_destinations_and_the_host_allowlist() -> None:
    assert destination_refusal("https://93.184.215.14/hook", WebhookPolicy()) is None
    assert destination_refusal("https://hooks.example.com/x", WebhookPolicy()) is None
    policy = WebhookPolicy(allowedHosts=["hooks.example.com", "*.example.org"])
    assert destination_refusal("https://HOOKS.example.com/x", policy) is None
    assert destination_refusal("https://a.b.example.org/x", policy) is None
    refusal = destination_refusal("https://example.org/x", policy)
    assert refusal == "webhook host 'example.org' is not in the runtime config's " \
                      "webhooks.allowedHosts"
    assert not host_allowed("evilexample.org", ["*.example.org"])
    assert "http or https" in (destination_refusal("ftp://x/y", WebhookPolicy()) or "")


def test_a_webhook_to_127_0_0_1_is_refused_unless_the_config_allows_it(
        receiver: Receiver) -> None:
    h = Harness()
    with pytest.raises(ConfigError) as refused:
        h.run(manifest(hook(f"{receiver.url}/hook")))
    assert refused.value.field == "steps[0].url"
    assert "127.0.0.1 is a loopback address" in refused.value.reason
    assert h.store.list_runs().runs == [] and receiver.requests == []

    allowed = Harness(config=ALLOW_LOCAL)
    result = allowed.run(manifest(hook(f"{receiver.url}/hook")))
    assert result.status is RunStatus.COMPLETED
    assert len(receiver.requests) == 1


def test_a_name_that_resolves_to_loopback_is_refused_when_the_step_runs(
        receiver: Receiver) -> None:
    port = receiver.url.rsplit(":", 1)[1]
    h = Harness()
    result = h.run(manifest(hook(f"http://localhost:{port}/hook")))
    assert result.status is RunStatus.FAILED
    assert result.error["type"] == "webhook_destination_refused"
    assert "webhook host 'localhost' resolves to a loopback address" in result.error["message"]
    assert "127.0.0.1" not in result.error["message"] and "::1" not in result.error["message"]
    assert receiver.requests == []
    assert h.store.list_effects(result.run_id) == []  # nothing was reserved, nothing sent


def test_a_name_is_called_at_its_checked_address_under_its_own_name(
        receiver: Receiver) -> None:
    port = receiver.url.rsplit(":", 1)[1]
    result = Harness(config=ALLOW_LOCAL).run(manifest(hook(f"http://localhost:{port}/hook")))
    assert result.status is RunStatus.COMPLETED, result.error
    assert receiver.requests[0].headers["host"] == f"localhost:{port}"


def test_the_allowlist_applies_to_local_destinations_too(receiver: Receiver) -> None:
    config = parse_config({"version": "1.0", "webhooks": {
        "allowPrivateNetworks": True, "allowedHosts": ["hooks.example.com"]}}, source="cfg")
    with pytest.raises(ConfigError, match=r"not in the runtime config's webhooks\.allowedHosts"):
        Harness(config=config).run(manifest(hook(f"{receiver.url}/hook")))


# -- delivery ------------------------------------------------------------------


def test_the_request_is_sent_as_declared_with_the_idempotency_key(receiver: Receiver) -> None:
    receiver.answer(201, {"received": True}, headers={"X-Request-Id": "r-1", "ETag": "v1"})
    h = Harness(config=ALLOW_LOCAL)
    body = {"status": "done", "note": "{{ not templated }}", "items": [1, 2.0], "é": 1e21}
    result = h.run(manifest(hook(f"{receiver.url}/hook?x=1", method="PUT", body=body,
                                 headers={"X-Source": "agent", "idempotency-key": "ignored"})))

    assert result.status is RunStatus.COMPLETED
    request, = receiver.requests
    assert (request.method, request.path) == ("PUT", "/hook?x=1")
    assert json.loads(request.body) == body
    # The bytes JSON.stringify writes, as the reference sends them.
    assert request.body == ('{"status":"done","note":"{{ not templated }}","items":[1,2],'
                            '"é":1e+21}').encode()
    assert request.headers["content-type"] == "application/json"
    assert request.headers["x-source"] == "agent"
    assert request.headers["idempotency-key"] == f"{result.run_id}:notify"
    assert request.headers["host"] == receiver.url.removeprefix("http://")
    # As the reference: the output is the response body (the status is in the event).
    assert result.output == {"received": True}
    assert [e["status"] for e in data_of(h, "webhook.completed")] == [201]
    # The effect ledger holds the outcome under the key that was sent.
    effect, = h.store.list_effects(result.run_id)
    assert effect.key == f"{result.run_id}:notify" and effect.status is EffectStatus.COMPLETED
    assert effect.result == {"output": {"received": True}, "status": 201}


def test_a_declared_key_text_bodies_and_no_body(receiver: Receiver) -> None:
    receiver.answer(200, raw=b"accepted", headers={"Content-Type": "text/plain"})
    receiver.answer(204, raw=b"")
    h = Harness(config=ALLOW_LOCAL)
    result = h.run(manifest(hook(f"{receiver.url}/a", idempotencyKey="release-v1"),
                            hook(f"{receiver.url}/b", method="GET") | {"id": "poll"}))
    assert result.status is RunStatus.COMPLETED
    first, second = receiver.requests
    assert first.headers["idempotency-key"] == "release-v1"
    assert first.body == b"" and "content-type" not in first.headers
    assert second.method == "GET" and second.headers["idempotency-key"] == f"{result.run_id}:poll"
    assert result.output == ["accepted", None]


def test_a_webhook_in_a_loop_sends_one_key_per_iteration(receiver: Receiver) -> None:
    h = Harness(config=ALLOW_LOCAL)
    result = h.run(manifest({"id": "each", "type": "loop", "loop": {"maxIterations": 2},
                             "steps": [hook(f"{receiver.url}/hook")]}))
    assert result.status is RunStatus.COMPLETED
    assert receiver.keys() == [f"{result.run_id}:each/0/notify", f"{result.run_id}:each/1/notify"]


def test_retries_on_503_with_the_same_key(receiver: Receiver) -> None:
    receiver.answer(503, {"busy": True}, headers={"Retry-After": "0"})
    receiver.answer(429, {"slow": "down"})
    receiver.answer(200, {"ok": 1})
    h = Harness(config=ALLOW_LOCAL)
    result = h.run(manifest(hook(f"{receiver.url}/hook", retries=2)))

    assert result.status is RunStatus.COMPLETED and result.output == {"ok": 1}
    assert receiver.keys() == [f"{result.run_id}:notify"] * 3
    assert [(e["attempt"], e["status"]) for e in data_of(h, "webhook.retried")] == \
        [(1, 503), (2, 429)]
    assert data_of(h, "webhook.retried")[0]["delay_ms"] == 0  # Retry-After: 0
    completed, = data_of(h, "webhook.completed")
    assert completed["status"] == 200 and completed["attempts"] == 3


def test_a_retry_after_beyond_the_limit_fails_the_step_without_waiting(
        receiver: Receiver) -> None:
    receiver.answer(429, {"slow": "down"}, headers={"Retry-After": "86400"})
    receiver.answer(200, {"ok": 1})
    h = Harness(config=ALLOW_LOCAL)
    result = h.run(manifest(hook(f"{receiver.url}/hook", retries=2)))
    assert result.status is RunStatus.FAILED
    assert result.error["details"] == {"status": 429}
    assert "asked to retry after 86400s, more than the 60s" in result.error["message"]
    assert len(receiver.requests) == 1
    assert data_of(h, "webhook.retried") == []


def test_retries_run_out(receiver: Receiver) -> None:
    for _ in range(3):
        receiver.answer(500, {"error": "boom"})
    h = Harness(config=ALLOW_LOCAL)
    result = h.run(manifest(hook(f"{receiver.url}/hook", retries=1)))
    assert result.status is RunStatus.FAILED
    assert result.error["type"] == "webhook_failed"
    assert result.error["details"] == {"status": 500}
    assert "answered 500 after 2 request(s)" in result.error["message"]
    assert len(receiver.requests) == 2
    failed, = data_of(h, "webhook.failed")
    assert (failed["status"], failed["attempts"]) == (500, 2)


def test_a_client_error_is_not_retried(receiver: Receiver) -> None:
    receiver.answer(404, {"error": "no such hook"})
    h = Harness(config=ALLOW_LOCAL)
    result = h.run(manifest(hook(f"{receiver.url}/hook", retries=3)))
    assert result.status is RunStatus.FAILED and "answered 404" in result.error["message"]
    assert len(receiver.requests) == 1


def test_a_response_over_the_cap_fails_the_step_naming_the_cap(receiver: Receiver) -> None:
    receiver.answer(200, raw=b"x" * 2048, headers={"Content-Type": "text/plain"})
    config = parse_config({"version": "1.0", "webhooks": {
        "allowPrivateNetworks": True, "maxResponseBytes": 1024}}, source="cfg")
    h = Harness(config=config)
    result = h.run(manifest(hook(f"{receiver.url}/hook")))
    assert result.status is RunStatus.FAILED
    assert result.error["type"] == "webhook_response_too_large"
    assert "exceeds the 1024 bytes response cap" in result.error["message"]
    assert WebhookPolicy().max_response_bytes == 1024 * 1024  # 1 MiB by default


def test_an_unreachable_destination_is_retried_then_fails() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    h = Harness(config=ALLOW_LOCAL)
    result = h.run(manifest(hook(f"http://127.0.0.1:{port}/hook", retries=1, timeoutMs=2000)))
    assert result.status is RunStatus.FAILED
    assert result.error["type"] == "webhook_unreachable"
    assert [e["error_type"] for e in data_of(h, "webhook.retried")] == ["ConnectError"]


def test_events_carry_codes_and_timings_never_bodies(receiver: Receiver) -> None:
    receiver.answer(503, {"secret": "server body"})
    h = Harness(config=ALLOW_LOCAL)
    h.run(manifest(hook(f"{receiver.url}/hook", body={"secret": "request body"})))
    webhook_events = [e for e in h.events.events if e.type.startswith("webhook.")]
    assert [e.type for e in webhook_events] == ["webhook.started", "webhook.retried",
                                                "webhook.completed"]
    assert "secret" not in json.dumps([e.to_json() for e in webhook_events])
    assert webhook_events[0].data == {"method": "POST", "host": "127.0.0.1"}


# -- crash and resume ------------------------------------------------------------


class Crash(BaseException):
    """The process dies here."""


class CrashBeforeRecording(MemoryRunStore):
    """Dies once after the webhook was delivered, before its outcome is recorded."""

    crashed = False

    def complete_effect(self, key: str, **kwargs: Any) -> None:
        if not self.crashed:
            self.crashed = True
            raise Crash()
        super().complete_effect(key, **kwargs)


def resume_after_crash(h: Harness) -> Any:
    run_id = h.store.list_runs().runs[0].run_id
    assert h.store.load_run(run_id).status is RunStatus.RUNNING
    h.clock.advance(h.lease_seconds + 1)
    return h.resume(run_id, allow_running_takeover=True)


def test_a_crash_before_the_outcome_is_recorded_sends_the_same_key_again(
        receiver: Receiver) -> None:
    receiver.answer(200, {"delivery": 1})
    receiver.answer(200, {"delivery": 2})
    h = Harness(config=ALLOW_LOCAL, store=CrashBeforeRecording())
    with pytest.raises(Crash):
        h.run(manifest(hook(f"{receiver.url}/hook", body={"n": 1})))
    run_id = h.store.list_runs().runs[0].run_id
    effect, = h.store.list_effects(run_id)
    assert effect.status is EffectStatus.RESERVED  # sent, outcome unknown

    result = resume_after_crash(h)
    assert result.status is RunStatus.COMPLETED and result.attempt == 2
    # Delivered twice under one key: the receiver deduplicates by it.
    assert receiver.keys() == [f"{run_id}:notify", f"{run_id}:notify"]
    assert receiver.requests[0].body == receiver.requests[1].body
    assert result.output == {"delivery": 2}
    effect, = h.store.list_effects(run_id)
    assert effect.status is EffectStatus.COMPLETED and effect.attempt == 1


def test_a_crash_after_the_outcome_is_recorded_replays_it_without_sending(
        receiver: Receiver) -> None:
    receiver.answer(202, {"delivery": 1})
    crashed: list[Event] = []

    class DieAfterRecording:
        def emit(self, event: Event) -> None:
            if event.type == "webhook.completed" and not crashed:
                crashed.append(event)
                raise Crash()

    h = Harness(config=ALLOW_LOCAL)
    h.runtime.event_sinks.append(DieAfterRecording())
    with pytest.raises(Crash):
        h.run(manifest(hook(f"{receiver.url}/hook")))
    run_id = h.store.list_runs().runs[0].run_id
    assert h.store.load_latest_checkpoint(run_id) is None or not any(
        entry.get("step_id") == "notify"
        for entry in h.store.load_latest_checkpoint(run_id).step_results)

    result = resume_after_crash(h)
    assert result.status is RunStatus.COMPLETED
    assert receiver.keys() == [f"{run_id}:notify"]  # sent once, ever
    assert result.output == {"delivery": 1}
    replayed = [e for e in data_of(h, "webhook.completed") if e.get("replayed")]
    assert replayed == [{"status": 202, "replayed": True}]


def test_the_policy_parses_from_the_config() -> None:
    config: RuntimeConfig = parse_config({"version": "1.0", "webhooks": {
        "allowPrivateNetworks": True, "allowedHosts": ["a.example"]}}, source="cfg")
    assert config.webhooks.allow_private_networks
    assert config.webhooks.allowed_hosts == ["a.example"]
    with pytest.raises(ConfigError) as refused:
        parse_config({"version": "1.0", "webhooks": {"allowPrivate": True}}, source="cfg")
    assert refused.value.field == "webhooks.allowPrivate"


# -- headers HTTP cannot carry -----------------------------------------------------


@pytest.mark.parametrize(("extra", "field", "reason"), [
    ({"headers": {"X-Note": "caf\u00e9"}}, "steps[0].headers.X-Note", "U+00E9 at position 3"),
    ({"headers": {"X-Note": "a\r\nX-Injected: 1"}}, "steps[0].headers.X-Note", "U+000D"),
    ({"headers": {"X-Note": "secret "}}, "steps[0].headers.X-Note", "start or end with a space"),
    ({"headers": {"Bad Name": "v"}}, 'steps[0].headers["Bad Name"]', "a header name is"),
    ({"idempotencyKey": "r\u00e9lease-1"}, "steps[0].idempotencyKey", "Idempotency-Key header"),
])
def test_headers_http_cannot_carry_are_refused_at_validate(
        receiver: Receiver, extra: dict[str, Any], field: str, reason: str) -> None:
    h = Harness(config=ALLOW_LOCAL)
    with pytest.raises(ManifestError) as refused:
        h.run(manifest(hook(f"{receiver.url}/hook", **extra)))
    assert refused.value.field == field and reason in refused.value.reason
    assert "caf" not in str(refused.value) and "secret" not in str(refused.value)  # not quoted
    assert receiver.requests == [] and h.store.list_runs().runs == []


def test_a_non_ascii_step_id_sends_a_percent_encoded_default_key(receiver: Receiver) -> None:
    h = Harness(config=ALLOW_LOCAL)
    result = h.run(manifest(hook(f"{receiver.url}/hook") | {"id": "benachrichtigen-\u00fc"}))
    assert result.status is RunStatus.COMPLETED, result.error
    assert receiver.keys() == [f"{result.run_id}:benachrichtigen-%C3%BC"]
    effect, = h.store.list_effects(result.run_id)  # the ledger keeps the key itself
    assert effect.key == f"{result.run_id}:benachrichtigen-\u00fc"


def test_a_header_that_escaped_validation_fails_the_step_before_the_effect_is_reserved(
        receiver: Receiver) -> None:
    agent = manifest(hook(f"{receiver.url}/hook"))
    step = agent.steps[0].model_copy(update={"headers": {"X-Note": "caf\u00e9"}})
    h = Harness(config=ALLOW_LOCAL)
    result = h.run(agent.model_copy(update={"steps": [step]}))
    assert result.status is RunStatus.FAILED
    assert result.error["type"] == "webhook_invalid_header"
    assert "U+00E9" in result.error["message"] and "caf" not in result.error["message"]
    assert h.store.list_effects(result.run_id) == [] and receiver.requests == []
