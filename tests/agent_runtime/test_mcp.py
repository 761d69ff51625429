"""MCP connections: the host config allows, the manifest narrows, a real server answers.

The server is `mcp_documents_server.py`, spoken to over stdio (a child
process) and over streamable HTTP (uvicorn in a thread on 127.0.0.1).
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from engine_harness import Harness
from mcp_types import CallToolResult, ImageContent, TextContent

from agent_runtime import RunStatus
from agent_runtime.config import RuntimeConfig, parse_config
from agent_runtime.errors import ConfigError, StepFailed
from agent_runtime.manifest import AgentManifest, parse_agent_manifest
from agent_runtime.run_manifest import load_agent_manifest
from agent_runtime.testing import scripted
from agent_runtime.tools.mcp import McpConnections, McpToolError, connection_grants, tool_output
from stores.base import Settlement
from stores.memory import MemoryRunStore
from stores.records import Checkpoint, EffectStatus

HERE = Path(__file__).resolve().parent
SERVER = HERE / "mcp_documents_server.py"
TOOL_AGENT = HERE.parent / "fixtures" / "manifests" / "tool-agent.agent.yaml"

# The model of tool-agent.agent.yaml: search, read what it found, answer.
TOOL_AGENT_SCRIPT = [
    {"toolCalls": [{"name": "docs__search", "arguments": {"query": "checkpoint"}}]},
    {"toolCalls": [{"name": "docs__read", "arguments": {"id": "doc-1"}}]},
    {"text": "doc-1 describes checkpoint recovery."},
]


# A server that starts slowly on a loaded machine must not read as a failed
# connection: the tests' connections are required (a failure fails the run at the
# connection, naming it) and get far longer than the 10 s default to open.
OPEN_GENEROUSLY = {"required": True, "connectTimeoutMs": 300_000}


def documents(log: Path, **extra: Any) -> dict[str, Any]:
    """The host's `documents` connection: the stdio test server."""
    return {"driver": "mcp", "transport": "stdio", "command": sys.executable,
            "args": [str(SERVER), str(log)], "mode": "read",
            "tools": ["search", "read", "delete"], "readTools": ["search", "read"],
            **OPEN_GENEROUSLY, **extra}


def config_with(**connections: dict[str, Any]) -> RuntimeConfig:
    return parse_config({"version": "1.0", "connections": connections}, source="test-config")


def agent(connections: list[dict[str, Any]], tools: list[str]) -> AgentManifest:
    return parse_agent_manifest({
        "schemaVersion": "1.0", "id": "mcp", "connections": connections,
        "steps": [{"id": "answer", "type": "prompt", "prompt": "Answer.", "tools": tools,
                   "includeInFinalOutput": True}]}, source="test")


def received(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def tool_results(h: Harness, run_id: str) -> list[dict[str, Any]]:
    checkpoint = h.store.load_latest_checkpoint(run_id)
    return [part["result"] for item in checkpoint.transcript if item["type"] == "tool-result"
            for part in item["content"]]


def tool_call_keys(h: Harness, run_id: str) -> list[str]:
    checkpoint = h.store.load_latest_checkpoint(run_id)
    return [part["call"]["idempotencyKey"] for item in checkpoint.transcript
            for part in item["content"] if part.get("type") == "tool-call"]


# -- the host config ---------------------------------------------------------


@pytest.mark.parametrize(("connection", "field", "reason"), [
    ({"url": "http://x", "tools": ["a"], "readTools": ["a"], "timeout": 5},
     "connections.docs.timeout", "unknown field"),
    ({"driver": "mcp", "tools": [], "url": "http://x"}, "connections.docs.tools",
     "at least 1"),
    ({"transport": "stdio", "tools": ["a"], "readTools": ["a"]}, "connections.docs.command",
     "needs command"),
    ({"transport": "stdio", "command": "x", "url": "http://x", "tools": ["a"],
      "readTools": ["a"]}, "connections.docs.url", "only for streamable-http"),
    ({"tools": ["a"], "readTools": ["a"]}, "connections.docs.url", "needs url"),
    ({"url": "http://x", "tools": ["a"], "readTools": ["a"], "command": "x"},
     "connections.docs.command", "only for stdio"),
    ({"url": "http://x", "tools": ["a"]}, "connections.docs.readTools",
     "explicit readTools allowlist"),
    ({"url": "http://x", "tools": ["a"], "readTools": ["b"]}, "connections.docs.readTools[0]",
     "tool 'b' is not in tools"),
    ({"url": "http://x", "mode": "read_write", "tools": ["a"], "nonIdempotentTools": ["z"]},
     "connections.docs.nonIdempotentTools[0]", "tool 'z' is not in tools"),
    ({"url": "http://x", "mode": "read_write", "tools": ["a"], "auth": {"type": "bearer"}},
     "connections.docs.auth.token", "bearer auth needs token"),
    ({"url": "http://x", "mode": "read_write", "tools": ["a"],
      "auth": {"type": "bearer", "token": {"env": "T"}},
      "headers": {"authorization": {"env": "A"}}},
     "connections.docs.headers", "both auth and an Authorization header"),
    ({"url": "http://x", "mode": "read_write", "tools": ["a"], "headers": {"X-Key": "literal"}},
     "connections.docs.headers.X-Key", "EnvReference"),
])
def test_connection_config_is_strict(connection: dict[str, Any], field: str,
                                     reason: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config({"version": "1.0", "connections": {"docs": {"driver": "mcp", **connection}}},
                     source="cfg.yaml")
    assert refused.value.field == field
    assert reason in refused.value.reason


def test_connection_defaults_follow_the_reference() -> None:
    config = config_with(docs={"driver": "mcp", "url": {"env": "DOCS_URL"}, "tools": ["search"],
                               "readTools": ["search"]})
    docs = config.connections["docs"]
    assert (docs.transport, docs.mode, docs.required) == ("streamable-http", "read", False)
    assert (docs.connect_timeout_ms, docs.tool_timeout_ms) == (10_000, 30_000)


# -- narrowing ---------------------------------------------------------------


@pytest.mark.parametrize(("binding", "field", "reason"), [
    ({"ref": "documents", "mode": "read", "tools": ["search", "delete"]}, "connections[0].tools",
     "tool 'delete' is not a read tool of connection 'documents'"),
    ({"ref": "documents", "mode": "read_write", "tools": ["purge"]}, "connections[0].tools",
     "tool 'purge' is not allowed by connection 'documents'"),
    ({"ref": "archive"}, "connections[0].ref",
     "connection 'archive' is not defined in the runtime config"),
])
def test_a_manifest_cannot_widen_a_connection(tmp_path: Path, binding: dict[str, Any],
                                              field: str, reason: str) -> None:
    config = config_with(documents=documents(tmp_path / "log", mode="read_write"))
    with pytest.raises(ConfigError) as refused:
        connection_grants(agent([binding], []), config, source="agent.yaml")
    assert (refused.value.source, refused.value.field) == ("agent.yaml", field)
    assert reason in refused.value.reason


def test_a_read_only_connection_cannot_be_raised_to_read_write(tmp_path: Path) -> None:
    config = config_with(documents=documents(tmp_path / "log"))
    with pytest.raises(ConfigError, match="read-only in the runtime config") as refused:
        connection_grants(agent([{"ref": "documents", "mode": "read_write"}], []), config,
                          source="agent.yaml")
    assert refused.value.field == "connections[0].mode"


def test_narrowing_by_tools_and_by_mode(tmp_path: Path) -> None:
    config = config_with(documents=documents(tmp_path / "log", mode="read_write",
                                             nonIdempotentTools=["delete"]))
    grants = connection_grants(agent([
        {"ref": "documents", "alias": "all"},
        {"ref": "documents", "alias": "reader", "mode": "read"},
        {"ref": "documents", "alias": "one", "tools": ["search"]},
        {"ref": "missing", "alias": "extra", "required": False}], []), config, source="a")
    assert grants["all"].tools == ("search", "read", "delete")
    assert grants["reader"].tools == ("search", "read")  # read mode exposes readTools only
    assert grants["one"].tools == ("search",)
    assert grants["extra"] is None  # optional, and the host does not define it
    tools = {tool.name: tool for tool in (grants["all"].tool(name, McpConnections())
                                          for name in ("read", "delete"))}
    assert tools["all__read"].idempotent and not tools["all__delete"].idempotent


def test_validation_names_the_step_tool_the_binding_does_not_allow(tmp_path: Path) -> None:
    h = Harness(config=config_with(documents=documents(tmp_path / "log")))
    manifest = agent([{"ref": "documents", "alias": "docs"}], ["docs__search", "docs__delete"])
    with pytest.raises(ConfigError) as refused:
        h.run(manifest)
    assert refused.value.field == "steps[0].tools"
    assert "'docs__delete' is not allowed" in refused.value.reason
    assert "allows search, read" in refused.value.reason
    assert h.store.list_runs().runs == []  # refused before a run exists


def test_a_tool_of_an_unbound_alias_is_refused(tmp_path: Path) -> None:
    h = Harness(config=config_with(documents=documents(tmp_path / "log")))
    with pytest.raises(ConfigError, match="alias 'files', which the manifest does not bind"):
        h.run(agent([{"ref": "documents", "alias": "docs"}], ["files__search"]))


# -- results -----------------------------------------------------------------


def test_results_become_tool_outputs() -> None:
    text = TextContent(type="text", text="one")
    assert tool_output(CallToolResult(content=[text, TextContent(type="text", text="two")])) \
        == "one\ntwo"
    assert tool_output(CallToolResult(content=[text], structured_content={"n": 1})) == {"n": 1}
    image = ImageContent(type="image", data="aGk=", mime_type="image/png")
    assert tool_output(CallToolResult(content=[text, image]))[1]["mimeType"] == "image/png"
    with pytest.raises(McpToolError, match=r"^one$"):
        tool_output(CallToolResult(content=[text], is_error=True))


# -- a real server over stdio --------------------------------------------------


@pytest.mark.slow
def test_tool_agent_runs_against_a_stdio_server(tmp_path: Path) -> None:
    log = tmp_path / "received.jsonl"
    h = Harness(scripted(responses=TOOL_AGENT_SCRIPT),
                config=config_with(documents=documents(log)))
    result = h.run(load_agent_manifest(TOOL_AGENT))

    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == "doc-1 describes checkpoint recovery."
    search, read = tool_results(h, result.run_id)
    assert search["output"] == {"hits": [{"id": "doc-1", "title": "Checkpoint recovery"}]}
    assert read["output"] == {"result": "A run resumes from its latest checkpoint after a crash."}
    # The server saw each call once, with the run's key for that call in `_meta`.
    calls = received(log)
    assert [call["tool"] for call in calls] == ["search", "read"]
    assert [call["idempotencyKey"] for call in calls] == tool_call_keys(h, result.run_id)
    assert all(call["idempotencyKey"] for call in calls)
    # The model was offered the server's own descriptions and schemas.
    offered = {tool.name: tool for tool in h.model.requests[0].tools}
    assert set(offered) == {"docs__search", "docs__read"}
    assert offered["docs__read"].description == "The text of one document."
    assert offered["docs__read"].parameters["required"] == ["id"]
    # One connection for the whole execution, closed with it.
    assert h.types("connection.") == ["connection.opened"]
    assert len(h.runtime.connections) == 0


@pytest.mark.slow
def test_an_error_result_is_a_tool_error_the_model_sees(tmp_path: Path) -> None:
    log = tmp_path / "received.jsonl"
    h = Harness(scripted(responses=[
        {"toolCalls": [{"name": "docs__read", "arguments": {"id": "doc-9"}},
                       {"name": "docs__read", "arguments": {"ident": "doc-1"}}]},
        {"text": "not found"}]), config=config_with(documents=documents(log)))
    result = h.run(agent([{"ref": "documents", "alias": "docs"}], ["docs__read"]))
    assert result.status is RunStatus.COMPLETED
    missing, malformed = tool_results(h, result.run_id)
    assert missing["error"]["type"] == "tool_error"
    assert "no document 'doc-9'" in missing["error"]["message"]
    # Arguments are checked against the server's schema before anything is sent.
    assert malformed["error"]["type"] == "invalid_arguments"
    assert [call["arguments"] for call in received(log)] == [{"id": "doc-9"}]


class Crash(BaseException):
    """The process dies here."""


class CrashBeforeRecording(MemoryRunStore):
    """Dies once right after a call was dispatched, before its result is recorded."""

    def __init__(self) -> None:
        super().__init__()
        self.crashed = False

    def complete_effect(self, key: str, **kwargs: Any) -> None:
        self._crash_once()
        super().complete_effect(key, **kwargs)

    def save_checkpoint_settling(self, checkpoint: Checkpoint, settlements: Sequence[Settlement],
                                 **kwargs: Any) -> None:
        # The result rides in the checkpoint that records it: that write is lost.
        if settlements:
            self._crash_once()
        super().save_checkpoint_settling(checkpoint, settlements, **kwargs)

    def _crash_once(self) -> None:
        if not self.crashed:
            self.crashed = True
            raise Crash()


@pytest.mark.slow
def test_a_call_whose_result_was_lost_is_sent_again_with_the_same_key(tmp_path: Path) -> None:
    log = tmp_path / "received.jsonl"
    h = Harness(scripted(responses=TOOL_AGENT_SCRIPT[1:]), store=CrashBeforeRecording(),
                config=config_with(documents=documents(log)))
    manifest = agent([{"ref": "documents", "alias": "docs"}], ["docs__read"])
    with pytest.raises(Crash):
        h.run(manifest)
    run_id = h.store.list_runs().runs[0].run_id
    assert len(h.runtime.connections) == 0  # the dying execution still closed it

    h.clock.advance(31)
    result = h.resume(run_id, allow_running_takeover=True)
    assert result.status is RunStatus.COMPLETED
    first, again = received(log)
    assert first == again and first["idempotencyKey"] == tool_call_keys(h, run_id)[0]
    effects = h.store.list_effects(run_id)
    assert [effect.status for effect in effects] == [EffectStatus.COMPLETED]


@pytest.mark.slow
def test_a_non_idempotent_tool_whose_result_was_lost_suspends(tmp_path: Path) -> None:
    log = tmp_path / "received.jsonl"
    h = Harness(scripted(responses=TOOL_AGENT_SCRIPT[1:]), store=CrashBeforeRecording(),
                config=config_with(documents=documents(log, nonIdempotentTools=["read"])))
    with pytest.raises(Crash):
        h.run(agent([{"ref": "documents", "alias": "docs"}], ["docs__read"]))
    run_id = h.store.list_runs().runs[0].run_id
    h.clock.advance(31)
    result = h.resume(run_id, allow_running_takeover=True)
    assert result.status is RunStatus.SUSPENDED
    assert result.suspension["reason"] == "effect-unknown"
    assert result.suspension["details"]["tool"] == "docs__read"
    assert len(received(log)) == 1  # never sent twice without an operator's decision


@pytest.mark.slow
def test_a_required_connection_that_fails_to_open_fails_the_step(tmp_path: Path) -> None:
    definition = documents(tmp_path / "log")
    definition["args"] = [str(tmp_path / "no-such-server.py")]
    h = Harness(scripted(responses=[{"text": "unused"}]),
                config=config_with(documents=definition))
    result = h.run(agent([{"ref": "documents", "alias": "docs"}], ["docs__search"]))
    assert result.status is RunStatus.FAILED
    assert result.error["type"] == "connection_failed"
    assert "connection 'documents'" in result.error["message"]
    assert h.model.requests == []


@pytest.mark.slow
def test_an_optional_connection_that_fails_to_open_is_left_out(tmp_path: Path) -> None:
    definition = documents(tmp_path / "log", required=False)
    definition["args"] = [str(tmp_path / "no-such-server.py")]
    h = Harness(scripted(responses=[{"text": "answered without documents"}]),
                config=config_with(documents=definition))
    result = h.run(agent([{"ref": "documents", "alias": "docs"}], ["docs__search"]))
    assert result.status is RunStatus.COMPLETED
    assert h.model.requests[0].tools == []
    assert h.types("connection.") == ["connection.failed"]


@pytest.mark.slow
def test_a_tool_the_server_does_not_offer_fails_the_step(tmp_path: Path) -> None:
    definition = documents(tmp_path / "log", mode="read_write")
    definition["tools"].append("archive")
    h = Harness(config=config_with(documents=definition))
    result = h.run(agent([{"ref": "documents", "alias": "docs"}], ["docs__archive"]))
    assert result.status is RunStatus.FAILED
    assert result.error["type"] == "mcp_tool_missing"
    assert "does not offer it" in result.error["message"]


# -- a real server over streamable HTTP ------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[tuple[str, Path, list[dict[str, str]]]]:
    """The documents server on 127.0.0.1 over streamable HTTP; yields its URL, its log
    and the headers of each request it received (names in lower case)."""
    import uvicorn
    from mcp_documents_server import documents_server

    log = tmp_path / "received.jsonl"
    app = documents_server(log).streamable_http_app()
    requests: list[dict[str, str]] = []

    async def recording(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            requests.append({name.decode(): value.decode() for name, value in scope["headers"]})
        await app(scope, receive, send)

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(recording, host="127.0.0.1", port=port,
                                           log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120  # generous: a loaded machine starts slowly
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            pytest.fail("the MCP HTTP server did not start")
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}/mcp", log, requests
    server.should_exit = True
    thread.join(timeout=10)


@pytest.mark.slow
def test_tool_agent_runs_against_a_streamable_http_server(
        http_server: tuple[str, Path, list[dict[str, str]]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    url, log, requests = http_server
    monkeypatch.setenv("DOCS_MCP_URL", url)
    monkeypatch.setenv("DOCS_MCP_TOKEN", "s3cret")
    config = config_with(documents={
        "driver": "mcp", "url": {"env": "DOCS_MCP_URL"},
        "auth": {"type": "bearer", "token": {"env": "DOCS_MCP_TOKEN"}},
        "tools": ["search", "read"], "readTools": ["search", "read"]})
    h = Harness(scripted(responses=TOOL_AGENT_SCRIPT), config=config)
    result = h.run(load_agent_manifest(TOOL_AGENT))

    assert result.status is RunStatus.COMPLETED, result.error
    search, read = tool_results(h, result.run_id)
    assert search["output"]["hits"][0]["id"] == "doc-1" and "output" in read
    assert [call["idempotencyKey"] for call in received(log)] == tool_call_keys(h, result.run_id)
    assert requests and {request.get("authorization") for request in requests} == {
        "Bearer s3cret"}


@pytest.mark.slow
def test_headers_and_a_bearer_token_go_with_every_http_request(
        http_server: tuple[str, Path, list[dict[str, str]]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    url, log, requests = http_server
    monkeypatch.setenv("DOCS_MCP_TENANT", "acme")
    monkeypatch.setenv("DOCS_MCP_TOKEN", "legacy-token")
    config = config_with(documents={
        "driver": "mcp", "url": url, "headers": {"X-Tenant": {"env": "DOCS_MCP_TENANT"}},
        "bearerToken": {"env": "DOCS_MCP_TOKEN"}, "tools": ["search"],
        "readTools": ["search"]})
    h = Harness(scripted(responses=[*TOOL_AGENT_SCRIPT[:1], {"text": "Found."}]), config=config)
    result = h.run(agent([{"ref": "documents", "alias": "docs"}], ["docs__search"]))

    assert result.status is RunStatus.COMPLETED, result.error
    assert [call["tool"] for call in received(log)] == ["search"]
    assert requests and {(request.get("x-tenant"), request.get("authorization"))
                         for request in requests} == {("acme", "Bearer legacy-token")}


def test_an_unset_environment_reference_fails_the_connection(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DOCS_MCP_URL", raising=False)
    config = config_with(documents={"driver": "mcp", "url": {"env": "DOCS_MCP_URL"},
                                    "required": True, "tools": ["search"],
                                    "readTools": ["search"]})
    h = Harness(config=config)
    result = h.run(agent([{"ref": "documents", "alias": "docs"}], ["docs__search"]))
    assert result.status is RunStatus.FAILED
    assert "environment variable DOCS_MCP_URL is not set" in result.error["message"]


def test_resolve_tools_reports_a_binding_the_config_no_longer_allows(tmp_path: Path) -> None:
    # A run resumed under a narrower config fails its step rather than widening.
    h = Harness(config=config_with(documents=documents(tmp_path / "log")))
    with pytest.raises(StepFailed, match=r"connections\[0\]\.mode"):
        h.runtime.resolve_tools(["docs__read"], agent(
            [{"ref": "documents", "alias": "docs", "mode": "read_write"}], []))


def test_an_http_url_with_credentials_is_refused() -> None:
    config = config_with(documents={"driver": "mcp", "url": "http://user:pw@127.0.0.1:9/mcp",
                                    "required": True, "tools": ["search"],
                                    "readTools": ["search"]})
    result = Harness(config=config).run(
        agent([{"ref": "documents", "alias": "docs"}], ["docs__search"]))
    assert result.status is RunStatus.FAILED
    assert "without credentials" in result.error["message"]
