"""A runtime on a memory store with a fake clock, for engine tests."""

from __future__ import annotations

from typing import Any

from agent_runtime import AgentRuntime, Tool
from agent_runtime.config import RuntimeConfig
from agent_runtime.events import ListEventSink
from agent_runtime.manifest import AgentManifest, parse_agent_manifest
from agent_runtime.models.scripted import ScriptedModel
from agent_runtime.testing import FakeClock, scripted
from stores.memory import MemoryRunStore

SCRIPTED = {"model": "scripted/test"}
ECHO = {"model": "scripted/echo"}


def manifest(*steps: dict[str, Any], variables: list[dict[str, Any]] | None = None,
             **extra: Any) -> AgentManifest:
    return parse_agent_manifest({"schemaVersion": "1.0", "id": "test", "variables": variables or [],
                                 "steps": list(steps), **extra}, source="test")


class Harness:
    """A runtime on a memory store with a fake clock, a scripted model and collected events."""

    def __init__(self, model: ScriptedModel | None = None, tools: list[Tool] | None = None,
                 store: MemoryRunStore | None = None, lease_seconds: float = 30.0,
                 config: RuntimeConfig | None = None) -> None:
        self.store = store or MemoryRunStore()
        self.clock = FakeClock()
        self.events = ListEventSink()
        self.model = model or scripted()
        self.tools = tools or []
        self.lease_seconds = lease_seconds
        self.config = config
        self.runtime = self.make_runtime()

    def make_runtime(self, owner: str = "test-owner") -> AgentRuntime:
        return AgentRuntime(store=self.store, models={"scripted": self.model}, tools=self.tools,
                            event_sinks=[self.events], clock=self.clock, owner=owner,
                            lease_seconds=self.lease_seconds, config=self.config)

    def run(self, agent: AgentManifest, **kwargs: Any) -> Any:
        kwargs.setdefault("options", SCRIPTED)
        return self.runtime.run_sync(manifest=agent, **kwargs)

    def resume(self, run_id: str, **kwargs: Any) -> Any:
        return self.runtime.run_sync(run_id=run_id, resume=True, **kwargs)

    def types(self, prefix: str = "") -> list[str]:
        return [t for t in self.events.types() if t.startswith(prefix)]

