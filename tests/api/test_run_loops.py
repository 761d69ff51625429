"""`RunLoops`, the event loops `serve` executes runs on: of the kind the process makes
(uvloop's when installed, else asyncio's), each run on the least busy loop."""

from __future__ import annotations

import asyncio
import contextvars
import importlib.util
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from agent_runtime.api import run_loops
from agent_runtime.api.run_loops import RunLoops, loop_kind, new_event_loop

WAIT = 60.0  # generous: a loaded machine only makes the test slower


@pytest.fixture
def loops() -> Iterator[RunLoops]:
    made = RunLoops(2, name="test-runs")
    yield made
    made.stop(timeout=WAIT)


def test_the_loops_are_uvloops_when_uvloop_is_installed(loops: RunLoops) -> None:
    seen: list[str] = []

    async def which_loop() -> None:
        seen.append(type(asyncio.get_running_loop()).__module__)

    loops.submit(which_loop()).result(timeout=WAIT)
    installed = importlib.util.find_spec("uvloop") is not None
    assert loop_kind() == ("uvloop" if installed else "asyncio")
    assert seen[0].startswith("uvloop" if installed else "asyncio")


def test_without_uvloop_a_loop_is_asyncios(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        return None if name == "uvloop" else real(name, *args)

    monkeypatch.setattr(run_loops.importlib.util, "find_spec", find_spec)
    assert loop_kind() == "asyncio"
    loop = new_event_loop()
    try:
        assert type(loop).__module__.startswith("asyncio")
    finally:
        loop.close()


def test_a_run_goes_to_the_least_busy_loop(loops: RunLoops) -> None:
    release = threading.Event()
    threads: list[str] = []

    async def waiting_run() -> None:
        threads.append(threading.current_thread().name)
        while not release.is_set():
            await asyncio.sleep(0.01)

    first = loops.submit(waiting_run())
    second = loops.submit(waiting_run())
    release.set()
    first.result(timeout=WAIT)
    second.result(timeout=WAIT)
    assert sorted(threads) == ["test-runs-0", "test-runs-1"]


_SEEN: contextvars.ContextVar[str] = contextvars.ContextVar("test_run_loops_seen",
                                                            default="unset")


def test_a_run_starts_in_the_loops_context_not_the_callers() -> None:
    # What the loops' maker set (the command's limits) reaches every run; what
    # the thread handing a run over set (a request's state) does not.
    made_in = _SEEN.set("the command's")
    try:
        loops = RunLoops(1, name="test-context")
    finally:
        _SEEN.reset(made_in)
    seen: list[str] = []

    async def run() -> None:
        seen.append(_SEEN.get())

    def request_thread() -> None:
        _SEEN.set("a request's")
        loops.submit(run()).result(timeout=WAIT)

    try:
        handing = threading.Thread(target=request_thread)
        handing.start()
        handing.join(WAIT)
        loops.submit(run()).result(timeout=WAIT)
    finally:
        loops.stop(timeout=WAIT)
    assert seen == ["the command's", "the command's"]
