"""A model's reasoning, as OpenAI-compatible servers, Anthropic, Gemini and Cohere
stream it: every delta reaches a view that asked for it (`--show-reasoning`),
events count its characters and never hold it, a profile with
`capabilities.reasoning: false` drops it, and `capabilities.maxInputTokens`
refuses a request certainly too large before it is sent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from chat_completions_wire import chunk, completion
from fake_provider_server import PROMPT, FakeProviderServer, driver_run, json_reply, sse_reply

from agent_runtime import RunStatus

REPO = Path(__file__).resolve().parents[3]
MODEL = {"provider": "local", "model": "test-model"}
THOUGHT = ["The user wants ", "a greeting."]


@pytest.fixture(autouse=True)
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCAL_TEST_KEY", "test-key")
    monkeypatch.setenv("CLAUDE_TEST_KEY", "test-key")


def config(server: FakeProviderServer, **capabilities: Any) -> dict[str, Any]:
    return {"providers": {"local": {"driver": "openai-compatible", "baseURL": f"{server.url}/v1",
                                    "apiKey": {"env": "LOCAL_TEST_KEY"}}},
            "models": {"thinker": {"provider": "local", "model": "test-model",
                                   "capabilities": {"streaming": True, **capabilities}}}}


def reasoning_stream(field: str = "reasoning_content") -> Any:
    return sse_reply([chunk({"role": "assistant", field: THOUGHT[0]}),
                      chunk({field: THOUGHT[1]}), chunk({"content": "Hello."}),
                      chunk({}, finish="stop"), chunk(usage=(9, 3))], done=True)


def reasoning_chars(events: Any) -> int:
    return sum(e.data["chars"] for e in events if e.type == "model.reasoning.delta")


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_streamed_reasoning_reaches_the_view_and_events_only_count_it(
        server: FakeProviderServer, field: str) -> None:
    server.add(reasoning_stream(field))
    run = driver_run(config(server, reasoning=True), watch_reasoning=True, watch_text=True)
    result = run.run(PROMPT, model={"ref": "thinker"})

    assert result.status is RunStatus.COMPLETED
    assert result.output == "Hello."  # reasoning is not the answer
    assert run.reasoning == [("ask", THOUGHT[0]), ("ask", THOUGHT[1])]
    assert run.deltas() == ["Hello."]
    assert reasoning_chars(run.events.events) == len("".join(THOUGHT))
    logged = json.dumps([e.to_json() for e in run.events.events])
    assert "greeting" not in logged and "user wants" not in logged


def test_reasoning_in_a_whole_answer_reaches_the_view_once(server: FakeProviderServer) -> None:
    body = completion("Hello.")
    body["choices"][0]["message"]["reasoning_content"] = "".join(THOUGHT)
    server.add(json_reply(body))
    run = driver_run(config(server, streaming=False), watch_reasoning=True)
    result = run.run(PROMPT, model={"ref": "thinker"})

    assert result.output == "Hello."
    assert run.reasoning == [("ask", "".join(THOUGHT))]


def test_a_profile_without_reasoning_drops_it(server: FakeProviderServer) -> None:
    server.add(reasoning_stream())
    run = driver_run(config(server, reasoning=False), watch_reasoning=True)
    result = run.run(PROMPT, model={"ref": "thinker"})

    assert result.output == "Hello."
    assert run.reasoning == []
    assert reasoning_chars(run.events.events) == 0


def test_anthropic_thinking_deltas_are_reasoning(server: FakeProviderServer) -> None:
    events: list[Any] = [("message_start", {"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
        "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 9, "output_tokens": 1}}})]
    blocks = [({"type": "thinking", "thinking": "", "signature": ""},
               [{"type": "thinking_delta", "thinking": part} for part in THOUGHT]),
              ({"type": "text", "text": ""}, [{"type": "text_delta", "text": "Hello."}])]
    for index, (start, deltas) in enumerate(blocks):
        events.append(("content_block_start", {"type": "content_block_start", "index": index,
                                               "content_block": start}))
        events.extend(("content_block_delta", {"type": "content_block_delta", "index": index,
                                               "delta": delta}) for delta in deltas)
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events += [("message_delta", {"type": "message_delta", "delta": {
        "stop_reason": "end_turn", "stop_sequence": None}, "usage": {"output_tokens": 3}}),
               ("message_stop", {"type": "message_stop"})]
    server.add(sse_reply(events))
    settings = {"providers": {"claude": {"driver": "anthropic", "baseURL": server.url,
                                         "apiKey": {"env": "CLAUDE_TEST_KEY"}}}}
    run = driver_run(settings, watch_reasoning=True, watch_text=True)
    result = run.run(PROMPT, model={"provider": "claude", "model": "claude-test"})

    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == "Hello."
    assert [delta for _, delta in run.reasoning] == THOUGHT


def test_max_input_tokens_refuses_a_request_certainly_too_large_before_sending_it(
        server: FakeProviderServer) -> None:
    run = driver_run(config(server, maxInputTokens=50))
    long_prompt = {**PROMPT, "prompt": "word " * 200}  # 1,000 bytes > 50 tokens x 8 bytes
    result = run.run(long_prompt, model={"ref": "thinker"})

    assert result.status is RunStatus.FAILED
    assert result.error is not None and result.error["type"] == "input_too_large"
    assert "capabilities.maxInputTokens" in result.error["message"]
    assert server.requests == []  # refused before a paid call


def test_max_input_tokens_lets_a_request_within_it_through(server: FakeProviderServer) -> None:
    server.add(reasoning_stream())
    run = driver_run(config(server, maxInputTokens=1000))
    assert run.run(PROMPT, model={"ref": "thinker"}).output == "Hello."
    assert len(server.requests) == 1


@pytest.mark.slow
def test_show_reasoning_prints_it_in_the_live_view_and_never_logs_it(
        tmp_path: Path, server: FakeProviderServer) -> None:
    server.add(reasoning_stream())
    (tmp_path / "cfg.yaml").write_text(
        "version: '1.0'\nproviders:\n  local:\n    driver: openai-compatible\n"
        f"    baseURL: {server.url}/v1\n    apiKey: {{env: LOCAL_TEST_KEY}}\n"
        "models:\n  thinker:\n    provider: local\n    model: test-model\n"
        "    capabilities: {reasoning: true, maxInputTokens: 128000}\n", encoding="utf-8")
    (tmp_path / "agent.yaml").write_text(
        "schemaVersion: '1.0'\nid: thinking\nmodel: {ref: thinker}\nsteps:\n"
        "  - id: ask\n    type: prompt\n    prompt: Say hello.\n", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "agent_runtime.cli", "run", "agent.yaml", "--config", "cfg.yaml",
         "--show-reasoning", "--format", "json"], cwd=tmp_path, capture_output=True, text=True,
        env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=120, check=False)

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["output"] == "Hello."
    assert "reasoning: The user wants" in done.stderr
    assert "reasoning: a greeting." in done.stderr
    events = (tmp_path / ".agent-runtime" / "events.jsonl").read_text(encoding="utf-8")
    assert '"model.reasoning.delta"' in events and "greeting" not in events
