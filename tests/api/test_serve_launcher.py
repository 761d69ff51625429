"""`LocalLauncher` (the worker pool of `agent-runtime serve`) and its reconciler loop, in
process on a memory store with a fake clock and the scripted echo model."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from agent_runtime import AgentRuntime, RunStatus
from agent_runtime.api.local_launcher import LocalLauncher
from agent_runtime.api.local_reconcile import ReconcileLoop
from agent_runtime.events import ListEventSink
from agent_runtime.reconcile import Liveness, OwnerStatus
from agent_runtime.testing import FakeClock
from stores.base import RunStore
from stores.memory import MemoryRunStore
from stores.records import Budget, RunRecord

ECHO = {"model": "scripted/echo"}
TIMEOUT = 60.0
DEAD_OWNER = "gone-host:1"

TWO_STEPS = {"schemaVersion": "1.0", "id": "two", "steps": [
    {"id": "first", "type": "prompt", "prompt": "one", "outputVariable": "one"},
    {"id": "second", "type": "prompt", "prompt": "two", "includeInFinalOutput": True}]}
APPROVAL = {"schemaVersion": "1.0", "id": "approval", "steps": [
    {"id": "draft", "type": "prompt", "prompt": "draft", "outputVariable": "draft"},
    {"id": "approve", "type": "approval", "prompt": "ok?", "action": "pause"},
    {"id": "final", "type": "prompt", "prompt": "final", "includeInFinalOutput": True}]}


class WindingDown(AgentRuntime):
    """A runtime whose job lingers after the attempt ended (its run already suspended)."""

    def __init__(self, gate: threading.Event, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.gate = gate
        self.ended = threading.Event()

    def run_sync(self, **kwargs: Any) -> Any:
        result = super().run_sync(**kwargs)
        self.ended.set()
        assert self.gate.wait(TIMEOUT), "the test never opened the gate"
        return result


class World:
    """A memory store, a fake clock, and runtimes on them, as serve builds them per job."""

    def __init__(self) -> None:
        self.store: RunStore = MemoryRunStore()
        self.clock = FakeClock()
        self.events = ListEventSink()
        self.gate: threading.Event | None = None
        self.wind_down: threading.Event | None = None
        self.lingering: list[WindingDown] = []
        self.built = 0

    def runtime(self, owner: str = "serve-test:1") -> AgentRuntime:
        return AgentRuntime(store=self.store, clock=self.clock, event_sinks=[self.events],
                            owner=owner, lease_seconds=30.0)

    def runtime_for(self, record: RunRecord) -> AgentRuntime:
        self.built += 1
        if self.gate is not None:
            assert self.gate.wait(TIMEOUT), "the test never opened the gate"
        if self.wind_down is not None and not self.lingering:
            self.lingering.append(WindingDown(self.wind_down, store=self.store, clock=self.clock,
                                              owner="serve-test:1", lease_seconds=30.0))
            return self.lingering[0]
        return self.runtime()

    def create(self, manifest: dict[str, Any] = TWO_STEPS) -> RunRecord:
        return self.runtime().create_run(manifest=manifest, options=ECHO)

    def status(self, run_id: str) -> RunStatus:
        record = self.store.load_run(run_id)
        assert record is not None
        return record.status


@pytest.fixture
def world() -> World:
    return World()


@pytest.fixture
def launcher(world: World) -> Iterator[LocalLauncher]:
    pool = LocalLauncher(world.store, world.runtime_for, workers=2, clock=world.clock)
    yield pool
    if world.gate is not None:
        world.gate.set()
    pool.shutdown(wait=True, timeout=TIMEOUT)


def settle(launcher: LocalLauncher) -> None:
    assert launcher.wait(TIMEOUT) == [], "jobs still executing"


def wait_until_set(check: Callable[[], bool]) -> bool:
    done = threading.Event()
    for _ in range(int(TIMEOUT / 0.01)):
        if check():
            done.set()
            break
        done.wait(0.01)
    return done.is_set()


def test_a_started_run_is_executed_by_a_worker(world: World, launcher: LocalLauncher) -> None:
    run = world.create()
    launcher.start(run)
    settle(launcher)
    record = world.store.load_run(run.run_id)
    assert record is not None and record.status is RunStatus.COMPLETED
    assert record.attempt == 1


def test_a_resume_is_recorded_then_executed(world: World, launcher: LocalLauncher) -> None:
    run = world.create(APPROVAL)
    launcher.start(run)
    settle(launcher)
    assert world.status(run.run_id) is RunStatus.SUSPENDED
    world.runtime().approve(run.run_id)
    launcher.resume(run, reason="approval", budget=Budget(max_total_tokens=10_000))
    settle(launcher)
    record = world.store.load_run(run.run_id)
    assert record is not None and record.status is RunStatus.COMPLETED
    assert record.resume_requested_at is None


def test_a_resume_asked_for_while_the_runs_job_winds_down_runs_after_it(
        world: World, launcher: LocalLauncher) -> None:
    world.wind_down = threading.Event()
    run = world.create(APPROVAL)
    launcher.start(run)
    assert wait_until_set(lambda: bool(world.lingering) and world.lingering[0].ended.is_set())
    assert world.status(run.run_id) is RunStatus.SUSPENDED
    assert launcher.running() == [run.run_id]  # the job has not returned yet
    world.runtime().approve(run.run_id)
    launcher.resume(run, reason="approval")
    world.wind_down.set()
    settle(launcher)
    record = world.store.load_run(run.run_id)
    assert record is not None and record.status is RunStatus.COMPLETED
    assert record.attempt == 2


def test_a_suspended_run_nobody_asked_to_resume_is_left_alone(
        world: World, launcher: LocalLauncher) -> None:
    run = world.create(APPROVAL)
    world.runtime().run_sync(run_id=run.run_id, resume=True)
    assert launcher.take_over(world.store.load_run(run.run_id))  # type: ignore[arg-type]
    settle(launcher)
    record = world.store.load_run(run.run_id)
    assert record is not None and record.status is RunStatus.SUSPENDED
    assert record.attempt == 1
    assert world.built == 0


def test_a_resume_request_that_the_pool_cannot_take_stays_for_the_reconciler(
        world: World) -> None:
    world.gate = threading.Event()
    pool = LocalLauncher(world.store, world.runtime_for, workers=1, max_queued=0,
                         clock=world.clock)
    try:
        suspended = world.create(APPROVAL)
        world.runtime().run_sync(run_id=suspended.run_id, resume=True)
        world.runtime().approve(suspended.run_id)
        blocker = world.create()
        pool.start(blocker)  # holds the only worker until the gate opens
        pool.resume(suspended, reason="approval")
        record = world.store.load_run(suspended.run_id)
        assert record is not None and record.status is RunStatus.SUSPENDED
        assert record.resume_requested_at is not None
        assert pool.running() == [blocker.run_id]
    finally:
        world.gate.set()
        pool.shutdown(wait=True, timeout=TIMEOUT)


def test_a_start_the_pool_cannot_take_leaves_the_run_created(
        world: World, caplog: pytest.LogCaptureFixture) -> None:
    world.gate = threading.Event()
    pool = LocalLauncher(world.store, world.runtime_for, workers=1, max_queued=1,
                         clock=world.clock)
    runs = [world.create() for _ in range(3)]
    try:
        with caplog.at_level(logging.WARNING, logger="agent_runtime.serve"):
            for run in runs:
                pool.start(run)
        assert sorted(pool.running()) == sorted(run.run_id for run in runs[:2])
        assert "left for the reconciler" in caplog.text
        world.gate.set()
        assert pool.wait(TIMEOUT) == []
    finally:
        world.gate.set()
        pool.shutdown(wait=True, timeout=TIMEOUT)
    assert [world.status(run.run_id) for run in runs] == \
        [RunStatus.COMPLETED, RunStatus.COMPLETED, RunStatus.CREATED]


def test_a_run_is_queued_once(world: World) -> None:
    world.gate = threading.Event()
    pool = LocalLauncher(world.store, world.runtime_for, workers=2, clock=world.clock)
    run = world.create()
    try:
        pool.start(run)
        pool.start(run)
        assert pool.running() == [run.run_id]
    finally:
        world.gate.set()
        pool.shutdown(wait=True, timeout=TIMEOUT)
    assert world.built == 1


def test_resuming_a_finished_run_does_nothing(world: World, launcher: LocalLauncher,
                                              caplog: pytest.LogCaptureFixture) -> None:
    run = world.create()
    launcher.start(run)
    settle(launcher)
    with caplog.at_level(logging.INFO, logger="agent_runtime.serve"):
        launcher.resume(run, reason="resume")
    settle(launcher)
    assert world.status(run.run_id) is RunStatus.COMPLETED
    assert "not resumed" in caplog.text
    assert world.built == 1


def test_a_run_someone_else_executes_is_left_to_them(world: World, launcher: LocalLauncher,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    run = world.create()
    world.store.resume_run(run.run_id, owner="elsewhere:7", now=world.clock.now(),
                           lease_seconds=30.0)
    with caplog.at_level(logging.INFO, logger="agent_runtime.serve"):
        launcher.start(run)
        settle(launcher)
    assert world.status(run.run_id) is RunStatus.RUNNING
    assert "another owner" in caplog.text
    assert "Traceback" not in caplog.text


def test_an_error_in_a_job_is_logged_with_its_traceback(
        world: World, caplog: pytest.LogCaptureFixture) -> None:
    def broken(record: RunRecord) -> AgentRuntime:
        raise RuntimeError("boom in the job")

    pool = LocalLauncher(world.store, broken, workers=1, clock=world.clock)
    run = world.create()
    with caplog.at_level(logging.ERROR, logger="agent_runtime.serve"):
        pool.start(run)
        assert pool.shutdown(wait=True, timeout=TIMEOUT) == []
    assert "the worker failed" in caplog.text
    assert "boom in the job" in caplog.text
    assert any(record.exc_info for record in caplog.records)
    assert world.status(run.run_id) is RunStatus.CREATED


def test_shutdown_drops_queued_runs_and_reports_executing_ones(world: World) -> None:
    world.gate = threading.Event()
    pool = LocalLauncher(world.store, world.runtime_for, workers=1, clock=world.clock)
    executing, queued = world.create(), world.create()
    pool.start(executing)
    pool.start(queued)
    assert wait_until_set(lambda: world.built == 1)  # the first job is executing
    assert pool.shutdown(wait=True, timeout=0.05) == [executing.run_id]
    pool.start(world.create())  # refused: stopping
    world.gate.set()
    assert pool.wait(TIMEOUT) == []
    assert world.status(executing.run_id) is RunStatus.COMPLETED
    assert world.status(queued.run_id) is RunStatus.CREATED


# -- the reconciler loop ----------------------------------------------------------


def dead_owner(run: RunRecord) -> OwnerStatus:
    if run.lease_owner == DEAD_OWNER:
        return OwnerStatus(Liveness.GONE, "its process is gone")
    return OwnerStatus(Liveness.ALIVE, "running")


def loop_for(world: World, launcher: LocalLauncher,
             liveness: Callable[[RunRecord], OwnerStatus] = dead_owner) -> ReconcileLoop:
    return ReconcileLoop(world.store, launcher, interval=30.0, clock=world.clock,
                         liveness=liveness, event_sinks=[world.events])


def test_a_pass_hands_a_run_whose_owner_died_to_a_worker(world: World,
                                                         launcher: LocalLauncher) -> None:
    run = world.create()
    world.store.resume_run(run.run_id, owner=DEAD_OWNER, now=world.clock.now(),
                           lease_seconds=30.0)
    loop = loop_for(world, launcher)
    summary = loop.pass_once()
    assert summary.counts()["candidates"] == 0  # the lease has not expired yet
    world.clock.advance(31)
    summary = loop.pass_once()
    assert summary.counts()["resumed"] == 1
    settle(launcher)
    record = world.store.load_run(run.run_id)
    assert record is not None and record.status is RunStatus.COMPLETED
    assert record.takeovers == 0  # taken over once, then progress reset the count


def test_a_pass_leaves_a_live_owners_run_alone(world: World, launcher: LocalLauncher) -> None:
    run = world.create()
    world.store.resume_run(run.run_id, owner="alive:2", now=world.clock.now(),
                           lease_seconds=30.0)
    world.clock.advance(31)
    summary = loop_for(world, launcher).pass_once()
    assert summary.counts()["skipped"] == 1
    settle(launcher)
    assert world.status(run.run_id) is RunStatus.RUNNING


def test_a_pass_starts_a_run_queued_too_long(world: World, launcher: LocalLauncher) -> None:
    run = world.create()
    world.clock.advance(61)
    summary = loop_for(world, launcher).pass_once()
    assert summary.counts()["resumed"] == 1
    settle(launcher)
    assert world.status(run.run_id) is RunStatus.COMPLETED


def test_a_pass_resumes_an_approved_run_nobody_resumed(world: World,
                                                       launcher: LocalLauncher) -> None:
    run = world.create(APPROVAL)
    world.runtime().run_sync(run_id=run.run_id, resume=True)
    world.runtime().approve(run.run_id)
    loop = loop_for(world, launcher)
    assert loop.resume_requested() == []  # the request is fresh: its own request may serve it
    world.clock.advance(10)
    assert loop.resume_requested() == [run.run_id]
    settle(launcher)
    assert world.status(run.run_id) is RunStatus.COMPLETED


def test_a_pass_does_not_queue_a_run_twice(world: World) -> None:
    world.gate = threading.Event()
    pool = LocalLauncher(world.store, world.runtime_for, workers=1, clock=world.clock)
    try:
        run = world.create()
        pool.start(run)
        world.clock.advance(61)
        summary = loop_for(world, pool).pass_once()
        assert summary.counts()["skipped"] == 1
        assert summary.outcomes[0].reason == "lost-race"
    finally:
        world.gate.set()
        pool.shutdown(wait=True, timeout=TIMEOUT)
    assert world.built == 1


def test_the_loop_runs_passes_until_stopped(world: World, launcher: LocalLauncher) -> None:
    passes = threading.Semaphore(0)
    loop = ReconcileLoop(world.store, launcher, interval=0.01, clock=world.clock,
                         liveness=dead_owner)
    original = loop.pass_once

    def counted() -> Any:
        try:
            return original()
        finally:
            passes.release()

    loop.pass_once = counted  # type: ignore[method-assign]
    loop.start()
    try:
        for _ in range(3):
            assert passes.acquire(timeout=TIMEOUT)
    finally:
        loop.stop(timeout=TIMEOUT)


def test_a_failing_pass_does_not_end_the_loop(world: World, launcher: LocalLauncher,
                                              caplog: pytest.LogCaptureFixture) -> None:
    calls = threading.Semaphore(0)
    loop = ReconcileLoop(world.store, launcher, interval=0.01, clock=world.clock)

    def failing() -> Any:
        calls.release()
        raise OSError("the store is briefly unavailable")

    loop.pass_once = failing  # type: ignore[method-assign]
    with caplog.at_level(logging.ERROR, logger="agent_runtime.serve"):
        loop.start()
        try:
            for _ in range(2):
                assert calls.acquire(timeout=TIMEOUT)
        finally:
            loop.stop(timeout=TIMEOUT)
    assert "the pass failed" in caplog.text


def test_the_interval_must_be_positive(world: World, launcher: LocalLauncher) -> None:
    with pytest.raises(ValueError):
        ReconcileLoop(world.store, launcher, interval=0)
