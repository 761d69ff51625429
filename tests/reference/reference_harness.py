"""What the ports of the reference's tests share: a runtime on a memory store with a
fake clock and collected events, a stand-in child step that reads the variables it
sees (as the reference's tests substitute a `StepExecutor`), and the run's
variables as its latest checkpoint saved them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agent_runtime import AgentRuntime
from agent_runtime.config import RuntimeConfig
from agent_runtime.events import ListEventSink
from agent_runtime.execution import Execution
from agent_runtime.manifest import AgentManifest, PromptStep, parse_agent_manifest
from agent_runtime.models.scripted import ScriptedModel
from agent_runtime.steps import default_steps
from agent_runtime.testing import FakeClock, scripted
from stores.base import RunStore
from stores.memory import MemoryRunStore
from stores.records import Frame

SCRIPTED = {"model": "scripted/test"}


def agent(*steps: dict[str, Any], variables: list[dict[str, Any]] | None = None,
          **extra: Any) -> AgentManifest:
    return parse_agent_manifest({"schemaVersion": "1.0", "variables": variables or [],
                                 "steps": list(steps), **extra}, source="test")


def declared(values: dict[str, Any]) -> list[dict[str, Any]]:
    """Variable declarations typed from their values, as the reference's tests build them."""
    def kind(value: Any) -> str:
        if isinstance(value, list):
            return "array"
        if isinstance(value, dict):
            return "object"
        if isinstance(value, bool):
            return "boolean"
        return "number" if isinstance(value, int | float) else "string"
    return [{"key": key, "type": kind(value), "value": value} for key, value in values.items()]


ChildBody = Callable[[Any, dict[str, Any]], Any]


class StandInChild:
    """A `prompt` executor that answers with `body(step, variables)`: the reference's
    tests' stand-in child step. It records the variables each call saw."""

    def __init__(self, body: ChildBody) -> None:
        self.body = body
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def execute(self, step: Any, frame: Frame, ctx: Execution,
                      resume: list[Frame]) -> Any:
        seen = dict(ctx.scope())
        self.calls.append((step.id, seen))
        return self.body(step, seen)


class Host:
    def __init__(self, *, model: ScriptedModel | None = None, child: StandInChild | None = None,
                 store: RunStore | None = None, config: RuntimeConfig | None = None,
                 **runtime: Any) -> None:
        self.store: RunStore = store if store is not None else MemoryRunStore()
        self.clock = FakeClock()
        self.events = ListEventSink()
        self.model = model or scripted()
        steps = default_steps()
        if child is not None:
            steps.register("prompt", PromptStep, child)
        self.runtime = AgentRuntime(store=self.store, models={"scripted": self.model},
                                    event_sinks=[self.events], clock=self.clock,
                                    owner="reference-test", config=config, steps=steps,
                                    **runtime)

    def run(self, manifest: AgentManifest, **kwargs: Any) -> Any:
        kwargs.setdefault("options", SCRIPTED)
        return self.runtime.run_sync(manifest=manifest, **kwargs)

    def resume(self, run_id: str, **kwargs: Any) -> Any:
        return self.runtime.run_sync(run_id=run_id, resume=True, **kwargs)

    def variables(self, run_id: str) -> dict[str, Any]:
        checkpoint = self.store.load_latest_checkpoint(run_id)
        assert checkpoint is not None
        return dict(checkpoint.variables)

    def data(self, event_type: str) -> list[dict[str, Any]]:
        return [event.data for event in self.events.events if event.type == event_type]
