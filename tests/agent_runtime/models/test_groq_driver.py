"""The `groq` driver against a local server speaking Groq's OpenAI-compatible
Chat Completions API (`/openai/v1/chat/completions`), through the real
engine: its own key variable, text, streaming with usage in `x_groq`, a tool
call round trip, structured output as an instruction, 429 with Retry-After
and 500s."""

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
from agent_runtime.models import groq as groq_driver

MODEL = {"provider": "groq", "model": "llama-test"}


@pytest.fixture(autouse=True)
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GROQ_API_KEY", "gsk-test-key")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-secret")  # never sent to Groq


def config(server: FakeProviderServer, **provider: Any) -> dict[str, Any]:
    """The built-in `groq` provider at the local server (its key: GROQ_API_KEY)."""
    return {"providers": {"groq": {"driver": "groq", "baseURL": f"{server.url}/openai/v1",
                                   **provider}}}


def last_chunk(usage: tuple[int, int]) -> dict[str, Any]:
    """Groq's final streamed chunk: the finish reason, and usage in `x_groq`."""
    return {**chunk({}, finish="stop"), "x_groq": {"id": "req_1", "usage": {
        "prompt_tokens": usage[0], "completion_tokens": usage[1],
        "total_tokens": sum(usage), "queue_time": 0.01, "total_time": 0.2}}}


def test_plain_text_with_the_groq_key_and_usage_in_the_checkpoint(
        server: FakeProviderServer) -> None:
    server.add(json_reply(completion("Hello there.", usage=(12, 5))))
    run = driver_run(config(server))
    result = run.run(PROMPT, model=MODEL)

    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == "Hello there."
    assert run.usage_in_checkpoint(result.run_id) == [
        {"inputTokens": 12, "outputTokens": 5, "totalTokens": 17}]
    [request] = server.requests
    assert request.path == "/openai/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer gsk-test-key"
    assert request.body["messages"][1] == {"role": "user", "content": "Say hello."}


def test_streamed_text_reaches_the_text_channel_with_usage_from_x_groq(
        server: FakeProviderServer) -> None:
    server.add(sse_reply([chunk({"role": "assistant", "content": "Hel"}),
                          chunk({"content": "lo."}), last_chunk((9, 3))], done=True))
    run = driver_run(config(server), watch_text=True)
    result = run.run(PROMPT, model=MODEL)

    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == "Hello."
    assert run.deltas() == ["Hel", "lo."]
    assert run.usage_in_checkpoint(result.run_id) == [
        {"inputTokens": 9, "outputTokens": 3, "totalTokens": 12}]
    body = server.requests[0].body
    assert body["stream"] is True
    assert "stream_options" not in body  # usage comes without being asked


def test_a_tool_call_round_trip_sends_the_result_back_under_the_call_id(
        server: FakeProviderServer) -> None:
    lookup_ticket, seen = ticket_tool()
    call = {"id": "call_7", "type": "function",
            "function": {"name": "lookup_ticket", "arguments": '{"ticket_id": "T-1"}'}}
    server.add(json_reply(completion(None, tool_calls=[call], usage=(20, 8))),
               json_reply(completion("T-1 is open.", usage=(40, 6))))
    run = driver_run(config(server), tools=[lookup_ticket])
    result = run.run({**PROMPT, "prompt": "Is T-1 open?", "tools": ["lookup_ticket"]},
                     model=MODEL)

    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == "T-1 is open."
    assert seen == ["T-1"]
    assistant, tool_message = server.bodies()[1]["messages"][2:]
    assert assistant["tool_calls"][0]["id"] == "call_7"
    assert tool_message == {"role": "tool", "tool_call_id": "call_7",
                            "content": json.dumps({"id": "T-1", "status": "open"})}
    assert run.consumed_tokens(result.run_id) == 74


def test_output_schema_is_an_instruction_unless_structured_outputs_are_on(
        server: FakeProviderServer) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    server.add(json_reply(completion('{"n": 3}')), json_reply(completion('{"n": 4}')))
    result = driver_run(config(server)).run({**PROMPT, "outputSchema": schema}, model=MODEL)
    assert result.output == {"n": 3}
    first = server.requests[0].body
    assert "response_format" not in first
    assert json.dumps(schema) in first["messages"][0]["content"]

    on = driver_run(config(server, supportsStructuredOutputs=True))
    assert on.run({**PROMPT, "outputSchema": schema}, model=MODEL).output == {"n": 4}
    assert server.requests[1].body["response_format"]["json_schema"]["schema"] == schema


def test_a_429_is_retried_after_its_retry_after(server: FakeProviderServer) -> None:
    server.add(json_reply({"error": {"message": "Rate limit reached for model llama-test",
                                     "type": "tokens", "code": "rate_limit_exceeded"}},
                          status=429, headers={"Retry-After": "3"}),
               json_reply(completion("Hello.")))
    settings = config(server)
    adapter, waits = recorded_retries(groq_driver.create_adapter, "groq", settings)
    result = driver_run(settings, models={"groq": adapter}).run(PROMPT, model=MODEL)

    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == "Hello."
    assert len(server.requests) == 2
    assert waits == [3.0]


def test_server_errors_are_retried_with_backoff_then_fail_with_the_status(
        server: FakeProviderServer) -> None:
    for _ in range(4):
        server.add(json_reply({"error": {"message": "Internal Server Error",
                                         "type": "internal_server_error"}}, status=500))
    settings = config(server)
    adapter, waits = recorded_retries(groq_driver.create_adapter, "groq", settings)
    result = driver_run(settings, models={"groq": adapter}).run(PROMPT, model=MODEL)

    assert result.status is RunStatus.FAILED
    assert result.error is not None
    assert result.error["type"] == "model_error"
    assert result.error["details"] == {"code": "internal_server_error"}
    assert "after 4 attempts" in result.error["message"]
    assert len(server.requests) == 4
    assert len(waits) == 3


def test_the_built_in_provider_needs_the_groq_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GROQ_API_KEY")
    run = driver_run({})
    with pytest.raises(ConfigError, match="GROQ_API_KEY"):
        run.run(PROMPT, model=MODEL)
    assert groq_driver.DEFAULT_BASE_URL == "https://api.groq.com/openai/v1"
