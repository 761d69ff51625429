"""What a host's settings for a stdio MCP server do: `connectTimeoutMs` cuts a server
that does not start, `toolTimeoutMs` cuts a call that does not answer, and `cwd` is
where the server's process runs.

The server is `mcp_limits_server.py`, a real child process. Each limit is set far
below what the server takes (it sleeps a minute), so a slow machine cannot make a
test pass or fail by timing: the tests assert that the long wait was cut and how,
never how fast anything else was.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from engine_harness import Harness

from agent_runtime import RunStatus
from agent_runtime.config import RuntimeConfig, parse_config
from agent_runtime.manifest import AgentManifest, parse_agent_manifest
from agent_runtime.testing import scripted

SERVER = Path(__file__).resolve().parent / "mcp_limits_server.py"
# Far longer than any limit below: reaching the end of it means the limit was ignored.
MINUTE = 60


def limits_connection(*server_args: str, **settings: Any) -> RuntimeConfig:
    definition = {"driver": "mcp", "transport": "stdio", "command": sys.executable,
                  "args": [str(SERVER), *server_args], "mode": "read",
                  "tools": ["nap", "where"], "readTools": ["nap", "where"],
                  # required and slow to give up, unless a test sets otherwise: a
                  # server slow to start on a loaded machine fails at the connection
                  "required": True, "connectTimeoutMs": 300_000, **settings}
    return parse_config({"version": "1.0", "connections": {"limits": definition}},
                        source="test-config")


def agent(tool: str) -> AgentManifest:
    return parse_agent_manifest({
        "schemaVersion": "1.0", "id": "limits",
        "connections": [{"ref": "limits", "alias": "lim"}],
        "steps": [{"id": "ask", "type": "prompt", "prompt": "Ask.", "tools": [tool],
                   "includeInFinalOutput": True}]}, source="test")


def tool_results(h: Harness, run_id: str) -> list[dict[str, Any]]:
    checkpoint = h.store.load_latest_checkpoint(run_id)
    return [part["result"] for item in checkpoint.transcript if item["type"] == "tool-result"
            for part in item["content"]]


@pytest.mark.slow
def test_connect_timeout_ms_cuts_a_server_that_does_not_start() -> None:
    config = limits_connection("--hang-before-start", str(MINUTE), connectTimeoutMs=200,
                               required=True)
    h = Harness(scripted(responses=[{"text": "unused"}]), config=config)
    result = h.run(agent("lim__nap"))

    assert result.status is RunStatus.FAILED
    assert result.error["type"] == "connection_failed"
    assert result.error["message"] == ("connection 'limits' did not open within 200 ms "
                                       "(connectTimeoutMs)")
    assert h.types("connection.") == ["connection.failed"]
    assert h.model.requests == []
    assert len(h.runtime.connections) == 0  # the hung server was not kept


@pytest.mark.slow
def test_tool_timeout_ms_cuts_a_call_that_does_not_answer() -> None:
    h = Harness(scripted(responses=[
        {"toolCalls": [{"name": "lim__nap", "arguments": {"seconds": MINUTE}}]},
        {"text": "The nap was cut."}]), config=limits_connection(toolTimeoutMs=300))
    result = h.run(agent("lim__nap"))

    # The model sees the cut call as a tool error and the run goes on.
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == "The nap was cut."
    [cut] = tool_results(h, result.run_id)
    assert cut["error"]["type"] == "tool_error"
    assert cut["error"]["message"].startswith("TimeoutError: ")
    assert ("connection 'limits': tool 'nap' did not answer within 300 ms (toolTimeoutMs)"
            in cut["error"]["message"])
    assert "output" not in cut


@pytest.mark.slow
def test_cwd_is_the_working_directory_of_the_server_process(tmp_path: Path) -> None:
    workdir = tmp_path / "server-home"
    workdir.mkdir()
    assert workdir.resolve() != Path.cwd().resolve()
    h = Harness(scripted(responses=[{"toolCalls": [{"name": "lim__where", "arguments": {}}]},
                                    {"text": "Found it."}]),
                config=limits_connection(cwd=str(workdir)))
    result = h.run(agent("lim__where"))

    assert result.status is RunStatus.COMPLETED, result.error
    [where] = tool_results(h, result.run_id)
    assert Path(where["output"]["result"]).resolve() == workdir.resolve()


@pytest.mark.slow
def test_a_missing_cwd_fails_the_connection_naming_the_directory(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-directory"
    h = Harness(scripted(responses=[{"text": "unused"}]),
                config=limits_connection(cwd=str(missing), required=True))
    result = h.run(agent("lim__where"))

    assert result.status is RunStatus.FAILED
    assert result.error["type"] == "connection_failed"
    assert result.error["message"].startswith("connection 'limits' failed to open: ")
    assert str(missing) in result.error["message"]
    assert h.model.requests == []
