"""A local stdio MCP server standing in for Context7: one `query-docs` tool.

`python context7_stand_in.py LOG` serves it over stdio. Every call appends one
JSON line to LOG (the tool, its arguments and the idempotency key in the
request's `_meta`), so a test sees what the server received. No network.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer

KEY = "agent-runtime/idempotency-key"  # where the client puts its key in `_meta`

SNIPPETS = {
    "/python/cpython": "asyncio.timeout() bounds an await; on expiry the task is cancelled "
                       "and TimeoutError is raised.",
}


def context7_server(log: Path) -> MCPServer:
    server = MCPServer("context7")

    @server.tool(name="query-docs")
    def query_docs(libraryId: str, query: str, ctx: Context) -> str:  # Context7 names them so
        """Documentation snippets of one library, for a question."""
        meta = dict(ctx.request_context.meta or {})
        with log.open("a", encoding="utf-8") as out:
            out.write(json.dumps({"tool": "query-docs",
                                  "arguments": {"libraryId": libraryId, "query": query},
                                  "idempotencyKey": meta.get(KEY)}) + "\n")
        return SNIPPETS.get(libraryId, f"No documentation for {libraryId}.")

    return server


if __name__ == "__main__":
    context7_server(Path(sys.argv[1])).run()
