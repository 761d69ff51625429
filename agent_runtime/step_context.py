"""What a step executor may use of its run: the runtime's services and the effect ledger.

`StepContext` is the part of an `Execution` that step kinds call besides the
walk itself (`checkpoint`, `run_sequence`, `guarded`): the run's model and
tools, its artifact store, approvals, webhook policy, child runs, and the
effect ledger. Steps call these rather than reach into the runtime, so the
runtime's shape can change without touching a step kind.

Every store write here is fenced by the attempt; `fenced` turns a refused
fence (a newer attempt took over, the run was cancelled or finished) into
`LostOwnership`, which stops the attempt without touching the run. Store calls
are made on the runtime's store thread, off the event loop (`store_call`,
agent_runtime/store_thread.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, ParamSpec, TypeVar

from stores.base import (
    ArtifactStore,
    RunStore,
    RunTerminal,
    Settlement,
    StaleAttempt,
    StoreError,
)
from stores.records import (
    ArtifactRef,
    Budget,
    EffectRecord,
    Frame,
    JsonObject,
    JsonValue,
    ParentRef,
    RunRecord,
)

from agent_runtime.errors import AgentRuntimeError
from agent_runtime.events import EventEmitter, TextSink
from agent_runtime.manifest import AgentManifest, ModelRef
from agent_runtime.state import RunState

if TYPE_CHECKING:
    from agent_runtime.capabilities import ResolvedModel
    from agent_runtime.config import WebhookPolicy
    from agent_runtime.results import RunResult
    from agent_runtime.run_host import RunHost
    from agent_runtime.sandbox.contract import SandboxAdapter
    from agent_runtime.tools import Tool
    from agent_runtime.tools.mcp import McpTool

    StepTool = Tool | McpTool  # a tool offered to the model: Python or MCP

P = ParamSpec("P")
T = TypeVar("T")

# How an operator may settle an effect whose outcome is unknown.
SETTLE_ACTIONS = ("retry", "result", "skip")


class LostOwnership(AgentRuntimeError):
    """The store refused a write: another attempt took over, or the run was cancelled."""

    def __init__(self, cause: StoreError) -> None:
        super().__init__(str(cause))
        self.cause = cause


class StepContext:
    """The services of one attempt of a run, as its steps see them."""

    runtime: RunHost
    run: RunRecord
    run_id: str
    attempt: int
    manifest: AgentManifest
    state: RunState
    events: EventEmitter
    # Operator decisions on effects whose outcome was unknown, by key.
    resolutions: dict[str, JsonObject]
    # Effect results that ride in the next checkpoint (`settle_effect`), when
    # the store can commit them with it.
    settlements: list[Settlement]
    settles_in_checkpoint: bool
    # Effects this execution reserved in a checkpoint (`checkpoint(reserving=)`)
    # and has not dispatched yet: their calls go out with no store write first.
    reserved: set[str]
    # The models this execution resolved, by the identity of the step's model
    # reference (kept, so the identity stays its own): a loop's prompt asks once.
    resolved_models: dict[int, tuple[ModelRef | None, ResolvedModel]]
    # `now().isoformat()`, by the system clock's cheaper text where it is one
    # (`clock.iso_stamp`): every transcript entry and step result is stamped.
    stamp: Callable[[], str]

    @property
    def store(self) -> RunStore:
        return self.runtime.store

    async def store_call(self, method: Callable[P, T], /, *args: P.args,
                         **kwargs: P.kwargs) -> T:
        """`method(*args, **kwargs)`, a call of the run's store, on the runtime's store
        thread: the event loop (the other members of a wave, the calls in flight)
        goes on meanwhile. Returns what the store returned, raises what it raised."""
        return await self.runtime.store_thread.call(method, *args, **kwargs)

    def now(self) -> datetime:
        return self.runtime.clock.now()

    # -- models, tools, artifacts ----------------------------------------------

    def resolve_model(self, model: ModelRef | None) -> ResolvedModel:
        """The step's model (else the manifest's), or the run's `--model` override.

        Resolved (and the host policy asked) once per execution for each model
        reference of its manifest: the manifest, the run's options and the host
        do not change within one, and a loop's prompt step asks at every iteration."""
        found = self.resolved_models.get(id(model))
        if found is not None and found[0] is model:
            return found[1]
        resolved = self.runtime.resolve_model(model, self.manifest, self.run.options)
        self.resolved_models[id(model)] = (model, resolved)
        return resolved

    async def prepare_tools(self, names: Iterable[str]) -> dict[str, StepTool]:
        """The named tools, ready to offer the model (MCP connections opened)."""
        return await self.runtime.prepare_tools(names, self)

    @property
    def artifacts(self) -> ArtifactStore | None:
        return self.runtime.artifacts

    @property
    def text_sink(self) -> TextSink | None:
        """Where model text goes as it arrives (a live view), if anyone watches."""
        return self.runtime.text_sink

    @property
    def reasoning_sink(self) -> TextSink | None:
        """Where a model's reasoning goes as it arrives, if a view shows it."""
        return self.runtime.reasoning_sink

    def artifact_sink(self, frame: Frame) -> Callable[[bytes, str], ArtifactRef] | None:
        """How a tool of this step saves artifacts, when the runtime has a store for them."""
        store = self.runtime.artifacts
        if store is None:
            return None

        def save(data: bytes, media_type: str) -> ArtifactRef:
            uri, sha256 = store.put(data, media_type=media_type, run_id=self.run_id)
            ref = ArtifactRef(uri=uri, sha256=sha256, size=len(data), media_type=media_type)
            # Content-addressed: a retried call saving the same bytes adds nothing.
            if all(existing.sha256 != sha256 for existing in self.state.artifacts):
                self.state.artifacts.append(ref)
            self.events.emit("artifact.created", step_id=frame.step_id,
                             step_path=frame.step_path, sha256=sha256, size=len(data),
                             media_type=media_type)
            return ref

        return save

    # -- approvals, webhooks, child runs ---------------------------------------

    def approval_decision(self, approval_id: str) -> JsonObject | None:
        """The recorded answer to approval `approval_id`, or None while it waits."""
        return self.runtime.approvals.decision(self.run, approval_id)

    @property
    def webhook_policy(self) -> WebhookPolicy:
        return self.runtime.config.webhooks

    @property
    def sandbox(self) -> SandboxAdapter | None:
        """Where code steps run (agent_runtime.sandbox), None when nowhere."""
        return self.runtime.sandbox

    @property
    def base_dir(self) -> Path:
        """Where a relative `manifestRef` is found when the run's manifest has no file."""
        return self.runtime.base_dir

    def start_child(self, manifest: AgentManifest, *, run_id: str, parent: ParentRef,
                    variables: Mapping[str, JsonValue], budget: Budget,
                    options: Mapping[str, JsonValue]) -> Coroutine[object, None, RunResult]:
        """Start a sub-run in this runtime (await it through `guarded`)."""
        return self.runtime.run(manifest=manifest, variables=variables, budget=budget,
                                run_id=run_id, options=options, parent=parent)

    def resume_child(self, run_id: str, *, budget: Budget,
                     takeover: bool) -> Coroutine[object, None, RunResult]:
        """Resume a sub-run; `takeover` when its owner's lease expired."""
        return self.runtime.run(run_id=run_id, resume=True, budget=budget,
                                allow_running_takeover=takeover)

    # -- the effect ledger -------------------------------------------------------

    @contextlib.contextmanager
    def fenced(self) -> Iterator[None]:
        """A store write of this attempt: a refused fence is lost ownership."""
        try:
            yield
        except (StaleAttempt, RunTerminal) as error:
            raise LostOwnership(error) from error

    async def begin_effect(self, key: str) -> EffectRecord:
        """Reserve effect `key` for this attempt before dispatching it (`RunStore.begin_effect`):
        an effect already reserved or completed by an earlier attempt comes back as it is.
        Awaited before the dispatch, so the reservation is stored before the call goes out."""
        with self.fenced():
            return await self.store_call(self.store.begin_effect, key, run_id=self.run_id,
                                         expected_attempt=self.attempt, at=self.now())

    async def complete_effect(self, key: str, result: JsonValue) -> None:
        """Record the result of effect `key`, so no later attempt dispatches it again."""
        with self.fenced():
            await self.store_call(self.store.complete_effect, key, run_id=self.run_id,
                                  expected_attempt=self.attempt, result=result, at=self.now())

    async def settle_effect(self, key: str, result: JsonValue) -> None:
        """Record the result of effect `key` with the next checkpoint, in the same commit,
        where the store can (`SettlesInCheckpoint`); else at once (`complete_effect`).

        Only for a caller whose very next store write is that checkpoint, which
        records the result in the transcript: a crash before it then leaves the
        effect reserved, as a crash during the call would, never completed with
        no checkpoint that shows its result."""
        if self.settles_in_checkpoint:
            self.settlements.append(Settlement(key, result))
        else:
            await self.complete_effect(key, result)

    def effect_resolution(self, key: str) -> JsonObject | None:
        """How an operator settled the effect `key` whose outcome was unknown, or None.

        Given to this execution (the CLI's `effects resolve`), else recorded in
        the store: `resolve_approval(run, key, approved=True, response={"action":
        ...})` on the `effect-unknown` suspension, which the reserved record
        keeps with its decision, so an executor in another process finds it.
        """
        given = self.resolutions.get(key)
        if given is not None:
            return given
        suspension = self.run.suspension
        if (suspension is None or suspension.reason != "effect-unknown"
                or suspension.details.get("key") != key or not suspension.decision
                or not suspension.decision.get("approved")):
            return None
        response = suspension.decision.get("response")
        if isinstance(response, dict) and response.get("action") in SETTLE_ACTIONS:
            return response
        return None
