"""One attempt of a run: the interpreter of the cursor and its commit points.

An `Execution` owns the attempt reserved by `resume_run`. It walks the
manifest's steps with a stack of frames (the cursor), checkpointing after
every step, loop iteration, model response and tool result. Each checkpoint
renews the lease in the same write and is fenced by the attempt, so a
superseded owner stops at its next commit point. Resuming rebuilds the stack
from the latest checkpoint and continues exactly where it was.

Every store call is made on the runtime's store thread and awaited
(agent_runtime/store_thread.py): a commit holds up only the coroutine that
made it, which goes on once it is stored, not the event loop.

Step kinds live in `agent_runtime.steps`, one module each; this module knows
none of them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, ParamSpec, TypeVar, cast

from stores.base import (
    CheckpointConflict,
    RunTerminal,
    SettlesInCheckpoint,
    StaleAttempt,
    StoreError,
)
from stores.records import (
    Checkpoint,
    Frame,
    JsonObject,
    JsonValue,
    RunError,
    RunRecord,
    RunStatus,
    json_copy,
    trusted_record,
    utc_now,
)

from agent_runtime.clock import iso_stamp
from agent_runtime.conditions import evaluate_condition
from agent_runtime.deadlines import SliceDeadline
from agent_runtime.errors import (
    CheckpointUnavailable,
    ConditionEvaluationError,
    DeadlineReached,
    EndRun,
    StepFailed,
    SuspendRun,
)
from agent_runtime.events import EventEmitter
from agent_runtime.lease_heartbeat import LeaseHeartbeat
from agent_runtime.manifest import AgentManifest
from agent_runtime.results import RunResult
from agent_runtime.run_outputs import OutputAllowance, final_output
from agent_runtime.state import COMPLETED, SKIPPED, STEP, RunState
from agent_runtime.state_projection import projected, projects
from agent_runtime.step_context import SETTLE_ACTIONS, LostOwnership, StepContext
from agent_runtime.step_kinds import StepBase
from agent_runtime.telemetry.trace_ids import TRACE_PARENT
from agent_runtime.waves import wave_runner

if TYPE_CHECKING:
    from agent_runtime.run_host import RunHost

T = TypeVar("T")
P = ParamSpec("P")

logger = logging.getLogger(__name__)

# Room for the events between two checkpoints of one attempt.
SEQUENCES_PER_CHECKPOINT = 1_000_000


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def join_path(prefix: str, *parts: object) -> str:
    tail = "/".join(map(str, parts))
    return f"{prefix}/{tail}" if prefix else tail


class Execution(StepContext):
    """One attempt of a run: walks the cursor, commits at every commit point, and
    ends the attempt completed, failed, suspended, cancelled or (at a slice's
    deadline) still running. Steps see it as their context (`StepContext`)."""

    def __init__(self, runtime: RunHost, run: RunRecord, manifest: AgentManifest,
                 state: RunState, cursor: list[Frame], *,
                 deadline: datetime | None = None, continues: bool = False) -> None:
        self.runtime = runtime
        self.run = run
        self.run_id = run.run_id
        self.attempt = run.attempt
        self.manifest = manifest
        self.state = state
        self.resume_cursor = cursor
        self.deadline = deadline
        self.continues = continues  # of an attempt an earlier execution began (a slice)
        self.takeover = False  # the attempt was taken over from an owner found gone
        self.slice = SliceDeadline(deadline, runtime.clock.now)  # bounds every call
        self.stamp = iso_stamp(runtime.clock.now)
        self.stack: list[Frame] = []
        self.scopes: list[JsonObject] = []
        self.projecting = projects(manifest.extensions)
        # One attempt may span several executions (`advance` in time slices):
        # numbering each one's events after its starting checkpoint keeps the
        # attempt's events ordered by (attempt, sequence) across them.
        self.events = EventEmitter(runtime.event_sinks, run_id=run.run_id, attempt=run.attempt,
                                   now=runtime.clock.now,
                                   first_sequence=state.seq * SEQUENCES_PER_CHECKPOINT + 1,
                                   failure=runtime.sink_failure, log=state.events)
        # The lease heartbeat while model and tool calls are in flight (`guarded`).
        self.heartbeat = LeaseHeartbeat(self._renew_lease,
                                        interval=max(runtime.lease_seconds / 3, 0.05),
                                        on_beat=lambda: self.events.emit("run.heartbeat"))
        self._lease = timedelta(seconds=runtime.lease_seconds)  # each checkpoint renews it
        self.resolutions = {}
        self.settlements = []
        self.reserved = set()
        self.resolved_models = {}
        # A protocol check costs more than a tool call's bookkeeping: once per execution.
        self.settles_in_checkpoint = isinstance(runtime.store, SettlesInCheckpoint)
        # A parallel run's top-level steps run in waves (agent_runtime.waves).
        self.waves = wave_runner(self)
        # What the host policy still lets the run's step outputs take.
        self._outputs: OutputAllowance | None = None

    # -- what steps use ------------------------------------------------------

    def scope(self) -> JsonObject:
        """Variables as templates and conditions see them: loop scopes over run variables."""
        merged = dict(self.state.variables) if self.scopes else self.state.variables
        for scope in self.scopes:
            merged.update(scope)
        return merged

    def condition(self, expression: str, *, step_path: str, field: str) -> bool:
        try:
            return evaluate_condition(expression, self.scope())
        except ConditionEvaluationError as error:
            raise StepFailed("condition_error", f"step {step_path}: {field}: {error}") from error

    async def checkpoint(self, *, reserving: Sequence[str] = ()) -> None:
        """A commit point: save the state and cursor, renew the lease, honour the deadline.

        `reserving`: effect keys of calls this checkpoint records as pending, to
        reserve in the same commit (only where the store settles in checkpoints).
        Their calls go out next, so neither the deadline nor an interrupt may
        come between: both are honoured at the commit point after the call.
        """
        if self.heartbeat.lost is not None:
            raise LostOwnership(self.heartbeat.lost)
        self.state.seq += 1
        seq = self.state.seq  # other members of a wave may commit while this one is stored
        now = self.now()
        checkpoint = self.state.to_checkpoint(
            run_id=self.run_id, attempt=self.attempt, manifest_hash=self.run.manifest_hash,
            cursor=self.cursor(), created_at=now, copy_lists=self._appending_meanwhile())
        lease_expires_at = now + self._lease
        settlements, self.settlements = self.settlements, []
        listening = self.events.listening
        writing = time.monotonic() if listening else 0.0
        try:
            if settlements or reserving:
                # `settle_effect` left them for this commit, or the step asked to
                # reserve: the store supports it.
                await self.runtime.store_thread.save_checkpoint_settling(
                    cast(SettlesInCheckpoint, self.store), checkpoint, settlements,
                    expected_attempt=self.attempt, at=now, lease_expires_at=lease_expires_at,
                    reservations=reserving)
            else:
                await self.runtime.store_thread.save_checkpoint(
                    self.store, checkpoint, expected_attempt=self.attempt,
                    lease_expires_at=lease_expires_at)
        except (StaleAttempt, RunTerminal, CheckpointConflict) as error:
            # A conflicting seq under our own attempt means another execution of
            # this attempt (a retried Lambda invocation) saved it first: it owns
            # the run now, and this one stops without touching it.
            raise LostOwnership(error) from error
        except Exception as error:
            # Without its commit point the run cannot go on: no later step runs.
            raise CheckpointUnavailable(self.run_id, error) from error
        renewed = self.heartbeat.renewed()
        self.slice.progressed = True
        if listening:  # how long the store took to commit (`commit` spans)
            self.events.emit("checkpoint.saved", seq=seq, store=type(self.store).__name__,
                             duration_ms=round((renewed - writing) * 1000, 3))
        if reserving:
            self.reserved.update(reserving)
            return
        if self.deadline is not None and now >= self.deadline:
            raise DeadlineReached()
        self.check_interrupt(before="the next action")

    def _appending_meanwhile(self) -> bool:
        """Whether a wave's members may append to the run's lists while the store thread
        reads them for a commit: then it gets copies; else they are shared."""
        return self.waves is not None and self.waves.active

    def check_interrupt(self, *, before: str) -> None:
        """Suspend the run (`interrupted`) when the runtime was asked to stop.

        Called at commit points and before a model request, tool call or
        sub-run starts (never between an effect's reservation and its call),
        so what finished is saved and nothing new begins.
        """
        if self.runtime.interrupt.is_set():
            path = self.stack[-1].step_path if self.stack else ""
            raise SuspendRun("interrupted", {"before": before, "step_path": path})

    def cursor(self) -> list[Frame]:
        # Copies of the frames, their continuations copied without deepcopy (a
        # hot path: every commit point). Trusted: each field is a valid frame's.
        return [trusted_record(Frame, {
            "step_path": frame.step_path, "step_id": frame.step_id,
            "step_index": frame.step_index, "loop_iteration": frame.loop_iteration,
            "child_index": frame.child_index, "continuation": json_copy(frame.continuation),
            "continuation_version": frame.continuation_version}) for frame in self.stack]

    def guarded(self, call: Awaitable[T]) -> Awaitable[T]:
        """Await a long model or tool call while a heartbeat keeps the lease alive."""
        return self.heartbeat.guarded(call)

    async def bounded(self, call: Coroutine[object, None, T], what: str, *, step_path: str,
                      timeout: float | None = None) -> T:
        """A model, tool or webhook call, heartbeat-guarded and bounded by its own
        `timeout` and the slice's deadline (agent_runtime/deadlines.py)."""
        if timeout is None and self.slice.deadline is None:
            return await self.guarded(call)  # nothing bounds it: no slice to fit in
        return await self.slice.bounded(call, what, step_path=step_path, timeout=timeout,
                                        guard=self.guarded)

    async def _renew_lease(self) -> None:
        await self.store_call(self.store.renew_lease, self.run_id, expected_attempt=self.attempt,
                              now=self.now(), lease_seconds=self.runtime.lease_seconds)

    # -- the walk ------------------------------------------------------------

    async def run_sequence(self, steps: Sequence[StepBase], *, prefix: str,
                           loop_iteration: int | None, resume: list[Frame],
                           checkpoint_last: bool = True) -> None:
        """Run `steps` in order from the resume frame; checkpoint after each one.

        With `checkpoint_last=False` the caller commits right after the last
        step itself (a loop iteration's end, the run's completion) with nothing
        outside the process in between, so that one commit point serves both: a
        crash before it repeats the last step, exactly as a crash just before
        the step's own commit would.
        """
        level = len(self.stack)
        start = resume[0].step_index if resume else 0
        first: Frame | None = resume[0] if resume else None
        if first is None or start >= len(steps) or first.step_id != steps[start].id:
            first = self._frame_at(steps, start, prefix, loop_iteration)
            resume = []  # nothing below a fresh frame
        self.stack.append(first)
        after = start
        for index in range(start, len(steps)):
            if index < after:
                continue  # ran in the wave before
            step = steps[index]
            if first is not None:  # the frame the sequence starts (or resumes) at
                frame, below, first = first, resume[1:], None
            else:
                frame, below = self._frame_at(steps, index, prefix, loop_iteration), []
            self.stack[level] = frame
            if level > 0:
                self.stack[level - 1].child_index = index
            if level == 0 and self.waves is not None:
                after = await self.waves.run(steps, index, frame, below)
            else:
                await self.run_step(step, frame, below)
                after = index + 1
            del self.stack[level + 1:]
            self.stack[level] = self._frame_at(steps, after, prefix, loop_iteration)
            if level > 0:
                self.stack[level - 1].child_index = after
            if checkpoint_last or after < len(steps):
                await self.checkpoint()
        # Popped only on normal completion: a suspension or failure propagating
        # through here is saved with the stack as it stands, pointing at the step.
        del self.stack[level:]

    @staticmethod
    def _frame_at(steps: Sequence[StepBase], index: int, prefix: str,
                  loop_iteration: int | None) -> Frame:
        # Trusted (several frames a commit point): the fields come from the parsed
        # manifest and the walk itself.
        if index >= len(steps):  # past the end: this sequence is done
            return trusted_record(Frame, {
                "step_path": prefix, "step_id": "", "step_index": index,
                "loop_iteration": loop_iteration, "child_index": None, "continuation": {},
                "continuation_version": 1})
        step = steps[index]
        return trusted_record(Frame, {
            "step_path": f"{prefix}/{step.id}" if prefix else step.id, "step_id": step.id,
            "step_index": index, "loop_iteration": loop_iteration, "child_index": None,
            "continuation": {}, "continuation_version": step.continuation_version})

    async def run_step(self, step: StepBase, frame: Frame, resume: list[Frame]) -> None:
        fresh = not frame.continuation and not resume
        depth = len(self.stack) - 1
        if fresh and step.when is not None and not self.condition(
                step.when, step_path=frame.step_path, field="when"):
            self.state.add_result({"kind": STEP, "step_path": frame.step_path,
                                   "step_id": step.id, "depth": depth, "status": SKIPPED,
                                   "at": self.stamp()})
            self.events.emit("step.skipped", step_id=step.id, step_path=frame.step_path)
            return
        executor = self.runtime.steps.get(step.type)
        if executor is None:
            raise StepFailed("unsupported_step",
                             f"step {frame.step_path}: {step.type!r} steps are not supported "
                             "by this runtime yet")
        # Events are built only when a sink listens, their fields too: a commit point's
        # several events would otherwise cost a run nobody watches a share of its time.
        listening = self.events.listening
        if listening:
            consumed_before = self.state.budget.spent(frame.step_path)
            started = time.monotonic()
            self.events.emit("step.started", step_id=step.id, step_path=frame.step_path,
                             kind=step.type, resumed=not fresh or None)
        output = await executor.execute(step, frame, self, resume)
        self._check_output_size(step, frame, output)
        if self.projecting:  # the manifest's stateProjection (state_projection.py)
            self.state.variables.update(projected(step, self.stack[0].step_index, output))
        elif step.output_variable:
            self.state.variables[step.output_variable] = output
        self.state.add_result({"kind": STEP, "step_path": frame.step_path, "step_id": step.id,
                               "depth": depth, "status": COMPLETED, "output": output,
                               "at": self.stamp()})
        if listening:
            self.events.emit("step.completed", step_id=step.id, step_path=frame.step_path,
                             kind=step.type,
                             duration_ms=round((time.monotonic() - started) * 1000),
                             tokens=self.state.budget.spent(frame.step_path) - consumed_before)

    def _check_output_size(self, step: StepBase, frame: Frame, output: JsonValue) -> None:
        if self._outputs is None:  # once per attempt: what earlier attempts kept
            self._outputs = OutputAllowance(self.runtime.policy, self.state.step_results)
        self._outputs.take(step, frame.step_path, output)

    # -- the attempt ---------------------------------------------------------

    def final_output(self) -> JsonValue:
        return final_output(self.manifest, self.state.step_results, projecting=self.projecting)

    def _final_checkpoint(self) -> Checkpoint:
        self.state.seq += 1
        return self.state.to_checkpoint(
            run_id=self.run_id, attempt=self.attempt, manifest_hash=self.run.manifest_hash,
            cursor=self.cursor(), created_at=self.now())

    async def execute(self) -> RunResult:
        started = time.monotonic()
        first = self.attempt == 1 and self.state.seq == 0
        self.events.emit("run.started" if first else "run.resumed",
                         from_seq=None if first else self.state.seq,
                         continues=self.continues or None, takeover=self.takeover or None,
                         agent=self.manifest.id,
                         trace_parent=_text(self.run.options.get(TRACE_PARENT)),
                         parent_run_id=None if self.run.parent is None
                         else self.run.parent.run_id)
        with self.runtime.store_thread.held():
            try:
                return await self._attempt(started)
            except LostOwnership as lost:
                return await self._lost_result(lost.cause)
            except CheckpointUnavailable as unavailable:
                return await self._fail_unsaved(unavailable)
            finally:
                self.heartbeat.stop()

    async def _attempt(self, started: float) -> RunResult:
        steps = self.manifest.steps
        try:
            # The run's completion below is the last step's commit point, as an
            # iteration's end is its last step's (run_sequence).
            await self.run_sequence(steps, prefix="", loop_iteration=None,
                                    resume=self.resume_cursor, checkpoint_last=False)
            if self.settlements:
                await self.checkpoint()  # effect results ride in a checkpoint, not a completion
        except SuspendRun as signal:
            # The run's last events ride in the write that suspends or ends it; the
            # sinks hear them once it committed.
            suspended = self.events.record("run.suspended", reason=signal.reason,
                                           approval_id=signal.details.get("approval_id"),
                                           child_run_id=signal.details.get("child_run_id"))
            await self._store_write(self.store.suspend_run, self.run_id,
                                    expected_attempt=self.attempt, reason=signal.reason,
                                    details=signal.details, at=self.now(),
                                    checkpoint=self._final_checkpoint())
            self.events.deliver(suspended)
            return self.result(RunStatus.SUSPENDED, suspension={"reason": signal.reason,
                                                                "details": signal.details})
        except EndRun as signal:
            return await self._end_early(signal)
        except StepFailed as failure:
            return await self._fail(RunError(type=failure.code, message=failure.message,
                                             details=failure.details))
        except DeadlineReached:
            return self.result(RunStatus.RUNNING)
        except (LostOwnership, CheckpointUnavailable):
            raise
        except Exception as error:
            # A bug in a step, tool adapter or provider driver: fail the run with
            # what happened rather than leave it to crash-loop; `fork` retries it.
            return await self._fail(RunError(type="internal_error",
                                             message=f"{type(error).__name__}: {error}"))
        self.stack = [self._frame_at(steps, len(steps), "", None)]
        output = self.final_output()
        completed = self.events.record(
            "run.completed", duration_ms=round((time.monotonic() - started) * 1000),
            tokens=self.state.budget.consumed_tokens)
        await self._store_write(self.store.complete_run, self.run_id,
                                expected_attempt=self.attempt, output=output, at=self.now(),
                                checkpoint=self._final_checkpoint())
        self.events.deliver(completed)
        return self.result(RunStatus.COMPLETED, output=output)

    async def _fail(self, error: RunError) -> RunResult:
        failed = self.events.record("run.failed", error_type=error.type)
        await self._store_write(self.store.fail_run, self.run_id, expected_attempt=self.attempt,
                                error=error, at=self.now(), checkpoint=self._final_checkpoint())
        self.events.deliver(failed)
        return self.result(RunStatus.FAILED, error=error)

    async def _end_early(self, signal: EndRun) -> RunResult:
        output = self.final_output()
        if signal.action == "complete":
            completed = self.events.record("run.completed", reason=signal.reason)
            await self._store_write(self.store.complete_run, self.run_id,
                                    expected_attempt=self.attempt, output=output, at=self.now(),
                                    checkpoint=self._final_checkpoint())
            self.events.deliver(completed)
            return self.result(RunStatus.COMPLETED, output=output)
        # A cancel carries no checkpoint: its event rides in the one saved before it.
        cancelled = self.events.record("run.cancelled", reason=signal.reason)
        await self._store_write(self.store.save_checkpoint, self._final_checkpoint(),
                                expected_attempt=self.attempt)
        await self._store_write(self.store.cancel_run, self.run_id, at=self.now(),
                                expected_attempt=self.attempt)
        self.events.deliver(cancelled)
        return self.result(RunStatus.CANCELLED)

    async def _store_write(self, write: Callable[P, None], *args: P.args,
                           **kwargs: P.kwargs) -> None:
        try:
            with self.fenced():
                await self.store_call(write, *args, **kwargs)
        except LostOwnership:
            raise
        except Exception as error:
            raise CheckpointUnavailable(self.run_id, error) from error

    async def _fail_unsaved(self, unavailable: CheckpointUnavailable) -> RunResult:
        """Fail the run as `checkpoint_unavailable` without a checkpoint (the store refused
        one). When the store refuses that too, the result still says so, and the run's
        lease expires for the reconciler; no store error escapes to the caller."""
        error = RunError(type="checkpoint_unavailable", message=str(unavailable))
        try:
            await self.store_call(self.store.fail_run, self.run_id,
                                  expected_attempt=self.attempt, error=error, at=self.now())
        except (StaleAttempt, RunTerminal) as lost:
            return await self._lost_result(lost)
        except Exception as second:
            logger.warning("run %s: failing it after %s also failed: %s", self.run_id,
                           unavailable, second)
        self.events.emit("run.failed", error_type=error.type)
        return self.result(RunStatus.FAILED, error=error)

    async def _lost_result(self, cause: StoreError) -> RunResult:
        try:
            current = await self.store_call(self.store.load_run, self.run_id)
        except Exception:  # the store failed again: report what is known
            current = None
        status = current.status if current is not None else RunStatus.FAILED
        self.events.emit("run.superseded", reason=type(cause).__name__,
                         status=status.value)
        return self.result(RunStatus(status),
                           error=RunError(type="lost_ownership", message=str(cause)))

    def result(self, status: RunStatus, *, output: JsonValue = None,
               suspension: JsonObject | None = None,
               error: RunError | None = None) -> RunResult:

        return RunResult(run_id=self.run_id, status=status, attempt=self.attempt, output=output,
                         suspension=suspension, usage=self.state.usage(),
                         error=None if error is None else error.model_dump(mode="json"))


__all__ = ["SETTLE_ACTIONS", "Execution", "LostOwnership", "join_path", "utc_now"]
