"""Reconciliation: finish the runs whose owner died, resume the runs asked to (DESIGN section 7).

    reconciler = Reconciler(store, runtime_for=lambda run: AgentRuntime(store=store, ...))
    summary = reconciler.reconcile_sync()      # one pass; `agent-runtime reconcile`

A pass lists the `created` runs queued longer than `queued_seconds` and the
`running` runs whose lease expired, and for each one, on a fresh read:

* a `created` run has no owner: it is started;
* a `running` run is taken over only when its owner is confirmed gone. The
  local engine's owner is `host:pid` (`engine.default_owner`); a
  `LivenessCheck` decides. An owner that is alive, or that this host cannot
  see (another host, another engine, an unreadable owner), is left alone: an
  expired lease alone proves nothing, the owner may be stopped or starved;
* a run already taken over `max_takeovers` times in a row (no checkpoint in
  between: a checkpoint resets the store's `takeovers`) is suspended with
  reason `crash-loop` instead of resumed again: something in it (or in the
  code running it) keeps killing its owner. It is never failed for that: the
  run did nothing wrong that a fix cannot mend, so an operator resumes it
  after the fix (`agent-runtime reconcile --resume-crash-looped`, or
  `POST /runs/{runId}/resume`), and that resume starts the count again.

Then come the `suspended` runs that should go on but nobody resumed (the
resume outbox): those whose resume request (`request_resume`, an approval)
is older than `resume_grace`, and `sub-run` parents whose child finished more
than `resume_grace` ago, even if the request for them was lost. The grace
lets the fast path (the request's own resume, an EventBridge event) win.

A takeover resumes the run from its latest checkpoint through the
`AgentRuntime` that `runtime_for(run)` builds with the run's remembered options,
or, given a `resume` action, has another executor do it (the AWS reconciler
starts a Step Functions execution: functions/reconciler/app.py).
Several reconcilers may run at once: the store's reservation is atomic and
every write is fenced by attempt, so of two that pick the same run exactly
one acts and the other reports `lost-race`, which is not an error.

Events: `reconcile.started`, `reconcile.resumed` (reason `resume-requested` or
`child-finished` for a suspended run), `reconcile.skipped` (reason
`owner-alive`, `owner-unknown` or `lost-race`), `reconcile.suspended-run`,
`reconcile.error` and `reconcile.completed` (counts). The reconciler is not a
run: an event about a run carries its id and the attempt the action concerns,
pass-level events an empty run id; `sequence` counts within the pass and
`data.reconcile_id` names it.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from stores import transitions
from stores.base import InvalidTransition, LeaseHeld, RunStore, RunTerminal, StaleAttempt
from stores.records import RunRecord, RunStatus

from agent_runtime.clock import Clock, SystemClock
from agent_runtime.events import EventEmitter, EventSink

if TYPE_CHECKING:
    # Built only when a pass resumes a run: the Lambda functions that share this
    # module's types (the start function, Reserve) never load the engine.
    from agent_runtime.engine import AgentRuntime

DEFAULT_MAX_TAKEOVERS = 3
DEFAULT_QUEUED_SECONDS = 60.0
DEFAULT_RESUME_GRACE_SECONDS = 30.0

OWNER_ALIVE = "owner-alive"
OWNER_UNKNOWN = "owner-unknown"
LOST_RACE = "lost-race"
# Why a suspended run is resumed.
RESUME_REQUESTED = "resume-requested"
CHILD_FINISHED = "child-finished"
SUB_RUN = "sub-run"
# Why the reconciler suspended a run: its owners kept dying (stores.transitions.CRASH_LOOP).
CRASH_LOOP = transitions.CRASH_LOOP


class LostRace(Exception):
    """Raised by a resume action that finds another reconciler or executor got there first."""


# Another reconciler (or a user's `resume`) got there first: the run moved on.
RACE_ERRORS = (LeaseHeld, RunTerminal, InvalidTransition, StaleAttempt, LostRace)


# -- is the owner still there? -----------------------------------------------


class Liveness(StrEnum):
    ALIVE = "alive"
    GONE = "gone"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class OwnerStatus:
    liveness: Liveness
    detail: str


class LivenessCheck(Protocol):
    def __call__(self, run: RunRecord) -> OwnerStatus:
        """Whether the owner of a running run's lease can still write to it.

        `GONE` only when certain: the reconciler then starts a competing
        attempt. When in doubt, `UNKNOWN`; the run is left alone.
        """
        ...


class ProcessLiveness:
    """Owners of the local engine, `host:pid`: a process on this host is asked directly.

    A pid that no longer exists, or a zombie (it exited and only waits for its
    parent to collect it), is gone. A pid that exists is alive, whoever's it
    is: a reused pid keeps a dead owner's run waiting, which is safe. An owner
    on another host, or not of the form `host:pid` (a Step Functions execution's
    ARN), is unknown.
    """

    def __init__(self, host: str | None = None) -> None:
        self.host = host or socket.gethostname()

    def __call__(self, run: RunRecord) -> OwnerStatus:
        owner = run.lease_owner or ""
        host, _, pid_text = owner.rpartition(":")
        if not host or not pid_text.isdigit() or int(pid_text) <= 0:
            return OwnerStatus(Liveness.UNKNOWN, f"owner {owner!r} is not host:pid")
        if host != self.host:
            return OwnerStatus(Liveness.UNKNOWN,
                               f"owner on host {host!r}, not this host ({self.host!r})")
        if os.name != "posix":  # os.kill(pid, 0) would signal the process on Windows
            return OwnerStatus(Liveness.UNKNOWN, "process checks need a POSIX system")
        pid = int(pid_text)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return OwnerStatus(Liveness.GONE, f"process {pid} on {host} no longer exists")
        except PermissionError:
            return OwnerStatus(Liveness.ALIVE, f"process {pid} on {host} exists "
                                               "(another user's)")
        if _is_zombie(pid):
            return OwnerStatus(Liveness.GONE, f"process {pid} on {host} exited (a zombie)")
        return OwnerStatus(Liveness.ALIVE, f"process {pid} on {host} is running")


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            # "pid (comm) state ...": comm may hold spaces and parentheses.
            return stat.read().rpartition(")")[2].split()[0] == "Z"
    except (OSError, IndexError):
        return False


# -- outcomes ------------------------------------------------------------------


class Action(StrEnum):
    RESUMED = "resumed"
    SKIPPED = "skipped"
    SUSPENDED_RUN = "suspended-run"  # a crash loop: suspended for an operator
    ERROR = "error"


@dataclass(frozen=True)
class RunOutcome:
    """What a pass did with one candidate run.

    `attempt` is the attempt that ran (resumed) or that the decision was
    about; `status` the run's status afterwards, when known.
    """

    run_id: str
    action: Action
    attempt: int
    reason: str | None = None
    detail: str | None = None
    status: RunStatus | None = None
    takeovers: int | None = None

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"run_id": self.run_id, "action": self.action.value,
                                "attempt": self.attempt}
        for name in ("reason", "detail", "status", "takeovers"):
            value = getattr(self, name)
            if value is not None:
                body[name] = value.value if isinstance(value, StrEnum) else value
        return body


@dataclass
class ReconcileSummary:
    reconcile_id: str
    outcomes: list[RunOutcome] = field(default_factory=list)

    def count(self, action: Action) -> int:
        return sum(outcome.action is action for outcome in self.outcomes)

    @property
    def errors(self) -> int:
        return self.count(Action.ERROR)

    def counts(self) -> dict[str, int]:
        return {"candidates": len(self.outcomes), "resumed": self.count(Action.RESUMED),
                "skipped": self.count(Action.SKIPPED),
                "suspended_runs": self.count(Action.SUSPENDED_RUN), "errors": self.errors}

    def to_json(self) -> dict[str, Any]:
        return {"reconcile_id": self.reconcile_id, "counts": self.counts(),
                "runs": [outcome.to_json() for outcome in self.outcomes]}


# -- how a run is resumed ------------------------------------------------------


@dataclass(frozen=True)
class Resumed:
    """What a resume action did: the attempt it ran or started, and the run's status
    after it — None when the attempt goes on elsewhere (a started execution)."""

    attempt: int
    status: RunStatus | None = None
    detail: str | None = None


class ResumeAction(Protocol):
    async def __call__(self, run: RunRecord) -> Resumed:
        """Reserve a new attempt of `run` and continue it, or have an executor do so.

        `run` is `created`, `suspended` with a resume due, or `running` with an
        owner confirmed gone (take it over: `allow_running_takeover`). Raises
        one of `RACE_ERRORS` when someone else got there first; any other
        exception is reported as an error of this run and the pass goes on.
        """
        ...


# -- the reconciler ------------------------------------------------------------


class _PassEvents:
    """The events of one pass, each about the run it acted on and naming the pass."""

    def __init__(self, sinks: list[EventSink], clock: Clock) -> None:
        self.reconcile_id = f"reconcile_{uuid.uuid4().hex[:16]}"
        self._events = EventEmitter(sinks, run_id="", attempt=0, now=clock.now,
                                    common={"reconcile_id": self.reconcile_id})

    def emit(self, type_: str, *, run_id: str = "", attempt: int = 0, **data: Any) -> None:
        self._events.emit_for(run_id, attempt, type_, **data)


class Reconciler:
    """Finds runs whose owner died and resumes them, or suspends those that keep dying,
    and resumes suspended runs whose resume is due (a request older than
    `resume_grace` seconds, a `sub-run` parent whose child finished).

    `runtime_for(run)` builds the runtime that resumes a run (its models,
    tools and config; the CLI uses the run's remembered options). Without it a
    plain `AgentRuntime` on this store is used.
    """

    def __init__(self, store: RunStore, *,
                 runtime_for: Callable[[RunRecord], AgentRuntime] | None = None,
                 resume: ResumeAction | None = None,
                 liveness: LivenessCheck | None = None,
                 max_takeovers: int = DEFAULT_MAX_TAKEOVERS,
                 queued_seconds: float = DEFAULT_QUEUED_SECONDS,
                 resume_grace: float = DEFAULT_RESUME_GRACE_SECONDS,
                 event_sinks: Iterable[EventSink] = (), clock: Clock | None = None,
                 page_size: int = 100, dead_owners_early: bool = False) -> None:
        if max_takeovers < 0:
            raise ValueError("max_takeovers must be 0 or more")
        self.store = store
        self.clock: Clock = clock or SystemClock()
        self.event_sinks = list(event_sinks)
        self.runtime_for = runtime_for or self._plain_runtime
        self.resume: ResumeAction = resume or self._resume_in_process
        self.liveness: LivenessCheck = liveness or ProcessLiveness()
        self.max_takeovers = max_takeovers
        self.queued_seconds = queued_seconds
        self.resume_grace = resume_grace
        self.page_size = page_size
        # Take over a running run whose owner `liveness` confirms gone without
        # waiting for its lease (the local reconciler: a pid of this host is
        # checked for free). Needs a resume that passes `expired_owner`.
        self.dead_owners_early = dead_owners_early

    def _plain_runtime(self, run: RunRecord) -> AgentRuntime:
        from agent_runtime.engine import AgentRuntime  # noqa: PLC0415 - see the imports

        return AgentRuntime(store=self.store, event_sinks=self.event_sinks, clock=self.clock)

    def candidates(self) -> Iterable[RunRecord]:
        """Running runs whose lease expired, runs queued longer than `queued_seconds`,
        then suspended runs whose resume is due (`resume_due`), each once."""
        now = self.clock.now()
        for status, before in ((RunStatus.RUNNING, now),
                               (RunStatus.CREATED, now - timedelta(seconds=self.queued_seconds))):
            yield from self._pages(statuses=[status], lease_expired_before=before)
        if self.dead_owners_early:
            for run in self._pages(statuses=[RunStatus.RUNNING]):
                if run.lease_expires_at is not None and run.lease_expires_at >= now \
                        and self.liveness(run).liveness is Liveness.GONE:
                    yield run
        seen: set[str] = set()
        for run in self._pages(statuses=[RunStatus.SUSPENDED],
                               resume_requested_before=self._resume_cutoff()):
            seen.add(run.run_id)
            yield run
        # A parent whose request was lost (written before the child's terminal
        # write landed, or not at all): found by its child, a page at a time.
        for run in self._pages(statuses=[RunStatus.SUSPENDED]):
            if run.run_id not in seen and run.suspension is not None \
                    and run.suspension.reason == SUB_RUN and self.resume_due(run) is not None:
                yield run

    def _pages(self, **filters: Any) -> Iterable[RunRecord]:
        cursor: str | None = None
        while True:
            page = self.store.list_runs(**filters, limit=self.page_size, cursor=cursor)
            yield from page.runs
            cursor = page.cursor
            if cursor is None:
                return

    def _resume_cutoff(self) -> datetime:
        return self.clock.now() - timedelta(seconds=self.resume_grace)

    def resume_due(self, run: RunRecord) -> str | None:
        """Why the suspended `run` should be resumed now (`RESUME_REQUESTED`,
        `CHILD_FINISHED`), or None when it waits on something still."""
        if run.status is not RunStatus.SUSPENDED:
            return None
        cutoff = self._resume_cutoff()
        if run.resume_requested_at is not None and run.resume_requested_at < cutoff:
            return RESUME_REQUESTED
        suspension = run.suspension
        if suspension is None or suspension.reason != SUB_RUN:
            return None
        child_id = suspension.details.get("child_run_id")
        child = self.store.load_run(child_id) if isinstance(child_id, str) else None
        if child is not None and child.status.terminal and child.updated_at < cutoff:
            return CHILD_FINISHED
        return None

    async def reconcile(self) -> ReconcileSummary:
        """One pass over every candidate run."""
        events = _PassEvents(self.event_sinks, self.clock)
        summary = ReconcileSummary(events.reconcile_id)
        events.emit("reconcile.started", max_takeovers=self.max_takeovers,
                    queued_seconds=self.queued_seconds, resume_grace=self.resume_grace)
        for listed in self.candidates():
            summary.outcomes.append(await self._reconcile_run(listed, events))
        events.emit("reconcile.completed", counts=summary.counts())
        return summary

    def reconcile_sync(self) -> ReconcileSummary:
        """`reconcile` for code without an event loop."""
        return asyncio.run(self.reconcile())

    def reconcile_every(self, interval: float,
                        report: Callable[[ReconcileSummary], None]) -> NoReturn:
        """A pass every `interval` seconds until interrupted (KeyboardInterrupt)."""
        while True:
            started = time.monotonic()
            report(self.reconcile_sync())
            time.sleep(max(0.0, interval - (time.monotonic() - started)))

    async def reconcile_run(self, listed: RunRecord) -> RunOutcome:
        """Decide about one candidate, as listed, and act on it (a pass of one run)."""
        return await self._reconcile_run(listed, _PassEvents(self.event_sinks, self.clock))

    async def _reconcile_run(self, listed: RunRecord, events: _PassEvents) -> RunOutcome:
        now = self.clock.now()
        # The listing may be old (an earlier run of this pass took a while) or
        # another reconciler may have acted since: decide on a fresh read.
        run = self.store.load_run(listed.run_id)
        if run is None or run.status is not listed.status or run.attempt != listed.attempt:
            now_status = "deleted" if run is None else f"{run.status.value}, attempt {run.attempt}"
            return self._skipped(events, listed, LOST_RACE,
                                 f"moved on since it was listed (now {now_status})")
        if run.status is RunStatus.RUNNING:
            expires = run.lease_expires_at
            live_lease = expires is not None and expires > now
            owner = None if live_lease and not self.dead_owners_early else self.liveness(run)
            if expires is not None and live_lease and (
                    owner is None or owner.liveness is not Liveness.GONE):
                return self._skipped(events, run, OWNER_ALIVE,
                                     f"lease renewed until {expires.isoformat()}")
            owner = owner or self.liveness(run)
            if owner.liveness is Liveness.ALIVE:
                return self._skipped(events, run, OWNER_ALIVE, owner.detail)
            if owner.liveness is Liveness.UNKNOWN:
                return self._skipped(events, run, OWNER_UNKNOWN, owner.detail)
            if run.takeovers >= self.max_takeovers:
                return self._suspend_crash_loop(events, run, owner.detail)
        due: str | None = None
        if run.status is RunStatus.SUSPENDED:
            due = self.resume_due(run)
            if due is None:
                return self._skipped(events, run, LOST_RACE, "no resume due any more")
        return await self._resume(events, run, due)

    def _skipped(self, events: _PassEvents, run: RunRecord, reason: str,
                 detail: str) -> RunOutcome:
        events.emit("reconcile.skipped", run_id=run.run_id, attempt=run.attempt, reason=reason,
                    detail=detail)
        return RunOutcome(run.run_id, Action.SKIPPED, run.attempt, reason=reason, detail=detail,
                          status=run.status)

    def _error(self, events: _PassEvents, run: RunRecord, error: Exception) -> RunOutcome:
        detail = f"{type(error).__name__}: {error}"
        events.emit("reconcile.error", run_id=run.run_id, attempt=run.attempt,
                    error_type=type(error).__name__)
        return RunOutcome(run.run_id, Action.ERROR, run.attempt, detail=detail,
                          status=run.status)

    def _suspend_crash_loop(self, events: _PassEvents, run: RunRecord, why: str) -> RunOutcome:
        deaths = run.takeovers + 1
        message = (f"the run's owner died {deaths} times in a row without saving a checkpoint "
                   f"(taken over {run.takeovers} times, the limit is {self.max_takeovers}); "
                   "suspended instead of resumed again: resume it once the cause is fixed")
        details = {"message": message, "takeovers": run.takeovers,
                   "max_takeovers": self.max_takeovers, "last_owner": run.lease_owner,
                   "owner_status": why}
        try:
            # Fenced by the attempt that died: a newer owner's run is left alone.
            self.store.suspend_run(run.run_id, expected_attempt=run.attempt, reason=CRASH_LOOP,
                                   details=details, at=self.clock.now())
        except RACE_ERRORS as race:
            return self._skipped(events, run, LOST_RACE, f"{type(race).__name__}: {race}")
        events.emit("reconcile.suspended-run", run_id=run.run_id, attempt=run.attempt,
                    takeovers=run.takeovers, reason=CRASH_LOOP)
        return RunOutcome(run.run_id, Action.SUSPENDED_RUN, run.attempt, reason=CRASH_LOOP,
                          detail=message, status=RunStatus.SUSPENDED, takeovers=run.takeovers)

    async def _resume_in_process(self, run: RunRecord) -> Resumed:
        runtime = self.runtime_for(run)
        running = run.status is RunStatus.RUNNING
        # The owner was confirmed gone: the store lets this take over before the
        # lease expires, while that owner still holds it.
        result = await runtime.run(run_id=run.run_id, resume=True,
                                   allow_running_takeover=running,
                                   expired_owner=run.lease_owner if running else None)
        if not result.executed:  # another executor finished it first
            raise RunTerminal(f"run {run.run_id} is now {result.status.value}, "
                              f"attempt {result.attempt}")
        return Resumed(result.attempt, result.status)

    async def _resume(self, events: _PassEvents, run: RunRecord,
                      reason: str | None = None) -> RunOutcome:
        # One run's broken options (a missing config, a tools file that no
        # longer imports) or a damaged record must not stop the pass.
        try:
            resumed = await self.resume(run)
        except RACE_ERRORS as race:
            return self._skipped(events, run, LOST_RACE, f"{type(race).__name__}: {race}")
        except Exception as error:
            return self._error(events, run, error)
        takeovers = run.takeovers + (run.status is RunStatus.RUNNING)
        events.emit("reconcile.resumed", run_id=run.run_id, attempt=resumed.attempt,
                    status=None if resumed.status is None else resumed.status.value,
                    from_status=run.status.value, takeovers=takeovers, detail=resumed.detail,
                    reason=reason)
        return RunOutcome(run.run_id, Action.RESUMED, resumed.attempt, reason=reason,
                          status=resumed.status, detail=resumed.detail, takeovers=takeovers)


__all__ = [
    "CHILD_FINISHED",
    "CRASH_LOOP",
    "DEFAULT_MAX_TAKEOVERS",
    "DEFAULT_RESUME_GRACE_SECONDS",
    "RESUME_REQUESTED",
    "Action",
    "Liveness",
    "LivenessCheck",
    "LostRace",
    "OwnerStatus",
    "ProcessLiveness",
    "ReconcileSummary",
    "Reconciler",
    "ResumeAction",
    "Resumed",
    "RunOutcome",
]
