"""`LocalLauncher` (how `agent-runtime serve` executes runs: asyncio tasks on its own event
loops, bounded by places), in process on a memory store with a fake clock and a model
whose answers wait for the test."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from launcher_world import APPROVAL, World, eventually, settle

from agent_runtime import AgentRuntime, RunStatus
from agent_runtime.api.local_launcher import SERVER_STOPPED
from agent_runtime.api.services import AtCapacity
from stores.records import Budget, RunRecord


@pytest.fixture
def world() -> Iterator[World]:
    built = World()
    yield built
    built.close()


def test_a_started_run_executes_at_once(world: World) -> None:
    launcher = world.launcher()
    run = world.create()
    launcher.start(run)
    settle(launcher)
    record = world.record(run.run_id)
    assert (record.status, record.attempt) == (RunStatus.COMPLETED, 1)


@pytest.mark.parametrize("loops", [1, 2])
def test_runs_waiting_on_their_model_wait_together(world: World, loops: int) -> None:
    launcher = world.launcher(loops=loops)
    world.model.gate.clear()
    runs = [world.create() for _ in range(50)]
    for run in runs:
        launcher.start(run)
    # Every run holds its model request at once: none waits for another to end.
    assert world.model.holding(50), f"only {world.model.in_flight} requests held at once"
    world.model.gate.set()
    settle(launcher)
    assert {world.status(run.run_id) for run in runs} == {RunStatus.COMPLETED}


def test_a_resume_is_recorded_then_executed(world: World) -> None:
    launcher = world.launcher()
    run = world.create(APPROVAL)
    launcher.start(run)
    settle(launcher)
    assert world.status(run.run_id) is RunStatus.SUSPENDED
    world.runtime().approve(run.run_id)
    launcher.resume(run, reason="approval", budget=Budget(max_total_tokens=10_000))
    settle(launcher)
    record = world.record(run.run_id)
    assert record.status is RunStatus.COMPLETED
    assert record.resume_requested_at is None


class WindingDown(AgentRuntime):
    """A runtime whose task lingers after the attempt ended (its run already suspended)."""

    def __init__(self, gate: threading.Event, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.gate = gate
        self.ended = threading.Event()

    async def resume_read(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        result = await super().resume_read(*args, **kwargs)
        self.ended.set()
        while not self.gate.is_set():
            await asyncio.sleep(0.005)
        return result


def test_a_resume_asked_for_while_the_runs_task_ends_runs_after_it(world: World) -> None:
    wind_down = threading.Event()
    lingering: list[WindingDown] = []

    def runtime_for(record: RunRecord) -> AgentRuntime:
        if not lingering:
            lingering.append(WindingDown(wind_down, store=world.store, clock=world.clock,
                                         owner="serve-test:1", lease_seconds=30.0,
                                         models={"gated": world.model}))
            return lingering[0]
        return world.runtime()

    launcher = world.launcher(runtime_for)
    run = world.create(APPROVAL)
    launcher.start(run)
    assert eventually(lambda: bool(lingering) and lingering[0].ended.is_set())
    assert world.status(run.run_id) is RunStatus.SUSPENDED
    assert launcher.running() == [run.run_id]  # its task has not ended yet
    world.runtime().approve(run.run_id)
    launcher.resume(run, reason="approval")
    wind_down.set()
    settle(launcher)
    record = world.record(run.run_id)
    assert (record.status, record.attempt) == (RunStatus.COMPLETED, 2)
    assert launcher.places.held() == 0


def test_a_suspended_run_nobody_asked_to_resume_is_left_alone(world: World) -> None:
    launcher = world.launcher()
    run = world.create(APPROVAL)
    world.runtime().run_sync(run_id=run.run_id, resume=True)
    assert launcher.take_over(world.record(run.run_id))
    settle(launcher)
    record = world.record(run.run_id)
    assert (record.status, record.attempt) == (RunStatus.SUSPENDED, 1)
    assert world.built == 0


def test_a_start_with_no_place_free_leaves_the_run_created_without_a_warning(
        world: World, caplog: pytest.LogCaptureFixture) -> None:
    launcher = world.launcher(max_runs=1)
    world.model.gate.clear()
    executing, refused = world.create(), world.create()
    with caplog.at_level(logging.INFO, logger="agent_runtime.serve"):
        launcher.start(executing)
        launcher.start(refused)
    assert launcher.running() == [executing.run_id]
    assert "no place free now" in caplog.text
    assert not [record for record in caplog.records if record.levelno >= logging.WARNING]
    world.model.gate.set()
    settle(launcher)
    assert world.status(executing.run_id) is RunStatus.COMPLETED
    assert world.status(refused.run_id) is RunStatus.CREATED  # for the reconciler


def test_a_request_holds_a_place_before_it_stores_anything(world: World) -> None:
    launcher = world.launcher(max_runs=2)
    world.model.gate.clear()
    with launcher.admit("alice"):
        run = world.create(tenant="alice")
        launcher.start(run)  # the run takes the request's place
    with launcher.admit("alice"):
        pass  # a request that failed before it started anything gives its place back
    assert launcher.places.held() == 1
    with launcher.admit("bob"):
        launcher.start(world.create(tenant="bob"))
    with pytest.raises(AtCapacity) as full:
        launcher.admit("carol")
    assert full.value.status == 429 and full.value.retry_after >= 1
    assert "--max-concurrent-runs" in full.value.detail
    world.model.gate.set()
    settle(launcher)
    assert launcher.places.held() == 0
    with launcher.admit("carol"):
        pass


def test_a_run_executes_once(world: World) -> None:
    launcher = world.launcher()
    world.model.gate.clear()
    run = world.create()
    launcher.start(run)
    launcher.start(run)
    assert launcher.running() == [run.run_id]
    world.model.gate.set()
    settle(launcher)
    assert world.built == 1
    assert world.record(run.run_id).attempt == 1


def test_resuming_a_finished_run_does_nothing(world: World,
                                              caplog: pytest.LogCaptureFixture) -> None:
    launcher = world.launcher()
    run = world.create()
    launcher.start(run)
    settle(launcher)
    with caplog.at_level(logging.INFO, logger="agent_runtime.serve"):
        launcher.resume(run, reason="resume")
    settle(launcher)
    assert world.status(run.run_id) is RunStatus.COMPLETED
    assert "not resumed" in caplog.text
    assert world.built == 1


def test_a_run_someone_else_executes_is_left_to_them(world: World,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    launcher = world.launcher()
    run = world.create()
    world.store.resume_run(run.run_id, owner="elsewhere:7", now=world.clock.now(),
                           lease_seconds=30.0)
    with caplog.at_level(logging.INFO, logger="agent_runtime.serve"):
        launcher.start(run)
        settle(launcher)
    assert world.status(run.run_id) is RunStatus.RUNNING
    assert "another owner" in caplog.text
    assert "Traceback" not in caplog.text


def test_a_runtime_that_cannot_be_built_is_logged_with_its_traceback_and_not_retried(
        world: World, caplog: pytest.LogCaptureFixture) -> None:
    def broken(record: RunRecord) -> AgentRuntime:
        world.built += 1
        raise RuntimeError("boom in the runtime")

    launcher = world.launcher(broken)
    run = world.create()
    with caplog.at_level(logging.ERROR, logger="agent_runtime.serve"):
        launcher.start(run)
        settle(launcher)
    assert "boom in the runtime" in caplog.text
    assert any(record.exc_info for record in caplog.records)
    assert world.built == 1
    assert world.status(run.run_id) is RunStatus.CREATED


def test_interrupted_runs_suspend_at_their_next_commit_point_with_a_resume_request(
        world: World) -> None:
    launcher = world.launcher()
    world.model.gate.clear()
    runs = [world.create() for _ in range(5)]
    for run in runs:
        launcher.start(run)
    assert world.model.holding(5)
    launcher.interrupt()
    with pytest.raises(AtCapacity) as stopping:
        launcher.admit("anyone")
    assert stopping.value.status == 503
    launcher.start(world.create())  # refused: stopping
    world.model.gate.set()  # the calls in flight end; no run starts another
    settle(launcher)
    for run in runs:
        record = world.record(run.run_id)
        assert record.status is RunStatus.SUSPENDED
        assert record.suspension is not None and record.suspension.reason == "interrupted"
        assert (record.resume_reason, record.lease_owner) == (SERVER_STOPPED, None)
    assert world.model.calls == 5  # the second step's request never started


def test_a_commit_the_store_refused_is_taken_over_again_once_the_store_takes_commits(
        world: World, caplog: pytest.LogCaptureFixture) -> None:
    launcher = world.launcher()
    world.model.gate.clear()
    run = world.create()
    launcher.start(run)
    assert world.model.holding(1)
    world.store.refusing.set()  # the disk fills while the model answers
    with caplog.at_level(logging.INFO, logger="agent_runtime.serve"):
        world.model.gate.set()
        # The first step's commit, the write failing the run, then this server's
        # takeovers: each refused, and the run stays `running`, this server's.
        assert eventually(lambda: world.store.refused >= 4)
        record = world.record(run.run_id)
        assert (record.status, record.lease_owner) == (RunStatus.RUNNING, "serve-test:1")
        assert launcher.running() == [run.run_id]
        world.store.refusing.clear()
        settle(launcher)
    record = world.record(run.run_id)
    assert (record.status, record.attempt) == (RunStatus.COMPLETED, 2)
    assert "attempt 1: the store refused its commit" in caplog.text


def test_the_loops_and_places_must_be_at_least_one(world: World) -> None:
    with pytest.raises(ValueError, match="event loop"):
        world.launcher(loops=0)
    with pytest.raises(ValueError, match="max_runs"):
        world.launcher(max_runs=0)
    with pytest.raises(ValueError, match="tenant_runs"):
        world.launcher(max_runs=2, tenant_runs=3)
