"""The reconciler loop of `agent-runtime serve`: a pass at start, then every interval.

Each pass runs the `Reconciler` (docs/design.md section 7) with the local liveness
check, so runs stranded by a crash of an earlier server (or of any local
process) are taken over at once: an owner on this host whose pid is gone
needs no wait for its lease (`dead_owners_early`). So is a run this server
holds the lease of but no longer executes (`ServerLiveness`): its attempt
ended without releasing it. `created` runs nobody started are started. The
same pass resumes `suspended` runs whose resume was requested (an approval
answered, a resume asked for, a server that stopped) a little while ago but
which nobody resumed, and `sub-run` parents whose child finished (the
reconciler's resume outbox). The first pass, at start, takes every request
made and run queued before the server started, however recent: the server
that made them is gone, or another live server races this one for them,
which the store settles. What came after is its own request's to start: this
server's, or under `serve --processes` a sibling's (their server started
when the supervisor did), which a child starting late must not race for.

Runs are not executed on the loop's thread: they are handed to the
`LocalLauncher`, and a pass hands over no more than it has places for (the
`room`); a run it finds no place for is skipped (`no-room`) until a later
pass, which is not an error.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from datetime import datetime

from stores.base import RunStore
from stores.records import RunRecord

from agent_runtime.api.local_launcher import LocalLauncher
from agent_runtime.clock import Clock, SystemClock
from agent_runtime.events import EventSink
from agent_runtime.reconcile import (
    CHILD_FINISHED,
    DEFAULT_MAX_TAKEOVERS,
    RESUME_REQUESTED,
    Action,
    Liveness,
    LivenessCheck,
    LostRace,
    NoRoom,
    OwnerStatus,
    ProcessLiveness,
    Reconciler,
    ReconcileSummary,
    Resumed,
)

DEFAULT_INTERVAL_SECONDS = 30.0
# A resume request younger than this is left to the request that made it.
REQUESTED_GRACE_SECONDS = 5.0

logger = logging.getLogger("agent_runtime.serve")
_REQUESTED = frozenset({RESUME_REQUESTED, CHILD_FINISHED})


class ServerLiveness:
    """`base` (the local process check), except for runs whose lease this server holds:
    alive while the launcher executes them, else gone (an attempt that ended without
    releasing its run), since this server's own pid would always look alive."""

    def __init__(self, launcher: LocalLauncher, base: LivenessCheck | None = None) -> None:
        self.launcher = launcher
        self.base: LivenessCheck = base or ProcessLiveness()

    def __call__(self, run: RunRecord) -> OwnerStatus:
        if run.lease_owner != self.launcher.owner:
            return self.base(run)
        if self.launcher.is_pending(run.run_id):
            return OwnerStatus(Liveness.ALIVE, "executing on this server")
        return OwnerStatus(Liveness.GONE, "this server holds its lease but no longer "
                                          "executes it (an attempt ended without releasing "
                                          "it)")


class ReconcileLoop:
    """Runs `pass_once` on a background thread every `interval` seconds until `stop`."""

    def __init__(self, store: RunStore, launcher: LocalLauncher, *,
                 interval: float = DEFAULT_INTERVAL_SECONDS,
                 requested_grace: float = REQUESTED_GRACE_SECONDS,
                 liveness: LivenessCheck | None = None,
                 max_takeovers: int = DEFAULT_MAX_TAKEOVERS,
                 event_sinks: Iterable[EventSink] = (), clock: Clock | None = None,
                 started: datetime | None = None) -> None:
        if interval <= 0:
            raise ValueError("the reconcile interval must be a positive number of seconds")
        self.store = store
        self.launcher = launcher
        self.interval = interval
        self.requested_grace = requested_grace
        self.clock: Clock = clock or SystemClock()
        # When the server started (now, unless given): see the module doc.
        self.started = started or self.clock.now()
        # Takeovers go to the launcher, not to this thread; an owner of this host
        # confirmed gone is replaced at once, without waiting for its lease.
        self.reconciler = Reconciler(store, resume=self._hand_over,
                                     liveness=ServerLiveness(launcher, liveness),
                                     max_takeovers=max_takeovers, resume_grace=requested_grace,
                                     event_sinks=event_sinks, clock=self.clock,
                                     dead_owners_early=True, room=launcher.free_places)
        self._first = True
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    async def _hand_over(self, run: RunRecord) -> Resumed:
        if self.launcher.is_pending(run.run_id):
            raise LostRace("already executing on this server")
        if not self.launcher.take_over(run):
            raise NoRoom("no place free for it on this server (or the server is stopping); "
                         "a later pass tries again")
        return Resumed(run.attempt + 1, None, "handed to the launcher")

    def pass_once(self) -> ReconcileSummary:
        """One reconciler pass (with the requested resumes nobody picked up); the first
        takes every request and queued run from before the server started, however
        recent (the module doc)."""
        reconciler = self.reconciler
        grace, queued = reconciler.resume_grace, reconciler.queued_seconds
        if self._first:
            since = max(0.0, (self.clock.now() - self.started).total_seconds())
            reconciler.resume_grace = reconciler.queued_seconds = since
        try:
            summary = reconciler.reconcile_sync()
        finally:
            reconciler.resume_grace, reconciler.queued_seconds = grace, queued
        self._first = False
        counts = summary.counts()
        if counts["candidates"]:
            logger.info("reconcile: %d candidates, %d resumed, %d skipped, "
                        "%d suspended as crash loops, %d errors", counts["candidates"],
                        counts["resumed"], counts["skipped"],
                        counts["suspended_runs"], counts["errors"])
        for outcome in summary.outcomes:
            if outcome.detail and outcome.action.value in ("error", "suspended-run"):
                logger.warning("reconcile: run %s: %s: %s", outcome.run_id,
                               outcome.action.value, outcome.detail)
            elif outcome.action is Action.RESUMED and outcome.reason in _REQUESTED:
                logger.info("reconcile: run %s: %s, handed to the launcher", outcome.run_id,
                            outcome.reason)
        return summary

    def resume_requested(self) -> list[str]:
        """One pass; the suspended runs it handed over because their resume was due
        (requested longer than the grace period ago, or a sub-run's child finished)."""
        return [outcome.run_id for outcome in self.pass_once().outcomes
                if outcome.action is Action.RESUMED and outcome.reason in _REQUESTED]

    # -- the thread ------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="agent-runtime-reconciler",
                                        daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                self.pass_once()
            except Exception:
                # A store that is briefly unavailable must not end the loop.
                logger.exception("reconcile: the pass failed; the next one is in %ss",
                                 self.interval)
            self._stopping.wait(self.interval)

    def stop(self, timeout: float | None = None) -> None:
        """No further pass; wait up to `timeout` seconds for one in progress."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout)
