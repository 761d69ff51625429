"""The `xai` driver against a local server speaking xAI's OpenAI-compatible
Chat Completions API, through the real engine: the built-in `xai` provider
pointed at the server, its own key variable, text, streaming with usage, a
tool call round trip, structured output, 429 with Retry-After and 500s."""

from __future__ import annotations

import json
from typing import Any

import pytest
from chat_completions_wire import chunk, completion
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
from agent_runtime.models import xai as xai_driver

MODEL = {"provider": "xai", "model": "grok-test"}


@pytest.fixture(autouse=True)
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XAI_API_KEY", "xai-test-key")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-secret")  # never sent to xAI


def config(server: FakeProviderServer, **provider: Any) -> dict[str, Any]:
    """The built-in `xai` provider at the local server (its key: XAI_API_KEY)."""
    return {"providers": {"xai": {"driver": "xai", "baseURL": f"{server.url}/v1", **provider}}}


def test_plain_text_with_the_xai_key_and_usage_in_the_checkpoint(
        server: FakeProviderServer) -> None:
    server.add(json_reply(completion("Hello there.", usage=(12, 5), model="grok-test")))
    run = driver_run(config(server))
    result = run.run(PROMPT, model=MODEL)

    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == "Hello there."
    assert run.usage_in_checkpoint(result.run_id) == [
        {"inputTokens": 12, "outputTokens": 5, "totalTokens": 17}]
    [request] = server.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer xai-test-key"
    assert request.body["model"] == "grok-test"
    assert request.body["messages"] == [{"role": "system", "content": "Be brief."},
                                        {"role": "user", "content": "Say hello."}]


def test_streamed_text_reaches_the_text_channel_with_usage_from_the_last_chunk(
        server: FakeProviderServer) -> None:
    server.add(sse_reply([chunk({"role": "assistant", "content": "Hel"}),
                          chunk({"content": "lo."}), chunk({}, finish="stop"),
                          chunk(usage=(9, 3))], done=True))
    run = driver_run(config(server), watch_text=True)
    result = run.run(PROMPT, model=MODEL)

    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == "Hello."
    assert run.deltas() == ["Hel", "lo."]
    assert run.usage_in_checkpoint(result.run_id) == [
        {"inputTokens": 9, "outputTokens": 3, "totalTokens": 12}]
    body = server.requests[0].body
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}


def test_a_tool_call_round_trip_sends_the_result_back_under_the_call_id(
        server: FakeProviderServer) -> None:
    lookup_ticket, seen = ticket_tool()
    # xAI streams a function call whole, in one chunk.
    server.add(sse_reply([chunk({"role": "assistant", "tool_calls": [{
                              "index": 0, "id": "call_7", "type": "function",
                              "function": {"name": "lookup_ticket",
                                           "arguments": '{"ticket_id": "T-1"}'}}]}),
                          chunk({}, finish="tool_calls"), chunk(usage=(20, 8))], done=True),
               sse_reply([chunk({"content": "T-1 is open."}), chunk({}, finish="stop"),
                          chunk(usage=(40, 6))], done=True))
    run = driver_run(config(server), tools=[lookup_ticket], watch_text=True)
    result = run.run({**PROMPT, "prompt": "Is T-1 open?", "tools": ["lookup_ticket"]},
                     model=MODEL)

    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == "T-1 is open."
    assert seen == ["T-1"]
    first, second = server.bodies()
    assert first["tools"][0]["function"]["name"] == "lookup_ticket"
    assistant, tool_message = second["messages"][2:]
    assert assistant["tool_calls"][0]["id"] == "call_7"
    assert tool_message == {"role": "tool", "tool_call_id": "call_7",
                            "content": json.dumps({"id": "T-1", "status": "open"})}
    assert run.consumed_tokens(result.run_id) == 74


def test_output_schema_uses_json_schema_response_format_by_default(
        server: FakeProviderServer) -> None:
    schema = {"type": "object", "properties": {"approved": {"type": "boolean"}},
              "required": ["approved"], "additionalProperties": False}
    server.add(json_reply(completion('{"approved": true}')))
    run = driver_run(config(server))
    result = run.run({**PROMPT, "outputSchema": schema, "maxOutputTokens": 50}, model=MODEL)

    assert result.output == {"approved": True}
    body = server.requests[0].body
    assert body["response_format"]["json_schema"]["schema"] == schema
    assert body["max_completion_tokens"] == 50


def test_a_429_is_retried_after_its_retry_after(server: FakeProviderServer) -> None:
    server.add(json_reply({"code": "Some resource has been exhausted",
                           "error": "Your team has exceeded its rate limit"},
                          status=429, headers={"Retry-After": "3"}),
               json_reply(completion("Hello.")))
    settings = config(server)
    adapter, waits = recorded_retries(xai_driver.create_adapter, "xai", settings)
    result = driver_run(settings, models={"xai": adapter}).run(PROMPT, model=MODEL)

    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == "Hello."
    assert len(server.requests) == 2
    assert waits == [3.0]


def test_server_errors_are_retried_with_backoff_then_fail_with_the_status(
        server: FakeProviderServer) -> None:
    for _ in range(4):
        server.add(json_reply({"error": "internal error"}, status=500))
    settings = config(server)
    adapter, waits = recorded_retries(xai_driver.create_adapter, "xai", settings)
    result = driver_run(settings, models={"xai": adapter}).run(PROMPT, model=MODEL)

    assert result.status is RunStatus.FAILED
    assert result.error is not None
    assert result.error["type"] == "model_error"
    assert result.error["details"] == {"code": "http_500"}
    assert "after 4 attempts" in result.error["message"]
    assert len(server.requests) == 4
    assert len(waits) == 3


def test_the_grok_alias_needs_the_xai_key_not_the_openai_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XAI_API_KEY")
    run = driver_run({})
    with pytest.raises(ConfigError, match="XAI_API_KEY"):
        run.run(PROMPT, model={"provider": "grok", "model": "grok-test"})
    assert xai_driver.DEFAULT_BASE_URL == "https://api.x.ai/v1"
