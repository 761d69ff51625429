"""Tool adapters: Python callables, and MCP connections (`agent_runtime.tools.mcp`)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from agent_runtime.config import RuntimeConfig, import_tool_target
from agent_runtime.errors import ConfigError
from agent_runtime.tools.python import Tool, ToolArgumentsError, ToolContext, tool

__all__ = ["Tool", "ToolArgumentsError", "ToolContext", "ToolRegistry", "configured_tools",
           "load_tool_file", "tool"]


class ToolRegistry:
    """The tools a runtime offers, by name."""

    def __init__(self, tools: Iterable[Tool] | Mapping[str, Tool] | None = None) -> None:
        self._tools: dict[str, Tool] = {}
        if isinstance(tools, Mapping):
            for name, item in tools.items():
                self.add(item, name=name)
        else:
            for item in tools or ():
                self.add(item)

    def add(self, item: Tool, *, name: str | None = None) -> None:
        if not isinstance(item, Tool):
            raise TypeError(f"{item!r} is not a tool; decorate it with @agent_runtime.tool")
        self._tools[name or item.name] = item

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return sorted(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)


def load_tool_file(path: str | Path) -> list[Tool]:
    """Import a Python file and return the tools it defines with `@tool`."""
    file = Path(path).resolve()
    if not file.is_file():
        raise ConfigError("tools file not found", source=str(path))
    module_name = f"agent_runtime_user_tools_{abs(hash(str(file)))}"
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        raise ConfigError("cannot import this file", source=str(path))
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        raise ConfigError(f"importing the tools file failed: {type(error).__name__}: {error}",
                          source=str(path)) from error
    found = [value for value in vars(module).values() if isinstance(value, Tool)]
    if not found:
        raise ConfigError("defines no @agent_runtime.tool functions", source=str(path))
    return found


def configured_tools(config: RuntimeConfig, *, source: str) -> list[Tool]:
    """The Python tools a runtime config names (`tools: {name: "module:function"}`),
    for the CLI and the Lambda functions alike; a plain function becomes a tool
    under the config's name. `source` names the config in errors."""
    found: list[Tool] = []
    for name, target in config.tools.items():
        item = import_tool_target(target, source=source, name=name)
        found.append(item if isinstance(item, Tool) else tool(name=name)(item))
    return found
