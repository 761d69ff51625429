"""The Python tools a runtime config names (`tools: {name: "module:function"}`):
one loader for the CLI and the Lambda functions."""

from __future__ import annotations

import pytest

from agent_runtime.config import parse_config
from agent_runtime.errors import ConfigError
from agent_runtime.tools import Tool, configured_tools, tool


@tool(name="shout")
def shout(text: str) -> str:
    """Upper-case the text."""
    return text.upper()


def word_count(text: str) -> int:
    """Count the words."""
    return len(text.split())


def test_a_decorated_tool_keeps_itself_and_a_plain_function_takes_the_config_name() -> None:
    config = parse_config({"version": "1.0", "tools": {
        "loud": f"{__name__}:shout", "words": f"{__name__}:word_count"}}, source="cfg.yaml")
    found = configured_tools(config, source="cfg.yaml")
    assert all(isinstance(item, Tool) for item in found)
    assert [item.name for item in found] == ["shout", "words"]
    assert found[1].fn("a b c") == 3


def test_a_target_that_does_not_import_names_the_config_and_the_entry() -> None:
    config = parse_config({"version": "1.0", "tools": {"gone": f"{__name__}:missing"}},
                          source="cfg.yaml")
    with pytest.raises(ConfigError) as refused:
        configured_tools(config, source="ssm:/agent/config")
    assert refused.value.source == "ssm:/agent/config"
    assert refused.value.field == "tools.gone"
    assert "cannot import" in refused.value.reason
