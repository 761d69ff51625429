"""The `google` driver against a local server speaking the Gemini API
(`generateContent`, `streamGenerateContent?alt=sse`), through the real engine:
text, streaming with usage, function call round trips (with and without call
ids, thought signatures sent back), structured output, 429 with Retry-After or
RetryInfo, 500s retried then failing, client errors and a missing SDK."""

from __future__ import annotations

import re
import sys
from typing import Any

import pytest
from fake_provider_server import (
    PROMPT,
    FakeProviderServer,
    driver_run,
    json_reply,
    recorded_retries,
    sse_reply,
    ticket_tool,
)

from agent_runtime import RunStatus
from agent_runtime.errors import ConfigError
from agent_runtime.models import google as google_driver

MODEL = {"provider": "gemini-house", "model": "gemini-test"}
GENERATE = "/v1beta/models/gemini-test:generateContent"
STREAM = "/v1beta/models/gemini-test:streamGenerateContent?alt=sse"


@pytest.fixture(autouse=True)
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEMINI_TEST_KEY", "test-key")
    # The SDK would take Vertex AI mode or another key from these; the driver must not.
    monkeypatch.setenv("GOOGLE_GENAI_USE_VERTEXAI", "true")
    monkeypatch.setenv("GOOGLE_API_KEY", "not-this-key")


def config(server: FakeProviderServer, **provider: Any) -> dict[str, Any]:
    # The version in baseURL, as the reference implementation writes it.
    entry = {"driver": "google", "baseURL": f"{server.url}/v1beta",
             "apiKey": {"env": "GEMINI_TEST_KEY"}, **provider}
    return {"providers": {"gemini-house": entry}}


def response(*parts: dict[str, Any], finish: str | None = "STOP",
             usage: tuple[int, int] | None = (12, 5), thoughts: int = 0) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": list(parts)},
                                 "index": 0}
    if finish:
        candidate["finishReason"] = finish
    body: dict[str, Any] = {"candidates": [candidate], "modelVersion": "gemini-test-001"}
    if usage is not None:
        body["usageMetadata"] = {"promptTokenCount": usage[0],
                                 "candidatesTokenCount": usage[1],
                                 "thoughtsTokenCount": thoughts,
                                 "totalTokenCount": sum(usage) + thoughts}
    return body


def function_call(args: dict[str, Any], *, call_id: str | None = "call-7",
                  signature: str | None = "c2lnLTE=", name: str = "lookup_ticket"
                  ) -> dict[str, Any]:
    call: dict[str, Any] = {"name": name, "args": args}
    if call_id is not None:
        call["id"] = call_id
    part: dict[str, Any] = {"functionCall": call}
    if signature is not None:
        part["thoughtSignature"] = signature
    return part


def wire(body: dict[str, Any], name: str) -> Any:
    """Field `name` (camelCase) of a request body in either spelling: the API's
    JSON takes both, and SDK versions differ in which they send."""
    snake = re.sub(r"([A-Z])", lambda upper: "_" + upper.group(1).lower(), name)
    return body[name] if name in body else body.get(snake)


def schema_of(declaration: dict[str, Any]) -> Any:
    return wire(declaration, "parametersJsonSchema")


def error(status: int, code: str, message: str, *,
          details: list[dict[str, Any]] | None = None,
          headers: dict[str, str] | None = None) -> Any:
    body = {"error": {"code": status, "message": message, "status": code,
                      **({"details": details} if details else {})}}
    return json_reply(body, status=status, headers=headers)


def test_plain_text_with_a_system_instruction_and_usage_in_the_checkpoint(
        server: FakeProviderServer) -> None:
    server.add(json_reply(response({"text": "Hello there."}, usage=(12, 5), thoughts=4)))
    run = driver_run(config(server))
    result = run.run(PROMPT, model=MODEL)

    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == "Hello there."
    # Thinking tokens are billed output: they count against the budget.
    assert run.usage_in_checkpoint(result.run_id) == [
        {"inputTokens": 12, "outputTokens": 9, "totalTokens": 21}]
    assert run.consumed_tokens(result.run_id) == 21
    [request] = server.requests
    assert request.path == GENERATE
    assert request.headers["x-goog-api-key"] == "test-key"
    body = request.body
    assert body["systemInstruction"]["parts"] == [{"text": "Be brief."}]
    assert body["contents"] == [{"role": "user", "parts": [{"text": "Say hello."}]}]
    assert "tools" not in body


def test_streamed_text_reaches_the_text_channel_in_order_with_usage(
        server: FakeProviderServer) -> None:
    server.add(sse_reply([
        response({"text": "Hel"}, finish=None, usage=None),
        response({"thought": True, "text": "(thinking)"}, finish=None, usage=None),
        response({"text": "lo."}, finish=None, usage=None),
        response({"text": ""}, usage=(9, 3))]))
    run = driver_run(config(server), watch_text=True)
    result = run.run(PROMPT, model=MODEL)

    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == "Hello."
    assert run.deltas() == ["Hel", "lo."]  # a thought summary is never shown
    assert sum(e.data["chars"] for e in run.events.events if e.type == "model.text.delta") == 6
    assert run.usage_in_checkpoint(result.run_id) == [
        {"inputTokens": 9, "outputTokens": 3, "totalTokens": 12}]
    assert server.requests[0].path == STREAM


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_function_call_round_trip_answers_with_a_function_response(
        server: FakeProviderServer, stream: bool) -> None:
    lookup_ticket, seen = ticket_tool()
    call = response(function_call({"ticket_id": "T-1"}), usage=(20, 8))
    answer = response({"text": "T-1 is open."}, usage=(40, 6))
    if stream:
        server.add(sse_reply([call]), sse_reply([answer]))
    else:
        server.add(json_reply(call), json_reply(answer))
    run = driver_run(config(server), tools=[lookup_ticket], watch_text=stream)
    result = run.run({**PROMPT, "prompt": "Is T-1 open?", "tools": ["lookup_ticket"]},
                     model=MODEL)

    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == "T-1 is open."
    assert seen == ["T-1"]
    first, second = server.bodies()
    [declaration] = wire(first["tools"][0], "functionDeclarations")
    assert declaration["name"] == "lookup_ticket"
    assert schema_of(declaration)["required"] == ["ticket_id"]
    model_turn, function_turn = second["contents"][1:]
    # The call goes back as it came, thought signature included.
    assert model_turn == {"role": "model", "parts": [
        {"functionCall": {"id": "call-7", "name": "lookup_ticket", "args": {"ticket_id": "T-1"}},
         "thoughtSignature": "c2lnLTE="}]}
    assert function_turn == {"role": "user", "parts": [{"functionResponse": {
        "id": "call-7", "name": "lookup_ticket",
        "response": {"output": {"id": "T-1", "status": "open"}}}}]}
    assert run.consumed_tokens(result.run_id) == 74


def test_a_call_without_an_id_is_matched_by_name_and_gets_no_made_up_id(
        server: FakeProviderServer) -> None:
    lookup_ticket, seen = ticket_tool()
    server.add(json_reply(response(function_call({"ticket_id": "T-2"}, call_id=None,
                                                 signature=None))),
               json_reply(response({"text": "T-2 is open."})))
    run = driver_run(config(server), tools=[lookup_ticket])
    result = run.run({**PROMPT, "tools": ["lookup_ticket"]}, model=MODEL)

    assert result.status is RunStatus.COMPLETED, result.error
    assert seen == ["T-2"]
    model_turn, function_turn = server.bodies()[1]["contents"][1:]
    # The call goes back as it came: no id, no signature.
    assert model_turn["parts"] == [
        {"functionCall": {"name": "lookup_ticket", "args": {"ticket_id": "T-2"}}}]
    assert function_turn["parts"][0]["functionResponse"] == {
        "name": "lookup_ticket", "response": {"output": {"id": "T-2", "status": "open"}}}


def test_a_call_from_a_given_history_goes_with_the_placeholder_signature(
        server: FakeProviderServer) -> None:
    # A call this driver never received (a history given as input, or a run
    # resumed in another process): its signature is not known.
    server.add(json_reply(response({"text": "It is open."})))
    step = {"id": "ask", "type": "prompt", "includeInFinalOutput": True, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "Is T-3 open?"}]},
        {"role": "assistant", "content": [{"type": "tool-call", "call": {
            "id": "c1", "name": "lookup_ticket", "input": {"ticket_id": "T-3"}}}]},
        {"role": "tool", "content": [{"type": "tool-result", "result": {
            "callId": "c1", "name": "lookup_ticket", "output": "open"}}]}]}
    result = driver_run(config(server)).run(step, model=MODEL)

    assert result.status is RunStatus.COMPLETED, result.error
    _, model_turn, function_turn = server.requests[0].body["contents"]
    assert model_turn["parts"] == [{
        "functionCall": {"id": "c1", "name": "lookup_ticket", "args": {"ticket_id": "T-3"}},
        "thoughtSignature": "skip_thought_signature_validator"}]
    assert function_turn["parts"][0]["functionResponse"]["response"] == {"output": "open"}


SCHEMA = {"type": "object", "properties": {"approved": {"type": "boolean"}},
          "required": ["approved"]}


def test_output_schema_is_answered_through_a_forced_function(
        server: FakeProviderServer) -> None:
    server.add(json_reply(response(function_call({"approved": True}, name="structured_output",
                                                 call_id=None))))
    run = driver_run(config(server))
    result = run.run({**PROMPT, "outputSchema": SCHEMA}, model=MODEL)

    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == {"approved": True}
    body = server.requests[0].body
    calling = wire(wire(body, "toolConfig"), "functionCallingConfig")
    assert calling["mode"] == "ANY"
    assert wire(calling, "allowedFunctionNames") == ["structured_output"]
    assert schema_of(wire(body["tools"][0], "functionDeclarations")[0]) == SCHEMA


def test_native_structured_output_when_the_provider_supports_it(
        server: FakeProviderServer) -> None:
    server.add(json_reply(response({"text": '{"approved": false}'})))
    run = driver_run(config(server, supportsStructuredOutputs=True))
    result = run.run({**PROMPT, "outputSchema": SCHEMA}, model=MODEL)

    assert result.output == {"approved": False}
    body = server.requests[0].body
    assert body["generationConfig"]["responseMimeType"] == "application/json"
    assert body["generationConfig"]["responseJsonSchema"] == SCHEMA
    assert "tools" not in body


def test_generation_options_reach_the_generation_config_and_others_are_refused(
        server: FakeProviderServer) -> None:
    server.add(json_reply(response({"text": "ok"})))
    run = driver_run(config(server))
    result = run.run(PROMPT, model={**MODEL, "options": {"temperature": 0.2, "topK": 3,
                                                         "maxOutputTokens": 64}})
    assert result.status is RunStatus.COMPLETED, result.error
    assert server.requests[0].body["generationConfig"] == {
        "temperature": 0.2, "topK": 3, "maxOutputTokens": 64}

    refused = run.run(PROMPT, model={**MODEL, "options": {"httpOptions": {"baseUrl": "x"}}})
    assert refused.status is RunStatus.FAILED
    assert refused.error is not None
    assert refused.error["details"] == {"code": "unsupported_option"}
    assert "httpOptions" in refused.error["message"]
    assert len(server.requests) == 1


@pytest.mark.parametrize("wait", ["header", "retry-info"])
def test_a_429_is_retried_after_the_wait_it_asks_for(server: FakeProviderServer,
                                                      wait: str) -> None:
    if wait == "header":
        throttled = error(429, "RESOURCE_EXHAUSTED", "Quota exceeded",
                          headers={"Retry-After": "3"})
    else:
        throttled = error(429, "RESOURCE_EXHAUSTED", "Quota exceeded", details=[
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "3s"}])
    server.add(throttled, json_reply(response({"text": "Hello."})))
    settings = config(server)
    adapter, waits = recorded_retries(google_driver.create_adapter, "gemini-house", settings)
    result = driver_run(settings, models={"gemini-house": adapter}).run(PROMPT, model=MODEL)

    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == "Hello."
    assert len(server.requests) == 2
    assert waits == [3.0]


def test_server_errors_are_retried_with_backoff_then_fail_with_the_status(
        server: FakeProviderServer) -> None:
    for _ in range(4):
        server.add(error(500, "INTERNAL", "An internal error has occurred."))
    settings = config(server)
    adapter, waits = recorded_retries(google_driver.create_adapter, "gemini-house", settings)
    result = driver_run(settings, models={"gemini-house": adapter}).run(PROMPT, model=MODEL)

    assert result.status is RunStatus.FAILED
    assert result.error is not None
    assert result.error["type"] == "model_error"
    assert result.error["details"] == {"code": "INTERNAL"}
    assert 'HTTP 500 INTERNAL: "An internal error has occurred."' in result.error["message"]
    assert "after 4 attempts" in result.error["message"]
    assert len(server.requests) == 4
    assert len(waits) == 3


def test_a_client_error_fails_at_once(server: FakeProviderServer) -> None:
    server.add(error(400, "INVALID_ARGUMENT", "API key not valid."))
    result = driver_run(config(server)).run(PROMPT, model=MODEL)

    assert result.status is RunStatus.FAILED
    assert result.error is not None
    assert result.error["details"] == {"code": "INVALID_ARGUMENT"}
    assert "gemini-house/gemini-test" in result.error["message"]
    assert len(server.requests) == 1


def test_the_built_in_provider_needs_its_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOOGLE_GENERATIVE_AI_API_KEY", raising=False)
    run = driver_run({})
    with pytest.raises(ConfigError, match="GOOGLE_GENERATIVE_AI_API_KEY"):
        run.run(PROMPT, model={"provider": "gemini", "model": "gemini-test"})


@pytest.mark.parametrize("base_url", [None, "https://generativelanguage.googleapis.com/v1beta",
                                      "https://generativelanguage.googleapis.com/",
                                      "http://127.0.0.1:8080/proxy/v1"])
def test_the_base_url_may_carry_the_api_version(base_url: str | None) -> None:
    root, version = google_driver.endpoint(base_url)
    if base_url is None or base_url.endswith("v1beta"):
        assert (root, version) == ("https://generativelanguage.googleapis.com", "v1beta")
    elif base_url.endswith("v1"):
        assert (root, version) == ("http://127.0.0.1:8080/proxy", "v1")
    else:
        assert (root, version) == (base_url, "v1beta")


def test_a_missing_sdk_names_the_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOOGLE_GENERATIVE_AI_API_KEY", "test-key")
    monkeypatch.delitem(sys.modules, "agent_runtime.models.google")
    monkeypatch.setitem(sys.modules, "google.genai", None)  # as if not installed
    run = driver_run({})
    with pytest.raises(ConfigError) as refused:
        run.run(PROMPT, model={"provider": "google", "model": "gemini-test"})
    assert "pip install 'agent-runtime-durable[google]'" in refused.value.reason
    assert "'google.genai'" in refused.value.reason
