"""The `openai` and `openai-compatible` drivers against a local HTTP server, through
the real engine: text, streaming, tool round trips, outputSchema, usage in the
checkpoint, retries honouring Retry-After, timeouts and error bodies."""

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
    sse_reply,
    ticket_tool,
)

from agent_runtime import RunStatus
from agent_runtime.config import parse_config
from agent_runtime.errors import ConfigError
from agent_runtime.models import openai as openai_driver
from agent_runtime.models.retry import RetryPolicy

MODEL = {"provider": "local", "model": "test-model"}


@pytest.fixture(autouse=True)
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCAL_TEST_KEY", "test-key")


def config(server: FakeProviderServer, **provider: Any) -> dict[str, Any]:
    entry = {"driver": "openai-compatible", "baseURL": f"{server.url}/v1",
             "apiKey": {"env": "LOCAL_TEST_KEY"}, **provider}
    return {"providers": {"local": entry}}


def test_plain_text_completes_the_run_and_usage_is_checkpointed(
        server: FakeProviderServer) -> None:
    server.add(json_reply(completion("Hello there.")))
    run = driver_run(config(server))
    result = run.run(PROMPT, model=MODEL)

    assert result.status is RunStatus.COMPLETED
    assert result.output == "Hello there."
    assert run.usage_in_checkpoint(result.run_id) == [
        {"inputTokens": 12, "outputTokens": 5, "totalTokens": 17}]
    assert run.consumed_tokens(result.run_id) == 17
    assert result.usage["input_tokens"] == 12
    [request] = server.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer test-key"
    assert request.body["model"] == "test-model"
    assert request.body["messages"] == [{"role": "system", "content": "Be brief."},
                                        {"role": "user", "content": "Say hello."}]
    assert "stream" not in request.body


def test_streamed_deltas_reach_the_text_channel_in_order_and_events_carry_no_text(
        server: FakeProviderServer) -> None:
    server.add(sse_reply([chunk({"role": "assistant", "content": ""}),
                          chunk({"content": "Hel"}), chunk({"content": "lo, "}),
                          chunk({"content": "world."}), chunk({}, finish="stop"),
                          chunk(usage=(9, 3))], done=True))
    run = driver_run(config(server), watch_text=True)
    result = run.run(PROMPT, model=MODEL)

    assert result.status is RunStatus.COMPLETED
    assert result.output == "Hello, world."
    assert run.text == [("ask", "Hel"), ("ask", "lo, "), ("ask", "world.")]
    deltas = [e for e in run.events.events if e.type == "model.text.delta"]
    # throttled counts of characters, never the text; together they cover it all
    assert sum(e.data["chars"] for e in deltas) == len("Hello, world.")
    assert all(set(e.data) == {"chars"} for e in deltas)
    assert run.usage_in_checkpoint(result.run_id) == [
        {"inputTokens": 9, "outputTokens": 3, "totalTokens": 12}]
    body = server.requests[0].body
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}


def test_a_model_profile_with_streaming_streams_without_a_watcher(
        server: FakeProviderServer) -> None:
    server.add(sse_reply([chunk({"content": "Hi"}), chunk({}, finish="stop"),
                          chunk(usage=(1, 1))], done=True))
    settings = config(server, includeUsage=True)
    settings["models"] = {"fast": {"provider": "local", "model": "test-model",
                                   "capabilities": {"streaming": True}}}
    run = driver_run(settings)
    result = run.run(PROMPT, model={"ref": "fast"})

    assert result.output == "Hi"
    assert server.requests[0].body["stream"] is True
    assert run.event_types("model.text.delta") == ["model.text.delta"]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_tool_call_round_trip_sends_the_result_back_under_the_call_id(
        server: FakeProviderServer, stream: bool) -> None:
    lookup_ticket, seen = ticket_tool()

    call = {"id": "call_7", "type": "function",
            "function": {"name": "lookup_ticket", "arguments": '{"ticket_id": "T-1"}'}}
    if stream:
        server.add(
            sse_reply([chunk({"tool_calls": [{"index": 0, "id": "call_7", "type": "function",
                                              "function": {"name": "lookup_ticket",
                                                           "arguments": '{"ticket'}}]}),
                       chunk({"tool_calls": [{"index": 0,
                                              "function": {"arguments": '_id": "T-1"}'}}]}),
                       chunk({}, finish="tool_calls"), chunk(usage=(20, 8))], done=True),
            sse_reply([chunk({"content": "T-1 is open."}), chunk({}, finish="stop"),
                       chunk(usage=(40, 6))], done=True))
    else:
        server.add(json_reply(completion(None, tool_calls=[call], usage=(20, 8))),
                   json_reply(completion("T-1 is open.", usage=(40, 6))))
    run = driver_run(config(server), tools=[lookup_ticket], watch_text=stream)
    result = run.run({**PROMPT, "prompt": "Is T-1 open?", "tools": ["lookup_ticket"]},
                     model=MODEL)

    assert result.status is RunStatus.COMPLETED
    assert result.output == "T-1 is open."
    assert seen == ["T-1"]
    first, second = server.bodies()
    assert first["tools"][0]["function"]["name"] == "lookup_ticket"
    assert first["tools"][0]["function"]["parameters"]["required"] == ["ticket_id"]
    assistant, tool_message = second["messages"][2:]
    assert assistant["tool_calls"][0]["id"] == "call_7"
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {"ticket_id": "T-1"}
    assert tool_message["role"] == "tool"
    assert tool_message["tool_call_id"] == "call_7"
    assert json.loads(tool_message["content"]) == {"id": "T-1", "status": "open"}
    assert [u["totalTokens"] for u in run.usage_in_checkpoint(result.run_id)] == [28, 46]
    assert run.consumed_tokens(result.run_id) == 74


SCHEMA = {"type": "object", "properties": {"approved": {"type": "boolean"},
                                           "reason": {"type": "string"}},
          "required": ["approved", "reason"], "additionalProperties": False}


def test_output_schema_uses_json_schema_response_format_when_supported(
        server: FakeProviderServer) -> None:
    server.add(json_reply(completion('{"approved": true, "reason": "fine"}')))
    run = driver_run(config(server, supportsStructuredOutputs=True))
    result = run.run({**PROMPT, "outputSchema": SCHEMA}, model=MODEL)

    assert result.status is RunStatus.COMPLETED
    assert result.output == {"approved": True, "reason": "fine"}
    format_ = server.requests[0].body["response_format"]
    assert format_["type"] == "json_schema"
    assert format_["json_schema"]["schema"] == SCHEMA
    assert format_["json_schema"]["strict"] is True  # the schema is closed and fully required


def test_a_non_object_output_schema_is_wrapped_in_the_response_format(
        server: FakeProviderServer) -> None:
    schema = {"type": "array", "items": {"type": "string"}}
    server.add(json_reply(completion('{"answer": ["a", "b"]}')))
    run = driver_run(config(server, supportsStructuredOutputs=True))
    result = run.run({**PROMPT, "outputSchema": schema}, model=MODEL)

    assert result.output == ["a", "b"]
    sent = server.requests[0].body["response_format"]["json_schema"]
    assert sent["schema"]["properties"]["answer"] == schema
    assert sent["strict"] is True


def test_output_schema_without_structured_outputs_instructs_and_parses(
        server: FakeProviderServer) -> None:
    loose = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    server.add(json_reply(completion('```json\n{"n": 3}\n```')))
    run = driver_run(config(server))  # openai-compatible: no structured outputs by default
    result = run.run({**PROMPT, "outputSchema": loose}, model=MODEL)

    assert result.output == {"n": 3}
    body = server.requests[0].body
    assert "response_format" not in body
    assert body["messages"][0]["role"] == "system"
    assert body["messages"][0]["content"].startswith("Be brief.")
    assert json.dumps(loose) in body["messages"][0]["content"]


def test_server_errors_are_retried_with_bounded_backoff_then_fail(
        server: FakeProviderServer) -> None:
    waits: list[float] = []

    async def record(seconds: float) -> None:
        waits.append(seconds)

    for _ in range(5):
        server.add(json_reply({"error": {"message": "overloaded", "type": "server_error"}},
                              status=503))
    settings = config(server)
    adapter = openai_driver.create_adapter(
        "local", parse_config({"version": "1.0", **settings}, source="test"),
        retry=RetryPolicy(sleep=record))
    run = driver_run(settings, models={"local": adapter})
    result = run.run(PROMPT, model=MODEL)

    assert result.status is RunStatus.FAILED
    assert len(server.requests) == 4
    assert len(waits) == 3
    assert all(0.25 <= wait <= 8 for wait in waits)
    assert waits[2] > waits[0]
    assert result.error is not None
    assert "after 4 attempts" in result.error["message"]
    assert result.error["details"] == {"code": "server_error"}


def test_an_error_body_becomes_a_clear_run_failure(server: FakeProviderServer) -> None:
    server.add(json_reply({"error": {"message": "The model `test-model` does not exist",
                                     "type": "invalid_request_error",
                                     "code": "model_not_found"}}, status=404))
    run = driver_run(config(server))
    result = run.run(PROMPT, model=MODEL)

    assert result.status is RunStatus.FAILED
    assert result.error is not None
    assert result.error["type"] == "model_error"
    assert result.error["details"] == {"code": "model_not_found"}
    message = result.error["message"]
    assert "local/test-model" in message
    assert 'HTTP 404 model_not_found: "The model `test-model` does not exist"' in message
    assert len(server.requests) == 1  # a client error is not retried
    record = run.store.load_run(result.run_id)
    assert record is not None and record.error is not None
    assert record.error.message == message


def test_a_missing_key_is_refused_before_any_request(server: FakeProviderServer,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOCAL_TEST_KEY")
    run = driver_run(config(server))
    with pytest.raises(ConfigError, match="LOCAL_TEST_KEY") as refused:
        run.run(PROMPT, model=MODEL)
    assert "'local'" in str(refused.value)
    assert server.requests == []


def test_the_built_in_openai_provider_needs_openai_api_key(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    run = driver_run({})
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        run.run(PROMPT, model={"provider": "openai", "model": "gpt-test"})


def test_a_compatible_server_never_receives_the_openai_key(
        server: FakeProviderServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    server.add(json_reply(completion()))
    entry = {"driver": "openai-compatible", "baseURL": f"{server.url}/v1"}
    run = driver_run({"providers": {"local": entry}})
    assert run.run(PROMPT, model=MODEL).status is RunStatus.COMPLETED
    # No key named: no Authorization header at all.
    assert "authorization" not in server.requests[0].headers


def test_an_unreachable_server_is_retried_then_fails_with_connection_error() -> None:
    waits: list[float] = []

    async def record(seconds: float) -> None:
        waits.append(seconds)

    with FakeProviderServer() as gone:
        closed = gone.url  # nothing listens here once the server has stopped
    settings = {"providers": {"local": {"driver": "openai-compatible", "baseURL": f"{closed}/v1"}}}
    adapter = openai_driver.create_adapter(
        "local", parse_config({"version": "1.0", **settings}, source="test"),
        retry=RetryPolicy(sleep=record))
    result = driver_run(settings, models={"local": adapter}).run(PROMPT, model=MODEL)

    assert result.status is RunStatus.FAILED
    assert result.error is not None
    assert result.error["details"] == {"code": "connection_error"}
    assert "after 4 attempts" in result.error["message"]
    assert len(waits) == 3
