"""`LocalLauncher`: the `Launcher` of `agent-runtime serve`, a pool of worker threads.

A request that starts or resumes a run returns as soon as the run is handed
to the pool; a worker then executes the attempt over the same store with a
runtime of its own (built per job: MCP connections and event loops are never
shared between threads). The store keeps the truth, so nothing here has to
survive a crash: a run the pool never got to stays `created`, or `suspended`
with its resume request recorded, and the reconciler loop
(`agent_runtime.api.local_reconcile`) starts it later; a run a dead worker
was executing is taken over once its lease expired and its owner pid is gone.

Workers are shared fairly between tenants (a run's `tenant`; runs without one
form one more tenant):

* each tenant has a queue of its own, and a free worker takes the next job of
  the tenant served least recently among those that have one waiting (round
  robin), so a tenant that queued a hundred runs delays another tenant's next
  run by at most one run, not a hundred;
* at most `tenant_workers` runs of one tenant execute at once, so that with
  fewer than `workers` one tenant cannot hold every worker with long runs
  while another tenant's run waits (`serve --tenant-workers`);
* a tenant's queue is bounded: when `tenant_workers + max_queued` of its jobs
  are queued or executing, a request is not made to wait; the run is left for
  the reconciler. Other tenants' queues are not affected.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
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

# Jobs that may wait for a worker, per worker and per tenant, before requests
# leave that tenant's runs to the reconciler.
QUEUED_PER_WORKER = 8

logger = logging.getLogger("agent_runtime.serve")


@dataclass(frozen=True)
class _Job:
    run_id: str
    tenant: str | None
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
                 workers: int, tenant_workers: int | None = None,
                 max_queued: int | None = None, clock: Clock | None = None) -> None:
        if workers < 1:
            raise ValueError("workers must be 1 or more")
        if tenant_workers is not None and not 1 <= tenant_workers <= workers:
            raise ValueError("tenant_workers must be 1 to workers")
        self.store = store
        self.runtime_for = runtime_for
        self.workers = workers
        self.tenant_workers = workers if tenant_workers is None else tenant_workers
        self.max_queued = QUEUED_PER_WORKER * workers if max_queued is None else max_queued
        self.clock: Clock = clock or SystemClock()
        self._changed = threading.Condition()
        # Per tenant, its jobs waiting for a worker (a tenant with none has no entry).
        self._queues: dict[str | None, deque[_Job]] = {}
        # Per tenant, its runs executing now.
        self._executing: dict[str | None, int] = {}
        # When each tenant was last given a worker (a pick counter): the least recent goes next.
        self._served: dict[str | None, int] = {}
        self._picks = 0
        # Run ids queued or executing, and their tenant: one job per run at a time.
        self._pending: dict[str, str | None] = {}
        # Resumes asked for while the run's job was still running: queued after it.
        self._again: dict[str, _Job] = {}
        # Jobs given to a free worker (counted as executing) that its thread has not
        # taken yet, and the workers free to take one.
        self._handed: deque[_Job] = deque()
        self._free = workers
        self._accepting = True
        self._threads = [threading.Thread(target=self._work, name=f"agent-runtime-worker-{n}",
                                          daemon=True) for n in range(workers)]
        for thread in self._threads:
            thread.start()

    # -- the Launcher protocol -----------------------------------------------

    def start(self, run: RunRecord) -> None:
        """Hand a new (`created`) run to a worker; when none can take it, the reconciler will."""
        self.submit(_Job(run.run_id, run.tenant, "start"))

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
        self.submit(_Job(run.run_id, run.tenant, f"resume ({reason})", budget=budget,
                         requested=True))

    # -- what the reconciler loop uses ---------------------------------------

    def is_pending(self, run_id: str) -> bool:
        """Whether the run is queued or executing here."""
        with self._changed:
            return run_id in self._pending

    def take_over(self, run: RunRecord) -> bool:
        """Hand a run the reconciler found (queued too long, owner dead, resume requested)
        to a worker; False when its tenant's queue is full, the pool is stopping, or the
        run is already here."""
        return self.submit(_Job(run.run_id, run.tenant, "reconcile",
                                allow_running_takeover=run.status is RunStatus.RUNNING))

    # -- the pool --------------------------------------------------------------

    def submit(self, job: _Job) -> bool:
        with self._changed:
            if not self._accepting:
                logger.info("run %s: not handed to a worker, the server is stopping; "
                            "the next server's reconciler continues it", job.run_id)
                return False
            if job.run_id in self._pending:
                # An approval answered the moment its run suspended finds the
                # worker still finishing the attempt that asked: run it next.
                if job.requested:
                    self._again[job.run_id] = job
                    return True
                return False
            held = sum(tenant == job.tenant for tenant in self._pending.values())
            if held >= self.tenant_workers + self.max_queued:
                logger.warning("run %s: its tenant has %d runs queued or executing on this "
                               "server, as many as it may; left for the reconciler",
                               job.run_id, held)
                return False
            self._enqueue(job)
        return True

    def _enqueue(self, job: _Job, *, first: bool = False) -> None:
        queue = self._queues.setdefault(job.tenant, deque())
        if first:
            queue.appendleft(job)
        else:
            queue.append(job)
        self._pending[job.run_id] = job.tenant
        self._dispatch()

    def _dispatch(self) -> None:
        """Give the next jobs to the free workers (the caller holds the lock). A job given
        to a worker is executing: stopping drops only the jobs still queued."""
        handed = False
        while self._free > len(self._handed) and (job := self._next_job()) is not None:
            self._handed.append(job)
            handed = True
        if handed:
            self._changed.notify_all()

    def _next_job(self) -> _Job | None:
        """The next job a free worker takes (the caller holds the lock), or None."""
        eligible = [tenant for tenant in self._queues
                    if self._executing.get(tenant, 0) < self.tenant_workers]
        if not eligible:
            return None
        # Round robin: the tenant served least recently (never: first), ties in
        # the order their queues appeared.
        tenant = min(eligible, key=lambda name: self._served.get(name, -1))
        queue = self._queues[tenant]
        job = queue.popleft()
        if not queue:
            del self._queues[tenant]
        self._picks += 1
        self._served[tenant] = self._picks
        self._executing[tenant] = self._executing.get(tenant, 0) + 1
        return job

    def _work(self) -> None:
        while True:
            with self._changed:
                while not self._handed:
                    if not self._accepting:
                        return
                    self._changed.wait()
                job = self._handed.popleft()
                self._free -= 1
            try:
                self._execute(job)
            finally:
                self._finished(job)

    def _finished(self, job: _Job) -> None:
        with self._changed:
            left = self._executing[job.tenant] - 1
            if left:
                self._executing[job.tenant] = left
            else:
                del self._executing[job.tenant]
            del self._pending[job.run_id]
            self._free += 1
            again = self._again.pop(job.run_id, None)
            if again is not None and self._accepting:
                self._enqueue(again, first=True)
            elif again is not None:
                logger.info("run %s: not resumed again, the server is stopping; the next "
                            "server's reconciler continues it", job.run_id)
            self._dispatch()
            self._changed.notify_all()

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
        with self._changed:
            return sorted(set(self._pending) | set(self._again))

    def shutdown(self, *, wait: bool = True, timeout: float | None = None) -> list[str]:
        """Stop taking runs, drop the queued ones (their runs stay in the store for the
        reconciler), and with `wait` let executing ones finish for up to `timeout`
        seconds. Returns the run ids still executing."""
        with self._changed:
            self._accepting = False
            for queue in self._queues.values():
                for job in queue:
                    del self._pending[job.run_id]
            self._queues.clear()
            self._changed.notify_all()
        if wait:
            return self.wait(timeout)
        return self.running()

    def wait(self, timeout: float | None = None) -> list[str]:
        """Wait up to `timeout` seconds for the jobs queued or executing (and those they
        hand on); the run ids still pending then."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while self._pending or self._again:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    break
                self._changed.wait(remaining)
            return sorted(set(self._pending) | set(self._again))
