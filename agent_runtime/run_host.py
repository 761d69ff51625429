"""What an attempt of a run uses of the runtime that executes it.

`Execution` and the step context see their runtime through this protocol, not
through `AgentRuntime` itself: the engine builds executions, and an execution
needs only these services back, so `engine.py` and `execution.py` do not
import each other (not even for type checking). `AgentRuntime` satisfies it;
mypy checks that where the engine hands itself to an `Execution`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from stores.base import ArtifactStore, RunStore
from stores.records import Budget, JsonValue, ParentRef

if TYPE_CHECKING:
    from agent_runtime.capabilities import ResolvedModel
    from agent_runtime.clock import Clock
    from agent_runtime.config import RuntimeConfig
    from agent_runtime.events import EventSink, SinkFailurePolicy, TextSink
    from agent_runtime.manifest import AgentManifest, ModelRef
    from agent_runtime.policy import HostPolicy
    from agent_runtime.results import RunResult
    from agent_runtime.sandbox.contract import SandboxAdapter
    from agent_runtime.step_context import StepContext, StepTool
    from agent_runtime.steps.approval import ApprovalAdapter
    from agent_runtime.steps.base import StepRegistry
    from agent_runtime.store_thread import StoreThread


class RunHost(Protocol):
    """The services of the runtime executing a run, as one attempt of it uses them."""

    @property
    def store(self) -> RunStore: ...

    @property
    def store_thread(self) -> StoreThread:
        """Where executions call the store, off the event loop (agent_runtime/store_thread.py)."""
        ...

    @property
    def approvals(self) -> ApprovalAdapter: ...

    @property
    def artifacts(self) -> ArtifactStore | None: ...

    @property
    def event_sinks(self) -> list[EventSink]: ...

    @property
    def sink_failure(self) -> SinkFailurePolicy:
        """What a sink's failure does to the run (events.py)."""
        ...

    @property
    def clock(self) -> Clock: ...

    @property
    def config(self) -> RuntimeConfig: ...

    @property
    def sandbox(self) -> SandboxAdapter | None:
        """Where code steps run (agent_runtime.sandbox); None when nowhere."""
        ...

    @property
    def policy(self) -> HostPolicy:
        """What any manifest may make this host do (agent_runtime.policy)."""
        ...

    @property
    def steps(self) -> StepRegistry:
        """The step kinds this runtime executes, by kind."""
        ...

    @property
    def lease_seconds(self) -> float: ...

    @property
    def base_dir(self) -> Path: ...

    @property
    def text_sink(self) -> TextSink | None: ...

    @property
    def reasoning_sink(self) -> TextSink | None: ...

    @property
    def interrupt(self) -> threading.Event:
        """Set to stop the runtime's runs at their next commit point."""
        ...

    async def run(self, *, manifest: AgentManifest | None = None,
                  variables: Mapping[str, JsonValue] | None = None,
                  budget: Budget | None = None, run_id: str | None = None,
                  resume: bool = False, allow_running_takeover: bool = False,
                  options: Mapping[str, JsonValue] | None = None,
                  parent: ParentRef | None = None) -> RunResult:
        """Start or resume a run in this runtime (a sub-run, for a step)."""
        ...

    def resolve_model(self, step_model: ModelRef | None, manifest: AgentManifest,
                      options: Mapping[str, JsonValue]) -> ResolvedModel: ...

    async def prepare_tools(self, names: Iterable[str],
                            ctx: StepContext) -> dict[str, StepTool]: ...
