"""A stdio MCP server for the connection settings a host sets on a server it starts:
`python mcp_limits_server.py [--hang-before-start SECONDS]`.

With `--hang-before-start` it answers nothing for that long, `initialize` included: a
server that hangs while starting. Its tools: `nap(seconds)` answers after sleeping
that long; `where()` answers the directory its process runs in.
"""

from __future__ import annotations

import argparse
import os
import time

import anyio
from mcp.server.mcpserver import MCPServer


def limits_server() -> MCPServer:
    server = MCPServer("limits")

    @server.tool()
    async def nap(seconds: float) -> str:
        """Answer after sleeping `seconds`."""
        await anyio.sleep(seconds)
        return f"slept {seconds}s"

    @server.tool()
    def where() -> str:
        """The working directory of this server's process."""
        return os.getcwd()

    return server


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--hang-before-start", type=float, default=0.0)
    options = parser.parse_args()
    # Asleep before the server reads its input: the client's `initialize` waits.
    time.sleep(options.hang_before_start)
    limits_server().run()
