"""Synchronous tools run on worker threads (agent_runtime/tools/threads.py): off the event
loop, in the caller's context, with what they return or raise handed back as it is, and
`asyncio.to_thread`'s answer to cancellation."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from typing import Any

import pytest

from agent_runtime import tool
from agent_runtime.tools import ToolContext
from agent_runtime.tools.threads import THREAD_NAME, ToolThreads

# Long enough never to be reached unless something hangs.
HANG_DEADLINE = 30.0

REQUEST = contextvars.ContextVar("request", default="none")


class Stop(BaseException):
    """Not an `Exception`: a tool's `BaseException` reaches its caller too."""


def test_a_call_runs_on_a_worker_thread_in_the_callers_context() -> None:
    threads = ToolThreads()

    def where() -> tuple[str, str]:
        return threading.current_thread().name, REQUEST.get()

    async def main() -> tuple[str, str]:
        REQUEST.set("r-1")
        return await threads.call(where)

    name, request = asyncio.run(main())
    assert name.startswith(THREAD_NAME)
    assert request == "r-1"
    threads.shutdown()


def test_what_the_function_raises_reaches_the_caller_as_it_is() -> None:
    threads = ToolThreads()
    stop, failure = Stop(), ValueError("no")

    def raising(error: BaseException) -> None:
        raise error

    async def outcome(error: BaseException) -> BaseException:
        try:
            await threads.call(raising, error)
        except BaseException as caught:  # the very object, whatever its class
            return caught
        raise AssertionError("the call returned")

    assert asyncio.run(outcome(failure)) is failure
    assert asyncio.run(outcome(stop)) is stop
    # A future cannot take StopIteration: it arrives as the RuntimeError a coroutine gives.
    caught = asyncio.run(outcome(StopIteration()))
    assert isinstance(caught, RuntimeError)
    assert isinstance(caught.__cause__, StopIteration)
    threads.shutdown()


def test_the_loop_goes_on_while_a_tool_blocks() -> None:
    threads = ToolThreads()
    release = threading.Event()
    ticks: list[int] = []

    async def ticker() -> None:
        while not release.is_set():
            ticks.append(1)
            if len(ticks) >= 3:
                release.set()
            await asyncio.sleep(0.001)

    async def main() -> bool:
        ticking = asyncio.create_task(ticker())
        blocked = await threads.call(release.wait, HANG_DEADLINE)
        await ticking
        return blocked

    assert asyncio.run(main()) is True
    assert len(ticks) >= 3
    threads.shutdown()


def test_a_call_cancelled_before_a_worker_took_it_never_runs() -> None:
    threads = ToolThreads(max_workers=1)
    started, release = threading.Event(), threading.Event()
    ran: list[str] = []

    def first() -> None:
        started.set()
        release.wait(HANG_DEADLINE)
        ran.append("first")

    def second() -> None:
        ran.append("second")

    async def main() -> None:
        busy = asyncio.create_task(threads.call(first))
        await asyncio.to_thread(started.wait, HANG_DEADLINE)
        waiting = asyncio.create_task(threads.call(second))  # queued behind `first`
        await asyncio.sleep(0)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        release.set()
        await busy

    asyncio.run(main())
    threads.shutdown()  # the worker took and skipped `second` before it ends
    assert ran == ["first"]


def test_a_call_cancelled_while_it_runs_ends_unseen_and_the_caller_goes_on() -> None:
    threads = ToolThreads()
    started, release, ended = threading.Event(), threading.Event(), threading.Event()

    def slow() -> str:
        started.set()
        release.wait(HANG_DEADLINE)
        ended.set()
        return "late"

    async def main() -> None:
        call = asyncio.create_task(threads.call(slow))
        await asyncio.to_thread(started.wait, HANG_DEADLINE)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call  # at once, while the function still runs

    asyncio.run(main())
    assert not ended.is_set()
    release.set()
    threads.shutdown()  # waits for the call still running
    assert ended.is_set()


def test_workers_are_kept_for_the_next_calls_and_started_only_as_needed() -> None:
    threads = ToolThreads(max_workers=4)
    gate = threading.Barrier(3, timeout=HANG_DEADLINE)

    async def main() -> None:
        for _ in range(20):
            await threads.call(time.monotonic)
        assert threads.workers == 1  # one call at a time: one worker, reused
        # Three at once, each waiting for the others: three workers.
        await asyncio.gather(*(threads.call(gate.wait) for _ in range(3)))
        assert threads.workers == 3

    asyncio.run(main())
    threads.shutdown()
    assert threads.workers == 0


def test_a_plain_function_tool_runs_off_the_loop_thread() -> None:
    @tool
    def where(item: int) -> dict[str, Any]:
        """Where the tool ran.

        Args:
            item: Echoed back.
        """
        return {"item": item, "thread": threading.current_thread().name}

    context = ToolContext(run_id="run-1", step_path="ask", idempotency_key="k", attempt=1)
    result = asyncio.run(where.invoke({"item": 3}, context))
    assert result["item"] == 3
    assert result["thread"].startswith(THREAD_NAME)


def test_calls_past_a_full_pool_wait_their_turn_and_each_runs_once() -> None:
    threads = ToolThreads(max_workers=2)
    ran: list[int] = []

    def record(index: int) -> int:
        ran.append(index)
        time.sleep(0.001)  # long enough that calls pile up behind the two workers
        return index * 10

    async def main() -> list[int]:
        return await asyncio.gather(*(threads.call(record, index) for index in range(40)))

    assert asyncio.run(main()) == [index * 10 for index in range(40)]
    assert sorted(ran) == list(range(40))
    assert threads.workers == 2
    threads.shutdown()
    assert threads.workers == 0


def test_shutdown_runs_the_calls_still_queued_then_ends_every_worker() -> None:
    threads = ToolThreads(max_workers=2)
    started, release = threading.Barrier(3, timeout=HANG_DEADLINE), threading.Event()
    ran: list[str] = []

    def held(name: str) -> None:
        started.wait()
        release.wait(HANG_DEADLINE)
        ran.append(name)

    # Shut down from another thread, as atexit would.
    stopping = threading.Thread(target=threads.shutdown, daemon=True)

    async def main() -> None:
        calls = [asyncio.ensure_future(threads.call(held, name)) for name in ("a", "b")]
        await asyncio.to_thread(started.wait)  # both workers busy: the pool is full
        queued = [asyncio.ensure_future(threads.call(ran.append, name)) for name in "xyz"]
        await asyncio.sleep(0)  # x, y and z are submitted, and wait
        # Shut down while they wait: the pool forgets its workers and queues
        # their ends behind x, y and z.
        stopping.start()
        while threads.workers:
            await asyncio.sleep(0.001)
        release.set()
        await asyncio.wait_for(asyncio.gather(*calls, *queued), HANG_DEADLINE)

    asyncio.run(main())
    stopping.join(HANG_DEADLINE)
    assert not stopping.is_alive(), "a worker never took its end"
    assert sorted(ran) == ["a", "b", "x", "y", "z"]
