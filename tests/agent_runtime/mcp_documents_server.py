"""A small MCP server with a few documents: `search`, `read` and `delete`.

Run as a stdio server (`python mcp_documents_server.py LOG`), or build it with
`documents_server(LOG)` and serve `streamable_http_app()` over HTTP. Every
call appends one JSON line to LOG — the tool, its arguments and the
idempotency key the client put in the request's `_meta`
(`agent-runtime/idempotency-key`) — so a test can see
what the server received.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel

KEY = "agent-runtime/idempotency-key"  # where the client puts its key in `_meta`

DOCUMENTS = {
    "doc-1": ("Checkpoint recovery", "A run resumes from its latest checkpoint after a crash."),
    "doc-2": ("Leases", "An attempt holds a lease; a stale attempt is fenced out."),
    "doc-3": ("Budgets", "Token budgets are cumulative across attempts."),
}


class Hit(BaseModel):
    id: str
    title: str


class SearchResult(BaseModel):
    hits: list[Hit]


def documents_server(log: Path) -> MCPServer:
    server = MCPServer("documents")

    def record(tool: str, arguments: dict[str, Any], ctx: Context) -> None:
        meta = dict(ctx.request_context.meta or {})
        with log.open("a", encoding="utf-8") as out:
            out.write(json.dumps({"tool": tool, "arguments": arguments,
                                  "idempotencyKey": meta.get(KEY)}) + "\n")

    @server.tool()
    def search(query: str, ctx: Context) -> SearchResult:
        """Find documents whose title or text mentions every word of the query."""
        record("search", {"query": query}, ctx)
        words = query.lower().split()
        hits = [Hit(id=doc_id, title=title) for doc_id, (title, text) in DOCUMENTS.items()
                if all(word in f"{title} {text}".lower() for word in words)]
        return SearchResult(hits=hits)

    @server.tool()
    def read(id: str, ctx: Context) -> str:
        """The text of one document."""
        record("read", {"id": id}, ctx)
        if id not in DOCUMENTS:
            raise ToolError(f"no document {id!r}")
        return DOCUMENTS[id][1]

    @server.tool()
    def delete(id: str, ctx: Context) -> str:
        """Delete a document (never allowed by the tests' read-mode configs)."""
        record("delete", {"id": id}, ctx)
        return f"deleted {id}"

    return server


if __name__ == "__main__":
    documents_server(Path(sys.argv[1])).run()
