"""An example tool for runs on Lambda (see tools/__init__.py)."""

from __future__ import annotations

from agent_runtime import tool


@tool
def word_count(text: str) -> dict[str, int]:
    """Count the words and characters of a text."""
    return {"words": len(text.split()), "characters": len(text)}
