"""`sub-run` steps: run another agent as a child run of this one.

The child is its own run in the same store, with `parent` set and an id
derived from the parent run id and the step path, so a re-executed step (a
resumed parent, a crash anywhere in between) always finds the same child. It
runs in process through the same runtime while the parent's lease is kept
alive. A child that suspends suspends the parent (`sub-run`); a resumed parent
resumes its child; a terminal child is never run again, its outcome is read.
A child still `running` under a live lease belongs to someone else: the parent
suspends rather than fight over it; an expired one is taken over.

Budget: the child may spend what the parent has left, and what it consumes is
added to the parent's budget exactly once. The frame keeps how many of the
child's tokens were already counted; that counter and the parent's consumed
tokens live in the same state, so every checkpoint saves both or neither.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, cast

from stores.base import LeaseHeld, RunTerminal
from stores.file_layout import MAX_RUN_ID_BYTES, check_run_id
from stores.records import Budget, Frame, JsonObject, JsonValue, ParentRef, RunRecord, RunStatus

from agent_runtime.errors import InvalidInput, ManifestError, NotFound, StepFailed, SuspendRun
from agent_runtime.excerpts import excerpt
from agent_runtime.manifest import AgentManifest, SubRunStep
from agent_runtime.run_manifest import load_agent_manifest
from agent_runtime.templates import MISSING, resolve_path
from agent_runtime.variables import resolve_variables
from agent_runtime.waves import EXECUTION_OPTION

if TYPE_CHECKING:
    from agent_runtime.execution import Execution

# Run option naming where an inline child's own `manifestRef`s are resolved.
# An inline child cannot carry its parent's `manifest_path`: resuming the child
# from the CLI checks its hash against that file, which holds the parent.
MANIFEST_DIR = "manifest_dir"


def child_run_id_for(parent_run_id: str, step_path: str) -> str:
    """The child's id: readable, stable across attempts, safe as a directory name.

    `<parent>.sub-<hash of the step path>`, unless that is no valid run id on
    the file store (a parent near the length limit, as deep sub-runs are, or
    ending in a dot): then a readable prefix of the parent and a hash of the
    parent and step path, which tells children of different parents apart.
    """
    digest = hashlib.sha256(step_path.encode()).hexdigest()[:12]
    child = f"{parent_run_id}.sub-{digest}"
    with contextlib.suppress(ValueError):
        check_run_id(child)
        return child
    tail = hashlib.sha256(f"{parent_run_id}\0{step_path}".encode(
        "utf-8", "surrogatepass")).hexdigest()[:24]
    readable = re.sub(r"\.{2,}", ".", re.sub(r"[^A-Za-z0-9_.-]", "-", parent_run_id))
    prefix = readable[:MAX_RUN_ID_BYTES - len(f".sub-{tail}")].strip(".-")
    return f"{prefix}.sub-{tail}" if prefix else f"sub-{tail}"


@dataclass(frozen=True)
class ChildSpec:
    """What creating the child takes: its id, agent, variable overrides and run options."""

    run_id: str
    manifest: AgentManifest
    variables: JsonObject
    options: JsonObject


class SubRunContinuation(TypedDict, total=False):
    """What a sub-run step keeps in its frame (JSON, as saved): its child's id, saved
    before the child exists, and the child's tokens already added to the parent's."""

    child_run_id: str
    counted_tokens: int


class SubRunStepExecutor:
    async def execute(self, step: SubRunStep, frame: Frame, ctx: Execution,
                      resume: list[Frame]) -> JsonValue:
        state = cast(SubRunContinuation, frame.continuation)  # a typed view of the same dict
        child_id: str = state.get("child_run_id") or child_run_id_for(ctx.run_id,
                                                                       frame.step_path)
        record = await self._load(ctx, child_id, frame)
        # A bad child manifest or mapping fails the step before any child exists.
        spec = None if record is not None else self._spec(step, frame, ctx, child_id)
        if "child_run_id" not in state:
            # Saved before the child is created, so a crash right after creating
            # it resumes that child instead of orphaning it.
            state.update({"child_run_id": child_id, "counted_tokens": 0})
            await ctx.checkpoint()
        if record is not None:
            # Tokens a child spent after the parent's last checkpoint (a crash).
            self._count(ctx, state, record)
        if record is None or not record.status.terminal:
            ctx.state.budget.check(before="sub-run")
            ctx.check_interrupt(before="sub-run")
            budget = Budget(max_total_tokens=self._child_limit(ctx, state))
            if record is not None:
                await self._resume(step, frame, ctx, record, budget)
            elif spec is not None:
                await self._start(step, frame, ctx, spec, budget)
            record = await self._load(ctx, child_id, frame)
            if record is None:
                raise StepFailed("sub_run_failed",
                                 f"step {frame.step_path}: child run {child_id} disappeared",
                                 {"child_run_id": child_id})
            self._count(ctx, state, record)
        return self._outcome(step, frame, ctx, record)

    # -- the child -----------------------------------------------------------

    def _spec(self, step: SubRunStep, frame: Frame, ctx: Execution, child_id: str) -> ChildSpec:
        options = dict(ctx.run.options)
        options.pop("manifest_path", None)
        options.pop(MANIFEST_DIR, None)
        options.pop(EXECUTION_OPTION, None)  # the parent's run manifest said how it runs
        anchor = self._manifest_dir(ctx)
        if step.manifest is not None:
            manifest: AgentManifest = step.manifest
            if anchor is not None:
                options[MANIFEST_DIR] = str(anchor)
        else:  # the model requires one of the two
            path = ((anchor or ctx.base_dir) / str(step.manifest_ref)).resolve()
            try:
                manifest = load_agent_manifest(path)
            except ManifestError as error:
                # Named, never quoted: the file is read on the manifest's behalf, and
                # a reason may quote what it holds (`validate FILE` shows it to its owner).
                where = f" at {error.field}" if error.field else ""
                reason = error.reason if isinstance(error, NotFound) else (
                    f"not a valid agent manifest{where} (agent-runtime validate {path} says "
                    "why)")
                raise StepFailed("sub_run_invalid",
                                 f"step {frame.step_path}: manifestRef "
                                 f"{excerpt(step.manifest_ref)}: {path}: {reason}",
                                 {"file": str(path), "field": error.field}
                                 ) from None
            options["manifest_path"] = str(path)
        variables = self._mapped_variables(step, ctx)
        try:
            # The child's declarations and type rules, checked here so the error
            # names the mapping rather than a command-line flag.
            resolve_variables(manifest, variables, source=f"step {frame.step_path}")
        except InvalidInput as error:
            field = (error.field or "").replace("variables", "variableMappings", 1)
            raise StepFailed("sub_run_invalid",
                             f"step {frame.step_path}: {field}: {error.reason}",
                             {"field": field}) from None
        return ChildSpec(child_id, manifest, variables, options)

    @staticmethod
    def _manifest_dir(ctx: Execution) -> Path | None:
        """The directory of the file holding this run's manifest, when there is one:
        a `manifestRef` is resolved there, else in the runtime's `base_dir`."""
        options = ctx.run.options
        if options.get(MANIFEST_DIR):  # the agent manifest's own directory
            return Path(str(options[MANIFEST_DIR]))
        if options.get("manifest_path"):
            return Path(str(options["manifest_path"])).parent
        return None

    @staticmethod
    def _mapped_variables(step: SubRunStep, ctx: Execution) -> JsonObject:
        """`{childVariable: parentPath}` resolved in the parent's scope.

        A path that resolves to nothing is left out, so the child's declared
        default applies (and a `requiresOverride` variable fails, naming it).
        """
        scope = ctx.scope()
        mapped: JsonObject = {}
        for key, parent_path in (step.variable_mappings or {}).items():
            value = resolve_path(scope, parent_path)
            if value is not MISSING:
                mapped[key] = value
        return mapped

    async def _start(self, step: SubRunStep, frame: Frame, ctx: Execution, spec: ChildSpec,
                     budget: Budget) -> None:
        ctx.events.emit("sub-run.started", step_id=step.id, step_path=frame.step_path,
                        child_run_id=spec.run_id)
        parent = ParentRef(run_id=ctx.run_id, step_path=frame.step_path)
        try:
            await ctx.guarded(ctx.start_child(
                spec.manifest, run_id=spec.run_id, parent=parent, variables=spec.variables,
                budget=budget, options=spec.options))
        except InvalidInput as error:  # the child's models or tools are unavailable here
            raise StepFailed("sub_run_invalid",
                             f"step {frame.step_path}: child run {spec.run_id}: {error}",
                             {"child_run_id": spec.run_id}) from None

    async def _resume(self, step: SubRunStep, frame: Frame, ctx: Execution, record: RunRecord,
                      budget: Budget) -> None:
        running = record.status is RunStatus.RUNNING
        if running and record.lease_expires_at is not None \
                and record.lease_expires_at > ctx.now():
            return  # someone else is running it: the parent waits (see _outcome)
        ctx.events.emit("sub-run.resumed", step_id=step.id, step_path=frame.step_path,
                        child_run_id=record.run_id, child_status=record.status.value,
                        takeover=running or None)
        # A running child here has an expired lease: its owner died (typically
        # this parent's previous attempt), so take it over. Losing a race for
        # it to another owner is fine: the outcome is read from the store.
        with contextlib.suppress(LeaseHeld, RunTerminal):
            await ctx.guarded(ctx.resume_child(record.run_id, budget=budget, takeover=running))

    @staticmethod
    async def _load(ctx: Execution, child_id: str, frame: Frame) -> RunRecord | None:
        record: RunRecord | None = await ctx.store_call(ctx.store.load_run, child_id)
        expected = ParentRef(run_id=ctx.run_id, step_path=frame.step_path)
        if record is not None and record.parent != expected:
            raise StepFailed("sub_run_invalid",
                             f"step {frame.step_path}: run {child_id} exists but is not this "
                             "step's child", {"child_run_id": child_id})
        return record

    # -- budget --------------------------------------------------------------

    @staticmethod
    def _child_limit(ctx: Execution, state: SubRunContinuation) -> int | None:
        """The child's limit: what it has spent so far plus what the parent has left.

        Given on every start and resume, since a resume limit replaces the
        persisted one: a parent resumed with a new limit passes it on.
        """
        budget = ctx.state.budget
        if budget.max_total_tokens is None:
            return None
        counted = state["counted_tokens"]
        return counted + budget.max_total_tokens - budget.consumed_tokens

    @staticmethod
    def _count(ctx: Execution, state: SubRunContinuation, record: RunRecord) -> None:
        """Add the child's tokens not yet counted to the parent's budget.

        No checkpoint of its own: the counter and the parent's total change
        together, and every way out of the step (its output, a suspension, a
        failure) is saved with a checkpoint; a crash loses both, consistently.
        """
        new = record.consumed_tokens - state["counted_tokens"]
        if new > 0:
            ctx.state.budget.consumed_tokens += new
            state["counted_tokens"] = record.consumed_tokens

    # -- the outcome ---------------------------------------------------------

    def _outcome(self, step: SubRunStep, frame: Frame, ctx: Execution,
                 record: RunRecord) -> JsonValue:
        child_id, path = record.run_id, frame.step_path
        where = {"step_id": step.id, "step_path": path, "child_run_id": child_id}
        if record.status is RunStatus.COMPLETED:
            ctx.events.emit("sub-run.completed", **where, tokens=record.consumed_tokens)
            output: JsonValue = record.output
            return output
        if record.status in (RunStatus.FAILED, RunStatus.CANCELLED):
            error = record.error
            ctx.events.emit("sub-run.failed", **where, status=record.status.value,
                            error_type=None if error is None else error.type)
            if record.status is RunStatus.CANCELLED:
                raise StepFailed("sub_run_cancelled",
                                 f"step {path}: child run {child_id} was cancelled",
                                 {"child_run_id": child_id})
            cause = "unknown error" if error is None else f"{error.type}: {error.message}"
            raise StepFailed("sub_run_failed",
                             f"step {path}: child run {child_id} failed: {cause}",
                             {"child_run_id": child_id,
                              "child_error": None if error is None
                              else error.model_dump(mode="json")})
        suspension = record.suspension if record.status is RunStatus.SUSPENDED else None
        reason = record.status.value if suspension is None else suspension.reason
        budget = ctx.state.budget
        if reason == "token-budget" and budget.exhausted:
            # The child ran out of the parent's budget: a new limit for the
            # parent is the remedy, so the parent says so itself.
            ctx.events.emit("sub-run.suspended", **where, child_reason=reason)
            raise SuspendRun("token-budget", {
                "max_total_tokens": budget.max_total_tokens,
                "consumed_tokens": budget.consumed_tokens, "before": "sub-run",
                "child_run_id": child_id, "step_path": path})
        ctx.events.emit("sub-run.suspended", **where, child_reason=reason)
        raise SuspendRun("sub-run", {
            "child_run_id": child_id, "child_reason": reason, "step_path": path,
            "step_id": step.id,
            "child_details": {} if suspension is None else dict(suspension.details)})
