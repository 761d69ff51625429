"""The `google` driver (provider names `google` and `gemini`): the Gemini API
through the official `google-genai` SDK (`pip install 'agent-runtime-durable[google]'`).

- The key is `GOOGLE_GENERATIVE_AI_API_KEY` (the reference implementation's
  variable), or the one `apiKey: {env}` names, passed explicitly; Vertex AI
  mode is off whatever the environment says (`GOOGLE_GENAI_USE_VERTEXAI`), so
  the SDK never looks for other credentials.
- `baseURL` is the API's root, with or without its version
  (`https://generativelanguage.googleapis.com/v1beta`, as the reference
  writes it): a trailing version segment becomes the SDK's `api_version`.
- Transport: the driver hands the SDK an httpx client of its own, one per
  call and closed after it (as the other drivers' clients), so which HTTP
  library the SDK would pick (httpx, httpx2, aiohttp) never changes the
  errors that come back. The SDK's own retries are off (its default).
- System messages become `systemInstruction`; tool calls and results are
  `functionCall` / `functionResponse` parts (`{"output": ...}` or
  `{"error": ...}`) in turns that alternate `user` and `model`.
- Call ids: Gemini may give a function call no id. The driver then makes one
  (`GENERATED_ID_PREFIX`, unique in the run) and sends no id back with that
  call or its result, since Gemini matches those by name and order.
- Thought signatures: Gemini 3 wants each function call it made sent back
  with the signature it came with (or without one, if it came without). The
  driver remembers that for the calls it received (the last
  `SIGNATURES_KEPT`, in memory; the transcript has no place for it) and sends
  each call back as it came; a call it knows nothing of (a run resumed in
  another process, a history given as input) goes with the placeholder
  Google documents for that case, which skips the check.
- Streaming: `streamGenerateContent` over server-sent events; text parts reach
  `on_text` as they arrive (thought summaries go to `on_reasoning`), a function call
  arrives whole, usage with the last chunk.
- Structured output: by default a forced "answer" function
  (`functionCallingConfig` mode `ANY`, restricted to it when it is the only
  tool), as the anthropic driver; `supportsStructuredOutputs: true` uses the
  API's native `responseJsonSchema` instead.
- Options: only the generation settings in `_OPTIONS` (camelCase, as the
  reference writes them); any other option is refused by name, since the
  SDK's config also holds settings that steer where a request goes.
- Retries: `agent_runtime.models.retry`. A 429's wait is its `Retry-After`,
  else the `RetryInfo.retryDelay` Google puts in the error body.
- Usage: input is the prompt plus tool-use prompt tokens, output the answer
  plus thinking tokens (both are billed), total as reported.
"""

from __future__ import annotations

import base64
import json
import re
import threading
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pydantic
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

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
    alternating_turns,
    answer_tool,
    answer_tool_response,
    split_system,
    tool_arguments,
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

DEFAULT_KEY_ENV = "GOOGLE_GENERATIVE_AI_API_KEY"
DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com"
DEFAULT_API_VERSION = "v1beta"
# Without limits.providerTimeoutMs: a long answer may take minutes.
DEFAULT_TIMEOUT = 300.0
GENERATED_ID_PREFIX = "gemini-call-"
SIGNATURES_KEPT = 1024
# The value Google documents for a function call whose signature is not at hand.
SKIP_SIGNATURE = base64.urlsafe_b64decode("skip_thought_signature_validator")
_VERSION = re.compile(r"v\d+(?:alpha|beta)?\d*")
# Manifest options (camelCase, as the reference implementation) -> config fields.
_OPTIONS = {"temperature": "temperature", "topP": "top_p", "topK": "top_k",
            "maxOutputTokens": "max_output_tokens", "stopSequences": "stop_sequences",
            "seed": "seed", "presencePenalty": "presence_penalty",
            "frequencyPenalty": "frequency_penalty", "thinkingConfig": "thinking_config",
            "safetySettings": "safety_settings"}
_FINISH = {"STOP": "stop", "MAX_TOKENS": "length", "SAFETY": "content-filter",
           "RECITATION": "content-filter", "BLOCKLIST": "content-filter",
           "PROHIBITED_CONTENT": "content-filter", "SPII": "content-filter",
           "IMAGE_SAFETY": "content-filter", "IMAGE_PROHIBITED_CONTENT": "content-filter"}


def create_adapter(provider: str, config: RuntimeConfig, *,
                   retry: RetryPolicy | None = None) -> GoogleModel:
    return GoogleModel(provider_settings(provider, config, key_env=DEFAULT_KEY_ENV),
                       retry=retry)


def endpoint(base_url: str | None) -> tuple[str, str]:
    """The SDK's `(base_url, api_version)` for a provider's `baseURL`."""
    if not base_url:
        return DEFAULT_BASE_URL, DEFAULT_API_VERSION
    root, _, last = base_url.rstrip("/").rpartition("/")
    if root and _VERSION.fullmatch(last):
        return root, last
    return base_url, DEFAULT_API_VERSION


class GoogleModel(ClientDriver[genai.Client]):
    def __init__(self, settings: ProviderSettings, *, retry: RetryPolicy | None = None) -> None:
        super().__init__(settings, retry=retry)
        self.native_structured_output = bool(settings.supports_structured_outputs)
        self.base_url, self.api_version = endpoint(settings.base_url)
        # call id -> the signature it came with (None: it came without one)
        self._signatures: OrderedDict[str, bytes | None] = OrderedDict()
        self._lock = threading.Lock()

    @asynccontextmanager
    async def _open_client(self, request: ModelRequest) -> AsyncIterator[genai.Client]:
        timeout = request.timeout_seconds or DEFAULT_TIMEOUT
        async with httpx.AsyncClient(timeout=timeout,
                                     headers=self.settings.headers or None) as http:
            client = genai.Client(vertexai=False, api_key=self.settings.api_key,
                                  http_options=types.HttpOptions(
                                      base_url=self.base_url, api_version=self.api_version,
                                      timeout=round(timeout * 1000),
                                      httpx_async_client=http))
            try:
                yield client
            finally:
                client.close()  # the synchronous client the SDK made beside ours

    # -- request ---------------------------------------------------------------

    def _params(self, request: ModelRequest) -> tuple[dict[str, Any], bool]:
        system, messages = split_system(request.messages, driver="google")
        fields = _generation_fields(request)
        if system:
            fields["system_instruction"] = system
        declarations = [types.FunctionDeclaration(name=tool.name, description=tool.description,
                                                  parameters_json_schema=tool.parameters)
                        for tool in request.tools]
        wrapped = False
        schema = request.output_schema
        if schema is not None and self.native_structured_output:
            fields["response_mime_type"] = "application/json"
            fields["response_json_schema"] = schema
        elif schema is not None:
            answer = answer_tool(schema, [tool.name for tool in request.tools], driver="google")
            wrapped = answer.wrapped
            declarations.append(types.FunctionDeclaration(
                name=answer.name, description=answer.description,
                parameters_json_schema=answer.input_schema))
            fields["tool_config"] = types.ToolConfig(
                function_calling_config=types.FunctionCallingConfig(
                    mode=types.FunctionCallingConfigMode.ANY,
                    allowed_function_names=[answer.name] if answer.alone else None))
        if declarations:
            fields["tools"] = [types.Tool(function_declarations=declarations)]
        # The driver runs the tools itself, through the engine.
        fields["automatic_function_calling"] = types.AutomaticFunctionCallingConfig(disable=True)
        try:
            config = types.GenerateContentConfig(**fields)
        except pydantic.ValidationError as error:
            raise ModelError("invalid_option", "the google driver cannot use the model "
                             f"options: {excerpt(str(error))}") from error
        return {"model": request.model, "contents": self._contents(messages),
                "config": config}, wrapped

    def _contents(self, messages: list[dict[str, Any]]) -> list[types.ContentUnion]:
        turns = alternating_turns(
            messages, driver="google",
            call=lambda call: {"function_call": {
                "id": _sent_id(call["id"]), "name": call["name"],
                "args": call.get("input") or {}}, "thought_signature": self._signature(
                    call["id"])},
            result=lambda result: {"function_response": {
                "id": _sent_id(result["callId"]), "name": result.get("name"),
                "response": _function_response(result)}},
            text=lambda text: {"text": text})
        return [types.Content(role="model" if turn["role"] == "assistant" else "user",
                              parts=[types.Part.model_validate(part)
                                     for part in turn["content"]])
                for turn in turns]

    def _signature(self, call_id: str) -> bytes | None:
        with self._lock:
            return self._signatures.get(call_id, SKIP_SIGNATURE)

    def _remember(self, call_id: str, signature: bytes | None) -> None:
        with self._lock:
            self._signatures[call_id] = signature
            self._signatures.move_to_end(call_id)
            while len(self._signatures) > SIGNATURES_KEPT:
                self._signatures.popitem(last=False)

    # -- response --------------------------------------------------------------

    async def _call(self, client: genai.Client, params: dict[str, Any], request: ModelRequest,
                    relay: TextRelay, *, wrapped: bool) -> ModelResponse:
        answer = _Answer()
        if not request.stream:
            response = await client.aio.models.generate_content(**params)
            answer.add(response, relay=None, reasoning=request.on_reasoning)
        else:
            async for chunk in await client.aio.models.generate_content_stream(**params):
                answer.add(chunk, relay=relay, reasoning=request.on_reasoning)
        calls = []
        for index, (call_id, name, args, signature) in enumerate(answer.calls):
            made = call_id or f"{GENERATED_ID_PREFIX}{uuid.uuid4().hex[:12]}-{index}"
            self._remember(made, signature)
            calls.append(ToolCallRequest(call_id=made, name=name,
                                         arguments=tool_arguments(args, tool=name)))
        if answer.finish == "MALFORMED_FUNCTION_CALL" and not calls:
            raise ModelError("invalid_tool_call", "the model produced a malformed function call")
        if answer.empty and not calls:
            raise answer.no_candidates()
        finish = _FINISH.get(answer.finish or "", (answer.finish or "").lower() or None)
        return answer_tool_response(request, text="".join(answer.text) or None, calls=calls,
                                    stop=finish, usage=answer.usage, model=answer.model,
                                    wrapped=wrapped)

    def _translate(self, error: Exception) -> ModelError | None:
        if isinstance(error, genai_errors.APIError):
            return _status_error(error)
        return translate_httpx_error(error, where=self.settings.base_url or "the Gemini API")


class _Answer:
    """A response as its chunks arrive (one chunk, when not streamed)."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: list[tuple[str | None, str, dict[str, Any] | None, bytes | None]] = []
        self.finish: str | None = None
        self.usage: Usage | None = None
        self.model: str | None = None
        self.empty = True
        self.block_reason: str | None = None

    def add(self, chunk: types.GenerateContentResponse, *, relay: TextRelay | None,
            reasoning: TextListener | None = None) -> None:
        self.model = chunk.model_version or self.model
        if chunk.usage_metadata is not None:
            self.usage = _usage(chunk.usage_metadata)
        if chunk.prompt_feedback is not None and chunk.prompt_feedback.block_reason:
            self.block_reason = str(chunk.prompt_feedback.block_reason.value)
        for candidate in (chunk.candidates or [])[:1]:
            self.empty = False
            if candidate.finish_reason is not None:
                self.finish = str(candidate.finish_reason.value)
            for part in (candidate.content.parts if candidate.content else None) or []:
                if part.function_call is not None:
                    call = part.function_call
                    self.calls.append((call.id, call.name or "", call.args,
                                       part.thought_signature))
                    if relay is not None and call.name == OUTPUT_TOOL:
                        relay(json.dumps(call.args or {}, ensure_ascii=False))
                elif part.text and not part.thought:
                    self.text.append(part.text)
                    if relay is not None:
                        relay(part.text)
                elif part.text and reasoning is not None:  # a thought summary
                    reasoning(part.text)

    def no_candidates(self) -> ModelError:
        if self.block_reason:
            return ModelError("prompt_blocked", "the provider blocked the prompt "
                              f"({excerpt(self.block_reason)})")
        return ModelError("empty_response", "the provider returned no candidates")


def _generation_fields(request: ModelRequest) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for key, value in request.options.items():
        field = _OPTIONS.get(key)
        if field is None:
            raise ModelError("unsupported_option",
                             f"the google driver does not take the model option {excerpt(key)} "
                             f"(it takes {', '.join(sorted(_OPTIONS))})")
        fields[field] = value
    if request.max_output_tokens is not None:
        fields["max_output_tokens"] = request.max_output_tokens
    return fields


def _sent_id(call_id: str) -> str | None:
    """The id sent back with a call or its result: Gemini's own, never one the
    driver made."""
    return None if call_id.startswith(GENERATED_ID_PREFIX) else call_id


def _function_response(result: dict[str, Any]) -> dict[str, Any]:
    if result.get("error") is not None:
        return {"error": result["error"]}
    return {"output": result.get("output")}


def _usage(usage: types.GenerateContentResponseUsageMetadata) -> Usage:
    input_tokens = (usage.prompt_token_count or 0) + (usage.tool_use_prompt_token_count or 0)
    output_tokens = (usage.candidates_token_count or 0) + (usage.thoughts_token_count or 0)
    return Usage(input_tokens=input_tokens, output_tokens=output_tokens,
                 total_tokens=usage.total_token_count)


def _status_error(error: genai_errors.APIError) -> ModelError:
    headers = getattr(error.response, "headers", None)
    code, message = error_body_details(error.details)
    status = error.status if isinstance(error.status, str) else code
    failure = http_error(error.code, headers=headers, code=status,
                         message=error.message if isinstance(error.message, str) else message)
    if failure.retry_after is None and failure.retryable:
        delay = _retry_delay(error.details)
        if delay is not None:
            return ModelError(failure.code, str(failure), retryable=True, retry_after=delay)
    return failure


def _retry_delay(body: Any) -> float | None:
    """The wait a Google error body asks for: `RetryInfo.retryDelay` ("36s")."""
    inner = body.get("error", body) if isinstance(body, dict) else None
    details = inner.get("details") if isinstance(inner, dict) else None
    for detail in details if isinstance(details, list) else []:
        if isinstance(detail, dict) and str(detail.get("@type", "")).endswith("RetryInfo"):
            delay = detail.get("retryDelay")
            if isinstance(delay, str) and delay.endswith("s"):
                try:
                    return max(0.0, float(delay[:-1]))
                except ValueError:
                    return None
    return None
