"""The documents server (`mcp_documents_server.py`) with another input schema for
its `search` tool: `python mcp_schema_server.py LOG SCHEMA_JSON`, over stdio.
Tests use it to offer the runtime a schema that must be refused."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from mcp_documents_server import documents_server

if __name__ == "__main__":
    server = documents_server(Path(sys.argv[1]))
    schema = json.loads(sys.argv[2])
    listed = server.list_tools

    async def list_tools() -> list[Any]:
        return [tool.model_copy(update={"input_schema": schema}) if tool.name == "search"
                else tool for tool in await listed()]

    server.list_tools = list_tools  # type: ignore[method-assign]
    server.run()
