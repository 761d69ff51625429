"""The `openai` and `openai-compatible` drivers: Chat Completions through the
official `openai` SDK (`AsyncOpenAI`).

`openai-compatible` is the same API at another `baseURL` (Ollama, vLLM, LM
Studio, a gateway). It sends a key only when its `providers` entry names one,
and never falls back to `OPENAI_API_KEY`, so an OpenAI key is not sent to a
third-party server.

- Streaming: when the request asks for it (`ModelRequest.stream`: the model
  profile's `capabilities.streaming`, else whether someone watches the text
  live), with `stream_options.include_usage` so usage still arrives; a server
  that rejects `stream_options` is configured with `includeUsage: false`.
- Structured output: `response_format: json_schema` (strict when the schema
  allows OpenAI's strict mode) when the provider supports it —
  `supportsStructuredOutputs`, default true for `openai`, false for
  `openai-compatible` — else an instruction in the system prompt and the
  answer text parsed as JSON.
- Retries: `agent_runtime.models.retry` (the SDK's own are off).
- One SDK client per event loop, shared by the calls in flight on it and
  closed by the last (`loop_clients.LoopClients`): overlapping calls reuse its
  keep-alive connections, and no pooled connection outlives its loop.
- Other services that speak Chat Completions (the `xai` and `groq` drivers)
  subclass `OpenAIChatModel` and set what differs as class attributes: the
  default endpoint, whether structured outputs are on by default, the
  maximum-tokens field, and where a streamed answer's usage arrives.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, ClassVar

import openai
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from agent_runtime.config import RuntimeConfig
from agent_runtime.excerpts import excerpt
from agent_runtime.models.base import (
    ModelError,
    ModelRequest,
    ModelResponse,
    ToolCallRequest,
    Usage,
)
from agent_runtime.models.conversation import (
    WRAPPED_ANSWER,
    finish_reason,
    message_text,
    output_tool_schema,
    parse_json_answer,
    part_text,
    parts,
    schema_instruction,
    tool_arguments,
    tool_result_text,
)
from agent_runtime.models.loop_clients import LoopClients, tls_context, uncapped
from agent_runtime.models.provider_settings import ProviderSettings, provider_settings
from agent_runtime.models.retry import RetryPolicy, SdkDriver, SdkErrors, TextRelay

DEFAULT_KEY_ENV = "OPENAI_API_KEY"
# The SDK insists on a key; a local server without auth ignores this one.
NO_KEY = "no-key"
# Manifest options (camelCase, as the reference implementation) -> request fields.
_OPTIONS = {"temperature": "temperature", "topP": "top_p", "seed": "seed",
            "stopSequences": "stop", "frequencyPenalty": "frequency_penalty",
            "presencePenalty": "presence_penalty"}


def create_adapter(provider: str, config: RuntimeConfig, *,
                   retry: RetryPolicy | None = None) -> OpenAIChatModel:
    if config.driver_of(provider) == "openai-compatible":
        return OpenAICompatibleChatModel(provider_settings(provider, config), retry=retry)
    return OpenAIChatModel(provider_settings(provider, config, key_env=DEFAULT_KEY_ENV),
                           retry=retry)


class OpenAIChatModel(SdkDriver[openai.AsyncOpenAI]):
    errors = SdkErrors(timeout=openai.APITimeoutError, connection=openai.APIConnectionError,
                       status=openai.APIStatusError, base=openai.OpenAIError)
    service = "the OpenAI API"
    # The endpoint without a `baseURL`; None: the SDK's own (OpenAI's).
    default_base_url: ClassVar[str | None] = None
    # `response_format: json_schema` unless `supportsStructuredOutputs` says otherwise.
    structured_outputs_default: ClassVar[bool] = True
    # OpenAI's reasoning models refuse `max_tokens`; many other servers know only it.
    max_tokens_field: ClassVar[str] = "max_completion_tokens"

    def __init__(self, settings: ProviderSettings, *, retry: RetryPolicy | None = None) -> None:
        super().__init__(settings, retry=retry)
        structured = settings.supports_structured_outputs
        self.structured_outputs = (self.structured_outputs_default if structured is None
                                   else structured)
        self.include_usage = True if settings.include_usage is None else settings.include_usage
        self._clients = LoopClients(self._new_client)

    def _open_client(self, request: ModelRequest,
                     ) -> AbstractAsyncContextManager[openai.AsyncOpenAI]:
        return self._clients.lease()

    def _new_client(self) -> openai.AsyncOpenAI:
        # Our retries govern (models/retry.py), so the SDK's own are off. The
        # SDK's own HTTP client settings, with the process's TLS context and
        # no cap on connections.
        return openai.AsyncOpenAI(api_key=self.settings.api_key or NO_KEY,
                                  base_url=self.settings.base_url or self.default_base_url,
                                  max_retries=0, default_headers=self.settings.headers or None,
                                  http_client=openai.DefaultAsyncHttpxClient(
                                      verify=tls_context(),
                                      limits=uncapped(openai.DEFAULT_CONNECTION_LIMITS)))

    def _stream_usage(self, chunk: Any) -> Any:
        """The usage a streamed chunk carries, if any (the last one, with `include_usage`)."""
        return chunk.usage

    # -- request ---------------------------------------------------------------

    def _params(self, request: ModelRequest) -> tuple[dict[str, Any], bool]:
        messages = _messages(request.messages)
        params: dict[str, Any] = {"model": request.model, "messages": messages}
        if request.tools:
            params["tools"] = [{"type": "function", "function": {
                "name": tool.name, "description": tool.description,
                "parameters": tool.parameters}} for tool in request.tools]
        schema = request.output_schema
        wrapped = False
        if schema is not None and self.structured_outputs:
            # The root of a response format must be an object.
            schema, wrapped = output_tool_schema(schema)
            if wrapped:
                schema = {**schema, "additionalProperties": False}
            params["response_format"] = {"type": "json_schema", "json_schema": {
                "name": "output", "schema": schema, "strict": _strict_compatible(schema)}}
        elif schema is not None:
            _instruct(messages, schema_instruction(schema))
        extra: dict[str, Any] = {}
        for key, value in request.options.items():
            if key == "maxOutputTokens":
                continue
            extra[_OPTIONS.get(key, key)] = value
        max_tokens = request.max_output_tokens or request.options.get("maxOutputTokens")
        if max_tokens is not None:
            extra[self.max_tokens_field] = max_tokens
        if extra:
            params["extra_body"] = extra
        if request.stream:
            params["stream"] = True
            if self.include_usage:
                params["stream_options"] = {"include_usage": True}
        if request.timeout_seconds is not None:
            params["timeout"] = request.timeout_seconds
        return params, wrapped

    # -- response --------------------------------------------------------------

    async def _call(self, client: openai.AsyncOpenAI, params: dict[str, Any],
                    request: ModelRequest, relay: TextRelay, *, wrapped: bool) -> ModelResponse:
        if request.stream:
            return await self._streamed(client, params, request, relay, wrapped=wrapped)
        completion: Any = await _create(client, params)
        if not completion.choices:
            raise ModelError("empty_response", "the provider returned no choices")
        choice = completion.choices[0]
        message = choice.message
        if getattr(message, "refusal", None) and not message.content:
            raise ModelError("refusal", f"the model refused: {excerpt(message.refusal)}")
        calls = [(call.id, call.function.name, call.function.arguments)
                 for call in message.tool_calls or [] if getattr(call, "function", None)]
        _relay_reasoning(request, message)
        return _response(request, text=message.content, raw_calls=calls,
                         raw_finish=choice.finish_reason, usage=completion.usage,
                         model=completion.model, wrapped=wrapped)

    async def _streamed(self, client: openai.AsyncOpenAI, params: dict[str, Any],
                        request: ModelRequest, relay: TextRelay, *,
                        wrapped: bool) -> ModelResponse:
        text: list[str] = []
        slots: dict[int, dict[str, str]] = {}
        finish: str | None = None
        usage: Any = None
        model: str | None = None
        stream: Any = await _create(client, params)
        async with stream:
            async for chunk in stream:
                model = chunk.model or model
                usage = self._stream_usage(chunk) or usage
                for choice in chunk.choices or []:
                    delta = choice.delta
                    _relay_reasoning(request, delta)
                    if delta is not None and delta.content:
                        text.append(delta.content)
                        relay(delta.content)
                    for call in (delta.tool_calls if delta is not None else None) or []:
                        index = call.index if call.index is not None else len(slots)
                        slot = slots.setdefault(index, {"id": "", "name": "", "arguments": ""})
                        slot["id"] = call.id or slot["id"]
                        if call.function is not None:
                            slot["name"] = slot["name"] or call.function.name or ""
                            slot["arguments"] += call.function.arguments or ""
                    finish = choice.finish_reason or finish
        calls = [(slot["id"], slot["name"], slot["arguments"])
                 for _, slot in sorted(slots.items())]
        return _response(request, text="".join(text) or None, raw_calls=calls,
                         raw_finish=finish, usage=usage, model=model, wrapped=wrapped)


async def _create(client: openai.AsyncOpenAI, params: dict[str, Any]) -> Any:
    """`client.chat.completions.create(**params)`, less the SDK's typed transform of
    the request. Our parameters are plain JSON already; the transform walks every
    message of the conversation against the SDK's TypedDicts and changes nothing
    in them, and on a busy `serve` it held the interpreter a fifth of the time
    (sampled with 1,000 runs waiting on models). The SDK's own request path
    otherwise: its auth, headers, errors and response types. `extra_body` wins
    over the named fields, as in `create`."""
    body = dict(params)
    extra = body.pop("extra_body", None)
    timeout = body.pop("timeout", None)
    if extra:
        body.update(extra)
    options: Any = {} if timeout is None else {"timeout": timeout}
    return await client.post("/chat/completions", body=body, options=options,
                             cast_to=ChatCompletion, stream=bool(body.get("stream")),
                             stream_cls=openai.AsyncStream[ChatCompletionChunk])


def _relay_reasoning(request: ModelRequest, message: Any) -> None:
    """Reasoning a chat completion carries beside its content: `reasoning_content`
    (DeepSeek, xAI, vLLM) or `reasoning` (Groq, OpenRouter); OpenAI's own keeps it."""
    if request.on_reasoning is None or message is None:
        return
    for name in ("reasoning_content", "reasoning"):
        text = getattr(message, name, None)
        if isinstance(text, str) and text:
            request.on_reasoning(text)
            return


class OpenAICompatibleChatModel(OpenAIChatModel):
    """`openai-compatible`: a key only when its entry names one (never
    `OPENAI_API_KEY`), structured outputs only when `supportsStructuredOutputs`
    says so, and `max_tokens`, which every compatible server knows."""

    service = "the OpenAI-compatible server"
    structured_outputs_default = False
    max_tokens_field = "max_tokens"

def _response(request: ModelRequest, *, text: str | None,
              raw_calls: Sequence[tuple[str, str, str | None]], raw_finish: str | None,
              usage: Any, model: str | None, wrapped: bool) -> ModelResponse:
    calls = [ToolCallRequest(call_id=call_id or f"call_{index}", name=name,
                             arguments=tool_arguments(arguments, tool=name))
             for index, (call_id, name, arguments) in enumerate(raw_calls)]
    data = None
    if request.output_schema is not None and not calls:
        data = parse_json_answer(text)
        if wrapped and isinstance(data, dict):
            data = data.get(WRAPPED_ANSWER)
            text = json.dumps(data, ensure_ascii=False)
    return ModelResponse(text=text, data=data, tool_calls=calls, usage=_usage(usage),
                         finish_reason=finish_reason(raw_finish, tool_calls=bool(calls)),
                         model=model)


def _usage(usage: Any) -> Usage | None:
    if usage is None:
        return None
    return Usage(input_tokens=getattr(usage, "prompt_tokens", None),
                 output_tokens=getattr(usage, "completion_tokens", None),
                 total_tokens=getattr(usage, "total_tokens", None))


def _messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    mapped: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if role in ("system", "user"):
            mapped.append({"role": role, "content": message_text(message, driver="openai")})
            continue
        text: list[str] = []
        calls: list[dict[str, Any]] = []
        results: list[dict[str, Any]] = []
        for part in parts(message, driver="openai"):
            if part["type"] == "tool-call":
                call = part["call"]
                arguments = json.dumps(call.get("input") or {}, ensure_ascii=False)
                calls.append({"id": call["id"], "type": "function",
                              "function": {"name": call["name"], "arguments": arguments}})
            elif part["type"] == "tool-result":
                result = part["result"]
                results.append({"role": "tool", "tool_call_id": result["callId"],
                                "content": tool_result_text(result)})
            else:
                text.append(part_text(part))
        if role == "assistant" and (text or calls):
            entry: dict[str, Any] = {"role": "assistant", "content": "\n".join(text) or None}
            if calls:
                entry["tool_calls"] = calls
            mapped.append(entry)
        mapped.extend(results)
    return mapped


def _instruct(messages: list[dict[str, Any]], instruction: str) -> None:
    """Add the structured-output instruction to the system prompt (many
    compatible servers accept one system message, and only first)."""
    if messages and messages[0]["role"] == "system":
        messages[0]["content"] = f"{messages[0]['content']}\n\n{instruction}".strip()
    else:
        messages.insert(0, {"role": "system", "content": instruction})


def _strict_compatible(schema: Any) -> bool:
    """Whether OpenAI's strict mode accepts `schema`: every object closed
    (`additionalProperties: false`) with all its properties required. Strict
    mode rejects any other schema, so a looser one is sent non-strict."""
    if isinstance(schema, list):
        return all(_strict_compatible(item) for item in schema)
    if not isinstance(schema, dict):
        return True
    if schema.get("type") == "object" or "properties" in schema:
        properties = schema.get("properties", {})
        if schema.get("additionalProperties") is not False \
                or set(schema.get("required", [])) != set(properties):
            return False
    children: list[Any] = []
    for key in ("properties", "$defs", "definitions"):
        children.extend((schema.get(key) or {}).values())
    for key in ("items", "anyOf", "allOf", "oneOf", "prefixItems"):
        if key in schema:
            children.append(schema[key])
    return all(_strict_compatible(child) for child in children)
