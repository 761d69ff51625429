"""The reference `hello.agent.yaml`, unchanged, against a local OpenAI-compatible
server: `--config` points the `openai` provider at it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_provider_server import FakeProviderServer, json_reply, sse_reply

REPO = Path(__file__).resolve().parents[3]
HELLO = REPO / "tests" / "fixtures" / "manifests" / "hello.agent.yaml"
ANSWER = "Checkpoints save a run. A crash loses nothing. The run resumes."


@pytest.fixture
def server() -> Iterator[FakeProviderServer]:
    with FakeProviderServer() as fake:
        yield fake


def run_cli(tmp_path: Path, server: FakeProviderServer,
            *flags: str) -> tuple[subprocess.CompletedProcess[str], dict[str, object]]:
    config = tmp_path / "cfg.yaml"
    config.write_text("version: '1.0'\n"
                      "providers:\n"
                      "  openai:\n"
                      "    driver: openai-compatible\n"
                      f"    baseURL: {server.url}/v1\n"
                      "    apiKey: {env: TEST_KEY}\n", encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=str(REPO), TEST_KEY="local-key")
    done = subprocess.run([sys.executable, "-m", "agent_runtime.cli", "run", str(HELLO),
                           "--config", str(config), "--format", "json", *flags],
                          cwd=tmp_path, capture_output=True, text=True, env=env, timeout=120,
                          check=False)
    assert "Traceback" not in done.stderr, done.stderr
    return done, json.loads(done.stdout.strip().splitlines()[-1])


def usage_chunk() -> dict[str, object]:
    return {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "gpt-5.6",
            "choices": [], "usage": {"prompt_tokens": 30, "completion_tokens": 15,
                                     "total_tokens": 45}}


def text_chunk(text: str, finish: str | None = None) -> dict[str, object]:
    return {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "gpt-5.6",
            "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}


@pytest.mark.slow
def test_hello_runs_unchanged_against_a_local_openai_compatible_server(
        tmp_path: Path, server: FakeProviderServer) -> None:
    server.add(json_reply({
        "id": "c", "object": "chat.completion", "created": 1, "model": "gpt-5.6",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": ANSWER}}],
        "usage": {"prompt_tokens": 30, "completion_tokens": 15, "total_tokens": 45}}))
    done, result = run_cli(tmp_path, server)

    assert done.returncode == 0, done.stderr
    assert result["status"] == "completed"
    assert result["output"] == ANSWER
    assert result["usage"]["consumed_tokens"] == 45  # type: ignore[index]
    [request] = server.requests
    assert request.headers["authorization"] == "Bearer local-key"
    assert request.body["model"] == "gpt-5.6"
    assert request.body["messages"] == [
        {"role": "system", "content": "You explain technical topics clearly and concisely."},
        {"role": "user", "content": "Explain durable agent checkpoints in three sentences."}]


@pytest.mark.slow
def test_stream_shows_text_as_it_arrives_and_the_event_log_never_holds_it(
        tmp_path: Path, server: FakeProviderServer) -> None:
    server.add(sse_reply([text_chunk("Checkpoints save a run. "),
                          text_chunk("A crash loses nothing. "),
                          text_chunk("The run resumes.", finish="stop"), usage_chunk()],
                         done=True))
    done, result = run_cli(tmp_path, server, "--stream")

    assert done.returncode == 0, done.stderr
    assert result["output"] == ANSWER
    assert server.requests[0].body["stream"] is True
    shown = done.stderr
    assert ANSWER in shown.replace("\n", "")
    assert shown.index("> explain [prompt]") < shown.index("Checkpoints save a run.") \
        < shown.index("model openai/gpt-5.6")
    events = (tmp_path / ".agent-runtime" / "events.jsonl").read_text(encoding="utf-8")
    assert '"model.text.delta"' in events
    assert "Checkpoints" not in events
