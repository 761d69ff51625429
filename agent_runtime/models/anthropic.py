"""The `anthropic` driver: the Messages API over HTTP (`messages_client`, a
`chat_http.JsonEndpointClient` at `{base}/v1/messages`).

- The endpoint: the provider's `baseURL`, else the `ANTHROPIC_BASE_URL`
  environment variable (which Anthropic's own SDK reads too), else
  `https://api.anthropic.com`.
- The key is `ANTHROPIC_API_KEY` (or the variable `apiKey: {env}` names), sent
  as `x-api-key` (no such header without a key), with `anthropic-version:
  2023-06-01`; the provider's `headers` win over both.
- System messages become the separate `system` prompt; tool calls and
  results are `tool_use` / `tool_result` blocks, consecutive turns of one role
  are joined (the API wants user and assistant turns to alternate).
- Streaming: `"stream": true` when the request asks for it
  (`ModelRequest.stream`); text deltas, and the JSON of a structured answer,
  reach `on_text` as they arrive, thinking deltas `on_reasoning`. The driver
  builds the final message from the events itself: content blocks by index,
  a tool's input parsed from its JSON pieces once the stream ends (JSON that
  does not parse, or is not an object, is `invalid_tool_call`), usage from
  `message_start` with what `message_delta` reports over it (the output
  tokens, and the input and cache counts when it sends them). A stream that
  ends before `message_stop` fails the call (`incomplete_response`): its
  answer is cut short. An `error` event fails it with the provider's error
  type (`chat_http`).
- Structured output: by default a forced "answer" tool whose input schema is
  the step's `outputSchema` (`tool_choice` names it; with the step's own
  tools too, `tool_choice: any`, so the model calls a tool or answers) —
  it works on every tool-capable Claude model. `supportsStructuredOutputs:
  true` on the provider uses the API's native `output_config.format`
  instead.
- `max_tokens` is required by the API: the step's `maxOutputTokens`, else the
  `maxOutputTokens` option, else `DEFAULT_MAX_TOKENS`. Other options go into
  the request body as they are (`temperature`, `topP`, `topK` and
  `stopSequences` under the API's names), over the fields the driver sets.
- Usage: input tokens include cache reads and writes, since they are billed
  and count against a run's budget.
- Answers are read as the JSON they are: a field left out or null is absent
  (no text, no usage), never an error; a `tool_use` input that is not an
  object is `invalid_tool_call`.
- Retries: `agent_runtime.models.retry`. One HTTP client per event loop,
  shared by the calls in flight there, as in the OpenAI driver
  (`loop_clients`).

Deliberately unlike Anthropic's SDK: `ANTHROPIC_AUTH_TOKEN` is not read and no
`Authorization: Bearer` is sent (a gateway that wants one gets it through the
provider's `headers`); a call without a key is sent as it is rather than
refused (a gateway may add the key); none of the SDK's own `x-stainless-*`
headers are sent; and a non-streamed call with a large `max_tokens` is not
refused up front: `limits.providerTimeoutMs` bounds every call.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager, aclosing
from typing import Any

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
from agent_runtime.models.chat_http import JsonEndpointClient, translate_client_error
from agent_runtime.models.conversation import (
    OUTPUT_TOOL,
    alternating_turns,
    answer_tool,
    answer_tool_response,
    split_system,
    tool_arguments,
    tool_result_failed,
    tool_result_text,
)
from agent_runtime.models.loop_clients import LoopClients
from agent_runtime.models.provider_settings import ProviderSettings, provider_settings
from agent_runtime.models.retry import ClientDriver, RetryPolicy, TextRelay

DEFAULT_KEY_ENV = "ANTHROPIC_API_KEY"
BASE_URL_ENV = "ANTHROPIC_BASE_URL"
ANTHROPIC_ENDPOINT = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096
_OPTIONS = {"temperature": "temperature", "topP": "top_p", "topK": "top_k",
            "stopSequences": "stop_sequences"}
_INPUT_TOKENS = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


def create_adapter(provider: str, config: RuntimeConfig, *,
                   retry: RetryPolicy | None = None) -> AnthropicModel:
    return AnthropicModel(provider_settings(provider, config, key_env=DEFAULT_KEY_ENV),
                          retry=retry)


def messages_client(base_url: str, *, api_key: str | None,
                    headers: Mapping[str, str] | None = None) -> JsonEndpointClient:
    """`POST {base_url}/v1/messages`, with `x-api-key` when there is a key and the
    API version; the provider's `headers` over them."""
    sent = {"anthropic-version": API_VERSION}
    if api_key:
        sent["x-api-key"] = api_key
    return JsonEndpointClient(base_url.rstrip("/") + "/v1/messages",
                              headers={**sent, **(headers or {})})


class AnthropicModel(ClientDriver[JsonEndpointClient]):
    service = "the Anthropic API"

    def __init__(self, settings: ProviderSettings, *, retry: RetryPolicy | None = None) -> None:
        super().__init__(settings, retry=retry)
        self.native_structured_output = bool(settings.supports_structured_outputs)
        self._clients = LoopClients(self._new_client)

    def _open_client(self, request: ModelRequest,
                     ) -> AbstractAsyncContextManager[JsonEndpointClient]:
        return self._clients.lease()

    def _new_client(self) -> JsonEndpointClient:
        base_url = (self.settings.base_url or os.environ.get(BASE_URL_ENV)
                    or ANTHROPIC_ENDPOINT)
        return messages_client(base_url, api_key=self.settings.api_key,
                               headers=self.settings.headers)

    def _translate(self, error: Exception) -> ModelError | None:
        return translate_client_error(error, where=self.settings.base_url or self.service)

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
        # Options are passed through as they are, and win over the named fields.
        params.update({_OPTIONS.get(key, key): value for key, value in options.items()})
        if request.stream:
            params["stream"] = True
        return params, wrapped

    # -- response --------------------------------------------------------------

    async def _call(self, client: JsonEndpointClient, params: dict[str, Any],
                    request: ModelRequest, relay: TextRelay, *, wrapped: bool) -> ModelResponse:
        if request.stream:
            message = await _streamed_message(client, params, request, relay)
        else:
            message = await client.complete(params)
            if request.on_reasoning is not None:
                for block in json_objects(message.get("content")):
                    thinking = json_text(block.get("thinking"))
                    if block.get("type") == "thinking" and thinking:
                        request.on_reasoning(thinking)
        return _response(request, message, wrapped=wrapped)


async def _streamed_message(client: JsonEndpointClient, params: dict[str, Any],
                            request: ModelRequest, relay: TextRelay) -> dict[str, Any]:
    """The message a stream of events builds, as a non-streamed call answers it;
    its text (and the answer tool's JSON) relayed, its thinking passed on, as
    they arrive."""
    message: dict[str, Any] | None = None
    blocks: dict[int, dict[str, Any]] = {}
    # A block's text and a tool_use block's input JSON, as they arrive: joined once
    # at the end (adding each delta to the text so far would copy it every time).
    texts: dict[int, list[str]] = {}
    pieces: dict[int, list[str]] = {}
    ended = False
    async with aclosing(client.stream(params)) as events:
        async for event in events:
            kind = event.get("type")
            if kind == "message_start":
                message = dict(json_object(event.get("message")))
                message["usage"] = dict(json_object(message.get("usage")))
            elif kind == "content_block_start":
                index = _index(event, default=len(blocks))
                blocks[index] = dict(json_object(event.get("content_block")))
            elif kind == "content_block_delta":
                index = _index(event, default=-1)
                block = blocks.get(index)
                if block is None:
                    raise ModelError("invalid_response", "the stream sent a delta of content "
                                     f"block {index}, which had not started")
                delta = json_object(event.get("delta"))
                delta_kind = delta.get("type")
                if delta_kind == "text_delta":
                    text = json_text(delta.get("text")) or ""
                    texts.setdefault(index, []).append(text)
                    relay(text)
                elif delta_kind == "thinking_delta":
                    thinking = json_text(delta.get("thinking"))
                    if thinking and request.on_reasoning is not None:
                        request.on_reasoning(thinking)
                elif delta_kind == "input_json_delta":
                    piece = json_text(delta.get("partial_json")) or ""
                    pieces.setdefault(index, []).append(piece)
                    if block.get("name") == OUTPUT_TOOL:
                        relay(piece)
            elif kind == "message_delta" and message is not None:
                delta = json_object(event.get("delta"))
                if "stop_reason" in delta:
                    message["stop_reason"] = delta["stop_reason"]
                # Later counts replace earlier ones: newer API versions send the
                # input and cache counts here again, not more of them.
                message["usage"].update({name: value for name, value in
                                         json_object(event.get("usage")).items()
                                         if value is not None})
            elif kind == "message_stop":
                ended = True
            # ping, content_block_stop, signature deltas: nothing to keep. An
            # `error` event never arrives here: the client raises it.
    if message is None or not ended:
        raise ModelError("incomplete_response", "the stream ended before the message did"
                         if message is not None else "the stream ended without a message",
                         retryable=True)
    for index, parts in pieces.items():
        block = blocks[index]
        if block.get("type") == "tool_use":
            block["input"] = tool_arguments("".join(parts),
                                            tool=json_text(block.get("name")) or "")
    for index, parts in texts.items():
        block = blocks[index]
        block["text"] = (json_text(block.get("text")) or "") + "".join(parts)
    message["content"] = [blocks[index] for index in sorted(blocks)]
    return message


def _response(request: ModelRequest, message: dict[str, Any], *,
              wrapped: bool) -> ModelResponse:
    text: list[str] = []
    calls: list[ToolCallRequest] = []
    for index, block in enumerate(json_objects(message.get("content"))):
        kind = block.get("type")
        if kind == "text":
            text.append(json_text(block.get("text")) or "")
        elif kind == "tool_use":
            name = json_text(block.get("name")) or ""
            arguments = block.get("input")
            if arguments is None:
                arguments = {}
            if not isinstance(arguments, dict):
                raise ModelError("invalid_tool_call", f"the model called tool "
                                 f"{excerpt(name)} with arguments that are not a JSON object")
            calls.append(ToolCallRequest(call_id=json_text(block.get("id")) or f"toolu_{index}",
                                         name=name, arguments=arguments))
    return answer_tool_response(request, text="".join(text) or None, calls=calls,
                                stop=json_text(message.get("stop_reason")),
                                usage=_usage(message.get("usage")),
                                model=json_text(message.get("model")), wrapped=wrapped)


def _usage(usage: Any) -> Usage | None:
    if not isinstance(usage, dict):
        return None
    inputs = [count for name in _INPUT_TOKENS if (count := json_count(usage.get(name))) is not None]
    output_tokens = json_count(usage.get("output_tokens"))
    if not inputs and output_tokens is None:
        return None
    return Usage(input_tokens=sum(inputs) if inputs else None, output_tokens=output_tokens)


def _index(event: dict[str, Any], *, default: int) -> int:
    index = json_count(event.get("index"))
    return default if index is None else index






def _messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return alternating_turns(
        messages, driver="anthropic",
        call=lambda call: {"type": "tool_use", "id": call["id"], "name": call["name"],
                           "input": call.get("input") or {}},
        result=lambda result: {"type": "tool_result", "tool_use_id": result["callId"],
                               "content": tool_result_text(result),
                               "is_error": tool_result_failed(result)},
        text=lambda text: {"type": "text", "text": text})
