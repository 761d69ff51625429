"""JSON over HTTP on aiohttp: the one call the Chat Completions drivers
(`openai`, `openai-compatible`, `xai`, `groq`) and the `anthropic` driver make.

The drivers need one endpoint, JSON in and JSON (or server-sent events) out.
Through the providers' SDKs (`openai`, `anthropic`), a call cost ~2 ms of the
interpreter (their request options and response models over httpx, httpcore
and anyio), and on a `serve` with a thousand runs waiting on models the SDK's
request path held the interpreter a third of the time; the same call here
costs a fraction of that.

`JsonEndpointClient` is the transport, given the endpoint's full URL and the
driver's headers (its credentials among them); `ChatCompletionsClient` is it
at `{base_url}/chat/completions` with `Authorization: Bearer KEY`, and the
anthropic driver's `messages_client` (`models/anthropic.py`) at
`{base}/v1/messages` with `x-api-key`. What every call does, as the SDKs did:
- a `User-Agent`, JSON `Accept` and `Content-Type`, the driver's headers over
  them and the provider's `headers` over the driver's (names compared
  without case);
- the process's TLS context (`loop_clients.tls_context`) and the environment's
  proxy for the endpoint (`HTTPS_PROXY`, `HTTP_PROXY`, `NO_PROXY`; credentials
  in its URL), read when the client is made: aiohttp's own `trust_env` looks
  them up again in a worker thread on every request, and lets a `~/.netrc`
  entry replace the provider's key;
- a connection may take at most `CONNECT_TIMEOUT` seconds to open and a read
  may wait at most `READ_TIMEOUT` (the SDKs' defaults); the call as a whole is
  bounded by its `timeout_seconds` (`retry.call_with_retries`);
- an HTTP error status raises the provider's code and message
  (`retry.http_error`: retryable for throttling and server errors, with its
  `Retry-After`); an event of a stream that carries an `error` raises it
  (an OpenAI-style chunk's, or Anthropic's `{"type": "error", "error": ...}`);
  a body that is not a JSON object raises `invalid_response`, and so does an
  answer (or one line of a stream) over `MAX_ANSWER_BYTES`: a server that
  sends without end does not take the process's memory with it.

A transport failure propagates as aiohttp's `ClientError` for the driver to
translate (`translate_client_error`). Error bodies are read up to
`ERROR_BODY_LIMIT` bytes: only an excerpt of one is ever shown.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any

import aiohttp
import pydantic_core
from multidict import CIMultiDict
from yarl import URL

from agent_runtime import __version__
from agent_runtime.excerpts import excerpt
from agent_runtime.models.base import ModelError
from agent_runtime.models.loop_clients import tls_context
from agent_runtime.models.retry import error_body_details, http_error, unreachable

CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 600.0
ERROR_BODY_LIMIT = 64 * 1024
# A completion, or one event of a stream, is kilobytes: this is far past any.
MAX_ANSWER_BYTES = 32 * 1024 * 1024
USER_AGENT = f"agent-runtime-durable/{__version__}"
DEFAULT_HEADERS = {"User-Agent": USER_AGENT, "Accept": "application/json",
                   "Content-Type": "application/json"}


class JsonEndpointClient:
    """`POST url` with a JSON body, over one aiohttp session (its keep-alive
    connections are reused by the calls that share it; see `loop_clients`).
    `headers` go with every request, over the defaults (`DEFAULT_HEADERS`)."""

    def __init__(self, url: str, *, headers: Mapping[str, str] | None = None) -> None:
        self.url = url
        sent = CIMultiDict(DEFAULT_HEADERS)
        for name, value in (headers or {}).items():
            sent[name] = value  # replaces a default of the same name, whatever its case
        self.proxy, credentials = environment_proxy(self.url)
        # Through a tunnel (https) the proxy reads its credentials from the CONNECT;
        # a forwarded http request carries them itself (aiohttp sends `proxy_headers`
        # only with a CONNECT).
        tunnel = self.url.startswith("https:")
        self._proxy_headers = credentials if tunnel else None
        self._headers = None if tunnel else credentials
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=tls_context(), limit=0), headers=sent,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT,
                                          sock_read=READ_TIMEOUT))

    async def close(self) -> None:
        await self._session.close()

    async def complete(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """The JSON object the server answered `body` with."""
        async with self._post(body) as response:
            await _raise_for_status(response)
            return _json_object(await _bounded_body(response.content), what="the response")

    async def stream(self, body: Mapping[str, Any]) -> AsyncGenerator[dict[str, Any], None]:
        """The JSON object of each server-sent event of the answer to `body`, in
        order, until `[DONE]` or the end of the body."""
        async with self._post(body) as response:
            await _raise_for_status(response)
            async for data in _event_data(response.content):
                if data == "[DONE]":
                    return
                event = _json_object(data, what="a streamed event")
                if event.get("error"):
                    code, message = error_body_details(event)
                    raise ModelError(code or "stream_error", "the provider failed the "
                                     f"stream: {excerpt(message or json.dumps(event))}")
                yield event

    def _post(self, body: Mapping[str, Any]) -> Any:
        return self._session.post(self.url, data=_encoded(body), headers=self._headers,
                                  proxy=self.proxy, proxy_headers=self._proxy_headers)


class ChatCompletionsClient(JsonEndpointClient):
    """`POST {base_url}/chat/completions`, with `Authorization: Bearer KEY` when
    there is a key (the provider's `headers` over it)."""

    def __init__(self, base_url: str, *, api_key: str | None,
                 headers: Mapping[str, str] | None = None) -> None:
        sent = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        super().__init__(base_url.rstrip("/") + "/chat/completions",
                         headers={**sent, **(headers or {})})


def environment_proxy(url: str) -> tuple[URL | None, dict[str, str] | None]:
    """The proxy the environment names for `url` (`NO_PROXY` honoured), without the
    credentials its URL may carry, and the headers that send them to the proxy."""
    target = URL(url)
    if target.host is None or urllib.request.proxy_bypass(target.host):
        return None, None
    named = urllib.request.getproxies().get(target.scheme)
    if not named:
        return None, None
    proxy = URL(named if "://" in named else f"http://{named}")
    credentials = aiohttp.BasicAuth.from_url(proxy)
    if credentials is None:
        return proxy, None
    return proxy.with_user(None), {"Proxy-Authorization": credentials.encode()}


def translate_client_error(error: Exception, *, where: str) -> ModelError | None:
    """A transport failure (aiohttp's) as a `ModelError`; None: not one. A certificate
    that fails verification is not retried: trying again cannot change it."""
    if isinstance(error, aiohttp.ClientConnectorCertificateError):
        cause = error.certificate_error
        reason = getattr(cause, "verify_message", None) or getattr(cause, "reason", None)
        return unreachable(where, f"the certificate of {error.host} failed verification "
                                  f"({excerpt(str(reason or cause))})", retryable=False)
    if isinstance(error, aiohttp.ClientError):
        return unreachable(where, excerpt(str(error) or type(error).__name__))
    return None


def _encoded(body: Mapping[str, Any]) -> bytes:
    """The request's JSON, UTF-8: pydantic's encoder, as for checkpoints (a request
    carries the whole conversation; `json.dumps` took several times as long)."""
    return pydantic_core.to_json(body)


async def _raise_for_status(response: aiohttp.ClientResponse) -> None:
    if response.status < 400:
        return
    raw = await response.content.read(ERROR_BODY_LIMIT)
    text = raw.decode(errors="replace")
    try:
        body: Any = json.loads(text)
    except ValueError:
        body = text
    code, message = error_body_details(body)
    raise http_error(response.status, headers=response.headers, code=code,
                     message=message or response.reason)


def _json_object(raw: str | bytes, *, what: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        text = raw if isinstance(raw, str) else raw.decode(errors="replace")
        raise ModelError("invalid_response", f"{what} is not a JSON object: {excerpt(text)}")
    return value


async def _bounded_body(content: aiohttp.StreamReader) -> bytes:
    parts: list[bytes] = []
    size = 0
    async for block in content.iter_any():
        size += len(block)
        if size > MAX_ANSWER_BYTES:
            raise _too_large("the response")
        parts.append(block)
    return b"".join(parts)


def _too_large(what: str) -> ModelError:
    return ModelError("invalid_response", f"{what} is larger than {MAX_ANSWER_BYTES} bytes")


async def _event_data(content: aiohttp.StreamReader) -> AsyncIterator[str]:
    """The `data` of each server-sent event in `content` (its `data:` lines joined
    by newlines); comments and other fields are skipped. Lines are split here,
    not by the reader's `readline`, which refuses a line longer than its buffer
    (a long tool-call argument arrives as one); a block without a line's end is
    only appended, so a long line costs one split, not one per block."""
    pending = bytearray()
    data: list[str] = []
    size = 0
    async for block in content.iter_any():
        pending += block
        if b"\n" not in block:
            if len(pending) > MAX_ANSWER_BYTES:
                raise _too_large("a line of the stream")
            continue
        *lines, rest = bytes(pending).split(b"\n")
        pending = bytearray(rest)
        for line in lines:
            text = line.rstrip(b"\r").decode()
            if not text:
                if data:
                    yield "\n".join(data)
                    data, size = [], 0
            elif text.startswith("data:"):
                data.append(text[5:].removeprefix(" "))
                size += len(line)
                if size > MAX_ANSWER_BYTES:
                    raise _too_large("an event of the stream")
    last = bytes(pending).strip()
    if last.startswith(b"data:"):
        data.append(last.decode()[5:].removeprefix(" "))
    if data:
        yield "\n".join(data)
