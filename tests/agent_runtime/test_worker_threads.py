"""The worker pool under tool and store calls (agent_runtime/worker_threads.py): every
job runs once, on at most `max_workers` threads, from any number of submitting
threads; what a job leaves to do runs once its worker is free; the wake pipes are
closed with the pool; a worker woken on its caller's CPU is free to use every CPU
again while it works."""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import threading
from collections import Counter
from collections.abc import Callable

import pytest

from agent_runtime.store_thread import StoreThread
from agent_runtime.worker_threads import WorkerThreads
from stores.thread_placement import Placement

HANG_DEADLINE = 30.0


@pytest.mark.parametrize("on_caller_cpu", [False, True])
def test_every_job_runs_once_whoever_submits_it(on_caller_cpu: bool) -> None:
    pool = WorkerThreads(3, name="test-pool", on_caller_cpu=on_caller_cpu)
    ran: Counter[int] = Counter()
    names: set[str] = set()
    lock = threading.Lock()
    done = threading.Semaphore(0)

    def job(index: int) -> Callable[[], object] | None:
        with lock:
            ran[index] += 1
            names.add(threading.current_thread().name)
        return done.release

    def submitter(first: int) -> None:
        for index in range(first, first + 250):
            pool.submit(lambda index=index: job(index))  # type: ignore[misc]

    submitters = [threading.Thread(target=submitter, args=(first,)) for first in
                  range(0, 1000, 250)]
    for thread in submitters:
        thread.start()
    for thread in submitters:
        thread.join()
    for _ in range(1000):
        assert done.acquire(timeout=HANG_DEADLINE), "a job never ran"
    assert ran == Counter(range(1000))
    assert pool.workers <= 3
    assert all(name.startswith("test-pool-") for name in names)
    pool.shutdown()
    assert pool.workers == 0


@pytest.mark.parametrize("on_caller_cpu", [False, True])
def test_what_a_job_leaves_to_do_runs_when_its_worker_is_free_again(on_caller_cpu: bool) -> None:
    pool = WorkerThreads(4, name="test-pool", on_caller_cpu=on_caller_cpu)
    heard = threading.Event()
    second_ran = threading.Event()

    def first() -> Callable[[], object]:
        def then() -> None:
            # The worker counts itself idle before this runs, so a job submitted
            # now is that worker's, not a new one's.
            pool.submit(_setting(second_ran))
            heard.set()
        return then

    pool.submit(first)
    assert heard.wait(HANG_DEADLINE)
    assert second_ran.wait(HANG_DEADLINE)
    assert pool.workers == 1
    pool.shutdown()


def _setting(event: threading.Event) -> Callable[[], None]:
    """A job that sets `event` and leaves nothing to do after."""
    def job() -> None:
        event.set()
    return job


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/fd")
def test_a_pool_closes_its_wake_pipe_once_it_is_gone() -> None:
    def descriptors() -> int:
        return len(os.listdir("/proc/self/fd"))

    before = descriptors()
    for _ in range(50):
        pool = WorkerThreads(2, name="test-pool")
        ended = threading.Event()
        pool.submit(_setting(ended))
        assert ended.wait(HANG_DEADLINE)
        pool.shutdown()
        del pool
    gc.collect()
    assert descriptors() <= before


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/fd")
def test_a_store_thread_per_execution_leaves_no_descriptor_behind() -> None:
    async def executions() -> None:
        for _ in range(50):
            store_thread = StoreThread()
            with store_thread.held():
                assert await store_thread.call(int, "7") == 7

    before = len(os.listdir("/proc/self/fd"))
    asyncio.run(executions())
    gc.collect()
    assert len(os.listdir("/proc/self/fd")) <= before


LINUX_PLACEMENT = pytest.mark.skipif(not Placement().active,
                                     reason="pins threads with Linux's sched_setaffinity")


@LINUX_PLACEMENT
def test_a_pinned_thread_keeps_to_its_cpu_until_it_frees_itself() -> None:
    placement = Placement()
    allowed = placement.allowed()
    assert allowed
    cpu = placement.caller_cpu()
    assert cpu in allowed
    pinned, go_on, freed = threading.Event(), threading.Event(), threading.Event()
    seen: list[set[int]] = []

    def worker() -> None:
        pinned.set()
        assert go_on.wait(HANG_DEADLINE)
        seen.append(os.sched_getaffinity(0))
        placement.free(allowed)
        seen.append(os.sched_getaffinity(0))
        freed.set()

    thread = threading.Thread(target=worker)
    thread.start()
    assert pinned.wait(HANG_DEADLINE)
    placement.pin(thread.native_id, cpu)
    go_on.set()
    assert freed.wait(HANG_DEADLINE)
    thread.join()
    assert seen == [{cpu}, allowed]


@LINUX_PLACEMENT
def test_a_worker_woken_on_its_callers_cpu_works_free_to_use_every_cpu() -> None:
    """Pinned when woken, it frees itself before the job starts: a long job (work
    outside the interpreter lock) can still be moved to a CPU of its own."""
    allowed = os.sched_getaffinity(0)
    pool = WorkerThreads(1, name="test-pool", on_caller_cpu=True)
    masks: list[set[int]] = []
    ran = threading.Semaphore(0)

    def job() -> Callable[[], object]:
        masks.append(os.sched_getaffinity(0))
        return ran.release

    for _ in range(20):  # the first starts the worker; the others wake it
        pool.submit(job)
        assert ran.acquire(timeout=HANG_DEADLINE), "a job never ran"
    pool.shutdown()
    assert masks == [allowed] * 20
