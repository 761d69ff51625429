"""`tool-agent.agent.yaml`, unchanged, run by the `agent-runtime` command against a
local MCP server (tests/agent_runtime/mcp_documents_server.py over stdio) that
provides `documents.search` and `documents.read`; and refused, exit 2, when the
host config does not allow what it asks for."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from stores.records import EffectStatus
from stores.sqlite import SqliteRunStore

REPO = Path(__file__).resolve().parents[2]
MANIFEST = REPO / "tests" / "fixtures" / "manifests" / "tool-agent.agent.yaml"
SERVER = REPO / "tests" / "agent_runtime" / "mcp_documents_server.py"

pytestmark = pytest.mark.slow


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "agent_runtime.cli", *args], cwd=cwd,
                          capture_output=True, text=True, env=env, timeout=120, check=False)


def write_config(tmp_path: Path, **documents: Any) -> Path:
    config = {"version": "1.0", "connections": {"documents": {
        "driver": "mcp", "transport": "stdio", "command": sys.executable,
        "args": [str(SERVER), str(tmp_path / "received.jsonl")],
        "mode": "read", "tools": ["search", "read"], "readTools": ["search", "read"],
        # required and patient: a slow start on a loaded machine fails at the connection
        "required": True, "connectTimeoutMs": 300_000, **documents}}}
    path = tmp_path / "host.config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def write_script(tmp_path: Path) -> Path:
    script = {"responses": [
        {"toolCalls": [{"name": "docs__search", "arguments": {"query": "checkpoint recovery"}}],
         "usage": {"inputTokens": 40, "outputTokens": 8}},
        {"toolCalls": [{"name": "docs__read", "arguments": {"id": "doc-1"}}],
         "usage": {"inputTokens": 60, "outputTokens": 8}},
        {"text": "Checkpoint recovery is described in doc-1.",
         "usage": {"inputTokens": 90, "outputTokens": 12}}]}
    path = tmp_path / "tool-agent.script.yaml"
    path.write_text(yaml.safe_dump(script))
    return path


def test_tool_agent_runs_with_a_local_mcp_server(tmp_path: Path) -> None:
    config, script = write_config(tmp_path), write_script(tmp_path)
    done = cli("run", str(MANIFEST), "--config", str(config), "--model", f"scripted/{script}",
               "--format", "json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["status"] == "completed"
    assert result["output"] == "Checkpoint recovery is described in doc-1."

    with SqliteRunStore(tmp_path / ".agent-runtime" / "runs.sqlite") as store:
        transcript = store.load_latest_checkpoint(result["run_id"]).transcript
        effects = store.list_effects(result["run_id"])
    calls = [part["call"] for item in transcript for part in item["content"]
             if part["type"] == "tool-call"]
    results = [part["result"] for item in transcript for part in item["content"]
               if part["type"] == "tool-result"]
    assert [call["name"] for call in calls] == ["docs__search", "docs__read"]
    assert results[0]["output"] == {"hits": [{"id": "doc-1", "title": "Checkpoint recovery"}]}
    assert results[1]["output"] == {
        "result": "A run resumes from its latest checkpoint after a crash."}
    keys = [call["idempotencyKey"] for call in calls]
    assert [result["idempotencyKey"] for result in results] == keys
    assert {effect.key for effect in effects} == set(keys)
    assert all(effect.status is EffectStatus.COMPLETED for effect in effects)

    # The server received each call once, with that call's key in the request `_meta`.
    received = [json.loads(line)
                for line in (tmp_path / "received.jsonl").read_text().splitlines()]
    assert [(call["tool"], call["idempotencyKey"]) for call in received] == \
        [("search", keys[0]), ("read", keys[1])]


@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_tool_the_host_does_not_allow_is_refused_naming_it(tmp_path: Path,
                                                             command: str) -> None:
    config = write_config(tmp_path, tools=["search"], readTools=["search"])
    extra = ["--model", "scripted/echo"] if command == "run" else []
    done = cli(command, str(MANIFEST), "--config", str(config), *extra, cwd=tmp_path)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert (f"{MANIFEST}: connections[0].tools: tool 'read' is not allowed by connection "
            "'documents'") in done.stderr
    assert not (tmp_path / "received.jsonl").exists()  # nothing was started
    if command == "run":
        with SqliteRunStore(tmp_path / ".agent-runtime" / "runs.sqlite") as store:
            assert store.list_runs().runs == []


def test_a_connection_the_host_does_not_define_is_refused_naming_it(tmp_path: Path) -> None:
    config = tmp_path / "empty.config.yaml"
    config.write_text("version: '1.0'\n")
    done = cli("validate", str(MANIFEST), "--config", str(config), cwd=tmp_path)
    assert done.returncode == 2
    assert (f"{MANIFEST}: connections[0].ref: connection 'documents' is not defined in the "
            "runtime config") in done.stderr


def test_validate_accepts_it_with_the_connection_allowed(tmp_path: Path) -> None:
    done = cli("validate", str(MANIFEST), "--config", str(write_config(tmp_path)),
               "--model", "scripted/echo", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok: ")
