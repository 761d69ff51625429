"""MCP connections as tools: the host allows, the manifest narrows, the server describes.

The runtime config's `connections` define each MCP server the host allows,
its transport (`stdio` or `streamable-http`), its mode and the complete list of
tools an agent may use. A manifest binds a connection under an alias
(`connections: [{ref: documents, alias: docs, tools: [search]}]`) and may only
narrow it: fewer tools, `read` instead of `read_write`. `read` mode exposes
only the host's `readTools`. Its tools are named `alias__tool` in steps and to
the model. Anything a manifest asks beyond what the host allows is an error
naming the manifest field, before a run exists (`connection_grants`).

Lifetime: a connection opens on first use within an execution (the first
prompt step offering one of its tools) and closes when the execution ends, so
a run pays one process start or HTTP handshake per connection per attempt, not
per call. Each open connection is served by a task of its own: the SDK's
client runs task groups that must be entered and left by one task and that
cancel their host task when the transport breaks, so the run's task only sends
requests and awaits their answers.

Idempotency: every call carries the run's stable key in the request's `_meta`
under `agent-runtime/idempotency-key` (the reference implementation's key,
so a server written to its contract deduplicates our calls too; also under
`idempotencyKey`, the key this project sent before), so a server can
deduplicate a call repeated after a crash. MCP tools therefore count as
idempotent (re-called with the same key on recovery) unless the host lists
them in `nonIdempotentTools`, in which case an unsettled call suspends the
run with `effect-unknown`.

Input schemas: a tool's schema comes from its server and is checked like
any schema (`agent_runtime.schemas`) before the tool is offered. One the
runtime refuses to apply — a reference to another document, a reference
cycle, a pattern RE2 cannot run, past the size limits — fails the step with
`mcp_tool_schema_refused` naming the tool and the place; one that is merely
not valid JSON Schema is left to the server to enforce.

Results: `structuredContent` when the server gives it, else the text content
joined by newlines (a result with non-text content keeps every block as
JSON); `isError` becomes a tool error the model sees.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO
from urllib.parse import urlsplit

from agent_runtime.config import EnvReference, McpConnectionConfig, RuntimeConfig
from agent_runtime.document_paths import format_path
from agent_runtime.errors import AgentRuntimeError, ConfigError, StepFailed
from agent_runtime.manifest import AgentManifest
from agent_runtime.models.base import ToolSpec
from agent_runtime.schema_refusals import SchemaInvalid, SchemaRefused
from agent_runtime.tools.python import ToolContext, check_arguments

if TYPE_CHECKING:
    from mcp import Client
    from mcp_types import CallToolResult
    from mcp_types import Tool as ServerTool

    from agent_runtime.events import EventEmitter
    from agent_runtime.schemas import CompiledSchema

IDEMPOTENCY_META_KEY = "agent-runtime/idempotency-key"
# The key's name in this project's releases before it followed the reference.
FORMER_IDEMPOTENCY_META_KEY = "idempotencyKey"
# A server that ignores the stop request is cancelled after this long.
CLOSE_TIMEOUT_SECONDS = 5.0
MAX_LISTING_PAGES = 100


class McpConnectionError(AgentRuntimeError):
    """A connection could not be opened, or its server could not list its tools."""


class McpToolError(AgentRuntimeError):
    """The server answered the call with `isError`; the message is its text."""


# -- what a manifest may use -------------------------------------------------


@dataclass(frozen=True)
class Grant:
    """What one manifest binding may use of a host connection."""

    connection: str  # the host's name for it (the binding's `ref`)
    alias: str
    definition: McpConnectionConfig
    mode: str
    tools: tuple[str, ...]  # host allowlist, narrowed by the binding and the mode
    required: bool

    def tool(self, name: str, connections: McpConnections) -> McpTool:
        """The runtime tool for `alias__name`; `StepFailed` when this grant does not allow it."""
        if name not in self.tools:
            allowed = ", ".join(self.tools) or "none"
            raise StepFailed("tool_not_allowed",
                             f"tool {self.alias + '__' + name!r} is not allowed: connection "
                             f"{self.connection!r} (alias {self.alias!r}, mode {self.mode}) "
                             f"allows {allowed}")
        return McpTool(self, name, connections)


def connection_grants(manifest: AgentManifest, config: RuntimeConfig, *,
                      source: str) -> dict[str, Grant | None]:
    """Each binding's grant by alias; None for an optional binding the host lacks.

    Raises `ConfigError` naming the manifest field when a binding asks for a
    connection, tool or mode the host does not allow.
    """
    grants: dict[str, Grant | None] = {}
    for index, binding in enumerate(manifest.connections):
        at = f"connections[{index}]"
        alias = binding.effective_alias
        definition = config.connections.get(binding.ref)
        if definition is None:
            if binding.required is False:
                grants[alias] = None
                continue
            raise ConfigError(f"connection {binding.ref!r} is not defined in the runtime config "
                              "(--config connections)", source=source, field=f"{at}.ref")
        if definition.mode == "read" and binding.mode == "read_write":
            raise ConfigError(f"connection {binding.ref!r} is read-only in the runtime config; "
                              "an agent cannot raise it to read_write", source=source,
                              field=f"{at}.mode")
        mode = binding.mode or definition.mode
        read_tools = set(definition.read_tools)
        for name in binding.tools or []:
            if name not in definition.tools:
                raise ConfigError(f"tool {name!r} is not allowed by connection {binding.ref!r}",
                                  source=source, field=f"{at}.tools")
            if mode == "read" and name not in read_tools:
                raise ConfigError(f"tool {name!r} is not a read tool of connection "
                                  f"{binding.ref!r}, and this binding is in read mode",
                                  source=source, field=f"{at}.tools")
        wanted = binding.tools if binding.tools is not None else definition.tools
        allowed = tuple(name for name in dict.fromkeys(wanted)
                        if mode == "read_write" or name in read_tools)
        grants[alias] = Grant(connection=binding.ref, alias=alias, definition=definition,
                              mode=mode, tools=allowed,
                              required=binding.required is True or definition.required)
    return grants


# -- tools -------------------------------------------------------------------


def tool_output(result: CallToolResult) -> Any:
    """Our tool output for an MCP result; `isError` raises `McpToolError`."""
    blocks = [block.model_dump(mode="json", by_alias=True, exclude_none=True)
              for block in result.content]
    texts = [block["text"] for block in blocks if block.get("type") == "text"]
    if result.is_error:
        raise McpToolError("\n".join(texts) or "the tool reported an error")
    if result.structured_content is not None:
        return result.structured_content
    if len(texts) == len(blocks):
        return "\n".join(texts)
    return blocks


class McpTool:
    """One allowed tool of a connection, as the prompt step sees a tool.

    Its description and input schema are the server's, filled in by
    `McpConnections.describe` when the step starts.
    """

    def __init__(self, grant: Grant, server_name: str, connections: McpConnections) -> None:
        self.grant = grant
        self.server_name = server_name
        self.name = f"{grant.alias}__{server_name}"
        self.idempotent = server_name not in grant.definition.non_idempotent_tools
        self.description = self.name
        self.parameters: dict[str, Any] = {"type": "object", "properties": {}}
        self._schema: CompiledSchema | None = None
        self._connections = connections

    def describe(self, info: ServerTool) -> None:
        """Take the server's description and input schema; `StepFailed` when the
        schema is one the runtime refuses to apply (see `agent_runtime.schemas`)."""
        from agent_runtime.schemas import compile_schema  # noqa: PLC0415 - jsonschema, when used

        self.description = info.description or info.title or self.name
        schema = dict(info.input_schema or {})
        self.parameters = schema or {"type": "object", "properties": {}}
        try:
            self._schema = compile_schema(self.parameters)
        except SchemaInvalid:
            self._schema = None  # not a schema we can read: the server validates
        except SchemaRefused as error:
            where = format_path(("inputSchema", *error.at))
            raise StepFailed("mcp_tool_schema_refused",
                             f"connection {self.grant.connection!r}: the input schema of tool "
                             f"{self.server_name!r} is refused at {where}: {error.reason}",
                             {"connection": self.grant.connection}) from error

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(name=self.name, description=self.description, parameters=self.parameters)

    def check_arguments(self, arguments: dict[str, Any]) -> None:
        if self._schema is None:
            return
        check_arguments(self.name, self._schema, arguments)

    async def invoke(self, arguments: dict[str, Any], context: ToolContext) -> Any:
        self.check_arguments(arguments)
        session = await self._connections.session(self.grant, context.run_id, context.attempt)
        result = await session.call(self.server_name, arguments,
                                    meta={IDEMPOTENCY_META_KEY: context.idempotency_key,
                                          FORMER_IDEMPOTENCY_META_KEY: context.idempotency_key})
        return tool_output(result)

    def __repr__(self) -> str:
        return f"McpTool({self.name!r}, idempotent={self.idempotent})"


# -- connections -------------------------------------------------------------


def _resolve(value: str | EnvReference, what: str) -> str:
    if isinstance(value, str):
        return value
    resolved = value.resolve()
    if resolved is None:
        raise McpConnectionError(f"{what}: environment variable {value.env} is not set")
    return resolved


def _has_fileno(stream: TextIO) -> bool:
    try:
        stream.fileno()
    except (AttributeError, OSError, ValueError):
        return False
    return True


def _describe_error(error: BaseException) -> str:
    if isinstance(error, BaseExceptionGroup) and error.exceptions:
        return _describe_error(error.exceptions[0])
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


class McpSession:
    """One open connection, served by a task of its own (see the module docstring)."""

    def __init__(self, name: str, definition: McpConnectionConfig) -> None:
        self.name = name
        self.definition = definition
        self._client: Client | None = None
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._listing: dict[str, ServerTool] | None = None

    @property
    def alive(self) -> bool:
        return self._client is not None and self._task is not None and not self._task.done()

    async def open(self) -> None:
        ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._serve(ready), name=f"mcp:{self.name}")
        timeout_ms = self.definition.connect_timeout_ms
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                self._client = await asyncio.shield(ready)
        except TimeoutError:
            await self.close()
            raise McpConnectionError(f"connection {self.name!r} did not open within "
                                     f"{timeout_ms} ms (connectTimeoutMs)") from None
        except McpConnectionError:
            await self.close()
            raise
        except Exception as error:
            await self.close()
            raise McpConnectionError(f"connection {self.name!r} failed to open: "
                                     f"{_describe_error(error)}") from error

    async def _serve(self, ready: asyncio.Future[Client]) -> None:
        try:
            async with self._connect() as client:
                ready.set_result(client)
                await self._stop.wait()
        except asyncio.CancelledError:
            if not ready.done():
                ready.cancel()
            raise
        except Exception as error:
            # Before `ready`: the opener reports it. After: the transport broke,
            # pending calls fail on their own and the next use reopens.
            if not ready.done():
                ready.set_exception(error)
        finally:
            self._client = None

    @asynccontextmanager
    async def _connect(self) -> AsyncIterator[Client]:
        try:
            from mcp import Client, StdioServerParameters  # noqa: PLC0415 - optional extra
            from mcp.client.stdio import stdio_client  # noqa: PLC0415
        except ImportError as error:
            raise McpConnectionError("MCP connections need the MCP SDK: "
                                     "pip install 'agent-runtime-durable[mcp]'") from error

        definition = self.definition
        async with AsyncExitStack() as stack:
            if definition.transport == "stdio":
                if definition.cwd is not None and not os.path.isdir(definition.cwd):
                    # Named here: the loop's own error may not say which (uvloop's does not).
                    raise McpConnectionError(
                        f"connection {self.name!r} failed to open: its cwd "
                        f"{definition.cwd} is not a directory")
                env = {key: _resolve(value, f"connection {self.name!r} env.{key}")
                       for key, value in (definition.env or {}).items()}
                params = StdioServerParameters(command=definition.command or "",
                                               args=list(definition.args), env=env or None,
                                               cwd=definition.cwd)
                # The server's stderr goes to ours when ours is a real file.
                errlog = sys.stderr
                if not _has_fileno(errlog):
                    errlog = stack.enter_context(open(os.devnull, "w"))  # noqa: SIM115
                client = Client(stdio_client(params, errlog=errlog))
            else:
                client = Client(await stack.enter_async_context(self._http_transport()))
            yield await stack.enter_async_context(client)

    @asynccontextmanager
    async def _http_transport(self) -> AsyncIterator[Any]:
        import httpx2  # noqa: PLC0415 - comes with the mcp extra
        from mcp.client.streamable_http import streamable_http_client  # noqa: PLC0415

        definition = self.definition
        url = _resolve(definition.url or "", f"connection {self.name!r} url")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname or "@" in parts.netloc:
            raise McpConnectionError(f"connection {self.name!r}: url must be http or https, "
                                     "without credentials in it")
        headers = {name: _resolve(value, f"connection {self.name!r} headers.{name}")
                   for name, value in (definition.headers or {}).items()}
        token = definition.auth.token if definition.auth is not None else definition.bearer_token
        if token is not None:
            headers["Authorization"] = "Bearer " + _resolve(token, f"connection {self.name!r} "
                                                                   "auth.token")
        # The SDK follows a redirect only within the endpoint's origin.
        timeout = httpx2.Timeout(definition.connect_timeout_ms / 1000, read=300.0)
        async with httpx2.AsyncClient(headers=headers, timeout=timeout) as http:
            yield streamable_http_client(url, http_client=http)

    async def tools(self) -> dict[str, ServerTool]:
        """The server's tools by name, listed once per session."""
        if self._listing is None:
            client = self._require()
            listing: dict[str, ServerTool] = {}
            cursor: str | None = None
            try:
                async with asyncio.timeout(self.definition.connect_timeout_ms / 1000):
                    for _ in range(MAX_LISTING_PAGES):
                        page = await client.list_tools(cursor=cursor)
                        listing.update((tool.name, tool) for tool in page.tools)
                        cursor = page.next_cursor
                        if not cursor:
                            break
            except TimeoutError:
                raise McpConnectionError(f"connection {self.name!r} did not list its tools "
                                         "within connectTimeoutMs") from None
            except Exception as error:
                raise McpConnectionError(f"connection {self.name!r} could not list its tools: "
                                         f"{_describe_error(error)}") from error
            self._listing = listing
        return self._listing

    async def call(self, tool: str, arguments: dict[str, Any], *,
                   meta: Mapping[str, Any]) -> CallToolResult:
        client = self._require()
        timeout_ms = self.definition.tool_timeout_ms
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                return await client.call_tool(tool, arguments, meta=dict(meta))  # type: ignore[arg-type]
        except TimeoutError:
            raise TimeoutError(f"connection {self.name!r}: tool {tool!r} did not answer within "
                               f"{timeout_ms} ms (toolTimeoutMs)") from None

    def _require(self) -> Client:
        if self._client is None or not self.alive:
            raise McpConnectionError(f"connection {self.name!r} is closed")
        return self._client

    async def close(self) -> None:
        self._stop.set()
        task = self._task
        if task is None or task.done():
            return
        if self._client is None:
            task.cancel()  # still connecting: nothing to stop gracefully
        _, pending = await asyncio.wait({task}, timeout=CLOSE_TIMEOUT_SECONDS)
        if pending:
            task.cancel()
            await asyncio.wait({task}, timeout=CLOSE_TIMEOUT_SECONDS)


class McpConnections:
    """The open sessions of a runtime's executions, by (run id, attempt, connection).

    An execution's sessions open on first use and close with `close(run_id,
    attempt)` when it ends; executions running side by side never share one.
    """

    def __init__(self) -> None:
        self._sessions: dict[tuple[str, int, str], McpSession] = {}

    async def session(self, grant: Grant, run_id: str, attempt: int,
                      on_open: Callable[[McpSession, float], None] | None = None) -> McpSession:
        key = (run_id, attempt, grant.connection)
        session = self._sessions.get(key)
        if session is not None and session.alive:
            return session
        if session is not None:
            await session.close()  # its transport broke: open a fresh one
        started = time.monotonic()
        session = McpSession(grant.connection, grant.definition)
        self._sessions[key] = session
        try:
            await session.open()
        except BaseException:
            self._sessions.pop(key, None)
            raise
        if on_open is not None:
            on_open(session, time.monotonic() - started)
        return session

    async def describe(self, tools: dict[str, Any], *, run_id: str, attempt: int,
                       events: EventEmitter) -> dict[str, Any]:
        """Make a step's MCP tools ready to offer: each connection opened (once per
        execution) and each tool described by its server.

        A connection that fails to open fails the step when it is required (by
        the binding or the host); otherwise its tools are left out of the step.
        A tool its server does not offer fails the step.
        """
        ready: dict[str, Any] = {}
        unavailable: set[str] = set()

        def opened(session: McpSession, seconds: float) -> None:
            events.emit("connection.opened", connection=session.name,
                        transport=session.definition.transport,
                        duration_ms=round(seconds * 1000))

        for name, item in tools.items():
            if not isinstance(item, McpTool):
                ready[name] = item
                continue
            grant = item.grant
            if grant.connection in unavailable:
                continue
            try:
                session = await self.session(grant, run_id, attempt, on_open=opened)
                listing = await session.tools()
            except McpConnectionError as error:
                events.emit("connection.failed", connection=grant.connection,
                            required=grant.required)
                if grant.required:
                    raise StepFailed("connection_failed", str(error),
                                     {"connection": grant.connection}) from error
                unavailable.add(grant.connection)
                continue
            info = listing.get(item.server_name)
            if info is None:
                offered = ", ".join(sorted(listing)) or "none"
                raise StepFailed("mcp_tool_missing",
                                 f"connection {grant.connection!r} allows tool "
                                 f"{item.server_name!r} but its server does not offer it "
                                 f"(it offers: {offered})", {"connection": grant.connection})
            item.describe(info)
            ready[name] = item
        return ready

    def __len__(self) -> int:
        """How many sessions are open."""
        return len(self._sessions)

    async def close(self, run_id: str, attempt: int) -> None:
        """Close every session the execution (`run_id`, `attempt`) opened."""
        for key in [key for key in self._sessions if key[:2] == (run_id, attempt)]:
            await self._sessions.pop(key).close()


__all__ = ["Grant", "McpConnectionError", "McpConnections", "McpSession", "McpTool",
           "McpToolError", "connection_grants", "tool_output"]
