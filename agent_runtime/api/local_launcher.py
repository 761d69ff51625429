"""`LocalLauncher`: the `Launcher` of `agent-runtime serve`, a pool of worker threads.

A request that starts or resumes a run returns as soon as the run is handed
to the pool; a worker then executes the attempt over the same store with a
runtime of its own (built per job: MCP connections and event loops are never
shared between threads). The store keeps the truth, so nothing here has to
survive a crash: a run the pool never got to stays `created`, or `suspended`
with its resume request recorded, and the reconciler loop
(`agent_runtime.api.local_reconcile`) starts it later; a run a dead worker
was executing is taken over once its lease expired and its owner pid is gone.

The queue is bounded: when every worker is busy and the queue is full, a
request is not made to wait; the run is left for the reconciler.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from dataclasses import dataclass

from stores.base import (
    InvalidTransition,
    LeaseHeld,
    RunNotFound,
    RunStore,
    RunTerminal,
    StaleAttempt,
)
from stores.records import Budget, RunRecord, RunStatus

from agent_runtime.clock import Clock, SystemClock
from agent_runtime.engine import AgentRuntime
from agent_runtime.errors import AgentRuntimeError

# Jobs that may wait for a worker, per worker, before requests leave runs to the reconciler.
QUEUED_PER_WORKER = 8

logger = logging.getLogger("agent_runtime.serve")


@dataclass(frozen=True)
class _Job:
    run_id: str
    why: str
    budget: Budget | None = None
    allow_running_takeover: bool = False
    # A resume request was recorded for it: worth a second job when it
    # arrives while the run's previous job is still winding down.
    requested: bool = False


class LocalLauncher:
    """Executes stored runs on `workers` threads; `runtime_for(run)` builds each job's runtime.

    Thread-safe: requests hand runs over from the server's event loop, the
    reconciler loop from its own thread.
    """

    def __init__(self, store: RunStore, runtime_for: Callable[[RunRecord], AgentRuntime], *,
                 workers: int, max_queued: int | None = None,
                 clock: Clock | None = None) -> None:
        if workers < 1:
            raise ValueError("workers must be 1 or more")
        self.store = store
        self.runtime_for = runtime_for
        self.workers = workers
        self.capacity = workers + (QUEUED_PER_WORKER * workers if max_queued is None
                                   else max_queued)
        self.clock: Clock = clock or SystemClock()
        self._executor = ThreadPoolExecutor(max_workers=workers,
                                            thread_name_prefix="agent-runtime-worker")
        self._lock = threading.Lock()
        # Run ids queued or executing: one job per run at a time.
        self._jobs: dict[str, Future[None]] = {}
        # Resumes asked for while the run's job was still running: submitted after it.
        self._again: dict[str, _Job] = {}
        self._accepting = True

    # -- the Launcher protocol -----------------------------------------------

    def start(self, run: RunRecord) -> None:
        """Hand a new (`created`) run to a worker; when none can take it, the reconciler will."""
        self.submit(_Job(run.run_id, "start"))

    def resume(self, run: RunRecord, *, reason: str, budget: Budget | None = None) -> None:
        """Record the resume request, then hand the run to a worker.

        The request is recorded first so that a run the pool cannot take now
        (or loses in a crash) is resumed by the reconciler loop. A run that
        moved on meanwhile (resumed by someone else, finished, cancelled) has
        nothing left to resume.
        """
        try:
            self.store.request_resume(run.run_id, at=self.clock.now(), reason=reason)
        except (RunTerminal, InvalidTransition, RunNotFound) as error:
            logger.info("run %s: not resumed (%s: %s)", run.run_id, type(error).__name__, error)
            return
        self.submit(_Job(run.run_id, f"resume ({reason})", budget=budget, requested=True))

    # -- what the reconciler loop uses ---------------------------------------

    def is_pending(self, run_id: str) -> bool:
        """Whether the run is queued or executing here."""
        with self._lock:
            future = self._jobs.get(run_id)
            return future is not None and not future.done()

    def take_over(self, run: RunRecord) -> bool:
        """Hand a run the reconciler found (queued too long, owner dead, resume requested)
        to a worker; False when the pool is full or stopping, or the run is already here."""
        return self.submit(_Job(run.run_id, "reconcile",
                                allow_running_takeover=run.status is RunStatus.RUNNING))

    # -- the pool --------------------------------------------------------------

    def submit(self, job: _Job) -> bool:
        with self._lock:
            if not self._accepting:
                logger.info("run %s: not handed to a worker, the server is stopping; "
                            "the next server's reconciler continues it", job.run_id)
                return False
            current = self._jobs.get(job.run_id)
            if current is not None and not current.done():
                # An approval answered the moment its run suspended finds the
                # worker still finishing the attempt that asked: run it next.
                if job.requested:
                    self._again[job.run_id] = job
                    return True
                return False
            if sum(not queued.done() for queued in self._jobs.values()) >= self.capacity:
                logger.warning("run %s: all %d workers busy and %d jobs queued; left for the "
                               "reconciler", job.run_id, self.workers,
                               self.capacity - self.workers)
                return False
            future = self._executor.submit(self._execute, job)
            self._jobs[job.run_id] = future
        future.add_done_callback(lambda _: self._forget(job.run_id, future))
        return True

    def _forget(self, run_id: str, future: Future[None]) -> None:
        with self._lock:
            if self._jobs.get(run_id) is future:
                del self._jobs[run_id]
            again = self._again.pop(run_id, None)
        if again is not None:
            self.submit(again)

    def _execute(self, job: _Job) -> None:
        """One attempt of one run. Nothing raised here is lost: it is logged."""
        try:
            record = self.store.load_run(job.run_id)
            if record is None:
                logger.info("run %s: deleted before a worker got to it", job.run_id)
                return
            if record.status is RunStatus.SUSPENDED and record.resume_requested_at is None:
                # Its resume request was served meanwhile (by this pool, the
                # reconciler or the CLI); resuming again would only re-ask.
                logger.info("run %s: %s: nothing to do (no resume pending)", job.run_id,
                            job.why)
                return
            runtime = self.runtime_for(record)
            result = runtime.run_sync(run_id=job.run_id, resume=True, budget=job.budget,
                                      allow_running_takeover=job.allow_running_takeover)
            logger.info("run %s: %s: attempt %d ended %s", job.run_id, job.why, result.attempt,
                        result.status.value)
        except (LeaseHeld, StaleAttempt) as error:
            logger.info("run %s: %s: another owner is executing it (%s)", job.run_id, job.why,
                        error)
        except (RunTerminal, InvalidTransition) as error:
            logger.info("run %s: %s: nothing to do (%s)", job.run_id, job.why, error)
        except AgentRuntimeError as error:
            # A run's options no longer load (a config or tools file gone): the
            # run keeps its checkpoint; `agent-runtime resume` can continue it.
            logger.error("run %s: %s: cannot execute: %s", job.run_id, job.why, error)
        except Exception:
            logger.exception("run %s: %s: the worker failed", job.run_id, job.why)

    # -- stopping --------------------------------------------------------------

    def running(self) -> list[str]:
        """Run ids queued or executing now, or due to run again."""
        with self._lock:
            return sorted({run_id for run_id, future in self._jobs.items()
                           if not future.done()} | set(self._again))

    def shutdown(self, *, wait: bool = True, timeout: float | None = None) -> list[str]:
        """Stop taking runs, drop the queued ones (their runs stay in the store for the
        reconciler), and with `wait` let executing ones finish for up to `timeout`
        seconds. Returns the run ids still executing."""
        with self._lock:
            self._accepting = False
        self._executor.shutdown(wait=False, cancel_futures=True)
        if wait:
            return self.wait(timeout)
        return self.running()

    def wait(self, timeout: float | None = None) -> list[str]:
        """Wait up to `timeout` seconds for the jobs queued or executing (and those they
        hand on); the run ids still pending then."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                futures = [future for future in self._jobs.values() if not future.done()]
                pending = bool(futures or self._again)
            remaining = None if deadline is None else deadline - time.monotonic()
            if not pending or (remaining is not None and remaining <= 0):
                return self.running()
            if futures:
                wait_for(futures, timeout=remaining)
            else:
                # A finished job's follow-up is submitted just after its waiters wake.
                time.sleep(0.01)
