"""How a provider driver calls its provider: bounded retries, Retry-After, timeouts.

Every driver makes its calls through `call_with_retries` (a driver that calls
through an SDK turns the SDK's own retries off), so one policy governs every
provider: at most `RetryPolicy.attempts` tries; a retry only for a `ModelError`
marked retryable (the statuses of `agent_runtime.http_retry` and connection
failures), after the wait that module's rules give (the provider's own
`Retry-After`, else backoff with jitter; one asking too long fails the call).

`timeout_seconds` bounds each try as a whole, streaming included (a server
that trickles bytes cannot outlast it). A timeout is not retried: the limit is
the user's (`limits.providerTimeoutMs`) and repeating the call would multiply
it. Nor is a call whose text was already shown through `on_text`: a repeat
would show the text twice.
"""

from __future__ import annotations

import asyncio
import re
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import httpx

from agent_runtime.excerpts import excerpt
from agent_runtime.http_retry import Backoff, retry_after_seconds, status_retryable
from agent_runtime.models.base import ModelError, ModelRequest, ModelResponse, TextListener
from agent_runtime.models.provider_settings import ProviderSettings

T = TypeVar("T")
ClientT = TypeVar("ClientT")

# A provider's error code as it may appear in messages and run errors: a short
# identifier. Anything else (a server of any kind answers OpenAI-compatible
# calls) is not repeated; the HTTP status stands in for it.
_PROVIDER_CODE = re.compile(r"[A-Za-z0-9_.:-]{1,64}")


@dataclass(frozen=True)
class RetryPolicy(Backoff):
    """The shared backoff numbers for provider calls, with how many tries and how to wait."""

    attempts: int = 4
    sleep: Callable[[float], Awaitable[None]] = field(default=asyncio.sleep, compare=False)


class TextRelay:
    """Passes text deltas on to the listener and remembers whether any went out."""

    def __init__(self, listener: TextListener | None) -> None:
        self._listener = listener
        self.sent = False

    def __call__(self, delta: str) -> None:
        if not delta:
            return
        self.sent = True
        if self._listener is not None:
            self._listener(delta)


async def call_with_retries(call: Callable[[], Awaitable[T]], *, policy: RetryPolicy,
                            timeout_seconds: float | None, relay: TextRelay,
                            translate: Callable[[Exception], ModelError | None]) -> T:
    """Run `call` until it succeeds, under `policy`.

    `translate` turns a client's exception into a `ModelError` (None: not a provider
    failure, so it propagates unchanged, as a bug of ours should). Raises the
    last `ModelError`; its message says how many attempts were made.
    """
    for attempt in range(1, policy.attempts + 1):
        try:
            async with asyncio.timeout(timeout_seconds):
                return await call()
        except ModelError as error:
            failure = error
        except TimeoutError:
            failure = timeout_error(timeout_seconds)
        except Exception as error:
            translated = translate(error)
            if translated is None:
                raise
            failure = translated
        if not failure.retryable or relay.sent or attempt == policy.attempts:
            if attempt > 1:
                raise ModelError(failure.code, f"{failure} (after {attempt} attempts)",
                                 retryable=failure.retryable,
                                 retry_after=failure.retry_after) from failure
            raise failure
        wait = policy.delay(attempt, failure.retry_after)
        if wait is None:
            asked = policy.refusal(failure.retry_after or 0.0, asker="the provider")
            raise ModelError(failure.code, f"{failure} ({asked})", retryable=True,
                             retry_after=failure.retry_after) from failure
        await policy.sleep(wait)
    raise AssertionError("unreachable: the last attempt returns or raises")


def timeout_error(timeout_seconds: float | None) -> ModelError:
    limit = "the time limit" if timeout_seconds is None else f"{timeout_seconds:g}s"
    return ModelError("timeout", f"no complete response within {limit} "
                      "(limits.providerTimeoutMs)")


def unreachable(where: str, reason: str, *, retryable: bool = True) -> ModelError:
    """The provider could not be reached (`connection_error`), naming where and why:
    retried unless trying again cannot change it (a certificate that fails)."""
    return ModelError("connection_error", f"cannot reach {where}: {reason}",
                      retryable=retryable)


def _no_answer() -> ModelError:
    """A transport's own timeout, as httpx raises it."""
    return ModelError("timeout", "the provider did not answer in time "
                      "(limits.providerTimeoutMs)")


def error_body_details(body: Any) -> tuple[str | None, str | None]:
    """`(code, message)` of an error body in the shapes providers use: OpenAI's
    `{"error": {message, type, code}}` (or that inner object alone), Anthropic's
    `{"type": "error", "error": {type, message}}`, `{"error": "text"}`,
    `{"message": ...}`, `{"detail": ...}`, or plain text."""
    if isinstance(body, str):
        return None, body.strip() or None
    if not isinstance(body, dict):
        return None, None
    inner = body.get("error", body)
    if isinstance(inner, str):
        return None, inner
    if not isinstance(inner, dict):
        return None, None
    code = inner.get("code") or inner.get("type")
    message = inner.get("message") or inner.get("detail") or body.get("detail")
    if code == "error":  # Anthropic's outer envelope type, not a cause
        code = None
    return (None if code is None else str(code),
            None if message is None else str(message))


def http_error(status: int, *, headers: Mapping[str, str] | None, code: str | None,
               message: str | None) -> ModelError:
    """The `ModelError` of an HTTP error response: the provider's code (else
    `http_<status>`), an excerpt of its message (an error body can echo the
    prompt, or be a whole HTML page), retryable for throttling and server
    errors."""
    if code is None or not _PROVIDER_CODE.fullmatch(code):
        code = f"http_{status}"
    text = f"HTTP {status} {code}: {excerpt(message)}" if message else f"HTTP {status} {code}"
    return ModelError(code, text, retryable=status_retryable(status),
                      retry_after=retry_after_seconds(headers))


class ClientDriver(ABC, Generic[ClientT]):
    """A provider driver that calls through a client (`chat_http`'s, an SDK's, or
    boto3's): one call per `generate`, under the shared retries, with a
    non-streamed answer handed to the text listener whole. A driver supplies the
    client, the request parameters, the call and the translation of its client's
    errors."""

    def __init__(self, settings: ProviderSettings, *, retry: RetryPolicy | None) -> None:
        self.settings = settings
        self.retry = retry or RetryPolicy()

    @abstractmethod
    def _open_client(self, request: ModelRequest) -> AbstractAsyncContextManager[ClientT]:
        """A client for this request's call, closed after it (if it needs closing)."""

    @abstractmethod
    def _params(self, request: ModelRequest) -> tuple[dict[str, Any], bool]:
        """The provider's request parameters, and whether a structured answer is
        wrapped (`conversation.output_tool_schema`)."""

    @abstractmethod
    async def _call(self, client: ClientT, params: dict[str, Any], request: ModelRequest,
                    relay: TextRelay, *, wrapped: bool) -> ModelResponse:
        """One try of the call; streamed text goes through `relay`."""

    @abstractmethod
    def _translate(self, error: Exception) -> ModelError | None:
        """A client's exception as a `ModelError`; None: not the provider's failure."""

    async def generate(self, request: ModelRequest, *,
                       on_text: TextListener | None = None) -> ModelResponse:
        params, wrapped = self._params(request)
        relay = TextRelay(on_text)
        async with self._open_client(request) as client:
            response = await call_with_retries(
                lambda: self._call(client, params, request, relay, wrapped=wrapped),
                policy=self.retry, timeout_seconds=request.timeout_seconds, relay=relay,
                translate=self._translate)
        if not request.stream and response.text and not response.tool_calls:
            relay(response.text)
        return response


def translate_httpx_error(error: Exception, *, where: str) -> ModelError | None:
    """An httpx exception as a `ModelError`, for drivers whose SDK lets httpx's
    own exceptions through (google-genai and cohere, given the driver's client);
    None: not a transport failure."""
    if isinstance(error, httpx.TimeoutException):
        return _no_answer()
    if isinstance(error, httpx.TransportError):
        return unreachable(where, excerpt(str(error)))
    return None
