"""`validate` hides pydantic's plugin loader while it reads a manifest
(agent_runtime/cli/validate.py). The stand-in offers only `get_plugins`: this
fails when an upgraded pydantic asks its loader for anything else, before a
user's `validate` would."""

from __future__ import annotations

import ast
import inspect

import pydantic.plugin._schema_validator as schema_validator


def test_pydantic_takes_only_get_plugins_from_its_plugin_loader() -> None:
    tree = ast.parse(inspect.getsource(schema_validator))
    taken = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
             and node.module == "_loader" and node.level == 1 for alias in node.names}
    assert taken == {"get_plugins"}
