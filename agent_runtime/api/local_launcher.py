"""`LocalLauncher`: the `Launcher` of `agent-runtime serve`: every run an asyncio task.

A request that starts or resumes a run returns as soon as the run is handed
over; the run's attempt then executes as a task on one of the server's event
loops (`agent_runtime.api.run_loops`, `serve --workers`), awaiting
`AgentRuntime.run(run_id=..., resume=True)` with a runtime of its own built
from the run's remembered options. A run waiting on its model holds a
coroutine, not a thread: how many runs execute at once is bounded by places
(`agent_runtime.api.run_capacity`: `--max-concurrent-runs`, and one tenant's
share, `--tenant-concurrent-runs`), not by threads. A run is started the
moment it is handed over, or refused then (429 to the request, the next pass
to the reconciler); nothing waits in a queue here.

The store keeps the truth, so nothing here has to survive a crash: a run that
was never handed over stays `created`, or `suspended` with its resume request
recorded, and the reconciler loop (`agent_runtime.api.local_reconcile`)
starts it; a run this process was executing when it died is taken over at
once by the next server, its owner (this host and pid) being gone.

Failures of the store: an attempt that ends with its run still `running`
under this server (a commit the store refused, a full disk, and the write
that would have failed the run refused too) is taken over again by this
server, after 1 s, then twice as long each time up to 30 s, until the store
answers; the run continues from its last checkpoint. A run taken over
`DEFAULT_MAX_TAKEOVERS` times without progress is left to the reconciler,
which suspends it as a crash loop.

Stopping (`interrupt`, on SIGTERM): no run is handed over any more, and every
runtime's `interrupt` is set: no new model request, tool call or step starts,
a call in flight may end, and each run suspends `interrupted` at its next
commit point, its lease released. Each run suspended that way gets a resume
request (reason `server-stopped`), so the next server's reconciler resumes it
without an operator.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace

from stores.base import (
    InvalidTransition,
    LeaseHeld,
    RunNotFound,
    RunStore,
    RunTerminal,
    StaleAttempt,
)
from stores.records import Budget, Checkpoint, RunRecord, RunStatus

from agent_runtime.api.place_ledger import PlaceLedger
from agent_runtime.api.run_capacity import DEFAULT_MAX_RUNS, RunPlaces
from agent_runtime.api.run_loops import RunLoops
from agent_runtime.attempt_reads import latest_unless_finished
from agent_runtime.clock import Clock, SystemClock
from agent_runtime.engine import AgentRuntime
from agent_runtime.errors import AgentRuntimeError
from agent_runtime.owner_liveness import default_owner
from agent_runtime.reconcile import DEFAULT_MAX_TAKEOVERS
from agent_runtime.results import RunResult
from agent_runtime.store_thread import StorePool, StoreThread, store_thread_for

DEFAULT_LOOPS = 1
# After an attempt left its run `running` here, the first wait before taking it
# over again, doubled each time up to the cap.
RETRY_FIRST_SECONDS = 1.0
RETRY_MAX_SECONDS = 30.0
# The resume request filed on each run this server suspended as it stopped.
SERVER_STOPPED = "server-stopped"
INTERRUPTED = "interrupted"
# The store could not take the attempt's commit (execution.CheckpointUnavailable).
CHECKPOINT_UNAVAILABLE = "checkpoint_unavailable"
# How often a run waiting to retry looks whether the server stops.
_STOP_POLL_SECONDS = 0.2

logger = logging.getLogger("agent_runtime.serve")


@dataclass(frozen=True)
class _Job:
    run_id: str
    tenant: str | None
    why: str
    budget: Budget | None = None
    allow_running_takeover: bool = False
    # The owner of a running run's lease confirmed gone: taken over without waiting.
    expired_owner: str | None = None
    # A resume request was recorded for it: worth a second job when it
    # arrives while the run's previous job is still winding down.
    requested: bool = False


class LocalLauncher:
    """Executes stored runs as tasks on `loops` event loops; `runtime_for(run)` builds each
    attempt's runtime (with `store_pool`, when given, for its store calls). Its places
    are counted in `ledger` too when it is one of `serve --processes`' children.

    Thread-safe: requests hand runs over from the server's request threads, the
    reconciler loop from its own thread. Also the routes' `RunCapacity` (`admit`).
    """

    def __init__(self, store: RunStore, runtime_for: Callable[[RunRecord], AgentRuntime], *,
                 loops: int = DEFAULT_LOOPS, max_runs: int = DEFAULT_MAX_RUNS,
                 tenant_runs: int | None = None, ledger: PlaceLedger | None = None,
                 store_pool: StorePool | None = None,
                 owner: str | None = None, clock: Clock | None = None,
                 retry_first: float = RETRY_FIRST_SECONDS,
                 retry_max: float = RETRY_MAX_SECONDS) -> None:
        self.store = store
        self.runtime_for = runtime_for
        self.places = RunPlaces(max_runs=max_runs, tenant_runs=tenant_runs, ledger=ledger)
        self.store_pool = store_pool
        # Whose leases this server's runtimes hold (theirs is `default_owner()` too).
        self.owner = owner or default_owner()
        self.clock: Clock = clock or SystemClock()
        self.retry_first = retry_first
        self.retry_max = retry_max
        self._loops = RunLoops(loops)
        self._changed = threading.Condition()
        # Run ids executing here (a task, or its retry), and their tenant: one task per run.
        self._pending: dict[str, str | None] = {}
        # Resumes asked for while the run's task was still ending: run after it.
        self._again: dict[str, _Job] = {}
        # Shared by every runtime this launcher builds: set once, all runs stop.
        self._interrupt = threading.Event()
        self._accepting = True

    @property
    def loops(self) -> int:
        return self._loops.count

    @property
    def max_runs(self) -> int:
        return self.places.max_runs

    @property
    def tenant_runs(self) -> int:
        return self.places.tenant_runs

    # -- the Launcher and RunCapacity protocols ----------------------------------

    def admit(self, tenant: str | None) -> AbstractContextManager[object]:
        """A place for one run of `tenant` (`RunCapacity`); `AtCapacity` when none is free."""
        return self.places.admit(tenant)

    def start(self, run: RunRecord) -> None:
        """Start a new (`created`) run now; when there is no place for it, it stays
        `created` for the reconciler (a request that was admitted always has one)."""
        self.submit(_Job(run.run_id, run.tenant, "start"))

    def resume(self, run: RunRecord, *, reason: str, budget: Budget | None = None) -> None:
        """Record the resume request, then resume the run now.

        The request is recorded first so that a run that cannot be resumed here
        now (or is lost in a crash) is resumed by the reconciler loop. A run that
        moved on meanwhile (resumed by someone else, finished, cancelled) has
        nothing left to resume.
        """
        try:
            self.store.request_resume(run.run_id, at=self.clock.now(), reason=reason)
        except (RunTerminal, InvalidTransition, RunNotFound) as error:
            logger.info("run %s: not resumed (%s: %s)", run.run_id, type(error).__name__, error)
            return
        self.submit(_Job(run.run_id, run.tenant, f"resume ({reason})", budget=budget,
                         requested=True))

    # -- what the reconciler loop uses -----------------------------------------

    def is_pending(self, run_id: str) -> bool:
        """Whether the run executes here now (or waits here to retry)."""
        with self._changed:
            return run_id in self._pending

    def take_over(self, run: RunRecord) -> bool:
        """Execute a run the reconciler found (queued too long, owner gone, resume
        requested); False when there is no place for it, the server is stopping, or
        the run executes here already."""
        running = run.status is RunStatus.RUNNING
        return self.submit(_Job(run.run_id, run.tenant, "reconcile",
                                allow_running_takeover=running,
                                expired_owner=run.lease_owner if running else None))

    def free_places(self) -> int:
        """How many more runs may start now (the reconciler's room per pass)."""
        return self.places.free()

    # -- handing runs to the loops ------------------------------------------------

    def submit(self, job: _Job) -> bool:
        with self._changed:
            if not self._accepting:
                logger.info("run %s: not started, the server is stopping; the next server "
                            "continues it", job.run_id)
                return False
            if job.run_id in self._pending:
                # An approval answered the moment its run suspended finds the
                # task still ending the attempt that asked: run it next.
                if job.requested:
                    self._again[job.run_id] = job
                    return True
                return False
            if not self.places.claim(job.tenant) and not self.places.take(job.tenant):
                # Not an error: the run is in the store, and the reconciler's
                # next pass starts it when there is room.
                logger.info("run %s: %s: no place free now (%d runs executing); the "
                            "reconciler starts it when there is one", job.run_id, job.why,
                            self.places.held())
                return False
            self._pending[job.run_id] = job.tenant
            self._launch(job)
        return True

    def _launch(self, job: _Job) -> None:
        """Start the job's task (the caller holds the lock and the run's place)."""
        future = self._loops.submit(self._execute(job))
        future.add_done_callback(lambda done: self._finished(job, done))

    def _finished(self, job: _Job, done: Future[None]) -> None:
        if not done.cancelled() and done.exception() is not None:
            # _execute handles every failure; this is a bug in it.
            logger.error("run %s: %s: the task failed", job.run_id, job.why,
                         exc_info=done.exception())
        with self._changed:
            again = self._again.pop(job.run_id, None)
            if again is not None and self._accepting:
                self._launch(again)  # the run keeps its place
                return
            if again is not None:
                logger.info("run %s: not resumed again, the server is stopping; the next "
                            "server's reconciler continues it", job.run_id)
            tenant = self._pending.pop(job.run_id)
            self.places.release(tenant)
            self._changed.notify_all()

    # -- one run's task -------------------------------------------------------------

    async def _execute(self, job: _Job) -> None:
        """The run's attempt, and as long as it leaves the run stranded here (the store
        refused a commit), another after a while. Nothing raised here is lost: it is
        logged."""
        delay = self.retry_first
        while await self._attempt(job):
            if not await self._wait_unless_stopping(delay):
                return  # stopping: the next server takes the run over at once
            job = replace(job, why="retry after the store failed", allow_running_takeover=True,
                          expired_owner=self.owner, requested=False)
            delay = min(delay * 2, self.retry_max)

    async def _attempt(self, job: _Job) -> bool:
        """One attempt of one run; True when the run is left `running` under this
        server (or the store would not say), to be taken over again."""
        calls = store_thread_for(self.store, pool=self.store_pool)
        if self._interrupt.is_set():
            logger.info("run %s: %s: not started, the server is stopping; the next server "
                        "continues it", job.run_id, job.why)
            return False
        try:
            # With its latest checkpoint, which the engine's resume reads otherwise.
            found = await calls.call(_run_and_latest, self.store, job.run_id)
        except Exception as error:
            return await self._store_failed(job, calls, error)
        if found is None:
            logger.info("run %s: deleted before it started", job.run_id)
            return False
        record, latest = found
        if record.status is RunStatus.SUSPENDED and record.resume_requested_at is None:
            # Its resume request was served meanwhile (here, by the reconciler or
            # the CLI); resuming again would only re-ask.
            logger.info("run %s: %s: nothing to do (no resume pending)", job.run_id, job.why)
            return False
        runtime = self._runtime(job, record)
        if runtime is None:
            return False
        try:
            result = await runtime.resume_read(record, latest, budget=job.budget,
                                               allow_running_takeover=job.allow_running_takeover,
                                               expired_owner=job.expired_owner)
        except (LeaseHeld, StaleAttempt) as error:
            logger.info("run %s: %s: another owner is executing it (%s)", job.run_id, job.why,
                        error)
            return False
        except (RunTerminal, InvalidTransition) as error:
            logger.info("run %s: %s: nothing to do (%s)", job.run_id, job.why, error)
            return False
        except AgentRuntimeError as error:
            logger.error("run %s: %s: cannot execute: %s", job.run_id, job.why, error)
            return False
        except Exception as error:
            # The engine fails a run whose steps raise; what escapes it is the
            # store failing before the attempt began (a read, the reservation).
            return await self._store_failed(job, calls, error)
        if _unsaved(result):
            logger.error("run %s: %s: attempt %d: the store refused its commit: %s",
                         job.run_id, job.why, result.attempt,
                         (result.error or {}).get("message"))
            return await self._stranded(job, calls)
        logger.info("run %s: %s: attempt %d ended %s", job.run_id, job.why, result.attempt,
                    result.status.value)
        if self._interrupt.is_set() and _interrupted(result):
            await self._file_resume(job, calls)
        return False

    def _runtime(self, job: _Job, record: RunRecord) -> AgentRuntime | None:
        """The attempt's runtime, stopping with this server; None (logged) when the
        run's options no longer load (a config or tools file gone: the run keeps its
        checkpoint, `agent-runtime resume` can continue it) or building it failed."""
        try:
            runtime = self.runtime_for(record)
        except AgentRuntimeError as error:
            logger.error("run %s: %s: cannot execute: %s", job.run_id, job.why, error)
            return None
        except Exception:
            logger.exception("run %s: %s: its runtime could not be built", job.run_id,
                             job.why)
            return None
        runtime.interrupt = self._interrupt
        return runtime

    async def _store_failed(self, job: _Job, calls: StoreThread, error: Exception) -> bool:
        logger.error("run %s: %s: the store failed: %s: %s", job.run_id, job.why,
                     type(error).__name__, error, exc_info=not isinstance(error, OSError))
        return await self._stranded(job, calls)

    async def _stranded(self, job: _Job, calls: StoreThread) -> bool:
        """After a store failure: whether the run is to be taken over again here (it is
        still `running` under this server, or still waits to start, or the store does
        not answer even a read), said in the log."""
        try:
            record = await calls.call(self.store.load_run, job.run_id)
        except Exception as error:
            logger.warning("run %s: the store does not answer (%s: %s); this server tries "
                           "again", job.run_id, type(error).__name__, error)
            return True
        if record is None or record.status.terminal:
            return False
        if record.status is RunStatus.RUNNING and record.lease_owner != self.owner:
            return False  # someone else's now
        if record.status is RunStatus.SUSPENDED and record.resume_requested_at is None:
            return False
        if record.takeovers >= DEFAULT_MAX_TAKEOVERS:
            logger.warning("run %s: taken over %d times without progress; left to the "
                           "reconciler", job.run_id, record.takeovers)
            return False
        logger.warning("run %s: still %s; this server tries again once the store takes "
                       "commits", job.run_id, record.status.value)
        return True

    async def _file_resume(self, job: _Job, calls: StoreThread) -> None:
        """A run this server suspended as it stopped: resumed by the next server's reconciler."""
        try:
            await calls.call(self.store.request_resume, job.run_id, at=self.clock.now(),
                             reason=SERVER_STOPPED)
        except Exception as error:
            logger.warning("run %s: suspended `interrupted`, but its resume request was not "
                           "recorded (%s: %s); resume it with `agent-runtime resume`",
                           job.run_id, type(error).__name__, error)

    async def _wait_unless_stopping(self, seconds: float) -> bool:
        """Wait `seconds`; False as soon as the server stops."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if self._interrupt.is_set():
                return False
            await asyncio.sleep(min(left, _STOP_POLL_SECONDS))
        return not self._interrupt.is_set()

    # -- stopping --------------------------------------------------------------

    def interrupt(self) -> None:
        """Stop: hand over no more runs, and have every executing run suspend
        `interrupted` at its next commit point. Safe in a signal handler (sets flags)."""
        self._accepting = False
        self.places.stop()
        self._interrupt.set()

    @property
    def interrupted(self) -> bool:
        return self._interrupt.is_set()

    def running(self) -> list[str]:
        """Run ids executing here now, or due to run again."""
        with self._changed:
            return sorted(set(self._pending) | set(self._again))

    def wait(self, timeout: float | None = None) -> list[str]:
        """Wait up to `timeout` seconds for the runs executing here (and those they hand
        on); the run ids still executing then."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while self._pending or self._again:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    break
                self._changed.wait(remaining)
            return sorted(set(self._pending) | set(self._again))

    def shutdown(self, *, wait: bool = True, timeout: float | None = None) -> list[str]:
        """`interrupt`, and with `wait` wait up to `timeout` seconds for the runs to
        suspend; once none is left, stop the loops. Returns the run ids still executing."""
        self.interrupt()
        left = self.wait(timeout) if wait else self.running()
        if not left:
            self.close()
        return left

    def close(self, timeout: float | None = None) -> None:
        """Stop the event loops (after the runs ended: a task still on one is cancelled)."""
        self._loops.stop(timeout)


def _run_and_latest(store: RunStore, run_id: str) -> tuple[RunRecord, Checkpoint | None] | None:
    """The run and, unless it finished, its latest checkpoint; None: it was deleted.
    (On the store thread: one trip there and back.)"""
    record = store.load_run(run_id)
    return None if record is None else (record, latest_unless_finished(store, record))


def _unsaved(result: RunResult) -> bool:
    return result.status is RunStatus.FAILED and result.error is not None \
        and result.error.get("type") == CHECKPOINT_UNAVAILABLE


def _interrupted(result: RunResult) -> bool:
    return result.status is RunStatus.SUSPENDED and result.suspension is not None \
        and result.suspension.get("reason") == INTERRUPTED


__all__ = ["DEFAULT_LOOPS", "SERVER_STOPPED", "LocalLauncher"]
