"""`webhook` steps: one HTTP request as declared, sent under an idempotency key.

The request is the step's `method` (default POST), `headers` and `body`
(JSON-encoded; fields are passed as declared, never templated), with an
`Idempotency-Key` header: the step's `idempotencyKey`, else
`<runId>:<stepPath>`, the same on every attempt of the run. The output is
the response body, as the reference's: JSON-decoded when the content type
mentions JSON (a body that is not JSON then fails the step), else the text;
null for an empty body. The status is in the `webhook.completed` event.

Delivery: `timeoutMs` per request (default 10 s); 408, 425, 429, 5xx answers
and transport errors are retried up to `retries` times (default 2) under the
shared rules of `agent_runtime.http_retry`: after the server's `Retry-After`
(one asking over 60 s fails the step at once), else exponential backoff. Any other
answer outside 2xx fails the step; redirects are not followed. A response
body over the cap (`webhooks.maxResponseBytes`, default 1 MiB) fails the step.

Destinations: only http and https, only public addresses, checked when the
manifest is validated and again for every address a name resolves to
(`agent_runtime.steps.webhook_destinations`).

Headers: declared headers and `idempotencyKey` must be printable ASCII
(`validate` refuses others by name); the default key is percent-encoded
where a step id is not. Headers are built and checked before the effect is
reserved, so a refused request leaves nothing in the ledger.

Exactly once, as far as the receiver deduplicates: the key is reserved in the
effect ledger before the first request and the outcome recorded there after
the last. A run that crashed after recording replays the recorded response
without sending again; one that crashed before recording (outcome unknown)
sends again with the same key, which is what the key is for.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import TYPE_CHECKING
from urllib.parse import quote

from stores.records import EffectStatus, Frame, JsonObject, JsonValue

from agent_runtime.config import WebhookPolicy
from agent_runtime.errors import StepFailed
from agent_runtime.excerpts import excerpt
from agent_runtime.http_retry import Backoff, retry_after_seconds, status_retryable
from agent_runtime.js_json import js_json
from agent_runtime.manifest import WebhookStep, header_name_problem, header_value_problem
from agent_runtime.serde import json_value
from agent_runtime.steps.webhook_destinations import (
    Destination,
    destination_refusal,
    host_allowed,
    resolve_destination,
)

if TYPE_CHECKING:
    import httpx

    from agent_runtime.execution import Execution

DEFAULT_METHOD = "POST"
DEFAULT_TIMEOUT_MS = 10_000
DEFAULT_RETRIES = 2
# The shared retry rules (agent_runtime.http_retry) with a webhook's numbers:
# a receiver gets longer to recover than a model provider.
WEBHOOK_BACKOFF = Backoff(base_delay=0.5, max_delay=30.0, max_retry_after=60.0)
USER_AGENT = "agent-runtime/0.1"

__all__ = ["WEBHOOK_BACKOFF", "WebhookStepExecutor", "destination_refusal", "host_allowed",
           "resolve_destination"]


# -- delivery ------------------------------------------------------------------


class _TooLarge(Exception):
    pass


async def _send(client: httpx.AsyncClient, destination: Destination, method: str, url: str, *,
                headers: dict[str, str], content: bytes | None) -> httpx.Response:
    """Send to the first checked address that accepts the connection; stream the answer."""
    import httpx  # noqa: PLC0415 - loaded by the first webhook, not with the engine

    extensions = {"sni_hostname": destination.host} if destination.scheme == "https" else {}
    refused: httpx.ConnectError | None = None
    for address in destination.addresses:
        request = client.build_request(method, httpx.URL(url).copy_with(host=address),
                                       headers=headers, content=content, extensions=extensions)
        try:
            return await client.send(request, stream=True)
        except httpx.ConnectError as error:
            refused = error
    assert refused is not None  # a destination has at least one address
    raise refused


def _without_addresses(text: str, destination: Destination) -> str:
    """A transport error's text with the addresses the host resolved to named by the
    host instead: the resolved addresses are the server's network, not the tenant's."""
    for address in destination.addresses:
        text = text.replace(address, destination.host)
    return text


def _header_text(key: str) -> str:
    """The key as a header value: a character HTTP cannot carry (a step id's
    non-ASCII letter) is percent-encoded as UTF-8; ASCII keys are unchanged."""
    return "".join(char if " " <= char <= "~" else quote(char, safe="", errors="surrogatepass")
                   for char in key).strip(" ")


def _request_headers(step: WebhookStep, key: str, destination: Destination) -> dict[str, str]:
    """The request's headers; `StepFailed` for one HTTP cannot carry (the manifest
    refuses them, so only a step built around its validation gets here)."""
    # Ours win over declared ones of the same name, whatever their case.
    reserved = {"idempotency-key", "host"}
    headers = {"User-Agent": USER_AGENT}
    for name, value in (step.headers or {}).items():
        if name.lower() not in reserved:
            headers = {k: v for k, v in headers.items() if k.lower() != name.lower()}
            headers[name] = value
    if step.has_body and not any(name.lower() == "content-type" for name in headers):
        headers["Content-Type"] = "application/json"
    headers["Idempotency-Key"] = _header_text(key)
    default_port = 443 if destination.scheme == "https" else 80
    host = f"[{destination.host}]" if ":" in destination.host else destination.host
    port = destination.port
    headers["Host"] = host if port is None or port == default_port else f"{host}:{port}"
    for name, value in headers.items():
        problem = header_name_problem(name) or header_value_problem(value)
        if problem is not None:
            raise StepFailed("webhook_invalid_header",
                             f"webhook header {excerpt(name)}: {problem}")
    return headers


async def _read_capped(response: httpx.Response, cap: int) -> bytes:
    declared = response.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > cap:
        raise _TooLarge()
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body.extend(chunk)
        if len(body) > cap:
            raise _TooLarge()
    return bytes(body)


class _NotJson(Exception):
    """A response that says it is JSON and is not."""


def _decode_body(response: httpx.Response, raw: bytes) -> JsonValue:
    if not raw:
        return None
    text = raw.decode(response.encoding or "utf-8", errors="replace")
    if "json" in response.headers.get("content-type", "").lower():
        try:
            parsed: JsonValue = json.loads(text)
            return parsed
        except ValueError as error:
            raise _NotJson(str(error)) from error
    return text


def _size(cap: int) -> str:
    return f"{cap // (1024 * 1024)} MiB" if cap % (1024 * 1024) == 0 else f"{cap} bytes"


class WebhookStepExecutor:
    async def execute(self, step: WebhookStep, frame: Frame, ctx: Execution,
                      resume: list[Frame]) -> JsonValue:
        policy = ctx.webhook_policy
        key = step.idempotency_key or f"{ctx.run_id}:{frame.step_path}"
        # Checked before the effect is reserved: a refused webhook sent nothing.
        destination = await ctx.bounded(resolve_destination(step.url, policy),
                                        "webhook's address lookup", step_path=frame.step_path)
        headers = _request_headers(step, key, destination)
        ctx.check_interrupt(before="webhook")
        # Too late in the slice: end it before the effect is reserved.
        ctx.slice.require_room("webhook", step_path=frame.step_path)
        effect = await ctx.begin_effect(key)
        if effect.status is EffectStatus.COMPLETED:
            # Delivered and recorded by an earlier attempt that died before its checkpoint.
            recorded: JsonObject = effect.result
            ctx.events.emit("webhook.completed", step_id=step.id, step_path=frame.step_path,
                            status=recorded.get("status",
                                                (recorded.get("error") or {}).get("status")),
                            replayed=True)
            return self._settled(recorded, frame)
        started = time.monotonic()
        # Cut by the slice's end, it is sent again by the next slice with the
        # same Idempotency-Key, which the receiver deduplicates.
        result, attempts = await ctx.bounded(self._deliver(step, frame, ctx, destination,
                                                           headers=headers, policy=policy),
                                             "webhook", step_path=frame.step_path)
        await ctx.complete_effect(key, result)
        duration_ms = round((time.monotonic() - started) * 1000)
        if "error" in result:
            ctx.events.emit("webhook.failed", step_id=step.id, step_path=frame.step_path,
                            status=result["error"].get("status"),
                            error_type=result["error"]["type"], attempts=attempts,
                            duration_ms=duration_ms)
        else:
            ctx.events.emit("webhook.completed", step_id=step.id, step_path=frame.step_path,
                            status=result["status"], attempts=attempts,
                            duration_ms=duration_ms)
        return self._settled(result, frame)

    @staticmethod
    def _settled(result: JsonObject, frame: Frame) -> JsonValue:
        if "error" in result:
            error = result["error"]
            details = {"status": error["status"]} if error.get("status") is not None else {}
            raise StepFailed(error["type"], f"step {frame.step_path}: {error['message']}",
                             details)
        output: JsonValue = result["output"]
        return output

    async def _deliver(self, step: WebhookStep, frame: Frame, ctx: Execution,
                       destination: Destination,
                       *, headers: dict[str, str],
                       policy: WebhookPolicy) -> tuple[JsonObject, int]:
        """Send until an answer that is not retried; return the ledger result and the
        number of requests sent."""
        method = step.method or DEFAULT_METHOD
        timeout_ms = step.timeout_ms or DEFAULT_TIMEOUT_MS
        attempts = (DEFAULT_RETRIES if step.retries is None else step.retries) + 1
        # The bytes the reference sends (JSON.stringify), so a receiver that signs
        # or hashes the body sees the same ones.
        content = js_json(step.body).encode() if step.has_body else None
        cap = policy.max_response_bytes
        ctx.events.emit("webhook.started", step_id=step.id, step_path=frame.step_path,
                        method=method, host=destination.host)
        import httpx  # noqa: PLC0415 - loaded by the first webhook, not with the engine

        async with httpx.AsyncClient(timeout=timeout_ms / 1000, follow_redirects=False,
                                     trust_env=False) as client:
            for attempt in range(1, attempts + 1):
                retry_after: float | None = None
                try:
                    response = await _send(client, destination, method, step.url,
                                           headers=headers, content=content)
                    try:
                        raw = await _read_capped(response, cap)
                    finally:
                        await response.aclose()
                except _TooLarge:
                    return {"error": {"type": "webhook_response_too_large",
                                      "status": response.status_code,
                                      "message": f"the webhook response exceeds the "
                                                 f"{_size(cap)} response cap "
                                                 "(webhooks.maxResponseBytes)"}}, attempt
                except httpx.TransportError as error:
                    failure: JsonObject = {
                        "type": "webhook_unreachable",
                        "message": f"{method} {destination.host} failed after {attempt} "
                                   f"request(s): {type(error).__name__}: "
                                   f"{_without_addresses(str(error), destination)}"}
                    reason = type(error).__name__
                else:
                    status = response.status_code
                    if 200 <= status <= 299:
                        try:
                            body = _decode_body(response, raw)
                        except _NotJson as error:
                            return {"error": {"type": "webhook_invalid_json", "status": status,
                                              "message": f"{method} {destination.host} answered "
                                                         f"{status} with a body that says JSON "
                                                         f"and is not: {error}"}}, attempt
                        return {"output": json_value(body, what="webhook response"),
                                "status": status}, attempt
                    failure = {"type": "webhook_failed", "status": status,
                               "message": f"{method} {destination.host} answered {status} "
                                          f"after {attempt} request(s)"
                                          + (" (redirects are not followed)"
                                             if 300 <= status <= 399 else "")}
                    if not status_retryable(status):
                        return {"error": failure}, attempt
                    reason = str(status)
                    retry_after = retry_after_seconds(response.headers)
                if attempt == attempts:
                    return {"error": failure}, attempt
                delay = WEBHOOK_BACKOFF.delay(attempt, retry_after)
                if delay is None:
                    refusal = WEBHOOK_BACKOFF.refusal(retry_after or 0.0)
                    return {"error": {**failure,
                                      "message": f"{failure['message']} ({refusal})"}}, attempt
                ctx.events.emit("webhook.retried", step_id=step.id, step_path=frame.step_path,
                                attempt=attempt, status=failure.get("status"),
                                error_type=None if "status" in failure else reason,
                                delay_ms=round(delay * 1000))
                await asyncio.sleep(delay)
        raise AssertionError("unreachable: the last attempt returns")
