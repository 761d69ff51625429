"""The `cohere` driver against a local server speaking Cohere's v2 Chat API
(`/v2/chat`, JSON and server-sent events), through the real engine: text,
streaming with usage, tool call round trips, structured output, 429 with
Retry-After, 500s retried then failing, and client errors."""

from __future__ import annotations

import json
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
from agent_runtime.models import cohere as cohere_driver

MODEL = {"provider": "command", "model": "command-test"}
ARGUMENTS = '{"ticket_id": "T-1"}'


@pytest.fixture(autouse=True)
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COHERE_TEST_KEY", "test-key")
    # The SDK reads these on its own; the driver must not let it.
    monkeypatch.setenv("CO_API_KEY", "not-this-key")
    monkeypatch.setenv("CO_API_URL", "http://127.0.0.1:9/not-here")


def config(server: FakeProviderServer, **provider: Any) -> dict[str, Any]:
    # The version in baseURL, as the reference implementation writes it.
    entry = {"driver": "cohere", "baseURL": f"{server.url}/v2",
             "apiKey": {"env": "COHERE_TEST_KEY"}, **provider}
    return {"providers": {"command": entry}}


def usage(tokens: tuple[int, int]) -> dict[str, Any]:
    return {"billed_units": {"input_tokens": tokens[0] - 2, "output_tokens": tokens[1]},
            "tokens": {"input_tokens": tokens[0], "output_tokens": tokens[1]}}


def chat(text: str | None = "Hello there.", *, calls: list[dict[str, Any]] | None = None,
         tokens: tuple[int, int] = (12, 5)) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant"}
    if text is not None:
        message["content"] = [{"type": "text", "text": text}]
    if calls:
        message["tool_plan"] = "I will look the ticket up."
        message["tool_calls"] = calls
    return {"id": "chat-1", "finish_reason": "TOOL_CALL" if calls else "COMPLETE",
            "message": message, "usage": usage(tokens)}


def event(kind: str, **fields: Any) -> tuple[str, dict[str, Any]]:
    return kind, {"type": kind, **fields}


def streamed_text(*deltas: str, tokens: tuple[int, int] = (9, 3)) -> Any:
    return sse_reply([
        event("message-start", id="chat-1", delta={"message": {"role": "assistant"}}),
        event("content-start", index=0,
              delta={"message": {"content": {"type": "text", "text": ""}}}),
        *(event("content-delta", index=0, delta={"message": {"content": {"text": delta}}})
          for delta in deltas),
        event("content-end", index=0),
        event("message-end", delta={"finish_reason": "COMPLETE", "usage": usage(tokens)})])


def error(status: int, message: str, *, headers: dict[str, str] | None = None) -> Any:
    return json_reply({"id": "err-1", "message": message}, status=status, headers=headers)


def test_plain_text_with_usage_in_the_checkpoint(server: FakeProviderServer) -> None:
    server.add(json_reply(chat("Hello there.", tokens=(12, 5))))
    run = driver_run(config(server))
    result = run.run(PROMPT, model=MODEL)

    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == "Hello there."
    assert run.usage_in_checkpoint(result.run_id) == [{"inputTokens": 12, "outputTokens": 5}]
    assert run.consumed_tokens(result.run_id) == 17
    [request] = server.requests
    assert request.path == "/v2/chat"
    assert request.headers["authorization"] == "Bearer test-key"
    assert request.body["model"] == "command-test"
    assert request.body["messages"] == [{"role": "system", "content": "Be brief."},
                                        {"role": "user", "content": "Say hello."}]
    assert request.body["stream"] is False


def test_streamed_text_reaches_the_text_channel_in_order_with_usage(
        server: FakeProviderServer) -> None:
    server.add(streamed_text("Hel", "lo.", tokens=(9, 3)))
    run = driver_run(config(server), watch_text=True)
    result = run.run(PROMPT, model=MODEL)

    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == "Hello."
    assert run.deltas() == ["Hel", "lo."]
    assert sum(e.data["chars"] for e in run.events.events if e.type == "model.text.delta") == 6
    assert run.usage_in_checkpoint(result.run_id) == [{"inputTokens": 9, "outputTokens": 3}]
    assert server.requests[0].body["stream"] is True


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_tool_call_round_trip_answers_with_a_tool_message_of_the_same_id(
        server: FakeProviderServer, stream: bool) -> None:
    lookup_ticket, seen = ticket_tool()
    call = {"id": "call_7", "type": "function",
            "function": {"name": "lookup_ticket", "arguments": ARGUMENTS}}
    if stream:
        server.add(sse_reply([
            event("message-start", id="chat-1", delta={"message": {"role": "assistant"}}),
            event("tool-plan-delta", delta={"message": {"tool_plan": "I will look."}}),
            event("tool-call-start", index=0, delta={"message": {"tool_calls": {
                "id": "call_7", "type": "function",
                "function": {"name": "lookup_ticket", "arguments": ""}}}}),
            event("tool-call-delta", index=0, delta={"message": {"tool_calls": {
                "function": {"arguments": ARGUMENTS[:9]}}}}),
            event("tool-call-delta", index=0, delta={"message": {"tool_calls": {
                "function": {"arguments": ARGUMENTS[9:]}}}}),
            event("tool-call-end", index=0),
            event("message-end", delta={"finish_reason": "TOOL_CALL",
                                        "usage": usage((20, 8))})]),
            streamed_text("T-1 is open.", tokens=(40, 6)))
    else:
        server.add(json_reply(chat(None, calls=[call], tokens=(20, 8))),
                   json_reply(chat("T-1 is open.", tokens=(40, 6))))
    run = driver_run(config(server), tools=[lookup_ticket], watch_text=stream)
    result = run.run({**PROMPT, "prompt": "Is T-1 open?", "tools": ["lookup_ticket"]},
                     model=MODEL)

    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == "T-1 is open."
    assert seen == ["T-1"]
    if stream:  # the tool plan is not answer text
        assert run.deltas() == ["T-1 is open."]
    first, second = server.bodies()
    assert first["tools"][0]["type"] == "function"
    assert first["tools"][0]["function"]["name"] == "lookup_ticket"
    assert first["tools"][0]["function"]["parameters"]["required"] == ["ticket_id"]
    assert "tool_choice" not in first
    assistant, tool_message = second["messages"][2:]
    assert assistant["role"] == "assistant"
    [sent_call] = assistant["tool_calls"]
    assert (sent_call["id"], sent_call["function"]["name"]) == ("call_7", "lookup_ticket")
    assert json.loads(sent_call["function"]["arguments"]) == {"ticket_id": "T-1"}
    assert tool_message["role"] == "tool"
    assert tool_message["tool_call_id"] == "call_7"
    assert json.loads(tool_message["content"]) == {"id": "T-1", "status": "open"}
    assert run.consumed_tokens(result.run_id) == 74


SCHEMA = {"type": "object", "properties": {"approved": {"type": "boolean"}},
          "required": ["approved"]}


def test_output_schema_is_answered_through_a_required_tool(server: FakeProviderServer) -> None:
    server.add(json_reply(chat(None, calls=[{"id": "call_1", "type": "function", "function": {
        "name": "structured_output", "arguments": '{"approved": true}'}}])))
    run = driver_run(config(server))
    result = run.run({**PROMPT, "outputSchema": SCHEMA}, model=MODEL)

    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == {"approved": True}
    body = server.requests[0].body
    assert body["tool_choice"] == "REQUIRED"
    assert body["tools"][0]["function"]["parameters"] == SCHEMA
    checkpoint = run.store.load_latest_checkpoint(result.run_id)
    assert checkpoint is not None
    [answer] = [item for item in checkpoint.transcript if item["type"] == "model-response"]
    assert answer["finish_reason"] == "stop"  # the answer tool's call is not a tool call


def test_native_structured_output_when_the_provider_supports_it(
        server: FakeProviderServer) -> None:
    schema = {"type": "array", "items": {"type": "string"}}
    server.add(json_reply(chat('{"answer": ["a", "b"]}')))
    run = driver_run(config(server, supportsStructuredOutputs=True))
    result = run.run({**PROMPT, "outputSchema": schema}, model=MODEL)

    assert result.output == ["a", "b"]
    body = server.requests[0].body
    assert body["response_format"]["type"] == "json_object"
    assert body["response_format"]["json_schema"]["properties"]["answer"] == schema
    assert "tools" not in body


def test_generation_options_are_mapped_and_others_refused(server: FakeProviderServer) -> None:
    server.add(json_reply(chat("ok")))
    run = driver_run(config(server))
    result = run.run(PROMPT, model={**MODEL, "options": {"temperature": 0.2, "topP": 0.9,
                                                         "maxOutputTokens": 64}})
    assert result.status is RunStatus.COMPLETED, result.error
    body = server.requests[0].body
    assert (body["temperature"], body["p"], body["max_tokens"]) == (0.2, 0.9, 64)

    refused = run.run(PROMPT, model={**MODEL, "options": {"documents": ["x"]}})
    assert refused.status is RunStatus.FAILED
    assert refused.error is not None
    assert refused.error["details"] == {"code": "unsupported_option"}
    assert len(server.requests) == 1


def test_a_429_is_retried_after_its_retry_after(server: FakeProviderServer) -> None:
    server.add(error(429, "You are using a Trial key, which is limited to 10 API calls / minute",
                     headers={"Retry-After": "3"}),
               json_reply(chat("Hello.")))
    settings = config(server)
    adapter, waits = recorded_retries(cohere_driver.create_adapter, "command", settings)
    result = driver_run(settings, models={"command": adapter}).run(PROMPT, model=MODEL)

    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == "Hello."
    assert len(server.requests) == 2
    assert waits == [3.0]


def test_server_errors_are_retried_with_backoff_then_fail_with_the_status(
        server: FakeProviderServer) -> None:
    for _ in range(4):
        server.add(error(500, "internal server error"))
    settings = config(server)
    adapter, waits = recorded_retries(cohere_driver.create_adapter, "command", settings)
    result = driver_run(settings, models={"command": adapter}).run(PROMPT, model=MODEL)

    assert result.status is RunStatus.FAILED
    assert result.error is not None
    assert result.error["type"] == "model_error"
    assert result.error["details"] == {"code": "http_500"}
    assert 'HTTP 500 http_500: "internal server error"' in result.error["message"]
    assert "after 4 attempts" in result.error["message"]
    assert len(server.requests) == 4
    assert len(waits) == 3


def test_a_generation_that_ends_in_error_is_retried(server: FakeProviderServer) -> None:
    server.add(json_reply({**chat(None), "finish_reason": "ERROR"}), json_reply(chat("Hello.")))
    settings = config(server)
    adapter, waits = recorded_retries(cohere_driver.create_adapter, "command", settings)
    result = driver_run(settings, models={"command": adapter}).run(PROMPT, model=MODEL)

    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == "Hello."
    assert len(waits) == 1


def test_a_client_error_fails_at_once(server: FakeProviderServer) -> None:
    server.add(error(400, "invalid request: model 'command-test' not found"))
    result = driver_run(config(server)).run(PROMPT, model=MODEL)

    assert result.status is RunStatus.FAILED
    assert result.error is not None
    assert result.error["details"] == {"code": "http_400"}
    assert "command/command-test" in result.error["message"]
    assert len(server.requests) == 1


def test_the_built_in_provider_needs_its_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COHERE_API_KEY", raising=False)
    run = driver_run({})
    with pytest.raises(ConfigError, match="COHERE_API_KEY"):
        run.run(PROMPT, model={"provider": "cohere", "model": "command-test"})


@pytest.mark.parametrize(("base_url", "root"), [
    (None, "https://api.cohere.com"), ("https://api.cohere.com/v2", "https://api.cohere.com"),
    ("https://api.cohere.com/v1/", "https://api.cohere.com"),
    ("http://127.0.0.1:8080/gateway", "http://127.0.0.1:8080/gateway")])
def test_the_base_url_may_carry_the_api_version(base_url: str | None, root: str) -> None:
    assert cohere_driver.api_root(base_url) == root

