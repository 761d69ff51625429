"""Reconciliation: finish the runs whose owner died, resume the runs asked to
(docs/design.md section 7).

    reconciler = Reconciler(store, runtime_for=lambda run: AgentRuntime(store=store, ...))
    summary = reconciler.reconcile_sync()      # one pass; `agent-runtime reconcile`

A pass reads only runs with something due, in this order, and for each one,
on a fresh read:

* `running` runs whose lease expired: taken over only when the owner is
  confirmed gone. The local engine's owner is `host:pid`
  (`owner_liveness.default_owner`); a `LivenessCheck` decides. An owner that is
  alive, or that this host cannot see (another host, another engine, an
  unreadable owner), is left alone: an expired lease alone proves nothing,
  the owner may be stopped or starved. A run already taken over
  `max_takeovers` times in a row (no checkpoint in between: a checkpoint
  resets the store's `takeovers`) is suspended with reason `crash-loop`
  instead of resumed again: something in it (or in the code running it)
  keeps killing its owner. It is never failed for that: the run did nothing
  wrong that a fix cannot mend, so an operator resumes it after the fix
  (`agent-runtime reconcile --resume-crash-looped`, or
  `POST /runs/{runId}/resume`), and that resume starts the count again;
* `suspended` runs whose resume request is older than `resume_grace` (the
  resume outbox: `request_resume`, an approval recorded, a sub-run's end,
  which the store files on the parent suspended on it). The grace lets the
  fast path (the request's own resume, an EventBridge event) win;
* `created` runs queued longer than `queued_seconds`: started.

Resumes come before new starts, and both only while there is `room` (asked
once per pass: the AWS reconciler's `MaxConcurrentRuns` less the runs
running); past it the pass lists no more of them and the next pass goes on
(`ReconcileSummary.deferred`). A suspended run with nothing due is never
read. Parents suspended before their child's end filed a request (data of an
earlier release) are found once, by the first pass of a reconciler made with
`sweep_sub_run_parents` (the CLI's and `serve`'s), which files the request
the child's end would now file.

A takeover resumes the run from its latest checkpoint through the
`AgentRuntime` that `runtime_for(run)` builds with the run's remembered options,
or, given a `resume` action, has another executor do it (the AWS reconciler
starts a Step Functions execution: functions/reconciler/app.py).
Several reconcilers may run at once: the store's reservation is atomic and
every write is fenced by attempt, so of two that pick the same run exactly
one acts and the other reports `lost-race`, which is not an error.

Events: `reconcile.started`, `reconcile.resumed` (reason `resume-requested` or
`child-finished` for a suspended run), `reconcile.skipped` (reason
`owner-alive`, `owner-unknown`, `lost-race`, or `no-room` when the executor
had no place for the run: a later pass tries again), `reconcile.suspended-run`,
`reconcile.error`, `reconcile.deferred` (no room for more resumes and starts),
`reconcile.request-filed` (the sweep) and `reconcile.completed` (counts). The
reconciler is not a run: an event about a run carries its id and the attempt
the action concerns, pass-level events an empty run id; `sequence` counts
within the pass and `data.reconcile_id` names it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NoReturn

from stores.base import (
    SUB_RUN_FINISHED,
    RunNotFound,
    RunStore,
    RunTerminal,
)
from stores.records import RunRecord, RunStatus

from agent_runtime.blocking_run import run_blocking
from agent_runtime.clock import Clock, SystemClock
from agent_runtime.crash_loops import every_crash_looped
from agent_runtime.events import EventEmitter, EventSink
from agent_runtime.owner_liveness import Liveness, LivenessCheck, OwnerStatus, ProcessLiveness
from agent_runtime.reconcile_outcomes import (  # re-exported: the reconciler's vocabulary
    CHILD_FINISHED,
    CRASH_LOOP,
    LOST_RACE,
    NO_ROOM,
    OWNER_ALIVE,
    OWNER_UNKNOWN,
    RACE_ERRORS,
    RESUME_REQUESTED,
    SUB_RUN,
    Action,
    LostRace,
    NoRoom,
    ReconcileSummary,
    ResumeAction,
    Resumed,
    RunOutcome,
)

if TYPE_CHECKING:
    # Built only when a pass resumes a run: the Lambda functions that share this
    # module's types (the start function) never load the engine.
    from agent_runtime.engine import AgentRuntime

DEFAULT_MAX_TAKEOVERS = 3
DEFAULT_QUEUED_SECONDS = 60.0
DEFAULT_RESUME_GRACE_SECONDS = 30.0

# -- the reconciler ------------------------------------------------------------


class _PassEvents:
    """The events of one pass, each about the run it acted on and naming the pass."""

    def __init__(self, sinks: list[EventSink], clock: Clock) -> None:
        self.reconcile_id = f"reconcile_{uuid.uuid4().hex[:16]}"
        self._events = EventEmitter(sinks, run_id="", attempt=0, now=clock.now,
                                    common={"reconcile_id": self.reconcile_id})

    def emit(self, type_: str, *, run_id: str = "", attempt: int = 0, **data: Any) -> None:
        self._events.emit_for(run_id, attempt, type_, **data)


# How many more attempts may start now (None: any number): asked once per pass.
Room = Callable[[], int | None]


@dataclass
class Swept:
    """What `Reconciler.sweep_sub_run_parents` did: the parents it filed a request on,
    whether it went through every suspended run, and the last one it looked at (a
    sweep that stopped early goes on after it)."""

    filed: list[str] = field(default_factory=list)
    complete: bool = False
    after: str | None = None


@dataclass
class _Pass:
    """One pass's events and summary, and the room it has left for resumes and starts."""

    events: _PassEvents
    summary: ReconcileSummary
    room: int | None = None
    room_read: bool = False


class Reconciler:
    """Finds runs whose owner died and resumes them, or suspends those that keep dying,
    resumes suspended runs whose resume is due (a request older than `resume_grace`
    seconds: an approval recorded, a sub-run's end) and starts runs queued longer than
    `queued_seconds` (see the module doc).

    `runtime_for(run)` builds the runtime that resumes a run (its models,
    tools and config; the CLI uses the run's remembered options). Without it a
    plain `AgentRuntime` on this store is used. `room` bounds the resumes and
    starts of a pass (`Room`). `sweep_sub_run_parents`: the first pass also finds
    parents whose child ended without filing a request (earlier releases did not).
    """

    def __init__(self, store: RunStore, *,
                 runtime_for: Callable[[RunRecord], AgentRuntime] | None = None,
                 resume: ResumeAction | None = None,
                 liveness: LivenessCheck | None = None,
                 max_takeovers: int = DEFAULT_MAX_TAKEOVERS,
                 queued_seconds: float = DEFAULT_QUEUED_SECONDS,
                 resume_grace: float = DEFAULT_RESUME_GRACE_SECONDS,
                 event_sinks: Iterable[EventSink] = (), clock: Clock | None = None,
                 page_size: int = 100, dead_owners_early: bool = False,
                 room: Room | None = None, sweep_sub_run_parents: bool = True) -> None:
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
        self.room = room
        self._sweep_pending = sweep_sub_run_parents
        self._pass: _Pass | None = None

    def _plain_runtime(self, run: RunRecord) -> AgentRuntime:
        from agent_runtime.engine import AgentRuntime  # noqa: PLC0415 - see the imports

        return AgentRuntime(store=self.store, event_sinks=self.event_sinks, clock=self.clock)

    def candidates(self) -> Iterable[RunRecord]:
        """Running runs whose lease expired (and, `dead_owners_early`, running runs whose
        owner is confirmed gone), then suspended runs whose resume is due, then runs
        queued longer than `queued_seconds`, each once: resumes and starts only while
        the pass has room (`room`)."""
        now = self.clock.now()
        yield from self._pages(statuses=[RunStatus.RUNNING], lease_expired_before=now)
        if self.dead_owners_early:
            for run in self._pages(statuses=[RunStatus.RUNNING]):
                if run.lease_expires_at is not None and run.lease_expires_at >= now \
                        and self.liveness(run).liveness is Liveness.GONE:
                    yield run
        # Resumes before new starts: a run already under way outranks one not begun.
        yield from self._admitted(statuses=[RunStatus.SUSPENDED],
                                  resume_requested_before=self._resume_cutoff())
        yield from self._admitted(
            statuses=[RunStatus.CREATED],
            lease_expired_before=now - timedelta(seconds=self.queued_seconds))

    def _pages(self, cursor: str | None = None, **filters: Any) -> Iterable[RunRecord]:
        while True:
            page = self.store.list_runs(**filters, limit=self.page_size, cursor=cursor)
            yield from page.runs
            cursor = page.cursor
            if cursor is None:
                return

    def _admitted(self, **filters: Any) -> Iterable[RunRecord]:
        """The runs matching `filters` a page at a time, no page longer than the room
        left: a backlog beyond it is not even listed."""
        cursor: str | None = None
        while True:
            room = self._room_left()
            if room == 0:
                return
            limit = self.page_size if room is None else min(self.page_size, room)
            page = self.store.list_runs(**filters, limit=limit, cursor=cursor)
            for run in page.runs:
                if self._room_left() == 0:
                    return
                yield run
            cursor = page.cursor
            if cursor is None:
                return

    def _room_left(self) -> int | None:
        current = self._pass
        if current is None or self.room is None:
            return None
        if not current.room_read:
            current.room, current.room_read = self.room(), True
            if current.room is not None and current.room <= 0:
                current.room = 0
        if current.room == 0 and current.summary.deferred is None:
            current.summary.deferred = "no room for more resumes or starts this pass"
            current.events.emit("reconcile.deferred", detail=current.summary.deferred)
        return current.room

    def _resume_cutoff(self) -> datetime:
        return self.clock.now() - timedelta(seconds=self.resume_grace)

    def resume_due(self, run: RunRecord) -> str | None:
        """Why the suspended `run` should be resumed now (`CHILD_FINISHED` for a request
        its sub-run's end filed, else `RESUME_REQUESTED`), or None when no request of
        it is older than the grace."""
        if run.status is not RunStatus.SUSPENDED:
            return None
        requested = run.resume_requested_at
        if requested is None or requested >= self._resume_cutoff():
            return None
        return CHILD_FINISHED if run.resume_reason == SUB_RUN_FINISHED else RESUME_REQUESTED

    def sweep_sub_run_parents(self, events: _PassEvents | None = None, *,
                              after: str | None = None) -> Swept:
        """File the request a child's end files now on every parent suspended on a child
        that has ended without one (stored by an earlier release).

        Reads every suspended run (with an id past `after`) once: a one-time step
        (the first pass of a reconciler made with `sweep_sub_run_parents`), not part
        of every pass. Stops early when `time_left` says so: `Swept.after` then
        names the last run it looked at, to go on from.
        """
        events = events or _PassEvents(self.event_sinks, self.clock)
        swept = Swept(after=after)
        for run in self._pages(statuses=[RunStatus.SUSPENDED], cursor=after):
            if not self.time_left():
                return swept
            swept.after = run.run_id
            suspension = run.suspension
            child_id = suspension.details.get("child_run_id") \
                if suspension is not None and suspension.reason == SUB_RUN else None
            if run.resume_requested_at is not None or not isinstance(child_id, str):
                continue
            child = self.store.load_run(child_id)
            if child is None or not child.status.terminal:
                continue
            try:
                self.store.request_resume(run.run_id, reason=SUB_RUN_FINISHED,
                                          at=min(child.updated_at, self.clock.now()))
            except (RunNotFound, *RACE_ERRORS):
                continue  # the parent moved on since it was listed
            events.emit("reconcile.request-filed", run_id=run.run_id, attempt=run.attempt,
                        reason=CHILD_FINISHED, child_run_id=child_id)
            swept.filed.append(run.run_id)
        swept.complete = True
        return swept

    def time_left(self) -> bool:
        """Whether there is time to take one more run (a pass bounded in time, as the
        AWS reconciler's is by its Lambda's, says no near the end)."""
        return True

    async def reconcile(self) -> ReconcileSummary:
        """One pass over every candidate run."""
        events = _PassEvents(self.event_sinks, self.clock)
        summary = ReconcileSummary(events.reconcile_id)
        self._pass = current = _Pass(events, summary)
        events.emit("reconcile.started", max_takeovers=self.max_takeovers,
                    queued_seconds=self.queued_seconds, resume_grace=self.resume_grace)
        if self._sweep_pending:
            self.sweep_sub_run_parents(events)
            self._sweep_pending = False
        try:
            for listed in self.candidates():
                outcome = await self._reconcile_run(listed, events)
                summary.outcomes.append(outcome)
                if outcome.action is Action.RESUMED and listed.status is not RunStatus.RUNNING \
                        and current.room is not None:
                    current.room -= 1  # a new attempt under way: one place fewer
        finally:
            self._pass = None
        events.emit("reconcile.completed", counts=summary.counts())
        return summary

    async def resume_crash_looped(self, *, tenant: str | None = None) -> ReconcileSummary:
        """Resume every run suspended as `crash-loop` (of `tenant`, when given), once its
        cause is fixed: its resume request is filed first (so one refused for capacity
        or lost to a crash is resumed by a later pass), then it is resumed as a due
        resume is. An operator's action (`agent_runtime.crash_loops`), not a pass."""
        events = _PassEvents(self.event_sinks, self.clock)
        summary = ReconcileSummary(events.reconcile_id)
        events.emit("reconcile.started", resume_crash_looped=True)
        for run in every_crash_looped(self.store, tenant=tenant):
            if not self.time_left():  # the rest stay suspended for the next call
                summary.deferred = "out of time; call again for the rest"
                break
            try:
                self.store.request_resume(run.run_id, at=self.clock.now(),
                                          reason=RESUME_REQUESTED)
            except (*RACE_ERRORS, RunNotFound) as race:
                summary.outcomes.append(self._skipped(events, run, LOST_RACE,
                                                      f"{type(race).__name__}: {race}"))
                continue
            summary.outcomes.append(await self._resume(events, run, CRASH_LOOP))
        events.emit("reconcile.completed", counts=summary.counts())
        return summary

    def reconcile_sync(self) -> ReconcileSummary:
        """`reconcile` for code without an event loop."""
        return run_blocking(self.reconcile())

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
        except NoRoom as full:
            return self._skipped(events, run, NO_ROOM, str(full))
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
    "NoRoom",
    "OwnerStatus",
    "ProcessLiveness",
    "ReconcileSummary",
    "Reconciler",
    "ResumeAction",
    "Resumed",
    "RunOutcome",
    "Swept",
]
