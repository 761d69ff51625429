"""`StorePool`: the store-call threads a host (`serve`) shares between its runtimes. Each
runtime's calls keep their order, one at a time; different runtimes' calls are made side
by side, as a store that shares one commit between concurrent callers needs."""

from __future__ import annotations

import asyncio
import threading

import pytest

from agent_runtime.store_thread import StorePool, StoreThread

DEADLINE = 60.0


def test_one_runtimes_calls_are_made_one_at_a_time_in_order() -> None:
    pool = StorePool(4)
    lane = StoreThread(pool=pool)
    made: list[int] = []
    at_once = 0
    busy = threading.Lock()

    def call(index: int) -> int:
        nonlocal at_once
        if not busy.acquire(blocking=False):
            at_once += 1  # another call of this lane was being made
            return index
        try:
            made.append(index)
            threading.Event().wait(0.001)
        finally:
            busy.release()
        return index

    async def main() -> list[int]:
        return list(await asyncio.gather(*(lane.call(call, n) for n in range(40))))

    try:
        assert asyncio.run(main()) == list(range(40))
    finally:
        pool.shutdown()
    assert made == list(range(40))
    assert at_once == 0


def test_different_runtimes_calls_are_made_side_by_side() -> None:
    pool = StorePool(2)
    both = threading.Barrier(2, timeout=DEADLINE)

    def meet() -> str:
        both.wait()  # returns only when the other lane's call is in flight too
        return "met"

    async def main() -> list[str]:
        first, second = StoreThread(pool=pool), StoreThread(pool=pool)
        return list(await asyncio.gather(first.call(meet), second.call(meet)))

    try:
        assert asyncio.run(main()) == ["met", "met"]
    finally:
        pool.shutdown()


def test_a_call_raises_what_the_store_raised_and_a_cancelled_one_never_runs() -> None:
    pool = StorePool(1)
    lane = StoreThread(pool=pool)
    refused = OSError(28, "No space left on device")
    release = threading.Event()
    ran: list[str] = []

    def slow() -> None:
        release.wait(DEADLINE)
        ran.append("slow")

    def behind() -> None:
        ran.append("behind")

    def fail() -> None:
        raise refused

    async def main() -> None:
        in_flight = asyncio.ensure_future(lane.call(slow))
        queued = asyncio.ensure_future(lane.call(behind))
        await asyncio.sleep(0.01)
        queued.cancel()
        await asyncio.wait([queued])  # its cancellation reached the pool's queue
        release.set()
        await in_flight
        with pytest.raises(asyncio.CancelledError):
            await queued
        with pytest.raises(OSError) as raised:
            await lane.call(fail)
        assert raised.value is refused

    try:
        asyncio.run(main())
    finally:
        pool.shutdown()
    assert ran == ["slow"]


def test_a_call_after_the_pool_stopped_fails_instead_of_hanging() -> None:
    pool = StorePool(1)
    pool.shutdown()
    lane = StoreThread(pool=pool)

    async def main() -> None:
        with pytest.raises(RuntimeError):
            await asyncio.wait_for(lane.call(lambda: None), DEADLINE)

    asyncio.run(main())


def test_a_pool_needs_a_thread() -> None:
    with pytest.raises(ValueError, match="1 thread"):
        StorePool(0)
