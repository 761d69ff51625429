"""The `anthropic` driver: the Messages API through the official `anthropic`
SDK (`AsyncAnthropic`).

- The key is `ANTHROPIC_API_KEY` (or the variable `apiKey: {env}` names),
  passed explicitly, so the SDK never looks for other credentials.
- System messages become the separate `system` prompt; tool calls and
  results are `tool_use` / `tool_result` blocks, consecutive turns of one role
  are joined (the API wants user and assistant turns to alternate).
- Streaming: `messages.stream` when the request asks for it
  (`ModelRequest.stream`); text deltas, and the JSON of a structured answer,
  reach `on_text` as they arrive; the final message gives usage.
- Structured output: by default a forced "answer" tool whose input schema is
  the step's `outputSchema` (`tool_choice` names it; with the step's own
  tools too, `tool_choice: any`, so the model calls a tool or answers) —
  it works on every tool-capable Claude model. `supportsStructuredOutputs:
  true` on the provider uses the API's native `output_config.format`
  instead.
- `max_tokens` is required by the API: the step's `maxOutputTokens`, else the
  `maxOutputTokens` option, else `DEFAULT_MAX_TOKENS`.
- Usage: input tokens include cache reads and writes, since they are billed
  and count against a run's budget.
- Retries: `agent_runtime.models.retry` (the SDK's own are off). One SDK client
  per model call, as in the OpenAI driver.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic

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
    OUTPUT_TOOL_DESCRIPTION,
    finish_reason,
    merge_consecutive,
    output_tool_schema,
    parse_json_answer,
    part_text,
    parts,
    split_output_call,
    split_system,
    tool_result_failed,
    tool_result_text,
)
from agent_runtime.models.provider_settings import ProviderSettings, provider_settings
from agent_runtime.models.retry import (
    RetryPolicy,
    SdkErrors,
    TextRelay,
    generate_with_client,
    translate_sdk_error,
)

DEFAULT_KEY_ENV = "ANTHROPIC_API_KEY"
DEFAULT_MAX_TOKENS = 4096
_OPTIONS = {"temperature": "temperature", "topP": "top_p", "topK": "top_k",
            "stopSequences": "stop_sequences"}


def create_adapter(provider: str, config: RuntimeConfig, *,
                   retry: RetryPolicy | None = None) -> AnthropicModel:
    return AnthropicModel(provider_settings(provider, config, key_env=DEFAULT_KEY_ENV),
                          retry=retry)


_ERRORS = SdkErrors(timeout=anthropic.APITimeoutError, connection=anthropic.APIConnectionError,
                    status=anthropic.APIStatusError, base=anthropic.AnthropicError)

class AnthropicModel:
    def __init__(self, settings: ProviderSettings, *, retry: RetryPolicy | None = None) -> None:
        self.settings = settings
        self.retry = retry or RetryPolicy()
        self.native_structured_output = bool(settings.supports_structured_outputs)

    def _client(self) -> anthropic.AsyncAnthropic:
        return anthropic.AsyncAnthropic(api_key=self.settings.api_key,
                                        base_url=self.settings.base_url, max_retries=0,
                                        default_headers=self.settings.headers or None)

    async def generate(self, request: ModelRequest, *,
                       on_text: TextListener | None = None) -> ModelResponse:
        params, wrapped = self._params(request)
        return await generate_with_client(
            self._client,
            lambda client, relay: self._call(client, params, request, relay, wrapped=wrapped),
            request, on_text, policy=self.retry, translate=self._translate)

    # -- request ---------------------------------------------------------------

    def _params(self, request: ModelRequest) -> tuple[dict[str, Any], bool]:
        system, messages = split_system(request.messages, driver="anthropic")
        options = dict(request.options)
        option_max = options.pop("maxOutputTokens", None)
        max_tokens = request.max_output_tokens or option_max or DEFAULT_MAX_TOKENS
        params: dict[str, Any] = {"model": request.model, "max_tokens": max_tokens,
                                  "messages": _messages(messages)}
        if system:
            params["system"] = system
        tools = [{"name": tool.name, "description": tool.description,
                  "input_schema": tool.parameters} for tool in request.tools]
        wrapped = False
        schema = request.output_schema
        if schema is not None and self.native_structured_output:
            params["output_config"] = {"format": {"type": "json_schema", "schema": schema}}
        elif schema is not None:
            if any(tool["name"] == OUTPUT_TOOL for tool in tools):
                raise ModelError("tool_name_reserved", f"a tool named {OUTPUT_TOOL!r} clashes "
                                 "with the anthropic driver's structured-output tool")
            input_schema, wrapped = output_tool_schema(schema)
            params["tool_choice"] = ({"type": "any"} if tools
                                     else {"type": "tool", "name": OUTPUT_TOOL})
            tools.append({"name": OUTPUT_TOOL, "description": OUTPUT_TOOL_DESCRIPTION,
                          "input_schema": input_schema})
        if tools:
            params["tools"] = tools
        extra = {_OPTIONS.get(key, key): value for key, value in options.items()}
        if extra:
            params["extra_body"] = extra
        if request.timeout_seconds is not None:
            params["timeout"] = request.timeout_seconds
        return params, wrapped

    # -- response --------------------------------------------------------------

    async def _call(self, client: anthropic.AsyncAnthropic, params: dict[str, Any],
                    request: ModelRequest, relay: TextRelay, *, wrapped: bool) -> ModelResponse:
        if not request.stream:
            message: Any = await client.messages.create(**params)
            return _response(request, message, wrapped=wrapped)
        answer_blocks: set[int] = set()
        async with client.messages.stream(**params) as stream:
            async for event in stream:
                if event.type == "content_block_start" \
                        and getattr(event.content_block, "name", None) == OUTPUT_TOOL:
                    answer_blocks.add(event.index)
                elif event.type == "content_block_delta":
                    delta = event.delta
                    if delta.type == "text_delta":
                        relay(delta.text)
                    elif delta.type == "input_json_delta" and event.index in answer_blocks:
                        relay(delta.partial_json)
            final = await stream.get_final_message()
        return _response(request, final, wrapped=wrapped)

    def _translate(self, error: Exception) -> ModelError | None:
        where = self.settings.base_url or "the Anthropic API"
        return translate_sdk_error(error, _ERRORS, where=where)


def _response(request: ModelRequest, message: Any, *, wrapped: bool) -> ModelResponse:
    text: list[str] = []
    calls: list[ToolCallRequest] = []
    for block in message.content:
        if block.type == "text":
            text.append(block.text)
        elif block.type == "tool_use":
            if not isinstance(block.input, dict):
                raise ModelError("invalid_tool_call", f"the model called tool "
                                 f"{excerpt(block.name)} with arguments that are not a JSON "
                                 "object")
            calls.append(ToolCallRequest(call_id=block.id, name=block.name,
                                         arguments=dict(block.input)))
    answer_text = "".join(text) or None
    data = None
    if request.output_schema is not None:
        calls, data = split_output_call(calls, wrapped=wrapped)
        if data is not None:
            answer_text = json.dumps(data, ensure_ascii=False)
        elif not calls:
            data = parse_json_answer(answer_text)
    stop = message.stop_reason
    return ModelResponse(text=answer_text, data=data, tool_calls=calls,
                         usage=_usage(message.usage),
                         finish_reason=finish_reason(None if stop == "tool_use" and not calls
                                                     else stop, tool_calls=bool(calls)),
                         model=message.model)


def _usage(usage: Any) -> Usage | None:
    if usage is None:
        return None
    input_tokens = sum(getattr(usage, name, None) or 0 for name in (
        "input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"))
    return Usage(input_tokens=input_tokens, output_tokens=usage.output_tokens)


def _messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    mapped: list[dict[str, Any]] = []
    for message in messages:
        blocks: list[dict[str, Any]] = []
        results: list[dict[str, Any]] = []
        for part in parts(message, driver="anthropic"):
            if part["type"] == "tool-call":
                call = part["call"]
                blocks.append({"type": "tool_use", "id": call["id"], "name": call["name"],
                               "input": call.get("input") or {}})
            elif part["type"] == "tool-result":
                result = part["result"]
                results.append({"type": "tool_result", "tool_use_id": result["callId"],
                                "content": tool_result_text(result),
                                "is_error": tool_result_failed(result)})
            elif text := part_text(part):  # the API refuses empty text blocks
                blocks.append({"type": "text", "text": text})
        role = "assistant" if message.get("role") == "assistant" else "user"
        mapped.append({"role": role, "content": blocks})
        # A tool's results answer the assistant turn before: they go in the next user turn.
        mapped.append({"role": "user", "content": results})
    return merge_consecutive(mapped)
