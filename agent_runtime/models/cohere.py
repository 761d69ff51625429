"""The `cohere` driver: Cohere's v2 Chat API through the official `cohere` SDK
(`AsyncClientV2`; `pip install 'agent-runtime-durable[cohere]'`).

- The key is `COHERE_API_KEY` (or the variable `apiKey: {env}` names), passed
  explicitly, so the SDK never reads `CO_API_KEY` or `CO_API_URL`.
- `baseURL` is the API's root, with or without its version
  (`https://api.cohere.com/v2`, as the reference writes it): the SDK adds
  `/v2/chat` itself, so a trailing `/v1` or `/v2` is dropped.
- Transport: an httpx client of the driver's, one per call and closed after
  it; the SDK's own retries are off (`max_retries: 0` on every call).
- Messages map one to one (`system`, `user`, `assistant` with `tool_calls`,
  `tool` with `tool_call_id`); a tool result is sent as text. A tool plan the
  model writes before its calls is not answer text and is not shown.
- Streaming: `chat_stream` (server-sent events); text deltas reach `on_text`
  as they arrive, tool calls are assembled from their start and delta events,
  usage and the finish reason come with `message-end`.
- Structured output: by default a forced "answer" tool (`tool_choice:
  REQUIRED`; with the step's own tools, the model calls one of them or
  answers), as the anthropic driver; `supportsStructuredOutputs: true` uses
  the API's native `response_format` with the schema instead.
- Options: the generation settings in `_OPTIONS` (camelCase, as the reference
  writes them); any other is refused by name rather than dropped.
- A generation that ends with finish reason `ERROR` or `TIMEOUT` fails the
  call as retryable (the API's own failure, not the request's).
- Usage: the tokens the model processed (`usage.tokens`), else the billed
  units.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import cohere
import httpx
from cohere.core.api_error import ApiError
from cohere.core.request_options import RequestOptions

from agent_runtime.config import RuntimeConfig
from agent_runtime.excerpts import excerpt
from agent_runtime.models.base import (
    ModelError,
    ModelRequest,
    ModelResponse,
    TextListener,
    ToolCallRequest,
    Usage,
)
from agent_runtime.models.conversation import (
    OUTPUT_TOOL,
    WRAPPED_ANSWER,
    answer_tool,
    answer_tool_response,
    message_text,
    output_tool_schema,
    part_text,
    parts,
    tool_arguments,
    tool_result_text,
)
from agent_runtime.models.provider_settings import ProviderSettings, provider_settings
from agent_runtime.models.retry import (
    ClientDriver,
    RetryPolicy,
    TextRelay,
    error_body_details,
    http_error,
    translate_httpx_error,
)

DEFAULT_KEY_ENV = "COHERE_API_KEY"
DEFAULT_BASE_URL = "https://api.cohere.com"
# Without limits.providerTimeoutMs: a long answer may take minutes.
DEFAULT_TIMEOUT = 300.0
# Manifest options (camelCase, as the reference implementation) -> chat parameters.
_OPTIONS = {"temperature": "temperature", "topP": "p", "topK": "k", "seed": "seed",
            "stopSequences": "stop_sequences", "frequencyPenalty": "frequency_penalty",
            "presencePenalty": "presence_penalty", "maxOutputTokens": "max_tokens",
            "safetyMode": "safety_mode"}
_FINISH = {"COMPLETE": "stop", "STOP_SEQUENCE": "stop", "MAX_TOKENS": "length",
           "TOOL_CALL": "tool_calls"}
_FAILED = ("ERROR", "TIMEOUT")


def create_adapter(provider: str, config: RuntimeConfig, *,
                   retry: RetryPolicy | None = None) -> CohereModel:
    return CohereModel(provider_settings(provider, config, key_env=DEFAULT_KEY_ENV),
                       retry=retry)


def api_root(base_url: str | None) -> str:
    """The SDK's `base_url` for a provider's `baseURL` (the SDK adds `/v2/...`)."""
    if not base_url:
        return DEFAULT_BASE_URL
    root, _, last = base_url.rstrip("/").rpartition("/")
    return root if root and last in ("v1", "v2") else base_url.rstrip("/")


class CohereModel(ClientDriver[cohere.AsyncClientV2]):
    def __init__(self, settings: ProviderSettings, *, retry: RetryPolicy | None = None) -> None:
        super().__init__(settings, retry=retry)
        self.native_structured_output = bool(settings.supports_structured_outputs)
        self.base_url = api_root(settings.base_url)

    @asynccontextmanager
    async def _open_client(self, request: ModelRequest) -> AsyncIterator[cohere.AsyncClientV2]:
        timeout = request.timeout_seconds or DEFAULT_TIMEOUT
        async with httpx.AsyncClient(timeout=timeout,
                                     headers=self.settings.headers or None) as http:
            yield cohere.AsyncClientV2(api_key=self.settings.api_key, base_url=self.base_url,
                                       timeout=timeout, httpx_client=http)

    # -- request ---------------------------------------------------------------

    def _params(self, request: ModelRequest) -> tuple[dict[str, Any], bool]:
        params: dict[str, Any] = {"model": request.model, "messages": _messages(request.messages)}
        for key, value in request.options.items():
            name = _OPTIONS.get(key)
            if name is None:
                raise ModelError("unsupported_option",
                                 f"the cohere driver does not take the model option "
                                 f"{excerpt(key)} (it takes {', '.join(sorted(_OPTIONS))})")
            params[name] = value
        if request.max_output_tokens is not None:
            params["max_tokens"] = request.max_output_tokens
        tools = [cohere.ToolV2(type="function", function=cohere.ToolV2Function(
            name=tool.name, description=tool.description, parameters=tool.parameters))
            for tool in request.tools]
        wrapped = False
        schema = request.output_schema
        if schema is not None and self.native_structured_output:
            # The root of a response format must be an object.
            schema, wrapped = output_tool_schema(schema)
            params["response_format"] = cohere.JsonObjectResponseFormatV2(json_schema=schema)
        elif schema is not None:
            answer = answer_tool(schema, [tool.name for tool in request.tools], driver="cohere")
            wrapped = answer.wrapped
            tools.append(cohere.ToolV2(type="function", function=cohere.ToolV2Function(
                name=answer.name, description=answer.description,
                parameters=answer.input_schema)))
            params["tool_choice"] = "REQUIRED"
        if tools:
            params["tools"] = tools
        # Our retries govern (models/retry.py), so the SDK's own are off.
        options: RequestOptions = {"max_retries": 0}
        params["request_options"] = options
        return params, wrapped

    # -- response --------------------------------------------------------------

    async def _call(self, client: cohere.AsyncClientV2, params: dict[str, Any],
                    request: ModelRequest, relay: TextRelay, *, wrapped: bool) -> ModelResponse:
        if request.stream:
            answer = await _streamed(client, params, relay, request.on_reasoning)
        else:
            answer = _Answer.of(await client.chat(**params), request.on_reasoning)
        if answer.finish is not None and answer.finish in _FAILED:
            raise ModelError(f"generation_{answer.finish.lower()}",
                             "the provider ended the answer with " + (
                                 f"an error: {excerpt(answer.error)}" if answer.error
                                 else f"finish reason {answer.finish}"), retryable=True)
        calls = [ToolCallRequest(call_id=call_id or f"call_{index}", name=name,
                                 arguments=tool_arguments(arguments, tool=name))
                 for index, (call_id, name, arguments) in enumerate(answer.calls)]
        native = self.native_structured_output and request.output_schema is not None
        response = answer_tool_response(
            request, text="".join(answer.text) or None, calls=calls,
            stop=_FINISH.get(answer.finish or "", (answer.finish or "").lower() or None),
            usage=answer.usage, model=None, wrapped=wrapped and not native)
        if native and wrapped and isinstance(response.data, dict):
            response.data = response.data.get(WRAPPED_ANSWER)
            response.text = json.dumps(response.data, ensure_ascii=False)
        return response

    def _translate(self, error: Exception) -> ModelError | None:
        if isinstance(error, ApiError):
            code, message = error_body_details(error.body)
            return http_error(error.status_code or 0, headers=error.headers, code=code,
                              message=message)
        return translate_httpx_error(error, where=self.settings.base_url or "the Cohere API")


class _Answer:
    """A chat response, whole or assembled from its stream events."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: list[tuple[str | None, str, str | None]] = []
        self.finish: str | None = None
        self.error: str | None = None
        self.usage: Usage | None = None

    @classmethod
    def of(cls, response: cohere.V2ChatResponse,
           reasoning: TextListener | None = None) -> _Answer:
        answer = cls()
        answer.finish = str(response.finish_reason) if response.finish_reason else None
        message = response.message
        for item in (message.content if message else None) or []:
            if item.type == "text":
                answer.text.append(item.text)
            elif item.type == "thinking" and reasoning is not None and item.thinking:
                reasoning(item.thinking)
        for call in (message.tool_calls if message else None) or []:
            function = call.function
            answer.calls.append((call.id, (function.name if function else None) or "",
                                 function.arguments if function else None))
        answer.usage = _usage(response.usage)
        return answer


async def _streamed(client: cohere.AsyncClientV2, params: dict[str, Any],
                    relay: TextRelay, reasoning: TextListener | None) -> _Answer:
    answer = _Answer()
    slots: dict[int, dict[str, str]] = {}
    answer_slots: set[int] = set()
    async for event in client.chat_stream(**params):
        streamed: Any = event  # a union of event models; each type's fields are read below
        message = _field(streamed, "delta", "message")
        if streamed.type == "content-delta":
            text = _field(message, "content", "text")
            if isinstance(text, str) and text:
                answer.text.append(text)
                relay(text)
            thinking = _field(message, "content", "thinking")
            if isinstance(thinking, str) and thinking and reasoning is not None:
                reasoning(thinking)
        elif streamed.type == "tool-call-start":
            call = _field(message, "tool_calls")
            index = streamed.index if streamed.index is not None else len(slots)
            name = _field(call, "function", "name") or ""
            slots[index] = {"id": _field(call, "id") or "", "name": name,
                            "arguments": _field(call, "function", "arguments") or ""}
            if name == OUTPUT_TOOL:
                answer_slots.add(index)
                relay(slots[index]["arguments"])
        elif streamed.type == "tool-call-delta":
            index = streamed.index if streamed.index is not None else len(slots) - 1
            delta = _field(message, "tool_calls", "function", "arguments") or ""
            if index in slots:
                slots[index]["arguments"] += delta
            if index in answer_slots:
                relay(delta)
        elif streamed.type == "message-end":
            finish = _field(streamed, "delta", "finish_reason")
            answer.finish = str(finish) if finish else None
            answer.error = _field(streamed, "delta", "error")
            answer.usage = _usage(_field(streamed, "delta", "usage"))
    answer.calls = [(slot["id"], slot["name"], slot["arguments"])
                    for _, slot in sorted(slots.items())]
    return answer


def _field(value: Any, *names: str) -> Any:
    """`value.a.b...`, or None where a step is missing (stream events are built
    unvalidated, so any field may be absent)."""
    for name in names:
        if value is None:
            return None
        value = getattr(value, name, None)
    return value


def _usage(usage: Any) -> Usage | None:
    counts = _field(usage, "tokens") or _field(usage, "billed_units")
    if counts is None:
        return None
    input_tokens = _field(counts, "input_tokens")
    output_tokens = _field(counts, "output_tokens")
    return Usage(input_tokens=None if input_tokens is None else int(input_tokens),
                 output_tokens=None if output_tokens is None else int(output_tokens))


def _messages(messages: list[dict[str, Any]]) -> list[cohere.ChatMessageV2]:
    mapped: list[cohere.ChatMessageV2] = []
    for message in messages:
        role = message.get("role")
        if role == "system":
            mapped.append(cohere.SystemChatMessageV2(
                content=message_text(message, driver="cohere")))
            continue
        if role == "user":
            mapped.append(cohere.UserChatMessageV2(content=message_text(message, driver="cohere")))
            continue
        text: list[str] = []
        calls: list[cohere.ToolCallV2] = []
        results: list[cohere.ChatMessageV2] = []
        for part in parts(message, driver="cohere"):
            if part["type"] == "tool-call":
                call = part["call"]
                calls.append(cohere.ToolCallV2(id=call["id"], type="function",
                                               function=cohere.ToolCallV2Function(
                                                   name=call["name"],
                                                   arguments=json.dumps(call.get("input") or {},
                                                                        ensure_ascii=False))))
            elif part["type"] == "tool-result":
                result = part["result"]
                results.append(cohere.ToolChatMessageV2(tool_call_id=result["callId"],
                                                        content=tool_result_text(result)))
            else:
                text.append(part_text(part))
        if role == "assistant" and (text or calls):
            mapped.append(cohere.AssistantChatMessageV2(
                content="\n".join(text) or None, tool_calls=calls or None))
        mapped.extend(results)
    return mapped
