"""The `anthropic` driver against a local HTTP server, through the real engine:
text, streaming, tool round trips, outputSchema (a forced answer tool, or
native), usage in the checkpoint, Retry-After, timeouts and error bodies."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fake_provider_server import (
    PROMPT,
    FakeProviderServer,
    driver_run,
    json_reply,
    sse_reply,
    ticket_tool,
)

from agent_runtime import RunStatus
from agent_runtime.errors import ConfigError

MODEL = {"provider": "claude", "model": "claude-test"}


@pytest.fixture(autouse=True)
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLAUDE_TEST_KEY", "test-key")


def config(server: FakeProviderServer, **provider: Any) -> dict[str, Any]:
    entry = {"driver": "anthropic", "baseURL": server.url,
             "apiKey": {"env": "CLAUDE_TEST_KEY"}, **provider}
    return {"providers": {"claude": entry}}


def message(*content: dict[str, Any], stop: str = "end_turn",
            usage: tuple[int, int] = (12, 5), cached: int = 0) -> dict[str, Any]:
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
            "content": list(content), "stop_reason": stop, "stop_sequence": None,
            "usage": {"input_tokens": usage[0], "output_tokens": usage[1],
                      "cache_read_input_tokens": cached}}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def streamed(*blocks: list[dict[str, Any]], stop: str = "end_turn",
             usage: tuple[int, int] = (9, 3)) -> Any:
    """An SSE message: each block is its start event's content block followed by deltas."""
    events: list[Any] = [("message_start", {"type": "message_start", "message": {
        **message(stop=stop, usage=(usage[0], 1)), "stop_reason": None}})]
    for index, (start, *deltas) in enumerate(blocks):
        events.append(("content_block_start", {"type": "content_block_start", "index": index,
                                               "content_block": start}))
        events.extend(("content_block_delta", {"type": "content_block_delta", "index": index,
                                               "delta": delta}) for delta in deltas)
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(("message_delta", {"type": "message_delta",
                                     "delta": {"stop_reason": stop, "stop_sequence": None},
                                     "usage": {"output_tokens": usage[1]}}))
    events.append(("message_stop", {"type": "message_stop"}))
    return sse_reply(events)


def test_plain_text_with_a_separate_system_prompt_and_usage_in_the_checkpoint(
        server: FakeProviderServer) -> None:
    server.add(json_reply(message(text("Hello there."), usage=(12, 5), cached=100)))
    run = driver_run(config(server))
    result = run.run(PROMPT, model=MODEL)

    assert result.status is RunStatus.COMPLETED
    assert result.output == "Hello there."
    # Cached input is billed input: it counts against the budget too.
    assert run.usage_in_checkpoint(result.run_id) == [{"inputTokens": 112, "outputTokens": 5}]
    assert run.consumed_tokens(result.run_id) == 117
    [request] = server.requests
    assert request.path == "/v1/messages"
    # The key reaches the server (as x-api-key or a bearer token, by SDK version).
    assert "test-key" in request.headers.get("x-api-key", "") + request.headers.get(
        "authorization", "")
    assert request.body["system"] == "Be brief."
    assert request.body["messages"] == [{"role": "user",
                                         "content": [{"type": "text", "text": "Say hello."}]}]
    assert request.body["max_tokens"] == 4096
    assert "stream" not in request.body


def test_streamed_text_deltas_reach_the_text_channel_in_order(
        server: FakeProviderServer) -> None:
    server.add(streamed([text(""), {"type": "text_delta", "text": "Hel"},
                         {"type": "text_delta", "text": "lo."}], usage=(9, 3)))
    run = driver_run(config(server), watch_text=True)
    result = run.run(PROMPT, model=MODEL)

    assert result.status is RunStatus.COMPLETED
    assert result.output == "Hello."
    assert run.deltas() == ["Hel", "lo."]
    # the event log gets throttled counts, never the text: all 6 characters, no more
    assert sum(e.data["chars"] for e in run.events.events if e.type == "model.text.delta") == 6
    assert run.usage_in_checkpoint(result.run_id) == [{"inputTokens": 9, "outputTokens": 3}]
    assert server.requests[0].body["stream"] is True


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_tool_use_round_trip_answers_with_a_tool_result_of_the_same_id(
        server: FakeProviderServer, stream: bool) -> None:
    lookup_ticket, seen = ticket_tool()

    use = {"type": "tool_use", "id": "toolu_7", "name": "lookup_ticket", "input": {}}
    if stream:
        server.add(streamed([use, {"type": "input_json_delta", "partial_json": '{"ticket'},
                             {"type": "input_json_delta", "partial_json": '_id": "T-1"}'}],
                            stop="tool_use", usage=(20, 8)),
                   streamed([text(""), {"type": "text_delta", "text": "T-1 is open."}],
                            usage=(40, 6)))
    else:
        server.add(json_reply(message({**use, "input": {"ticket_id": "T-1"}}, stop="tool_use",
                                      usage=(20, 8))),
                   json_reply(message(text("T-1 is open."), usage=(40, 6))))
    run = driver_run(config(server), tools=[lookup_ticket], watch_text=stream)
    result = run.run({**PROMPT, "prompt": "Is T-1 open?", "tools": ["lookup_ticket"]},
                     model=MODEL)

    assert result.status is RunStatus.COMPLETED
    assert result.output == "T-1 is open."
    assert seen == ["T-1"]
    first, second = server.bodies()
    assert first["tools"][0]["name"] == "lookup_ticket"
    assert first["tools"][0]["input_schema"]["required"] == ["ticket_id"]
    assert "tool_choice" not in first
    assistant, results = second["messages"][1:]
    assert assistant == {"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_7", "name": "lookup_ticket",
         "input": {"ticket_id": "T-1"}}]}
    [result_block] = results["content"]
    assert results["role"] == "user"
    assert result_block["type"] == "tool_result"
    assert result_block["tool_use_id"] == "toolu_7"
    assert result_block["is_error"] is False
    assert json.loads(result_block["content"]) == {"id": "T-1", "status": "open"}
    assert run.consumed_tokens(result.run_id) == 74


SCHEMA = {"type": "object", "properties": {"approved": {"type": "boolean"}},
          "required": ["approved"]}


def test_output_schema_is_answered_through_a_forced_tool(server: FakeProviderServer) -> None:
    server.add(json_reply(message({"type": "tool_use", "id": "toolu_1",
                                   "name": "structured_output", "input": {"approved": True}},
                                  stop="tool_use")))
    run = driver_run(config(server))
    result = run.run({**PROMPT, "outputSchema": SCHEMA}, model=MODEL)

    assert result.status is RunStatus.COMPLETED
    assert result.output == {"approved": True}
    body = server.requests[0].body
    assert body["tool_choice"] == {"type": "tool", "name": "structured_output"}
    assert body["tools"] == [{"name": "structured_output", "description": body["tools"][0][
        "description"], "input_schema": SCHEMA}]


def test_a_non_object_output_schema_is_wrapped_and_unwrapped(server: FakeProviderServer) -> None:
    schema = {"type": "array", "items": {"type": "string"}}
    server.add(json_reply(message({"type": "tool_use", "id": "toolu_1",
                                   "name": "structured_output",
                                   "input": {"answer": ["a", "b"]}}, stop="tool_use")))
    run = driver_run(config(server))
    result = run.run({**PROMPT, "outputSchema": schema}, model=MODEL)

    assert result.output == ["a", "b"]
    assert server.requests[0].body["tools"][0]["input_schema"]["properties"]["answer"] == schema


def test_native_structured_output_when_the_provider_supports_it(
        server: FakeProviderServer) -> None:
    server.add(json_reply(message(text('{"approved": false}'))))
    run = driver_run(config(server, supportsStructuredOutputs=True))
    result = run.run({**PROMPT, "outputSchema": SCHEMA}, model=MODEL)

    assert result.output == {"approved": False}
    body = server.requests[0].body
    assert body["output_config"] == {"format": {"type": "json_schema", "schema": SCHEMA}}
    assert "tools" not in body


def test_an_error_body_becomes_a_clear_run_failure(server: FakeProviderServer) -> None:
    server.add(json_reply({"type": "error", "error": {
        "type": "invalid_request_error", "message": "max_tokens: 999999 > 64000"}}, status=400))
    run = driver_run(config(server))
    result = run.run(PROMPT, model=MODEL)

    assert result.status is RunStatus.FAILED
    assert result.error is not None
    assert result.error["type"] == "model_error"
    assert result.error["details"] == {"code": "invalid_request_error"}
    assert ('claude/claude-test: HTTP 400 invalid_request_error: "max_tokens: 999999 > 64000"'
            in result.error["message"])
    assert len(server.requests) == 1


def test_the_built_in_provider_needs_anthropic_api_key(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    run = driver_run({})
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
        run.run(PROMPT, model={"provider": "anthropic", "model": "claude-test"})
