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
  per event loop, shared by the calls in flight there, as in the OpenAI driver
  (`loop_clients`).
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Any

import anthropic

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
    OUTPUT_TOOL,
    alternating_turns,
    answer_tool,
    answer_tool_response,
    split_system,
    tool_result_failed,
    tool_result_text,
)
from agent_runtime.models.loop_clients import LoopClients, tls_context, uncapped
from agent_runtime.models.provider_settings import ProviderSettings, provider_settings
from agent_runtime.models.retry import RetryPolicy, SdkDriver, SdkErrors, TextRelay

DEFAULT_KEY_ENV = "ANTHROPIC_API_KEY"
DEFAULT_MAX_TOKENS = 4096
_OPTIONS = {"temperature": "temperature", "topP": "top_p", "topK": "top_k",
            "stopSequences": "stop_sequences"}


def create_adapter(provider: str, config: RuntimeConfig, *,
                   retry: RetryPolicy | None = None) -> AnthropicModel:
    return AnthropicModel(provider_settings(provider, config, key_env=DEFAULT_KEY_ENV),
                          retry=retry)


class AnthropicModel(SdkDriver[anthropic.AsyncAnthropic]):
    errors = SdkErrors(timeout=anthropic.APITimeoutError, connection=anthropic.APIConnectionError,
                       status=anthropic.APIStatusError, base=anthropic.AnthropicError)
    service = "the Anthropic API"

    def __init__(self, settings: ProviderSettings, *, retry: RetryPolicy | None = None) -> None:
        super().__init__(settings, retry=retry)
        self.native_structured_output = bool(settings.supports_structured_outputs)
        self._clients = LoopClients(self._new_client)

    def _open_client(self, request: ModelRequest,
                     ) -> AbstractAsyncContextManager[anthropic.AsyncAnthropic]:
        return self._clients.lease()

    def _new_client(self) -> anthropic.AsyncAnthropic:
        # Our retries govern (models/retry.py), so the SDK's own are off. The
        # SDK's own HTTP client settings, with the process's TLS context and
        # no cap on connections.
        return anthropic.AsyncAnthropic(api_key=self.settings.api_key,
                                        base_url=self.settings.base_url, max_retries=0,
                                        default_headers=self.settings.headers or None,
                                        http_client=anthropic.DefaultAsyncHttpxClient(
                                            verify=tls_context(),
                                            limits=uncapped(anthropic.DEFAULT_CONNECTION_LIMITS)))

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
        tools: list[dict[str, Any]] = [{"name": tool.name, "description": tool.description,
                                        "input_schema": tool.parameters}
                                       for tool in request.tools]
        wrapped = False
        schema = request.output_schema
        if schema is not None and self.native_structured_output:
            params["output_config"] = {"format": {"type": "json_schema", "schema": schema}}
        elif schema is not None:
            answer = answer_tool(schema, [tool["name"] for tool in tools], driver="anthropic")
            wrapped = answer.wrapped
            params["tool_choice"] = ({"type": "tool", "name": answer.name} if answer.alone
                                     else {"type": "any"})
            tools.append({"name": answer.name, "description": answer.description,
                          "input_schema": answer.input_schema})
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
            for block in message.content:
                if block.type == "thinking" and block.thinking and request.on_reasoning:
                    request.on_reasoning(block.thinking)
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
                    elif delta.type == "thinking_delta" and request.on_reasoning is not None:
                        request.on_reasoning(delta.thinking)
                    elif delta.type == "input_json_delta" and event.index in answer_blocks:
                        relay(delta.partial_json)
            final = await stream.get_final_message()
        return _response(request, final, wrapped=wrapped)


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
    return answer_tool_response(request, text="".join(text) or None, calls=calls,
                                stop=message.stop_reason, usage=_usage(message.usage),
                                model=message.model, wrapped=wrapped)


def _usage(usage: Any) -> Usage | None:
    if usage is None:
        return None
    input_tokens = sum(getattr(usage, name, None) or 0 for name in (
        "input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"))
    return Usage(input_tokens=input_tokens, output_tokens=usage.output_tokens)


def _messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return alternating_turns(
        messages, driver="anthropic",
        call=lambda call: {"type": "tool_use", "id": call["id"], "name": call["name"],
                           "input": call.get("input") or {}},
        result=lambda result: {"type": "tool_result", "tool_use_id": result["callId"],
                               "content": tool_result_text(result),
                               "is_error": tool_result_failed(result)},
        text=lambda text: {"type": "text", "text": text})
