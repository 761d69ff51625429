"""A model provider on 127.0.0.1 for driver tests, and runs through the real engine.

`FakeProviderServer` is a real HTTP server in a thread: each request gets
the next scripted `Reply` (JSON, server-sent events, an AWS event stream, or
a hang), and every request is recorded so a test can check what went back
to the provider (tool results and their ids). Nothing leaves the machine.
"""

from __future__ import annotations

import json
import ssl
import struct
import threading
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agent_runtime import AgentRuntime, RunResult, Tool, tool
from agent_runtime.config import parse_config
from agent_runtime.events import ListEventSink
from agent_runtime.manifest import parse_agent_manifest
from agent_runtime.models.base import ModelAdapter
from agent_runtime.models.retry import RetryPolicy
from stores.memory import MemoryRunStore


@dataclass
class Reply:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    # Written and flushed one at a time, the connection closed after the last.
    chunks: list[bytes] | None = None
    # Seconds to wait before answering (released early when the server stops).
    delay: float = 0.0


def json_reply(body: Any, *, status: int = 200, headers: dict[str, str] | None = None) -> Reply:
    return Reply(status=status, body=json.dumps(body).encode(),
                 headers={"Content-Type": "application/json", **(headers or {})})


def sse_reply(events: list[Any], *, done: bool = False) -> Reply:
    """Server-sent events: a dict is `data: JSON`; `(name, dict)` adds `event: name`."""
    chunks = []
    for event in events:
        if isinstance(event, tuple):
            name, data = event
            chunks.append(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
        else:
            chunks.append(f"data: {json.dumps(event)}\n\n".encode())
    if done:
        chunks.append(b"data: [DONE]\n\n")
    return Reply(headers={"Content-Type": "text/event-stream"}, chunks=chunks)


def aws_event_message(event_type: str, payload: dict[str, Any]) -> bytes:
    """One message of the AWS event stream encoding (what ConverseStream returns)."""
    headers = b""
    for name, value in ((":event-type", event_type), (":content-type", "application/json"),
                        (":message-type", "event")):
        encoded = value.encode()
        headers += (bytes([len(name)]) + name.encode() + b"\x07"
                    + struct.pack(">H", len(encoded)) + encoded)
    body = json.dumps(payload).encode()
    total = 12 + len(headers) + len(body) + 4
    prelude = struct.pack(">II", total, len(headers))
    prelude += struct.pack(">I", zlib.crc32(prelude) & 0xFFFFFFFF)
    message = prelude + headers + body
    return message + struct.pack(">I", zlib.crc32(message) & 0xFFFFFFFF)


def aws_event_stream_reply(events: list[dict[str, Any]]) -> Reply:
    """A ConverseStream response: each `{eventType: payload}` one event-stream message."""
    chunks = [aws_event_message(name, payload)
              for event in events for name, payload in event.items()]
    return Reply(headers={"Content-Type": "application/vnd.amazon.eventstream"}, chunks=chunks)


def hang(seconds: float) -> Reply:
    """An answer that comes too late."""
    return Reply(body=b'{"late": true}', headers={"Content-Type": "application/json"},
                 delay=seconds)


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]  # by lowercase name; of a repeated header, the last
    body: Any
    # Every header line as sent, in order (a repeated header too).
    header_lines: list[tuple[str, str]] = field(default_factory=list)


class FakeProviderServer:
    """`tls`: a server-side context, to answer over HTTPS."""

    def __init__(self, *, tls: ssl.SSLContext | None = None) -> None:
        self.requests: list[Received] = []
        self._replies: list[Reply] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._scheme = "http"
        if tls is not None:
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
            self._scheme = "https"
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,),
                                        daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{self._scheme}://{host!s}:{port}"

    def add(self, *replies: Reply) -> None:
        with self._lock:
            self._replies.extend(replies)

    def bodies(self) -> list[Any]:
        return [request.body for request in self.requests]

    def __enter__(self) -> FakeProviderServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _next(self, received: Received) -> Reply:
        with self._lock:
            self.requests.append(received)
            if self._replies:
                return self._replies.pop(0)
        return json_reply({"error": {"message": "the fake server has no scripted reply left",
                                     "type": "test_error"}}, status=418)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body: Any = json.loads(raw) if raw else None
                except ValueError:
                    body = raw
                reply = server._next(Received(self.command, self.path,
                                              {k.lower(): v for k, v in self.headers.items()},
                                              body, list(self.headers.items())))
                if reply.delay and server._stopping.wait(reply.delay):
                    return
                try:
                    self.send_response(reply.status)
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    if reply.chunks is None:
                        self.send_header("Content-Length", str(len(reply.body)))
                    self.send_header("Connection", "close")
                    self.end_headers()
                    for chunk in reply.chunks if reply.chunks is not None else [reply.body]:
                        self.wfile.write(chunk)
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


# -- runs through the engine ---------------------------------------------------

# The prompt step every driver test starts from.
PROMPT = {"id": "ask", "type": "prompt", "systemPrompt": "Be brief.", "prompt": "Say hello.",
          "includeInFinalOutput": True}


def no_real_aws(monkeypatch: Any, tmp_path: Any) -> None:
    """Fake AWS credentials in the environment, and no way to find real ones (a
    profile, a config file, instance metadata): a test never reaches AWS."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_BEARER_TOKEN_BEDROCK"):
        monkeypatch.delenv(name, raising=False)


def ticket_tool() -> tuple[Tool, list[str]]:
    """A `lookup_ticket` tool for tool round trips, and the ticket ids it was called with."""
    seen: list[str] = []

    @tool
    def lookup_ticket(ticket_id: str) -> dict[str, Any]:
        """Look up a ticket."""
        seen.append(ticket_id)
        return {"id": ticket_id, "status": "open"}

    return lookup_ticket, seen


@dataclass
class DriverRun:
    """A runtime on a memory store, with the events and the streamed text it saw."""

    runtime: AgentRuntime
    store: MemoryRunStore
    events: ListEventSink
    text: list[tuple[str, str]] = field(default_factory=list)
    reasoning: list[tuple[str, str]] = field(default_factory=list)

    def run(self, *steps: dict[str, Any], model: dict[str, Any],
            limits: dict[str, Any] | None = None) -> RunResult:
        agent: dict[str, Any] = {"schemaVersion": "1.0", "id": "driver-test", "model": model,
                                 "steps": list(steps)}
        if limits:
            agent["limits"] = limits
        return self.runtime.run_sync(manifest=parse_agent_manifest(agent, source="test"))

    def usage_in_checkpoint(self, run_id: str) -> list[dict[str, Any]]:
        checkpoint = self.store.load_latest_checkpoint(run_id)
        assert checkpoint is not None
        return [item["usage"] for item in checkpoint.transcript
                if item["type"] == "model-response" and item.get("usage")]

    def consumed_tokens(self, run_id: str) -> int:
        checkpoint = self.store.load_latest_checkpoint(run_id)
        assert checkpoint is not None
        return checkpoint.budget.consumed_tokens

    def deltas(self) -> list[str]:
        return [delta for _, delta in self.text]

    def event_types(self, prefix: str) -> list[str]:
        return [t for t in self.events.types() if t.startswith(prefix)]


def driver_run(config: dict[str, Any], *, tools: list[Tool] | None = None,
               models: dict[str, ModelAdapter] | None = None,
               watch_text: bool = False, watch_reasoning: bool = False) -> DriverRun:
    store = MemoryRunStore()
    events = ListEventSink()
    text: list[tuple[str, str]] = []
    reasoning: list[tuple[str, str]] = []
    runtime = AgentRuntime(store=store, config=parse_config({"version": "1.0", **config},
                                                           source="test-config"),
                           tools=tools or [], models=models, event_sinks=[events],
                           text_sink=(lambda path, delta: text.append((path, delta)))
                           if watch_text else None,
                           reasoning_sink=(lambda path, delta: reasoning.append((path, delta)))
                           if watch_reasoning else None)
    return DriverRun(runtime=runtime, store=store, events=events, text=text,
                     reasoning=reasoning)



def recorded_retries(create_adapter: Any, provider: str,
                     config: dict[str, Any]) -> tuple[ModelAdapter, list[float]]:
    """A driver's adapter whose retry waits are recorded, not slept: `create_adapter`
    is the driver module's, `config` the runtime config without its version."""
    waits: list[float] = []

    async def record(seconds: float) -> None:
        waits.append(seconds)

    adapter = create_adapter(provider, parse_config({"version": "1.0", **config},
                                                    source="test-config"),
                             retry=RetryPolicy(sleep=record))
    return adapter, waits
