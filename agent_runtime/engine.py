"""AgentRuntime: start, resume and advance durable runs.

    runtime = AgentRuntime(store=SqliteRunStore("runs.sqlite"), tools=[lookup_order])
    result = await runtime.run(manifest="agent.yaml", variables={"topic": "leases"})
    result = await runtime.run(run_id=result.run_id, resume=True)

Every execution — a first start or a resume — begins with a resume
reservation (`resume_run`): a new attempt with a lease. Everything the
attempt writes is fenced by that attempt. Bad input is rejected before a run
is created (`InvalidInput`); a run that cannot continue is failed with a
recorded error, never left half-written. A store that fails a check before the
first step (`CorruptRecord`) fails the attempt as `corrupt_record`: reported
once, never resumed and failing forever, and no step runs from it.

The store calls of a run (its reservation, the reads before it, every commit
of its execution) are made on the runtime's store thread, off the event loop
(agent_runtime/store_thread.py; a host running many runtimes at once shares
one `StorePool` between them); the synchronous methods (`create_run`,
`approve`, `cancel`, `create_fork`) call the store directly, as before.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Coroutine, Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Concatenate, ParamSpec, TypeVar

from stores.base import ArtifactStore, CorruptRecord, RunAlreadyExists, RunStore, RunTerminal
from stores.memory import MemoryRunStore
from stores.records import (
    Budget,
    Checkpoint,
    JsonObject,
    JsonValue,
    ParentRef,
    RunError,
    RunRecord,
    RunStatus,
)

from agent_runtime.attempt_begin import execution_from
from agent_runtime.attempt_reads import (
    attempt_start,
    existing_run,
    reserve_attempt,
    run_and_latest,
)
from agent_runtime.blocking_run import blocking
from agent_runtime.checkpoint_check import ForkSourceMissing, check_checkpoint, unstartable
from agent_runtime.clock import Clock, SystemClock
from agent_runtime.config import RuntimeConfig
from agent_runtime.errors import InvalidInput, ManifestMismatch
from agent_runtime.events import (
    CONTINUE,
    Event,
    EventEmitter,
    EventSink,
    SinkFailurePolicy,
    TextSink,
)
from agent_runtime.execution import Execution
from agent_runtime.forks import forked_record
from agent_runtime.host_services import HostServices
from agent_runtime.limits import use_limits
from agent_runtime.manifest import AgentManifest, manifest_hash, manifest_json, parse_agent_manifest
from agent_runtime.models.adapters import ModelAdapters
from agent_runtime.models.base import ModelAdapter
from agent_runtime.models.scripted import ScriptedModel
from agent_runtime.owner_liveness import default_owner
from agent_runtime.policy import HostPolicy, PolicyHooks
from agent_runtime.results import TERMINAL, RunResult, finished_result
from agent_runtime.run_ids import generate_run_id
from agent_runtime.run_manifest import LoadedManifest, load_manifest_file
from agent_runtime.run_options import without_origin
from agent_runtime.sandbox.selection import build_sandbox
from agent_runtime.state import RunState
from agent_runtime.steps import StepRegistry, default_steps
from agent_runtime.steps.approval import ApprovalAdapter, StoreApprovals
from agent_runtime.store_thread import StorePool, store_thread_for
from agent_runtime.tools import Tool, ToolRegistry
from agent_runtime.tools.mcp import McpConnections
from agent_runtime.variables import check_declared_types, resolve_variables
from agent_runtime.waves import EXECUTION_OPTION, execution_json, execution_option

if TYPE_CHECKING:
    from agent_runtime.sandbox.contract import SandboxAdapter


# What `run` accepts as a manifest: parsed, loaded from a run manifest, data, or a file.
ManifestSource = AgentManifest | LoadedManifest | Mapping[str, JsonValue] | str | Path

P = ParamSpec("P")
T = TypeVar("T")


def holding_store_thread(
        method: Callable[Concatenate[AgentRuntime, P], Coroutine[object, None, T]],
) -> Callable[Concatenate[AgentRuntime, P], Coroutine[object, None, T]]:
    """An async method of the runtime that executes runs: its store thread lives while
    it runs (one thread for all its store calls and its sub-runs', not one each)."""

    @functools.wraps(method)
    async def call(runtime: AgentRuntime, /, *args: P.args, **kwargs: P.kwargs) -> T:
        with runtime.store_thread.held():
            return await method(runtime, *args, **kwargs)

    return call


class AgentRuntime(HostServices):
    """A host's runtime: its store, models, tools, step kinds, config and event sinks.

    Starts, resumes, advances, forks, approves and cancels runs in its
    store; each execution is one attempt (`Execution`) holding the run's
    lease as `owner`. Cheap to build; build one per process or per config.
    """

    def __init__(self, *, store: RunStore | None = None,
                 models: Mapping[str, ModelAdapter] | None = None,
                 tools: Iterable[Tool] | Mapping[str, Tool] | ToolRegistry | None = None,
                 approvals: ApprovalAdapter | None = None,
                 artifacts: ArtifactStore | None = None,
                 event_sinks: Iterable[EventSink] = (), clock: Clock | None = None,
                 config: RuntimeConfig | None = None, steps: StepRegistry | None = None,
                 owner: str | None = None, lease_seconds: float = 60.0,
                 base_dir: Path | None = None, text_sink: TextSink | None = None,
                 reasoning_sink: TextSink | None = None,
                 policy: HostPolicy | None = None,
                 event_sink_failure_policy: str = CONTINUE,
                 on_event_sink_error: Callable[[Exception, Event], None] | None = None,
                 store_pool: StorePool | None = None,
                 sandbox: SandboxAdapter | None = None,
                 adapters: ModelAdapters | None = None) -> None:
        self.store: RunStore = store if store is not None else MemoryRunStore()
        # Where this runtime's executions call the store, off the event loop: a thread
        # of its own, or a lane on the threads a host shares between its runtimes.
        self.store_thread = store_thread_for(self.store, pool=store_pool)
        self.models: dict[str, ModelAdapter] = dict(models or {})
        self.tools = tools if isinstance(tools, ToolRegistry) else ToolRegistry(tools)
        self.approvals: ApprovalAdapter = approvals or StoreApprovals()
        self.artifacts = artifacts
        self.event_sinks = list(event_sinks)
        # `fail-run`: a step whose event a sink cannot take fails the run (events.py).
        self.sink_failure = SinkFailurePolicy(event_sink_failure_policy, on_event_sink_error)
        self.clock: Clock = clock or SystemClock()
        # The config's providers' adapters: given (shared with the host's other
        # runtimes of this config), else this runtime's own.
        self.adapters = ModelAdapters.matching(config, adapters)
        self.config = self.adapters.config
        self.steps = steps or default_steps()
        # Where code steps run: given, else the config's `sandbox:` (agent_runtime.sandbox).
        self.sandbox = sandbox or build_sandbox(self.config.sandbox)
        self.owner = owner or default_owner()
        self.lease_seconds = lease_seconds
        self.base_dir = base_dir or Path.cwd()
        # What any manifest may make this host do (agent_runtime.policy): given, else
        # the config's `policy:`, else none (a local user running their own files).
        self.policy = policy or self.config.policy or HostPolicy.permissive()
        self.policy_hooks = PolicyHooks(self.policy)
        self.scripted = ScriptedModel(self.base_dir, may_read=self._may_read_script)
        # Model text as it arrives, for a live view; events never carry it.
        self.text_sink = text_sink
        # The model's reasoning as it arrives (`--show-reasoning`); never logged either.
        self.reasoning_sink = reasoning_sink
        self.connections = McpConnections()
        # Set (from any thread or a signal handler) to stop this runtime's runs
        # gracefully: no new model request, tool call or step starts, and each
        # run suspends with `interrupted` at its next commit point.
        self.interrupt = threading.Event()

    def _may_read_script(self, path: Path) -> bool:
        return self.policy.script_allowed(path, self.base_dir)

    def check_budget(self, budget: Budget | None, *,
                     field: str = "budget.maxTotalTokens") -> None:
        """Refuse a token budget over the host policy's `maxTotalTokens` (`InvalidInput`)."""
        refusal = self.policy.budget_refusal(None if budget is None
                                             else budget.max_total_tokens)
        if refusal is not None:
            raise InvalidInput(refusal, field=field)

    # -- runs ------------------------------------------------------------------

    @holding_store_thread
    async def run(self, *, manifest: ManifestSource | None = None,
                  variables: Mapping[str, JsonValue] | None = None,
                  budget: Budget | None = None, run_id: str | None = None, resume: bool = False,
                  allow_running_takeover: bool = False,
                  options: Mapping[str, JsonValue] | None = None,
                  parent: ParentRef | None = None,
                  effect_resolutions: Mapping[str, JsonObject] | None = None,
                  tenant: str | None = None, expired_owner: str | None = None) -> RunResult:
        """Start a run, or with `resume=True` continue `run_id` from its latest checkpoint.

        A sub-run's child (`parent=`) belongs to its parent's tenant unless told.
        `expired_owner` (with `allow_running_takeover`) names a lease owner the
        caller confirmed dead: its run is taken over without waiting for the lease.
        """
        if resume:
            if run_id is None:
                raise InvalidInput("resume needs a run_id", field="run_id")
            return await self._resume(run_id, manifest=manifest, budget=budget,
                                      allow_running_takeover=allow_running_takeover,
                                      effect_resolutions=effect_resolutions,
                                      expired_owner=expired_owner)
        if manifest is None:
            raise InvalidInput("a run needs a manifest", field="manifest")
        if tenant is None and parent is not None:
            parent_record = await self.store_thread.call(self.store.load_run, parent.run_id)
            tenant = None if parent_record is None else parent_record.tenant
        record, agent = self.new_run(manifest=manifest, variables=variables, budget=budget,
                                     run_id=run_id, options=options, parent=parent, tenant=tenant)
        reserved = await self.store_thread.call(self._create_and_reserve, record,
                                                record.created_at)
        state = RunState.initial(record.variables, record.budget.max_total_tokens)
        return await self._execute(Execution(self, reserved, agent, state, []))

    run_sync = blocking(run)  # `run` for code without an event loop

    def new_run(self, *, manifest: ManifestSource,
                variables: Mapping[str, JsonValue] | None = None,
                budget: Budget | None = None, run_id: str | None = None,
                options: Mapping[str, JsonValue] | None = None,
                parent: ParentRef | None = None, tenant: str | None = None,
                variables_source: str = "--variables") -> tuple[RunRecord, AgentManifest]:
        """The record of a new run, its input checked against this host (not yet stored).

        Variables are resolved and the manifest's models, tools, connections
        and webhook destinations checked, so bad input is refused before a run
        exists (`InvalidInput`, `ConfigError`). `variables_source` names where
        `variables` came from in error messages (a flag, a request field).
        Options saying where a run came from (`ORIGIN_OPTIONS`) are not copied.
        """
        with use_limits(self.config.limits):  # the host's input limits, in every host
            agent, loaded, source = self._load(manifest)
        run_overrides: dict[str, JsonValue] = {}
        if loaded is not None and loaded.run is not None:
            run_overrides = {item.key: item.value for item in loaded.run.variables or []}
            if budget is None and loaded.run.budget is not None:
                budget = Budget(max_total_tokens=loaded.run.budget.max_total_tokens)
            run_id = run_id or loaded.run.run_id
            if loaded.run.execution is not None:
                # Kept with the run: every attempt, takeover and Advance slice plans alike.
                options = {**(options or {}), EXECUTION_OPTION: execution_json(
                    loaded.run.execution)}
        overrides = {**run_overrides, **dict(variables or {})}
        label = source if not variables else (
            variables_source if not run_overrides else f"{source} with {variables_source}")
        with use_limits(self.config.limits):
            resolved = resolve_variables(agent, overrides, source=label)
        run_options = without_origin(options)
        if EXECUTION_OPTION in run_options:
            run_options[EXECUTION_OPTION] = execution_json(execution_option(
                run_options[EXECUTION_OPTION]))
        self.check_runnable(agent, run_options, source=source, tenant=tenant)
        self.check_budget(budget)
        if parent is None and (budget is None or budget.max_total_tokens is None):
            # A child draws on its parent's budget, already bounded here.
            budget = Budget(max_total_tokens=self.policy.budget_for(None))
        now = self.clock.now()
        record = RunRecord(run_id=run_id or generate_run_id(),
                           manifest_hash=manifest_hash(agent),
                           manifest=manifest_json(agent), variables=resolved,
                           budget=budget or Budget(), parent=parent, tenant=tenant,
                           options=run_options, created_at=now, updated_at=now)
        return record, agent

    def create_run(self, *, manifest: ManifestSource,
                   variables: Mapping[str, JsonValue] | None = None,
                   budget: Budget | None = None, run_id: str | None = None,
                   options: Mapping[str, JsonValue] | None = None,
                   tenant: str | None = None) -> RunRecord:
        """Store a new run without executing it: status `created`, attempt 0.

        Another executor starts it — on AWS the state machine, on a
        `resume-requested` event or when the reconciler finds it queued too
        long — with a resume reservation like any other attempt.
        """
        record, _ = self.new_run(manifest=manifest, variables=variables, budget=budget,
                                 run_id=run_id, options=options, tenant=tenant)
        self._store_new(record)
        return record

    def _store_new(self, record: RunRecord) -> None:
        try:
            self.store.create_run(record)
        except RunAlreadyExists as error:
            raise InvalidInput(f"a run with id {record.run_id!r} already exists",
                               field="run_id") from error

    def _create_and_reserve(self, record: RunRecord, now: datetime) -> RunRecord:
        """Store a new run and reserve its first attempt for this runtime."""
        self._store_new(record)
        return self.store.resume_run(record.run_id, owner=self.owner, now=now,
                                     lease_seconds=self.lease_seconds)

    def _load(self, manifest: ManifestSource) -> tuple[AgentManifest, LoadedManifest | None, str]:
        if isinstance(manifest, AgentManifest):
            return manifest, None, "manifest"
        if isinstance(manifest, LoadedManifest):
            return manifest.agent, manifest, str(manifest.path)
        if isinstance(manifest, Mapping):
            return parse_agent_manifest(dict(manifest), source="manifest"), None, "manifest"
        loaded = load_manifest_file(manifest)
        return loaded.agent, loaded, str(loaded.path)

    def stored_manifest(self, record: RunRecord) -> AgentManifest:
        return parse_agent_manifest(record.manifest, source=f"run {record.run_id}")

    @holding_store_thread
    async def resume_read(self, record: RunRecord, latest: Checkpoint | None, *,
                          budget: Budget | None = None, allow_running_takeover: bool = False,
                          expired_owner: str | None = None) -> RunResult:
        """`run(run_id=record.run_id, resume=True, ...)` for a caller that has just read
        the run with its latest checkpoint (`attempt_reads.run_and_latest`), as `serve`'s
        launcher does to build the run's runtime: one store call fewer at each start."""
        self.check_budget(budget)
        return await self._resume_read(record, latest, manifest=None, budget=budget,
                                       allow_running_takeover=allow_running_takeover,
                                       effect_resolutions=None, expired_owner=expired_owner)

    async def _resume(self, run_id: str, *, manifest: ManifestSource | None,
                      budget: Budget | None, allow_running_takeover: bool,
                      effect_resolutions: Mapping[str, JsonObject] | None,
                      expired_owner: str | None = None) -> RunResult:
        self.check_budget(budget)
        # The run and its latest checkpoint in one store call (one trip to the store
        # thread and back); a finished run's checkpoint is not read.
        record, latest = await self.store_thread.call(run_and_latest, self.store, run_id)
        return await self._resume_read(record, latest, manifest=manifest, budget=budget,
                                       allow_running_takeover=allow_running_takeover,
                                       effect_resolutions=effect_resolutions,
                                       expired_owner=expired_owner)

    async def _resume_read(self, record: RunRecord, latest: Checkpoint | None, *,
                           manifest: ManifestSource | None, budget: Budget | None,
                           allow_running_takeover: bool,
                           effect_resolutions: Mapping[str, JsonObject] | None,
                           expired_owner: str | None) -> RunResult:
        run_id = record.run_id
        agent = self.stored_manifest(record)
        if manifest is not None:
            given, _, source = self._load(manifest)
            given_hash = manifest_hash(given)
            if given_hash != record.manifest_hash:
                raise ManifestMismatch(
                    f"the manifest changed since run {run_id!r} started ({record.manifest_hash} "
                    f"-> {given_hash}); a changed manifest is a new definition: start a new run",
                    source=source)
        if record.status in TERMINAL:
            return finished_result(record)
        # Checked before an attempt is reserved: nothing runs from a damaged checkpoint.
        check_checkpoint(record, latest, agent)
        try:
            # Reserved, and what the attempt starts from read, in one store call.
            reserved = await self.store_thread.call(
                reserve_attempt, self.store, run_id, owner=self.owner, clock=self.clock,
                lease_seconds=self.lease_seconds,
                allow_running_takeover=allow_running_takeover, expired_owner=expired_owner)
        except RunTerminal:  # it finished since it was read
            finished = await self.store_thread.call(self.store.load_run, run_id)
            return finished_result(finished or record)
        if reserved.cannot is not None:
            return await self._fail_unstarted(reserved.record, *unstartable(reserved.cannot))
        try:
            execution = execution_from(self, reserved.record, reserved.start, agent,
                                       budget=budget)
        except (ForkSourceMissing, CorruptRecord) as cannot:
            return await self._fail_unstarted(reserved.record, *unstartable(cannot))
        execution.resolutions = dict(effect_resolutions or {})
        # Its owner's lease was taken: the run was running, or the store counted one.
        execution.takeover = (record.status is RunStatus.RUNNING
                              or reserved.record.takeovers > record.takeovers)
        return await self._execute(execution)

    async def _execute(self, execution: Execution) -> RunResult:
        """Run one execution (under the config's `limits`); its MCP connections close with it."""
        try:
            with use_limits(self.config.limits):
                return await execution.execute()
        finally:
            await self.connections.close(execution.run_id, execution.attempt)

    async def _execution(self, record: RunRecord, agent: AgentManifest, *,
                         budget: Budget | None = None,
                         deadline: datetime | None = None) -> Execution:
        """A reserved attempt's execution; `CorruptRecord` if its checkpoints or effects fail."""
        checkpoint = await self.store_thread.call(attempt_start, self.store, record,
                                                  clock=self.clock,
                                                  lease_seconds=self.lease_seconds)
        return execution_from(self, record, checkpoint, agent, budget=budget, deadline=deadline)

    @holding_store_thread
    async def advance(self, run_id: str, *, deadline: datetime | None = None,
                      expected_attempt: int | None = None,
                      budget: Budget | None = None) -> RunResult:
        """Execute a reserved (running) attempt until the deadline, a suspension or the end.

        The caller holds the attempt (on AWS, the slice holding its lease); at the
        deadline the result's status is `running` and a later call continues.
        `budget` replaces the token limit, as a resume's does; every slice of
        the attempt may pass the same one.
        """
        record = await self.store_thread.call(existing_run, self.store, run_id)
        if record.status is not RunStatus.RUNNING or (
                expected_attempt is not None and record.attempt != expected_attempt):
            return finished_result(record)
        try:
            execution = await self._execution(record, self.stored_manifest(record),
                                              budget=budget, deadline=deadline)
        except (ForkSourceMissing, CorruptRecord) as cannot:
            return await self._fail_unstarted(record, *unstartable(cannot))
        return await self._execute(execution)

    def create_fork(self, run_id: str, *, seq: int | None = None, new_run_id: str | None = None,
                    budget: Budget | None = None, tenant: str | None = None,
                    variables: JsonObject | None = None) -> RunRecord:
        """Store a new run that starts from a saved checkpoint of `run_id`; do not execute it.

        The new run is `created` (`forks.forked_record`); its first attempt,
        wherever it executes (`run(resume=True)`, `advance`), copies that
        checkpoint as its own seq 1 and continues from it. Its token limit is
        `budget`, else the one in force at the checkpoint; `variables` replace
        the checkpoint's (an operator's edit); `tenant` defaults to the source's.
        """
        self.check_budget(budget)
        source = existing_run(self.store, run_id)
        manifest = self.stored_manifest(source)
        # The host's policy may have changed since the source started.
        self.check_runnable(manifest, source.options, source=f"run {source.run_id}",
                            tenant=source.tenant if tenant is None else tenant)
        if variables is not None:
            check_declared_types(manifest, variables)
        # Read whole first: a store failing its checks (CorruptRecord) is not forked from.
        latest, _ = self.store.load_latest_checkpoint(run_id), self.store.list_effects(run_id)
        checkpoint = latest if seq is None else self.store.load_checkpoint(run_id, seq)
        if checkpoint is None:
            which = "checkpoint" if seq is None else f"checkpoint {seq}"
            raise InvalidInput(f"run {run_id!r} has no {which} to fork from", field="seq")
        record = forked_record(source, checkpoint, run_id=new_run_id or generate_run_id(),
                               now=self.clock.now(), budget=budget, tenant=tenant,
                               variables=variables)
        self._store_new(record)
        return record

    @holding_store_thread
    async def fork(self, run_id: str, *, seq: int | None = None, new_run_id: str | None = None,
                   budget: Budget | None = None) -> RunResult:
        """Start a new run from a saved checkpoint of `run_id` (the latest, or `seq`), and run it.

        How a user retries a failed run or explores from an earlier point: the
        new run has the same definition and runtime options, starts from a
        copy of that checkpoint, and runs; the original is left unchanged. Tool
        calls pending at the checkpoint keep their idempotency keys, so a
        system that deduplicates by key sees a repeat, never a new side effect.
        """
        record = await self.store_thread.call(self.create_fork, run_id, seq=seq,
                                              new_run_id=new_run_id, budget=budget)
        return await self.run(run_id=record.run_id, resume=True)

    async def _fail_unstarted(self, record: RunRecord, error_type: str,
                              message: str) -> RunResult:
        """Fail a reserved attempt that cannot begin, so it is not left running."""
        error = RunError(type=error_type, message=message)
        now = self.clock.now()
        await self.store_thread.call(self.store.fail_run, record.run_id,
                                     expected_attempt=record.attempt, error=error, at=now)
        EventEmitter(self.event_sinks, run_id=record.run_id, attempt=record.attempt,
                     now=self.clock.now).emit("run.failed", error_type=error.type)
        return RunResult(run_id=record.run_id, status=RunStatus.FAILED, attempt=record.attempt,
                         error=error.model_dump(mode="json"))

    def approve(self, run_id: str, *, approved: bool = True, response: JsonValue = None,
                responded_by: str | None = None, approval_id: str | None = None) -> str:
        """Record the answer to the approval a run waits for; return its approval id."""
        record = existing_run(self.store, run_id)
        if approval_id is None:
            suspension = record.suspension
            if record.status is not RunStatus.SUSPENDED or suspension is None \
                    or suspension.reason != "approval":
                raise InvalidInput(f"run {run_id!r} is {record.status.value}, not waiting for "
                                   "an approval", field="run_id")
            approval_id = str(suspension.details["approval_id"])
        self.store.resolve_approval(run_id, approval_id, approved=approved, response=response,
                                    responded_by=responded_by, at=self.clock.now())
        return approval_id

    def cancel(self, run_id: str) -> None:
        self.store.cancel_run(run_id, at=self.clock.now())
