"""The Chat Completions wire as the openai-style drivers speak it (models/chat_http.py),
against a local HTTP server through the real engine: what reaches the server
(endpoint, headers, proxies) and how every kind of answer is read (fields left
out or null, a stream's error, a body that is not JSON, lines split anywhere)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from chat_completions_wire import chunk, completion
from fake_provider_server import PROMPT, FakeProviderServer, Reply, driver_run, json_reply

from agent_runtime import RunStatus
from agent_runtime.models import chat_http

MODEL = {"provider": "local", "model": "test-model"}


@pytest.fixture(autouse=True)
def no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    """The machine's own proxy settings stay out of these tests."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


def compatible(server: FakeProviderServer, **entry: Any) -> dict[str, Any]:
    return {"providers": {"local": {"driver": "openai-compatible",
                                    "baseURL": f"{server.url}/v1", **entry}}}


def test_the_openai_driver_reads_openais_environment_and_a_compatible_one_does_not(
        server: FakeProviderServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", f"{server.url}/openai/v1")
    monkeypatch.setenv("OPENAI_ORG_ID", "org-7")
    monkeypatch.setenv("OPENAI_PROJECT_ID", "proj-9")
    server.add(json_reply(completion("from openai")), json_reply(completion("from local")))

    result = driver_run({}).run(PROMPT, model={"provider": "openai", "model": "gpt-test"})
    assert (result.status, result.output) == (RunStatus.COMPLETED, "from openai")
    result = driver_run(compatible(server)).run(PROMPT, model=MODEL)
    assert (result.status, result.output) == (RunStatus.COMPLETED, "from local")

    openai_request, local_request = server.requests
    assert openai_request.path == "/openai/v1/chat/completions"
    assert openai_request.headers["authorization"] == "Bearer sk-test"
    assert openai_request.headers["openai-organization"] == "org-7"
    assert openai_request.headers["openai-project"] == "proj-9"
    assert openai_request.headers["user-agent"].startswith("agent-runtime-durable/")
    assert local_request.path == "/v1/chat/completions"
    assert not {"authorization", "openai-organization", "openai-project"} \
        & set(local_request.headers)


def test_a_providers_headers_win_over_the_drivers_own(server: FakeProviderServer,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEAM_AGENT", "house-gateway/2")
    server.add(json_reply(completion()))
    entry = {"headers": {"User-Agent": {"env": "TEAM_AGENT"}}}
    result = driver_run(compatible(server, **entry)).run(PROMPT, model=MODEL)
    assert result.status is RunStatus.COMPLETED
    assert server.requests[0].headers["user-agent"] == "house-gateway/2"


def test_the_environments_http_proxy_carries_the_call(server: FakeProviderServer,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", server.url)
    server.add(json_reply(completion("through the proxy")))
    settings = {"providers": {"local": {"driver": "openai-compatible",
                                        "baseURL": "http://provider.invalid/v1"}}}
    result = driver_run(settings).run(PROMPT, model=MODEL)
    assert (result.status, result.output) == (RunStatus.COMPLETED, "through the proxy")
    # A proxy is sent the whole URL of the request it forwards.
    assert server.requests[0].path == "http://provider.invalid/v1/chat/completions"


def test_a_proxys_credentials_go_to_the_proxy_and_no_proxy_is_honoured(
        server: FakeProviderServer, monkeypatch: pytest.MonkeyPatch) -> None:
    host_port = server.url.removeprefix("http://")
    monkeypatch.setenv("HTTP_PROXY", f"http://relay:s3cret@{host_port}")
    server.add(json_reply(completion("proxied")), json_reply(completion("direct")))
    settings = {"providers": {"local": {"driver": "openai-compatible",
                                        "baseURL": "http://provider.invalid/v1"}}}
    assert driver_run(settings).run(PROMPT, model=MODEL).output == "proxied"
    assert server.requests[0].headers["proxy-authorization"] == "Basic cmVsYXk6czNjcmV0"

    with FakeProviderServer() as gone:
        closed = gone.url  # a proxy nobody answers at: only a direct call can succeed
    monkeypatch.setenv("HTTP_PROXY", closed)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    assert driver_run(compatible(server)).run(PROMPT, model=MODEL).output == "direct"
    assert server.requests[1].path == "/v1/chat/completions"
    assert "proxy-authorization" not in server.requests[1].headers


def test_fields_left_out_or_null_are_absent_not_errors(server: FakeProviderServer) -> None:
    answer = {"choices": [{"message": {"content": "Hi.", "tool_calls": None,
                                       "refusal": None}, "finish_reason": None}],
              "usage": None, "model": None}
    server.add(json_reply(answer))
    run = driver_run(compatible(server))
    result = run.run(PROMPT, model=MODEL)
    assert (result.status, result.output) == (RunStatus.COMPLETED, "Hi.")
    assert run.usage_in_checkpoint(result.run_id) == []


def test_an_answer_without_choices_fails_the_run_clearly(server: FakeProviderServer) -> None:
    server.add(json_reply({"id": "chatcmpl-1", "choices": []}))
    result = driver_run(compatible(server)).run(PROMPT, model=MODEL)
    assert result.status is RunStatus.FAILED
    assert result.error is not None
    assert result.error["details"] == {"code": "empty_response"}


def test_a_body_that_is_not_json_fails_the_run_naming_what_came(
        server: FakeProviderServer) -> None:
    server.add(Reply(body=b"<html>gateway login</html>",
                     headers={"Content-Type": "text/html"}))
    result = driver_run(compatible(server)).run(PROMPT, model=MODEL)
    assert result.status is RunStatus.FAILED
    assert result.error is not None
    assert result.error["details"] == {"code": "invalid_response"}
    assert "the response is not a JSON object" in result.error["message"]
    assert "gateway login" in result.error["message"]
    assert len(server.requests) == 1


def test_an_error_status_with_a_text_body_names_the_status_and_the_text(
        server: FakeProviderServer) -> None:
    server.add(Reply(status=401, body=b"no such key", headers={"Content-Type": "text/plain"}))
    result = driver_run(compatible(server)).run(PROMPT, model=MODEL)
    assert result.status is RunStatus.FAILED
    assert result.error is not None
    assert result.error["details"] == {"code": "http_401"}
    assert 'HTTP 401 http_401: "no such key"' in result.error["message"]


def streamed(chunks: list[bytes]) -> Reply:
    return Reply(headers={"Content-Type": "text/event-stream"}, chunks=chunks)


def test_a_stream_is_read_whatever_its_line_endings_and_however_it_is_split(
        server: FakeProviderServer) -> None:
    long_text = "é" * 100_000  # one line past any reader's buffer, in two-byte characters
    events = [chunk({"role": "assistant", "content": "Look: "}), chunk({"content": long_text}),
              chunk({}, finish="stop"), chunk(usage=(3, 4))]
    wire = b": a comment\r\n\r\n" + b"".join(
        f"data: {json.dumps(event, ensure_ascii=False)}\r\n\r\n".encode()
        for event in events) + b"data: [DONE]"
    # Split mid-line, mid-CRLF and mid-character, as TCP may.
    server.add(streamed([wire[start:start + 4093] for start in range(0, len(wire), 4093)]))
    run = driver_run(compatible(server), watch_text=True)
    result = run.run(PROMPT, model=MODEL)
    assert result.status is RunStatus.COMPLETED
    assert result.output == "Look: " + long_text
    assert run.text == [("ask", "Look: "), ("ask", long_text)]
    assert run.usage_in_checkpoint(result.run_id) == [
        {"inputTokens": 3, "outputTokens": 4, "totalTokens": 7}]


def test_an_error_inside_a_stream_fails_the_run_with_the_providers_message(
        server: FakeProviderServer) -> None:
    error = {"error": {"message": "the model crashed", "type": "server_error"}}
    server.add(streamed([f"data: {json.dumps(chunk({'content': 'Hel'}))}\n\n".encode(),
                         f"data: {json.dumps(error)}\n\n".encode()]))
    run = driver_run(compatible(server), watch_text=True)
    result = run.run(PROMPT, model=MODEL)
    assert result.status is RunStatus.FAILED
    assert result.error is not None
    assert result.error["details"] == {"code": "server_error"}
    assert "the model crashed" in result.error["message"]
    assert run.text == [("ask", "Hel")]
    assert len(server.requests) == 1  # text was shown: not repeated


def test_an_answer_past_the_size_bound_fails_the_run_instead_of_filling_memory(
        server: FakeProviderServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chat_http, "MAX_ANSWER_BYTES", 4096)
    server.add(json_reply(completion("x" * 10_000)))
    result = driver_run(compatible(server)).run(PROMPT, model=MODEL)
    assert result.status is RunStatus.FAILED
    assert result.error is not None
    assert result.error["details"] == {"code": "invalid_response"}
    assert "the response is larger than 4096 bytes" in result.error["message"]


@pytest.mark.parametrize("line_end", [b"\n\n", b""], ids=["one-event", "no-line-end"])
def test_a_stream_line_past_the_size_bound_fails_the_run(
        server: FakeProviderServer, monkeypatch: pytest.MonkeyPatch, line_end: bytes) -> None:
    monkeypatch.setattr(chat_http, "MAX_ANSWER_BYTES", 4096)
    line = f"data: {json.dumps(chunk({'content': 'y' * 10_000}))}".encode() + line_end
    server.add(streamed([line[start:start + 1000] for start in range(0, len(line), 1000)]))
    result = driver_run(compatible(server), watch_text=True).run(PROMPT, model=MODEL)
    assert result.status is RunStatus.FAILED
    assert result.error is not None
    assert result.error["details"] == {"code": "invalid_response"}
    assert "of the stream is larger than 4096 bytes" in result.error["message"]
