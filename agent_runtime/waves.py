"""Parallel waves: the members of a wave run side by side, each checkpointing as it goes.

A run whose options hold `execution: {mode: parallel, maxConcurrency}` (a run
manifest's `execution`, kept with the run so every attempt, takeover and
Advance slice plans alike) runs its top-level steps in the waves
`build_execution_waves` plans, capped by the host's `execution.maxConcurrency`.
A wave of one step runs exactly as in a sequential run. A wider wave runs its
members as asyncio tasks:

- the cursor's top-level frame records the wave: its step indexes, the
  members that finished, and each unfinished member's continuation (the very
  dict the member's own frame holds, so every checkpoint, whoever saves it,
  carries every member's progress);
- a member checkpoints at its own commit points and once more as it ends
  (its output and its place in `finished` in one write), so a crash mid-wave
  resumes only the unfinished members, each from where it was;
- a member that fails, suspends or meets the deadline stops the wave: the
  others finish the request they have in flight and stop before their next
  one; a lost lease wins, then the first failure, then the first suspension;
- token budget: before each model request a member reserves the request's
  estimated tokens; a request starts only while the budget, counting the
  reservations of requests in flight as spent, is not exhausted (exhausted by
  reservations alone, it waits for one to settle; by tokens really consumed,
  the run suspends `token-budget` as a sequential run does). What requests in
  flight consume beyond the limit is the overshoot, reported in the run's
  usage (`overshoot_tokens`) and by a `budget.overshoot` event.

Within a wave the n-th model request of the run is not a fixed thing, so a
scripted model for a parallel run answers by step (`byStep`).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from stores.records import Frame, JsonValue

from agent_runtime.errors import DeadlineReached, InvalidInput, StepFailed, SuspendRun
from agent_runtime.execution_plan import build_execution_waves
from agent_runtime.run_manifest import RunExecution
from agent_runtime.serde import json_size

if TYPE_CHECKING:
    from agent_runtime.execution import Execution
    from agent_runtime.step_kinds import Step

# The run option holding the run manifest's `execution` (camelCase, as written).
EXECUTION_OPTION = "execution"
WAVE = "wave"


class MemberStopped(Exception):
    """A wave member stopped before its next request because a sibling ended the wave."""


def execution_option(value: Any, *, field: str = f"options.{EXECUTION_OPTION}") -> RunExecution:
    """A run's stored `execution` setting; `InvalidInput` naming `field` when it is not one."""
    try:
        return RunExecution.model_validate(value)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise InvalidInput(f"{where + ': ' if where else ''}{first['msg']}", field=field) from None


def execution_json(execution: RunExecution) -> dict[str, Any]:
    return execution.model_dump(mode="json", by_alias=True, exclude_none=True)


def wave_runner(ctx: Execution) -> WaveRunner | None:
    """The runner of a parallel run's waves; None for a sequential run."""
    raw = ctx.run.options.get(EXECUTION_OPTION)
    if raw is None:
        return None
    try:
        execution = execution_option(raw)
    except InvalidInput:
        return WaveRunner(ctx, None)  # refused when the walk reaches it, as a failed run
    if execution.mode != "parallel":
        return None
    return WaveRunner(ctx, execution)


class WaveRunner:
    def __init__(self, ctx: Execution, execution: RunExecution | None) -> None:
        self.ctx = ctx
        self.execution = execution
        self._waves: dict[int, tuple[int, ...]] | None = None
        self.active = False  # a wider wave is running
        self.stopping = False
        self.reservations: dict[str, int] = {}
        self._settled = asyncio.Event()
        self._overshoot_reported = 0

    # -- the plan --------------------------------------------------------------

    def _wave_from(self, index: int) -> tuple[int, ...]:
        """The planned wave starting at `index` (planned from the first step this
        execution reaches: waves after a wave boundary plan the same from there)."""
        if self.execution is None:
            raise StepFailed("invalid_execution", "the run's `execution` option is not a valid "
                             "run manifest execution setting; start a new run")
        if self._waves is None or index not in self._waves:
            cap = self.ctx.runtime.config.execution.max_concurrency
            waves = build_execution_waves(self.ctx.manifest, index, self.execution,
                                          host_max_concurrency=cap)
            self._waves = {wave.step_indexes[0]: wave.step_indexes for wave in waves}
        return self._waves.get(index, (index,))

    # -- the top-level hook ------------------------------------------------------

    async def run(self, steps: Sequence[Step], index: int, frame: Frame,
                  below: list[Frame]) -> int:
        """Run the wave starting at `index` (its frame `frame`); return the index after it."""
        saved = frame.continuation.get(WAVE)
        if saved is None and (frame.continuation or below):
            # Started alone (an earlier attempt under a smaller host cap): it ends alone.
            await self.ctx.run_step(steps[index], frame, below)
            return index + 1
        members = tuple(saved["steps"]) if saved is not None else self._wave_from(index)
        if len(members) == 1:
            await self.ctx.run_step(steps[index], frame, below)
            return index + 1
        await self._run_wave(steps, members, frame)
        return members[-1] + 1

    async def _run_wave(self, steps: Sequence[Step], members: tuple[int, ...],
                        frame: Frame) -> None:
        ctx = self.ctx
        record = frame.continuation.setdefault(
            WAVE, {"steps": list(members), "finished": [], "members": {}})
        finished = set(record["finished"])
        fresh = not finished and not record["members"]
        started = time.monotonic()
        paths: list[JsonValue] = [steps[i].id for i in members]
        ctx.events.emit("wave.started", steps=paths,
                        finished=[steps[i].id for i in members if i in finished] or None,
                        resumed=not fresh or None)
        frames: dict[int, Frame] = {}
        for index in members:
            if index in finished:
                continue
            # The member's continuation is this same dict in the wave's record
            # (model_construct: validating would copy it).
            continuation = record["members"].setdefault(str(index), {})
            frames[index] = Frame.model_construct(
                step_path=steps[index].id, step_id=steps[index].id, step_index=index,
                loop_iteration=None, child_index=None, continuation=continuation)
        self.active, self.stopping = True, False
        ctx.state.budget.concurrent = True
        tasks = {index: asyncio.create_task(self._member(steps[index], member, record))
                 for index, member in frames.items()}
        try:
            if tasks:  # none when the last member finished just before a crash
                await asyncio.wait(tasks.values())
        finally:
            for task in tasks.values():
                task.cancel()  # only when this coroutine itself was cancelled
            self.active = ctx.state.budget.concurrent = False
            self.reservations.clear()
        self._report_overshoot()
        outcomes = [task.exception() for task in tasks.values() if not task.cancelled()]
        failure = _wave_outcome([error for error in outcomes if error is not None])
        if failure is not None:
            raise failure
        ctx.events.emit("wave.completed", steps=paths,
                        duration_ms=round((time.monotonic() - started) * 1000))

    async def _member(self, step: Step, frame: Frame, record: dict[str, Any]) -> None:
        ctx = self.ctx
        try:
            await ctx.run_step(step, frame, [])
        except MemberStopped:
            return
        except BaseException:
            self._stop()
            raise
        finally:
            self._release(frame.step_path)
        # Finished: its output (saved by run_step) and its place in `finished`
        # reach the store in the same checkpoint.
        del record["members"][str(frame.step_index)]
        record["finished"].append(frame.step_index)
        try:
            await ctx.checkpoint()
        except BaseException:
            self._stop()
            raise

    def _stop(self) -> None:
        """A member ended the wave: the others stop before their next request."""
        self.stopping = True
        self._wake()

    # -- the budget ----------------------------------------------------------------

    async def admit(self, frame: Frame, estimate: int) -> None:
        """Hold a wave member until its next model request may start, and reserve it."""
        budget = self.ctx.state.budget
        self._release(frame.step_path)  # its previous request settled before this one
        while True:
            if self.stopping:
                raise MemberStopped()
            budget.check(before="model request")
            limit = budget.max_total_tokens
            reserved = sum(self.reservations.values())
            if limit is None or not self.reservations \
                    or budget.consumed_tokens + reserved < limit:
                self.reservations[frame.step_path] = estimate
                return
            await self._settled.wait()

    def _release(self, step_path: str) -> None:
        if self.reservations.pop(step_path, None) is not None:
            self._wake()
        self._report_overshoot()

    def _wake(self) -> None:
        """Let members waiting for room in the budget look again."""
        settled, self._settled = self._settled, asyncio.Event()
        settled.set()

    def _report_overshoot(self) -> None:
        budget = self.ctx.state.budget
        overshoot = budget.overshoot_tokens
        if overshoot > self._overshoot_reported:
            self._overshoot_reported = overshoot
            self.ctx.events.emit("budget.overshoot", overshoot_tokens=overshoot,
                                 max_total_tokens=budget.max_total_tokens,
                                 consumed_tokens=budget.consumed_tokens,
                                 requests_in_flight=len(self.reservations))


def _wave_outcome(errors: list[BaseException]) -> BaseException | None:
    """What ends a wave when members raised: a lost lease (nothing more may be
    written), else a failure, else a suspension, else the deadline."""
    from agent_runtime.execution import LostOwnership  # noqa: PLC0415 - a cycle otherwise

    for kind in (LostOwnership, Exception, SuspendRun, DeadlineReached, BaseException):
        for error in errors:
            if isinstance(error, kind):
                return error
    return None


def request_estimate(ctx: Execution, messages: list[dict[str, Any]],
                     max_output_tokens: int | None) -> int:
    """Tokens a model request is expected to take: the run's average so far, or
    its input at four characters a token and its output limit, whichever is more."""
    state = ctx.state
    average = state.budget.consumed_tokens / state.model_requests if state.model_requests else 0
    own = math.ceil(json_size(messages) / 4) + (max_output_tokens or 0)
    return max(1, math.ceil(average), own)


async def admit_model_request(ctx: Execution, frame: Frame, messages: list[dict[str, Any]],
                              max_output_tokens: int | None) -> int:
    """Check the budget before a model request (a wave member reserves it, waiting
    while requests in flight may exhaust it); return the request's index in the run."""
    runner: WaveRunner | None = getattr(ctx, "waves", None)
    if runner is None or not runner.active:
        ctx.state.budget.check(before="model request")
        return ctx.state.model_requests + 1
    await runner.admit(frame, request_estimate(ctx, messages, max_output_tokens))
    return ctx.state.model_requests + len(runner.reservations)


__all__ = ["EXECUTION_OPTION", "MemberStopped", "WaveRunner", "admit_model_request",
           "execution_json", "execution_option", "wave_runner"]
