"""The reference's examples/interactive-web/interactive-brief.agent.yaml, unchanged, against
a local stdio MCP stand-in for its `context7` connection and a scripted `default` model."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from reference_harness import Host

from agent_runtime import RunStatus
from agent_runtime.config import parse_config
from agent_runtime.run_manifest import load_agent_manifest
from agent_runtime.testing import scripted

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "fixtures" / "interactive-brief.agent.yaml"
STAND_IN = HERE / "context7_stand_in.py"

QUESTION = "How do I bound an await with a timeout?"
SCRIPT = [
    {"toolCalls": [{"name": "context7__query-docs",
                    "arguments": {"libraryId": "/python/cpython", "query": QUESTION}}]},
    {"text": "Notes: asyncio.timeout() bounds an await and raises TimeoutError."},
    {"text": "Draft: wrap awaits in asyncio.timeout()."},
    {"text": "1. asyncio.timeout() bounds an await."},
    {"text": "Caution: cancellation needs cleanup."},
    {"text": "Brief: bound every await with asyncio.timeout()."},
]


@pytest.mark.slow
def test_the_interactive_brief_runs_unchanged_with_a_context7_stand_in(tmp_path: Path) -> None:
    log = tmp_path / "context7.jsonl"
    config = parse_config({"version": "1.0",
                           "models": {"default": {"provider": "scripted", "model": "test"}},
                           "connections": {"context7": {
                               "driver": "mcp", "transport": "stdio",
                               "command": sys.executable, "args": [str(STAND_IN), str(log)],
                               "mode": "read", "tools": ["query-docs"],
                               "readTools": ["query-docs"]}}}, source="test-config")
    model = scripted(responses=SCRIPT)
    host = Host(model=model, config=config)
    result = host.run(load_agent_manifest(MANIFEST), options={}, variables={
        "topic": "Timeouts in asyncio", "audience": "backend engineers",
        "libraryId": "/python/cpython", "documentationQuestion": QUESTION})

    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == "Brief: bound every await with asyncio.timeout()."
    # the tool call reached the stand-in once, under the run's key, and is recorded
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert [call["arguments"] for call in calls] == [{"libraryId": "/python/cpython",
                                                      "query": QUESTION}]
    checkpoint = host.store.load_latest_checkpoint(result.run_id)
    assert checkpoint is not None
    results = [part["result"] for item in checkpoint.transcript
               if item["type"] == "tool-result" for part in item["content"]]
    assert results[0]["output"]["result"].startswith("asyncio.timeout() bounds an await")
    assert calls[0]["idempotencyKey"] == results[0]["idempotencyKey"]
    # templates saw the defaults and the overrides; includeRisks ran the review step
    steps = [request.step_id for request in model.requests]
    assert steps == ["gather-context", "gather-context", "draft", "extract-evidence",
                     "review-risks", "finalize"]
    draft = model.requests[2].messages
    assert draft[0]["content"][0]["text"] == ("Write in a practical tone for backend engineers. "
                                              "Keep the complete brief below 220 words.")
    assert host.variables(result.run_id)["finalBrief"] == result.output
