"""The Messages API as the `anthropic` driver speaks it over aiohttp
(models/anthropic.py on models/chat_http.py), against a local HTTP server through
the real engine: the endpoint and headers that reach the server, the body, a
stream built into the final message (a tool's input from its JSON pieces,
usage counted once), and the provider's errors, in the stream and as statuses."""

from __future__ import annotations

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
from agent_runtime.models import anthropic as anthropic_driver
from agent_runtime.models.provider_settings import ProviderSettings

MODEL = {"provider": "claude", "model": "claude-test"}
TOOL_PROMPT = {**PROMPT, "prompt": "Is T-1 open?", "tools": ["lookup_ticket"]}


@pytest.fixture(autouse=True)
def environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A key for the provider; the machine's proxies and Anthropic settings stay out."""
    monkeypatch.setenv("CLAUDE_TEST_KEY", "test-key")
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)


def config(server: FakeProviderServer, **provider: Any) -> dict[str, Any]:
    entry = {"driver": "anthropic", "baseURL": server.url,
             "apiKey": {"env": "CLAUDE_TEST_KEY"}, **provider}
    return {"providers": {"claude": entry}}


def message(*content: dict[str, Any], stop: str = "end_turn") -> dict[str, Any]:
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
            "content": list(content), "stop_reason": stop, "stop_sequence": None,
            "usage": {"input_tokens": 12, "output_tokens": 5}}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def tool_use(name: str = "lookup_ticket") -> dict[str, Any]:
    return {"type": "tool_use", "id": "toolu_7", "name": name, "input": {}}


def start(usage: dict[str, int] | None = None) -> tuple[str, dict[str, Any]]:
    return ("message_start", {"type": "message_start", "message": {
        **message(), "content": [], "stop_reason": None,
        "usage": usage or {"input_tokens": 9, "output_tokens": 1}}})


def block(index: int, content_block: dict[str, Any], *deltas: dict[str, Any],
          ) -> list[tuple[str, dict[str, Any]]]:
    """A content block's events: its start, its deltas, its stop."""
    return [("content_block_start", {"type": "content_block_start", "index": index,
                                     "content_block": content_block}),
            *(("content_block_delta", {"type": "content_block_delta", "index": index,
                                       "delta": delta}) for delta in deltas),
            ("content_block_stop", {"type": "content_block_stop", "index": index})]


def end(stop: str = "end_turn", usage: dict[str, int] | None = None,
        ) -> list[tuple[str, dict[str, Any]]]:
    return [("message_delta", {"type": "message_delta",
                               "delta": {"stop_reason": stop, "stop_sequence": None},
                               "usage": usage or {"output_tokens": 3}}),
            ("message_stop", {"type": "message_stop"})]


def json_pieces(*pieces: str) -> list[dict[str, Any]]:
    return [{"type": "input_json_delta", "partial_json": piece} for piece in pieces]


def text_delta(value: str) -> dict[str, Any]:
    return {"type": "text_delta", "text": value}


def test_anthropic_base_url_is_the_endpoint_without_a_base_url_and_a_base_url_wins(
        server: FakeProviderServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "env-key")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"{server.url}/gateway/")
    server.add(json_reply(message(text("from the environment"))),
               json_reply(message(text("from the config"))))

    result = driver_run({}).run(PROMPT, model={"provider": "anthropic", "model": "claude-test"})
    assert (result.status, result.output) == (RunStatus.COMPLETED, "from the environment")
    result = driver_run(config(server)).run(PROMPT, model=MODEL)
    assert (result.status, result.output) == (RunStatus.COMPLETED, "from the config")

    from_environment, from_config = server.requests
    assert from_environment.path == "/gateway/v1/messages"  # its trailing slash stripped
    assert from_environment.headers["x-api-key"] == "env-key"
    assert from_config.path == "/v1/messages"
    assert from_config.headers["x-api-key"] == "test-key"


def test_the_headers_sent_and_a_providers_own_win_whatever_their_case(
        server: FakeProviderServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PINNED_VERSION", "2024-01-01")
    monkeypatch.setenv("TEAM_AGENT", "house-gateway/2")
    server.add(json_reply(message(text("Hi."))), json_reply(message(text("Hi."))))

    assert driver_run(config(server)).run(PROMPT, model=MODEL).output == "Hi."
    headers = {"Anthropic-Version": {"env": "PINNED_VERSION"},
               "user-agent": {"env": "TEAM_AGENT"}}
    assert driver_run(config(server, headers=headers)).run(PROMPT, model=MODEL).output == "Hi."

    ours, theirs = server.requests
    assert ours.headers["anthropic-version"] == "2023-06-01"
    assert ours.headers["x-api-key"] == "test-key"
    assert ours.headers["content-type"] == "application/json"
    assert ours.headers["accept"] == "application/json"
    assert ours.headers["user-agent"].startswith("agent-runtime-durable/")
    assert "authorization" not in ours.headers  # the key goes only as x-api-key
    sent = [(name.lower(), value) for name, value in theirs.header_lines]
    assert [value for name, value in sent if name == "anthropic-version"] == ["2024-01-01"]
    assert [value for name, value in sent if name == "user-agent"] == ["house-gateway/2"]


def test_without_a_key_no_x_api_key_is_sent(server: FakeProviderServer) -> None:
    adapter = anthropic_driver.AnthropicModel(ProviderSettings(
        name="claude", driver="anthropic", api_key=None, base_url=server.url))
    server.add(json_reply(message(text("Hi."))))
    result = driver_run(config(server), models={"claude": adapter}).run(PROMPT, model=MODEL)

    assert (result.status, result.output) == (RunStatus.COMPLETED, "Hi.")
    [request] = server.requests
    assert not {"x-api-key", "authorization"} & set(request.headers)
    assert request.headers["anthropic-version"] == "2023-06-01"


def test_options_are_merged_into_the_body_over_the_named_fields(
        server: FakeProviderServer) -> None:
    server.add(json_reply(message(text("Hi."))))
    options = {"temperature": 0.2, "topK": 5, "stopSequences": ["END"],
               "metadata": {"user_id": "u-1"}, "maxOutputTokens": 256, "system": "Be terse."}
    run = driver_run(config(server))
    result = run.run(PROMPT, model={**MODEL, "options": options},
                     limits={"providerTimeoutMs": 30_000})

    assert result.status is RunStatus.COMPLETED, result.error
    body = server.requests[0].body
    assert body["temperature"] == 0.2
    assert body["top_k"] == 5
    assert body["stop_sequences"] == ["END"]
    assert body["metadata"] == {"user_id": "u-1"}
    assert body["max_tokens"] == 256
    assert body["system"] == "Be terse."  # an option wins over the field the driver set
    assert not {"extra_body", "timeout", "maxOutputTokens", "topK", "stream"} & set(body)


def test_a_tool_input_streamed_in_pieces_is_one_call_with_the_parsed_arguments(
        server: FakeProviderServer) -> None:
    lookup_ticket, seen = ticket_tool()
    server.add(
        sse_reply([start(), *block(0, text(""), text_delta("Checking.")),
                   *block(1, tool_use(), *json_pieces("", '{"tic', 'ket_id": "', 'T-1"', "}")),
                   *end("tool_use")]),
        sse_reply([start(), *block(0, text(""), text_delta("T-1 is open.")), *end()]))
    run = driver_run(config(server), tools=[lookup_ticket], watch_text=True)
    result = run.run(TOOL_PROMPT, model=MODEL)

    assert (result.status, result.output) == (RunStatus.COMPLETED, "T-1 is open.")
    assert seen == ["T-1"]
    # A real tool's JSON is not the answer: only text reaches the text channel.
    assert run.deltas() == ["Checking.", "T-1 is open."]
    tool_uses = [part for part in server.requests[1].body["messages"][1]["content"]
                 if part["type"] == "tool_use"]
    assert tool_uses == [{"type": "tool_use", "id": "toolu_7", "name": "lookup_ticket",
                          "input": {"ticket_id": "T-1"}}]


def test_a_streamed_structured_answer_relays_its_json_and_is_the_output(
        server: FakeProviderServer) -> None:
    schema = {"type": "object", "properties": {"approved": {"type": "boolean"}},
              "required": ["approved"]}
    server.add(sse_reply([start(), *block(0, tool_use("structured_output"),
                                          *json_pieces('{"appro', 'ved": true}')),
                          *end("tool_use")]))
    run = driver_run(config(server), watch_text=True)
    result = run.run({**PROMPT, "outputSchema": schema}, model=MODEL)

    assert (result.status, result.output) == (RunStatus.COMPLETED, {"approved": True})
    assert run.deltas() == ['{"appro', 'ved": true}']


@pytest.mark.parametrize("pieces", [('{"ticket_id": "T-', ), ('["T-1"]', )],
                         ids=["not-json", "not-an-object"])
def test_a_streamed_tool_input_that_is_not_a_json_object_fails_the_call(
        server: FakeProviderServer, pieces: tuple[str, ...]) -> None:
    lookup_ticket, seen = ticket_tool()
    server.add(sse_reply([start(), *block(0, tool_use(), *json_pieces(*pieces)),
                          *end("tool_use")]))
    run = driver_run(config(server), tools=[lookup_ticket], watch_text=True)
    result = run.run(TOOL_PROMPT, model=MODEL)

    assert result.status is RunStatus.FAILED
    assert result.error is not None
    assert result.error["details"] == {"code": "invalid_tool_call"}
    assert 'the model called tool "lookup_ticket" with arguments that are not' \
        in result.error["message"]
    assert seen == []
    assert len(server.requests) == 1


def test_a_non_streamed_tool_input_that_is_not_an_object_fails_the_call(
        server: FakeProviderServer) -> None:
    lookup_ticket, seen = ticket_tool()
    server.add(json_reply(message({**tool_use(), "input": '{"ticket_id": "T-1"}'},
                                  stop="tool_use")))
    result = driver_run(config(server), tools=[lookup_ticket]).run(TOOL_PROMPT, model=MODEL)

    assert result.status is RunStatus.FAILED
    assert result.error is not None
    assert result.error["details"] == {"code": "invalid_tool_call"}
    assert 'tool "lookup_ticket" with arguments that are not a JSON object' \
        in result.error["message"]
    assert seen == []


def test_fields_left_out_or_null_are_absent_not_errors(server: FakeProviderServer) -> None:
    server.add(json_reply({"content": [text("Hi."), {"type": "thinking", "thinking": None},
                                       None],
                           "stop_reason": None, "model": None, "usage": None}))
    run = driver_run(config(server), watch_reasoning=True)
    result = run.run(PROMPT, model=MODEL)

    assert (result.status, result.output) == (RunStatus.COMPLETED, "Hi.")
    assert run.usage_in_checkpoint(result.run_id) == []
    assert run.reasoning == []


def test_an_error_event_in_the_stream_fails_the_call_with_the_providers_type(
        server: FakeProviderServer) -> None:
    overloaded = {"type": "error", "error": {"type": "overloaded_error",
                                             "message": "Overloaded"}}
    server.add(sse_reply([start(), ("content_block_start", {
        "type": "content_block_start", "index": 0, "content_block": text("")}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": text_delta("Hel")}),
        ("ping", {"type": "ping"}), ("error", overloaded)]))
    run = driver_run(config(server), watch_text=True)
    result = run.run(PROMPT, model=MODEL)

    assert result.status is RunStatus.FAILED
    assert result.error is not None
    assert result.error["details"] == {"code": "overloaded_error"}
    assert 'the provider failed the stream: "Overloaded"' in result.error["message"]
    assert run.deltas() == ["Hel"]
    assert len(server.requests) == 1  # text was shown: not repeated


def test_a_stream_cut_short_is_retried_while_nothing_was_shown(
        server: FakeProviderServer) -> None:
    adapter, waits = recorded_retries(anthropic_driver.create_adapter, "claude",
                                      config(server))
    server.add(sse_reply([start(), ("ping", {"type": "ping"})]),
               sse_reply([start(), *block(0, text(""), text_delta("Hello.")), *end()]))
    run = driver_run(config(server), models={"claude": adapter}, watch_text=True)
    result = run.run(PROMPT, model=MODEL)

    assert (result.status, result.output) == (RunStatus.COMPLETED, "Hello.")
    assert run.deltas() == ["Hello."]
    assert len(server.requests) == 2
    assert len(waits) == 1


RATE_LIMITED = {"type": "error", "error": {
    "type": "rate_limit_error",
    "message": "Number of requests has exceeded your per-minute rate limit"}}


def test_a_429_with_anthropics_error_body_waits_its_retry_after(
        server: FakeProviderServer) -> None:
    adapter, waits = recorded_retries(anthropic_driver.create_adapter, "claude",
                                      config(server))
    server.add(json_reply(RATE_LIMITED, status=429, headers={"Retry-After": "7"}),
               json_reply(message(text("Hello."))))
    result = driver_run(config(server), models={"claude": adapter}).run(PROMPT, model=MODEL)

    assert (result.status, result.output) == (RunStatus.COMPLETED, "Hello.")
    assert waits == [7.0]
    assert len(server.requests) == 2


def test_a_429_that_persists_fails_with_the_rate_limit_error_code(
        server: FakeProviderServer) -> None:
    adapter, waits = recorded_retries(anthropic_driver.create_adapter, "claude",
                                      config(server))
    server.add(*[json_reply(RATE_LIMITED, status=429, headers={"Retry-After": "2"})] * 4)
    result = driver_run(config(server), models={"claude": adapter}).run(PROMPT, model=MODEL)

    assert result.status is RunStatus.FAILED
    assert result.error is not None
    assert result.error["details"] == {"code": "rate_limit_error"}
    assert ('HTTP 429 rate_limit_error: "Number of requests has exceeded your per-minute '
            'rate limit" (after 4 attempts)') in result.error["message"]
    assert waits == [2.0, 2.0, 2.0]


def test_usage_repeated_in_message_delta_is_counted_once(server: FakeProviderServer) -> None:
    counts = {"input_tokens": 10, "cache_creation_input_tokens": 5,
              "cache_read_input_tokens": 100}
    server.add(sse_reply([start({**counts, "output_tokens": 1}),
                          *block(0, text(""), text_delta("Hello.")),
                          *end(usage={**counts, "output_tokens": 7})]))
    run = driver_run(config(server), watch_text=True)
    result = run.run(PROMPT, model=MODEL)

    assert (result.status, result.output) == (RunStatus.COMPLETED, "Hello.")
    assert run.usage_in_checkpoint(result.run_id) == [{"inputTokens": 115, "outputTokens": 7}]
    assert run.consumed_tokens(result.run_id) == 122
