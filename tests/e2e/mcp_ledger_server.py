"""A side-effecting stdio MCP server written to the reference's `_meta` contract.

`python mcp_ledger_server.py DIR` serves one tool, `transfer(account, amount)`,
that moves money once per idempotency key: the key is read from the request's
`_meta["agent-runtime/idempotency-key"]`, as the reference implementation
documents it, and a call without one is refused. In DIR:

* `ledger.jsonl`: one line per transfer applied (key, account, amount),
  flushed to disk before the call answers: the side effect;
* `calls.jsonl`: one line per call received (key, and whether it was a
  repeat answered from the ledger);
* `hold`: while this file exists, a transfer just applied waits before it
  answers, so a test can kill the client between the side effect and the
  moment the client records its result.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

KEY = "agent-runtime/idempotency-key"


def ledger_server(directory: Path) -> MCPServer:
    server = MCPServer("ledger")
    ledger, calls, hold = (directory / "ledger.jsonl", directory / "calls.jsonl",
                           directory / "hold")

    def append(path: Path, entry: dict[str, Any]) -> None:
        with path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(entry) + "\n")
            out.flush()
            os.fsync(out.fileno())

    def applied() -> dict[str, dict[str, Any]]:
        if not ledger.exists():
            return {}
        entries = (json.loads(line) for line in ledger.read_text().splitlines() if line)
        return {entry["key"]: entry for entry in entries}

    @server.tool()
    def transfer(account: str, amount: int, ctx: Context) -> dict[str, Any]:
        """Move `amount` to `account`, once per idempotency key."""
        key = dict(ctx.request_context.meta or {}).get(KEY)
        if not isinstance(key, str) or not key:
            raise ToolError(f"no idempotency key in _meta[{KEY!r}]")
        done = applied().get(key)
        append(calls, {"key": key, "repeat": done is not None})
        if done is None:
            done = {"key": key, "account": account, "amount": amount}
            append(ledger, done)
            while hold.exists():
                time.sleep(0.05)
        return {"transferred": done["amount"], "to": done["account"]}

    return server


if __name__ == "__main__":
    ledger_server(Path(sys.argv[1])).run()
