"""The `bedrock` driver: Amazon Bedrock's Converse and ConverseStream API through boto3.

Why boto3 is imported here, and only here, lazily: the engine never imports
boto3 (AWS code lives in `stores/` and `functions/`, and ruff bans the import
in `agent_runtime/`). A Bedrock model is reached only through boto3, and this
module is loaded only by `build_adapter` when a run uses a `bedrock` provider,
so boto3 and botocore are imported inside the functions that need them, with
a `noqa` naming this reason. A tiny module outside the package would not
change what is imported when; it would only hide the driver from its siblings.

- Region: the provider's `region`, else the AWS environment (`AWS_REGION`,
  the profile). Credentials: the AWS chain (environment, profile, role) or a
  Bedrock API key in `AWS_BEARER_TOKEN_BEDROCK`, read by botocore itself;
  `apiKey` is not used. Both are checked when the adapter is built, before
  any request. `baseURL` is an endpoint URL (a VPC endpoint); `headers` go
  with every request the driver's own clients send, signed with it.
- boto3 is synchronous: every call runs in a worker thread
  (`asyncio.to_thread`). Streamed deltas are handed back to the event loop
  as they arrive; after a timeout the worker stops reading at the next event.
- Clients are thread-safe and cached per timeout (botocore's read timeout is
  a client setting); botocore's own retries are off.
- Structured output: a forced "answer" tool (`toolChoice`), as the anthropic
  driver; `supportsStructuredOutputs: true` uses Converse's native
  `outputConfig.textFormat` instead.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import Any

from agent_runtime.config import RuntimeConfig
from agent_runtime.errors import StepFailed
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
    tool_arguments,
    tool_result_failed,
    tool_result_text,
)
from agent_runtime.models.provider_settings import ProviderSettings, provider_settings
from agent_runtime.models.retry import (
    ClientDriver,
    RetryPolicy,
    TextRelay,
    http_error,
    timeout_error,
    unreachable,
)

# Without limits.providerTimeoutMs: botocore's 60 s default is short for a long answer.
DEFAULT_READ_TIMEOUT = 300.0
CONNECT_TIMEOUT = 10.0
# Error codes worth a retry whatever the status says (a stream's errors carry none).
RETRYABLE_CODES = frozenset({"throttlingexception", "serviceunavailableexception",
                             "internalserverexception", "modelnotreadyexception"})
_INFERENCE = {"maxOutputTokens": "maxTokens", "temperature": "temperature", "topP": "topP",
              "stopSequences": "stopSequences"}


def create_adapter(provider: str, config: RuntimeConfig, *, client: Any = None,
                   retry: RetryPolicy | None = None) -> BedrockModel:
    """The adapter of a bedrock provider; `client` injects a bedrock-runtime client
    (tests: one with a botocore Stubber)."""
    entry = config.providers.get(provider)
    if entry is not None and entry.api_key is not None:
        raise StepFailed("provider_config_invalid",
                         f"model provider {provider!r} (bedrock) does not use apiKey: it signs "
                         "requests with AWS credentials (AWS_ACCESS_KEY_ID and "
                         "AWS_SECRET_ACCESS_KEY, AWS_PROFILE or a role), or takes a Bedrock API "
                         "key from AWS_BEARER_TOKEN_BEDROCK")
    return BedrockModel(provider_settings(provider, config), client=client, retry=retry)


def _session(settings: ProviderSettings) -> Any:
    """A boto3 session for the provider's region, with its credentials checked."""
    try:
        import boto3  # noqa: PLC0415, TID251 - the bedrock driver only; see the module docstring
    except ImportError as error:
        raise StepFailed("provider_unavailable",
                         f"model provider {settings.name!r} (bedrock) needs boto3: "
                         "pip install 'agent-runtime-durable[aws]'") from error
    session = boto3.session.Session(region_name=settings.region)
    if not session.region_name:
        raise StepFailed("provider_config_invalid",
                         f"model provider {settings.name!r} (bedrock) needs a region: set "
                         f"providers.{settings.name}.region in the runtime config, or AWS_REGION")
    if session.get_credentials() is None and not os.environ.get("AWS_BEARER_TOKEN_BEDROCK"):
        raise StepFailed("provider_credentials_missing",
                         f"model provider {settings.name!r} (bedrock) found no AWS credentials: "
                         "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE, or "
                         "AWS_BEARER_TOKEN_BEDROCK for a Bedrock API key), or run with an IAM "
                         "role")
    return session


class BedrockModel(ClientDriver[Any]):
    def __init__(self, settings: ProviderSettings, *, client: Any = None,
                 retry: RetryPolicy | None = None) -> None:
        super().__init__(settings, retry=retry)
        self.native_structured_output = bool(settings.supports_structured_outputs)
        self._fixed_client = client
        self._session = None if client is not None else _session(settings)
        self._clients: dict[float | None, Any] = {}
        self._lock = threading.Lock()

    def _client(self, timeout: float | None) -> Any:
        if self._fixed_client is not None:
            return self._fixed_client
        with self._lock:
            if timeout not in self._clients:
                from botocore.config import Config  # noqa: PLC0415, TID251 - see the docstring

                config = Config(retries={"total_max_attempts": 1, "mode": "standard"},
                                read_timeout=timeout or DEFAULT_READ_TIMEOUT,
                                connect_timeout=min(timeout or CONNECT_TIMEOUT, CONNECT_TIMEOUT),
                                user_agent_extra="agent-runtime")
                assert self._session is not None
                client = self._session.client(
                    "bedrock-runtime", endpoint_url=self.settings.base_url, config=config)
                if self.settings.headers:
                    client.meta.events.register("before-sign.bedrock-runtime",
                                                self._add_headers)
                self._clients[timeout] = client
            return self._clients[timeout]

    def _add_headers(self, request: Any, **_: Any) -> None:
        # Before signing, so a proxy or endpoint that checks the signature sees them signed.
        for name, value in self.settings.headers.items():
            request.headers[name] = value

    def _open_client(self, request: ModelRequest) -> AbstractAsyncContextManager[Any]:
        # A boto3 client is kept per timeout and shared across calls: nothing to close.
        return nullcontext(self._client(request.timeout_seconds))

    def _translate(self, error: Exception) -> ModelError | None:
        return _translate_aws(error)

    # -- request ---------------------------------------------------------------

    def _params(self, request: ModelRequest) -> tuple[dict[str, Any], bool]:
        system, messages = split_system(request.messages, driver="bedrock")
        params: dict[str, Any] = {"modelId": request.model, "messages": _messages(messages)}
        if system:
            params["system"] = [{"text": system}]
        inference: dict[str, Any] = {}
        additional: dict[str, Any] = {}
        for key, value in request.options.items():
            if key in _INFERENCE:
                inference[_INFERENCE[key]] = value
            else:
                additional[key] = value
        if request.max_output_tokens is not None:
            inference["maxTokens"] = request.max_output_tokens
        if inference:
            params["inferenceConfig"] = inference
        if additional:
            params["additionalModelRequestFields"] = additional
        tools: list[dict[str, Any]] = [
            {"toolSpec": {"name": tool.name, "description": tool.description or tool.name,
                          "inputSchema": {"json": tool.parameters}}} for tool in request.tools]
        tool_config: dict[str, Any] = {}
        wrapped = False
        schema = request.output_schema
        if schema is not None and self.native_structured_output:
            params["outputConfig"] = {"textFormat": {"type": "json_schema", "structure": {
                "jsonSchema": {"name": "output", "schema": json.dumps(schema)}}}}
        elif schema is not None:
            answer = answer_tool(schema, [tool["toolSpec"]["name"] for tool in tools],
                                 driver="bedrock")
            wrapped = answer.wrapped
            tool_config["toolChoice"] = ({"tool": {"name": answer.name}} if answer.alone
                                         else {"any": {}})
            tools.append({"toolSpec": {"name": answer.name, "description": answer.description,
                                       "inputSchema": {"json": answer.input_schema}}})
        if tools:
            params["toolConfig"] = {"tools": tools, **tool_config}
        return params, wrapped

    # -- response --------------------------------------------------------------

    async def _call(self, client: Any, params: dict[str, Any], request: ModelRequest,
                    relay: TextRelay, *, wrapped: bool) -> ModelResponse:
        if not request.stream:
            raw = await asyncio.to_thread(lambda: client.converse(**params))
            message = (raw.get("output") or {}).get("message") or {}
            return _response(request, message.get("content") or [], raw.get("stopReason"),
                             raw.get("usage"), wrapped=wrapped)
        loop = asyncio.get_running_loop()
        stopped = threading.Event()

        def deliver(delta: str) -> None:
            loop.call_soon_threadsafe(relay, delta)

        try:
            content, stop_reason, usage = await asyncio.to_thread(
                _read_stream, client, params, deliver, stopped)
        finally:
            stopped.set()  # a worker still reading after a timeout stops at its next event
        return _response(request, content, stop_reason, usage, wrapped=wrapped)


def _read_stream(client: Any, params: dict[str, Any], deliver: Callable[[str], None],
                 stopped: threading.Event) -> tuple[list[dict[str, Any]], str | None, Any]:
    """ConverseStream's events gathered into Converse's content blocks (in a worker thread)."""
    stream = client.converse_stream(**params)["stream"]
    text: list[str] = []
    tools: dict[int, dict[str, Any]] = {}
    stop_reason = None
    usage = None
    try:
        for event in stream:
            if stopped.is_set():
                break
            if "contentBlockStart" in event:
                start = event["contentBlockStart"]
                use = start.get("start", {}).get("toolUse")
                if use is not None:
                    tools[start["contentBlockIndex"]] = {"toolUseId": use["toolUseId"],
                                                         "name": use["name"], "input": ""}
            elif "contentBlockDelta" in event:
                block = event["contentBlockDelta"]
                delta = block.get("delta", {})
                if "text" in delta:
                    text.append(delta["text"])
                    deliver(delta["text"])
                elif "toolUse" in delta:
                    tool = tools[block["contentBlockIndex"]]
                    tool["input"] += delta["toolUse"].get("input", "")
                    if tool["name"] == OUTPUT_TOOL:
                        deliver(delta["toolUse"].get("input", ""))
            elif "messageStop" in event:
                stop_reason = event["messageStop"].get("stopReason")
            elif "metadata" in event:
                usage = event["metadata"].get("usage")
    finally:
        stream.close()
    content: list[dict[str, Any]] = [{"text": "".join(text)}] if text else []
    for _, tool in sorted(tools.items()):
        arguments = tool_arguments(tool["input"], tool=tool["name"])
        content.append({"toolUse": {"toolUseId": tool["toolUseId"], "name": tool["name"],
                                    "input": arguments}})
    return content, stop_reason, usage


def _response(request: ModelRequest, content: list[dict[str, Any]], stop_reason: str | None,
              usage: Any, *, wrapped: bool) -> ModelResponse:
    text = "".join(block["text"] for block in content if "text" in block) or None
    calls = [ToolCallRequest(call_id=block["toolUse"]["toolUseId"], name=block["toolUse"]["name"],
                             arguments=tool_arguments(block["toolUse"].get("input"),
                                                      tool=block["toolUse"]["name"]))
             for block in content if "toolUse" in block]
    usage_value = None
    if usage:
        usage_value = Usage(input_tokens=usage.get("inputTokens"),
                            output_tokens=usage.get("outputTokens"),
                            total_tokens=usage.get("totalTokens"))
    return answer_tool_response(request, text=text, calls=calls, stop=stop_reason,
                                usage=usage_value, model=request.model, wrapped=wrapped)


def _translate_aws(error: Exception) -> ModelError | None:
    from botocore import exceptions as aws  # noqa: PLC0415, TID251 - see the module docstring

    if isinstance(error, aws.ClientError):
        info = error.response.get("Error", {})
        meta = error.response.get("ResponseMetadata", {})
        code = info.get("Code") or "aws_error"
        message = info.get("Message") or str(error)
        status = meta.get("HTTPStatusCode")
        retryable = code.lower() in RETRYABLE_CODES
        if isinstance(status, int) and status >= 400:
            failure = http_error(status, headers=meta.get("HTTPHeaders"), code=code,
                                 message=message)
            failure.retryable = failure.retryable or retryable
            return failure
        return ModelError(code, f"{code}: {excerpt(message)}", retryable=retryable)
    if isinstance(error, aws.ReadTimeoutError):
        return timeout_error(None)
    if isinstance(error, aws.EndpointConnectionError | aws.ConnectionClosedError
                  | aws.ConnectTimeoutError | aws.HTTPClientError):
        return unreachable("Bedrock", excerpt(str(error)))
    if isinstance(error, aws.BotoCoreError):
        return ModelError("aws_error", f"{type(error).__name__}: {excerpt(str(error))}")
    return None


def _messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return alternating_turns(
        messages, driver="bedrock",
        call=lambda call: {"toolUse": {"toolUseId": call["id"], "name": call["name"],
                                       "input": call.get("input") or {}}},
        result=_tool_result, text=lambda text: {"text": text})


def _tool_result(result: dict[str, Any]) -> dict[str, Any]:
    """A tool result as Converse takes it: an object output as JSON, else text."""
    output = result.get("output")
    failed = tool_result_failed(result)
    body = ([{"json": output}] if isinstance(output, dict) and not failed
            else [{"text": tool_result_text(result)}])
    return {"toolResult": {"toolUseId": result["callId"], "content": body,
                           "status": "error" if failed else "success"}}
