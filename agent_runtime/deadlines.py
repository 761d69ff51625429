"""Deadline-aware calls: no model, tool or webhook call outlives its slice
(docs/design.md section 10, Time).

`advance` runs an attempt in slices, each with a deadline (on AWS, the Lambda's
time left less `AdvanceMarginSeconds`). Every call a step makes is bounded by
the time left in the slice and by its own timeout (a model call's
`limits.providerTimeoutMs`, enforced here whether or not the provider's driver
honours it).

- Too late to start (no time left, or less than a step asks for): the slice
  ends before the call is dispatched (`CallCut`, `dispatched=False`); nothing
  of it exists, so the next slice simply makes it.
- Cut by the deadline: the call is cancelled and abandoned uncommitted
  (`CallCut`, `dispatched=True`); the attempt ends its slice as at a commit
  point past the deadline (the run stays running at its last checkpoint, no
  takeover), and the next slice makes the call again — a tool call with the
  same idempotency key, from the checkpoint. A step whose call is not safe to
  repeat decides otherwise (prompt steps: a tool that is not idempotent is
  started only with half a slice left, and one cut anyway suspends the run as
  `effect-unknown`).
- Cut in a slice that had saved no checkpoint before the call: the call had
  the whole slice and the next would cut it again, so the step fails
  (`call_exceeds_slice`) naming it and the slice's length, instead of looping.
- Past its own timeout: `CallTimedOut`, which the step reports naming its limit.

A slice whose deadline had already passed when it began (a margin as long as
the time left) runs to its first commit point, its calls bounded only by
their own timeouts. Deadlines are read on the injected clock; the bound
itself is real time on the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from agent_runtime.errors import DeadlineReached, StepFailed

T = TypeVar("T")


class CallCut(DeadlineReached):
    """A call abandoned at the slice's deadline (or not started for it), uncommitted."""

    def __init__(self, what: str, *, dispatched: bool) -> None:
        super().__init__(what)
        self.dispatched = dispatched


@dataclass
class CallTimedOut(Exception):
    """A call ran past its own timeout (for a model call, `limits.providerTimeoutMs`)."""

    seconds: float


class SliceDeadline:
    """The deadline of one slice of an attempt, and how its calls are bounded by it."""

    def __init__(self, deadline: datetime | None, now: Callable[[], datetime]) -> None:
        self.deadline = deadline
        self._now = now
        self.started = now()
        # Set at every checkpoint: a slice that saved none would only repeat itself.
        self.progressed = False

    def window(self) -> float | None:
        """The seconds this slice had when it began; None without a deadline, or
        with one already past then."""
        if self.deadline is None:
            return None
        window = (self.deadline - self.started).total_seconds()
        return window if window > 0 else None

    def left(self) -> float | None:
        """Seconds left before the deadline (None: calls are not bounded by it)."""
        if self.deadline is None or self.window() is None:
            return None
        return (self.deadline - self._now()).total_seconds()

    def has_room(self, share: float = 0.0) -> bool:
        """Whether more than `share` of a whole slice is left (always, with no deadline)."""
        left, window = self.left(), self.window()
        return left is None or window is None or (left > share * window and left > 0)

    def require_room(self, what: str, *, step_path: str, share: float = 0.0) -> None:
        """End the slice before dispatching `what` unless more than `share` of a
        whole slice is left, so nothing of it is sent (no effect to doubt)."""
        if self.has_room(share):
            return
        window = self.window()
        if not self.progressed:
            raise StepFailed("call_exceeds_slice",
                             f"step {step_path}: no time to start the {what} in a whole "
                             f"slice of {window:g} s (the time an Advance has, less its "
                             "margin)", {"slice_seconds": window})
        raise CallCut(what, dispatched=False)

    async def bounded(self, call: Coroutine[Any, Any, T], what: str, *, step_path: str,
                      timeout: float | None = None,
                      guard: Callable[[Coroutine[Any, Any, T]], Awaitable[T]]) -> T:
        """Await `call` through `guard` (the lease heartbeat) within its own `timeout`
        and the slice (see the module doc)."""
        try:
            self.require_room(what, step_path=step_path)
        except BaseException:
            call.close()
            raise
        bounds = [bound for bound in (timeout, self.left()) if bound is not None]
        if not bounds:
            return await guard(call)
        bound = min(bounds)
        progressed = self.progressed
        scope = asyncio.timeout(bound)
        try:
            async with scope:
                return await guard(call)
        except TimeoutError:
            if not scope.expired():
                raise  # the call's own error, not our bound
            if timeout is not None and timeout <= bound:
                raise CallTimedOut(timeout) from None
            if not progressed:
                window = self.window() or 0.0
                raise StepFailed("call_exceeds_slice",
                                 f"step {step_path}: the {what} did not finish within a whole "
                                 f"slice of {window:g} s (the time an Advance has, less its "
                                 "margin); no slice can fit it",
                                 {"slice_seconds": window}) from None
            raise CallCut(what, dispatched=True) from None
