"""The `openai` and `openai-compatible` drivers: Chat Completions over HTTP
(`chat_http.ChatCompletionsClient`).

`openai-compatible` is the same API at another `baseURL` (Ollama, vLLM, LM
Studio, a gateway). It sends a key only when its `providers` entry names one,
and never falls back to `OPENAI_API_KEY`, so an OpenAI key is not sent to a
third-party server. Only the `openai` driver reads the environment variables
of OpenAI's own clients: `OPENAI_BASE_URL` (without a `baseURL`),
`OPENAI_ORG_ID` and `OPENAI_PROJECT_ID` (its organization and project headers).

- Streaming: when the request asks for it (`ModelRequest.stream`: the model
  profile's `capabilities.streaming`, else whether someone watches the text
  live), with `stream_options.include_usage` so usage still arrives; a server
  that rejects `stream_options` is configured with `includeUsage: false`.
- Structured output: `response_format: json_schema` (strict when the schema
  allows OpenAI's strict mode) when the provider supports it —
  `supportsStructuredOutputs`, default true for `openai`, false for
  `openai-compatible` — else an instruction in the system prompt and the
  answer text parsed as JSON.
- Retries: `agent_runtime.models.retry`.
- One HTTP client per event loop, shared by the calls in flight on it and
  closed by the last (`loop_clients.LoopClients`): overlapping calls reuse its
  keep-alive connections, and no pooled connection outlives its loop.
- Other services that speak Chat Completions (the `xai` and `groq` drivers)
  subclass `OpenAIChatModel` and set what differs as class attributes: the
  default endpoint, whether structured outputs are on by default, the
  maximum-tokens field, and where a streamed answer's usage arrives.
- Answers are read as the JSON they are: a field a server leaves out, or sends
  as null, is absent (no text, no calls, no usage), never an error.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager, aclosing
from typing import Any, ClassVar

from agent_runtime.config import RuntimeConfig
from agent_runtime.excerpts import excerpt
from agent_runtime.models.answer_json import json_count, json_object, json_objects, json_text
from agent_runtime.models.base import (
    ModelError,
    ModelRequest,
    ModelResponse,
    ToolCallRequest,
    Usage,
)
from agent_runtime.models.chat_http import ChatCompletionsClient, translate_client_error
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
from agent_runtime.models.loop_clients import LoopClients
from agent_runtime.models.provider_settings import ProviderSettings, provider_settings
from agent_runtime.models.retry import ClientDriver, RetryPolicy, TextRelay

DEFAULT_KEY_ENV = "OPENAI_API_KEY"
OPENAI_ENDPOINT = "https://api.openai.com/v1"
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


class OpenAIChatModel(ClientDriver[ChatCompletionsClient]):
    service = "the OpenAI API"
    # The endpoint without a `baseURL`.
    default_base_url: ClassVar[str] = OPENAI_ENDPOINT
    # Whether OPENAI_BASE_URL, OPENAI_ORG_ID and OPENAI_PROJECT_ID apply (OpenAI's own only).
    openai_environment: ClassVar[bool] = True
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
                     ) -> AbstractAsyncContextManager[ChatCompletionsClient]:
        return self._clients.lease()

    def _new_client(self) -> ChatCompletionsClient:
        base_url = self.settings.base_url
        headers: dict[str, str] = {}
        if self.openai_environment:
            base_url = base_url or os.environ.get("OPENAI_BASE_URL")
            for header, variable in (("OpenAI-Organization", "OPENAI_ORG_ID"),
                                     ("OpenAI-Project", "OPENAI_PROJECT_ID")):
                if os.environ.get(variable):
                    headers[header] = os.environ[variable]
        headers.update(self.settings.headers)
        return ChatCompletionsClient(base_url or self.default_base_url,
                                     api_key=self.settings.api_key, headers=headers)

    def _translate(self, error: Exception) -> ModelError | None:
        return translate_client_error(error, where=self.settings.base_url or self.service)

    def _stream_usage(self, chunk: dict[str, Any]) -> Any:
        """The usage a streamed chunk carries, if any (the last one, with `include_usage`)."""
        return chunk.get("usage")

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
        if request.stream:
            params["stream"] = True
            if self.include_usage:
                params["stream_options"] = {"include_usage": True}
        # Options are passed through as they are, and win over the named fields.
        params.update(extra)
        return params, wrapped

    # -- response --------------------------------------------------------------

    async def _call(self, client: ChatCompletionsClient, params: dict[str, Any],
                    request: ModelRequest, relay: TextRelay, *, wrapped: bool) -> ModelResponse:
        if request.stream:
            return await self._streamed(client, params, request, relay, wrapped=wrapped)
        completion = await client.complete(params)
        choices = json_objects(completion.get("choices"))
        if not choices:
            raise ModelError("empty_response", "the provider returned no choices")
        choice = choices[0]
        message = json_object(choice.get("message"))
        if message.get("refusal") and not message.get("content"):
            raise ModelError("refusal", f"the model refused: {excerpt(str(message['refusal']))}")
        calls = [(json_text(call.get("id")), json_text(function.get("name")) or "",
                  function.get("arguments"))
                 for call in json_objects(message.get("tool_calls"))
                 if (function := json_object(call.get("function")))]
        _relay_reasoning(request, message)
        return _response(request, text=json_text(message.get("content")), raw_calls=calls,
                         raw_finish=json_text(choice.get("finish_reason")),
                         usage=completion.get("usage"), model=json_text(completion.get("model")),
                         wrapped=wrapped)

    async def _streamed(self, client: ChatCompletionsClient, params: dict[str, Any],
                        request: ModelRequest, relay: TextRelay, *,
                        wrapped: bool) -> ModelResponse:
        text: list[str] = []
        slots: dict[int, dict[str, str]] = {}
        finish: str | None = None
        usage: Any = None
        model: str | None = None
        async with aclosing(client.stream(params)) as chunks:
            async for chunk in chunks:
                model = json_text(chunk.get("model")) or model
                usage = self._stream_usage(chunk) or usage
                for choice in json_objects(chunk.get("choices")):
                    delta = json_object(choice.get("delta"))
                    _relay_reasoning(request, delta)
                    content = json_text(delta.get("content"))
                    if content:
                        text.append(content)
                        relay(content)
                    for call in json_objects(delta.get("tool_calls")):
                        index = call.get("index")
                        if not isinstance(index, int):
                            index = len(slots)
                        slot = slots.setdefault(index, {"id": "", "name": "", "arguments": ""})
                        slot["id"] = json_text(call.get("id")) or slot["id"]
                        function = json_object(call.get("function"))
                        slot["name"] = slot["name"] or json_text(function.get("name")) or ""
                        slot["arguments"] += json_text(function.get("arguments")) or ""
                    finish = json_text(choice.get("finish_reason")) or finish
        calls = [(slot["id"], slot["name"], slot["arguments"])
                 for _, slot in sorted(slots.items())]
        return _response(request, text="".join(text) or None, raw_calls=calls,
                         raw_finish=finish, usage=usage, model=model, wrapped=wrapped)





def _relay_reasoning(request: ModelRequest, message: dict[str, Any]) -> None:
    """Reasoning a chat completion carries beside its content: `reasoning_content`
    (DeepSeek, xAI, vLLM) or `reasoning` (Groq, OpenRouter); OpenAI's own keeps it."""
    if request.on_reasoning is None:
        return
    for name in ("reasoning_content", "reasoning"):
        text = message.get(name)
        if isinstance(text, str) and text:
            request.on_reasoning(text)
            return


class OpenAICompatibleChatModel(OpenAIChatModel):
    """`openai-compatible`: a key only when its entry names one (never
    `OPENAI_API_KEY`), structured outputs only when `supportsStructuredOutputs`
    says so, and `max_tokens`, which every compatible server knows."""

    service = "the OpenAI-compatible server"
    openai_environment = False
    structured_outputs_default = False
    max_tokens_field = "max_tokens"

def _response(request: ModelRequest, *, text: str | None,
              raw_calls: Sequence[tuple[str | None, str, Any]], raw_finish: str | None,
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
    if not isinstance(usage, dict):
        return None
    return Usage(input_tokens=json_count(usage.get("prompt_tokens")),
                 output_tokens=json_count(usage.get("completion_tokens")),
                 total_tokens=json_count(usage.get("total_tokens")))



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
