"""The reconciler loop of `agent-runtime serve` (`ReconcileLoop`), in process on a memory
store with a fake clock: what a pass hands to the launcher, and what it leaves alone."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from launcher_world import APPROVAL, OWNER, World, settle

from agent_runtime import RunStatus
from agent_runtime.api.local_launcher import LocalLauncher
from agent_runtime.api.local_reconcile import ReconcileLoop
from agent_runtime.reconcile import Liveness, OwnerStatus
from stores.records import RunRecord

TIMEOUT = 60.0
DEAD_OWNER = "gone-host:1"


@pytest.fixture
def world() -> Iterator[World]:
    built = World()
    yield built
    built.close()


@pytest.fixture
def launcher(world: World) -> LocalLauncher:
    return world.launcher()


def dead_owner(run: RunRecord) -> OwnerStatus:
    if run.lease_owner == DEAD_OWNER:
        return OwnerStatus(Liveness.GONE, "its process is gone")
    return OwnerStatus(Liveness.ALIVE, "running")


def loop_for(world: World, launcher: LocalLauncher,
             liveness: Callable[[RunRecord], OwnerStatus] = dead_owner) -> ReconcileLoop:
    return ReconcileLoop(world.store, launcher, interval=30.0, clock=world.clock,
                         liveness=liveness, event_sinks=[world.events])


def later_pass(world: World, launcher: LocalLauncher) -> ReconcileLoop:
    """A loop whose first pass (which takes every pending request and queued run at
    once) is behind it."""
    loop = loop_for(world, launcher)
    loop.pass_once()
    return loop


def test_a_run_whose_owner_died_is_taken_over_at_once_without_waiting_for_its_lease(
        world: World, launcher: LocalLauncher) -> None:
    run = world.create()
    world.store.resume_run(run.run_id, owner=DEAD_OWNER, now=world.clock.now(),
                           lease_seconds=3600.0)
    summary = loop_for(world, launcher).pass_once()
    assert summary.counts()["resumed"] == 1  # the clock never moved
    settle(launcher)
    record = world.record(run.run_id)
    assert (record.status, record.attempt) == (RunStatus.COMPLETED, 2)
    assert record.takeovers == 0  # taken over once, then progress reset the count


def test_a_live_owners_run_is_left_alone(world: World, launcher: LocalLauncher) -> None:
    run = world.create()
    world.store.resume_run(run.run_id, owner="alive:2", now=world.clock.now(),
                           lease_seconds=30.0)
    world.clock.advance(31)
    summary = loop_for(world, launcher).pass_once()
    assert summary.counts()["skipped"] == 1
    settle(launcher)
    assert world.status(run.run_id) is RunStatus.RUNNING


def test_a_run_this_server_holds_but_no_longer_executes_is_taken_over(
        world: World, launcher: LocalLauncher) -> None:
    run = world.create()
    # This server's lease, from an attempt that ended without releasing it.
    world.store.resume_run(run.run_id, owner=OWNER, now=world.clock.now(), lease_seconds=30.0)
    summary = loop_for(world, launcher).pass_once()
    assert summary.counts()["resumed"] == 1
    settle(launcher)
    assert world.status(run.run_id) is RunStatus.COMPLETED


def test_a_run_executing_here_is_left_to_its_task(world: World,
                                                  launcher: LocalLauncher) -> None:
    world.model.gate.clear()
    run = world.create()
    launcher.start(run)
    assert world.model.holding(1)
    loop = loop_for(world, launcher)
    assert loop.pass_once().outcomes == []  # its lease is live, its owner is here
    world.clock.advance(31)
    summary = loop.pass_once()
    [outcome] = summary.outcomes
    assert (outcome.action.value, outcome.reason) == ("skipped", "owner-alive")
    assert outcome.detail == "executing on this server"
    world.model.gate.set()
    settle(launcher)
    assert world.record(run.run_id).attempt == 1


def test_the_first_pass_starts_queued_runs_and_pending_resumes_at_once(
        world: World, launcher: LocalLauncher) -> None:
    queued = world.create()
    approved = world.create(APPROVAL)
    world.runtime().run_sync(run_id=approved.run_id, resume=True)
    world.runtime().approve(approved.run_id)
    world.clock.advance(1)  # this server starts a moment later
    summary = loop_for(world, launcher).pass_once()
    assert summary.counts()["resumed"] == 2  # the server that made them is gone
    settle(launcher)
    assert {world.status(run.run_id) for run in (queued, approved)} == {RunStatus.COMPLETED}


def test_the_first_pass_leaves_runs_queued_since_the_server_started_to_their_requests(
        world: World, launcher: LocalLauncher) -> None:
    left = world.create()  # by a server that is gone
    world.clock.advance(1)
    started = world.clock.now()  # the server starts: under --processes, its supervisor
    world.clock.advance(1)
    # A sibling process's request queued this one, and starts it itself: a child
    # whose first pass comes late must not race it for the run (and a place).
    sibling = world.create()
    loop = ReconcileLoop(world.store, launcher, interval=30.0, clock=world.clock,
                         liveness=dead_owner, event_sinks=[world.events], started=started)
    assert [outcome.run_id for outcome in loop.pass_once().outcomes] == [left.run_id]
    settle(launcher)
    assert world.status(left.run_id) is RunStatus.COMPLETED
    assert world.status(sibling.run_id) is RunStatus.CREATED


def test_later_passes_leave_fresh_requests_and_new_runs_to_their_own_requests(
        world: World, launcher: LocalLauncher) -> None:
    loop = later_pass(world, launcher)
    run = world.create()
    approved = world.create(APPROVAL)
    world.runtime().run_sync(run_id=approved.run_id, resume=True)
    world.runtime().approve(approved.run_id)
    assert loop.pass_once().counts()["candidates"] == 0
    world.clock.advance(10)
    assert loop.resume_requested() == [approved.run_id]
    world.clock.advance(61)
    assert loop.pass_once().counts()["resumed"] == 1  # queued too long: started
    settle(launcher)
    assert {world.status(one.run_id) for one in (run, approved)} == {RunStatus.COMPLETED}


def test_a_run_with_no_place_free_is_skipped_for_a_later_pass_not_an_error(
        world: World, caplog: pytest.LogCaptureFixture) -> None:
    launcher = world.launcher(max_runs=1)
    world.model.gate.clear()
    busy = world.create()
    launcher.start(busy)
    assert world.model.holding(1)
    stranded = world.create()
    world.store.resume_run(stranded.run_id, owner=DEAD_OWNER, now=world.clock.now(),
                           lease_seconds=30.0)
    queued = world.create()
    with caplog.at_level(logging.INFO, logger="agent_runtime.serve"):
        summary = loop_for(world, launcher).pass_once()
    outcomes = {outcome.run_id: outcome for outcome in summary.outcomes}
    assert outcomes[stranded.run_id].reason == "no-room"
    assert queued.run_id not in outcomes  # not even listed: the pass had no room
    assert summary.deferred is not None
    assert summary.counts()["errors"] == 0
    assert not [record for record in caplog.records if record.levelno >= logging.WARNING]
    world.model.gate.set()
    settle(launcher)
    world.clock.advance(61)
    # A place again: the stranded run first (a takeover needs no room), the
    # queued one when a pass finds the place free again (this one, or the next).
    loop = loop_for(world, launcher)
    resumed = 0
    for _ in range(2):
        resumed += loop.pass_once().counts()["resumed"]
        settle(launcher)
    assert resumed == 2
    assert {world.status(run.run_id) for run in (stranded, queued)} == {RunStatus.COMPLETED}


def test_a_pass_does_not_hand_over_a_run_executing_here(world: World,
                                                        launcher: LocalLauncher) -> None:
    world.model.gate.clear()
    run = world.create()
    launcher.start(run)
    world.clock.advance(61)
    summary = later_pass(world, launcher).pass_once()
    assert all(outcome.action.value == "skipped" for outcome in summary.outcomes)
    world.model.gate.set()
    settle(launcher)
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
