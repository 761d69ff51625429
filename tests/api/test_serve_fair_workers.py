"""The workers of `serve` are shared fairly between tenants (issue 31, "Medium": two tenants'
long loops filled both workers and another tenant's run stayed `created` for 50 s).

In process, on a memory store: every job waits at a gate of its own until the test
lets it go, so which run a free worker takes next is exactly what the test says.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from agent_runtime import AgentRuntime, RunStatus
from agent_runtime.api.local_launcher import LocalLauncher
from agent_runtime.testing import FakeClock
from stores.memory import MemoryRunStore
from stores.records import RunRecord

TIMEOUT = 60.0
ONE_STEP: dict[str, Any] = {"schemaVersion": "1.0", "id": "one", "steps": [
    {"id": "ask", "type": "prompt", "prompt": "hi", "includeInFinalOutput": True}]}


class GatedRuns:
    """Runs whose jobs each wait for the test to release them; the order jobs started in."""

    def __init__(self) -> None:
        self.store = MemoryRunStore()
        self.clock = FakeClock()
        self.started: list[str] = []
        self.names: dict[str, str] = {}
        self.gates: dict[str, threading.Event] = {}
        self.changed = threading.Condition()

    def runtime(self) -> AgentRuntime:
        return AgentRuntime(store=self.store, clock=self.clock, owner="fair-test:1",
                            lease_seconds=30.0)

    def create(self, tenant: str, name: str) -> RunRecord:
        record = self.runtime().create_run(manifest=ONE_STEP, options={"model": "scripted/echo"},
                                           tenant=tenant)
        self.names[record.run_id] = name
        self.gates[record.run_id] = threading.Event()
        return record

    def runtime_for(self, record: RunRecord) -> AgentRuntime:
        with self.changed:
            self.started.append(self.names[record.run_id])
            self.changed.notify_all()
        assert self.gates[record.run_id].wait(TIMEOUT), "the test never released the run"
        return self.runtime()

    def release(self, run: RunRecord) -> None:
        self.gates[run.run_id].set()

    def wait_started(self, count: int) -> list[str]:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.started) >= count, TIMEOUT), \
                f"only {self.started} started"
            return list(self.started)

    def status(self, run: RunRecord) -> RunStatus:
        record = self.store.load_run(run.run_id)
        assert record is not None
        return record.status


@pytest.fixture
def runs() -> Iterator[GatedRuns]:
    gated = GatedRuns()
    yield gated
    for gate in gated.gates.values():
        gate.set()


def pool(runs: GatedRuns, **kwargs: Any) -> LocalLauncher:
    return LocalLauncher(runs.store, runs.runtime_for, clock=runs.clock, **kwargs)


def test_a_free_worker_takes_the_tenants_in_turn(runs: GatedRuns) -> None:
    launcher = pool(runs, workers=1)
    try:
        first = runs.create("alice", "a1")
        launcher.start(first)
        assert runs.wait_started(1) == ["a1"]
        queued = [runs.create("alice", "a2"), runs.create("alice", "a3"),
                  runs.create("bob", "b1"), runs.create("carol", "c1")]
        for run in queued:
            launcher.start(run)
        for run in [first, *queued]:
            runs.release(run)
        assert launcher.wait(TIMEOUT) == []
    finally:
        launcher.shutdown(wait=True, timeout=TIMEOUT)
    # alice was served last: bob and carol go before her next runs.
    assert runs.started == ["a1", "b1", "c1", "a2", "a3"]
    assert {runs.status(run) for run in [first, *queued]} == {RunStatus.COMPLETED}


def test_one_tenant_cannot_hold_every_worker(runs: GatedRuns) -> None:
    launcher = pool(runs, workers=3, tenant_workers=2)
    try:
        alices = [runs.create("alice", f"a{n}") for n in range(1, 5)]
        for run in alices:
            launcher.start(run)
        assert sorted(runs.wait_started(2)) == ["a1", "a2"]
        bob = runs.create("bob", "b1")
        launcher.start(bob)
        # The third worker was kept from alice: bob's run starts while hers wait.
        assert runs.wait_started(3)[2] == "b1"
        assert runs.status(alices[2]) is RunStatus.CREATED
        runs.release(alices[0])
        assert runs.wait_started(4)[3] == "a3"
        for run in [*alices, bob]:
            runs.release(run)
        assert launcher.wait(TIMEOUT) == []
    finally:
        launcher.shutdown(wait=True, timeout=TIMEOUT)


def test_a_tenants_full_queue_does_not_refuse_another_tenants_run(
        runs: GatedRuns, caplog: pytest.LogCaptureFixture) -> None:
    launcher = pool(runs, workers=1, max_queued=1)
    try:
        alices = [runs.create("alice", f"a{n}") for n in range(1, 4)]
        with caplog.at_level(logging.WARNING, logger="agent_runtime.serve"):
            for run in alices:
                launcher.start(run)
        assert "left for the reconciler" in caplog.text
        bob = runs.create("bob", "b1")
        launcher.start(bob)
        assert sorted(launcher.running()) == sorted(
            run.run_id for run in [alices[0], alices[1], bob])
        for run in [*alices, bob]:
            runs.release(run)
        assert launcher.wait(TIMEOUT) == []
    finally:
        launcher.shutdown(wait=True, timeout=TIMEOUT)
    # The refused run stays `created` in the store, for the reconciler.
    assert runs.status(alices[2]) is RunStatus.CREATED
    assert runs.status(bob) is RunStatus.COMPLETED


def test_stopping_drops_every_tenants_queued_runs_and_they_stay_in_the_store(
        runs: GatedRuns) -> None:
    launcher = pool(runs, workers=2, tenant_workers=1)
    executing = [runs.create("alice", "a1"), runs.create("bob", "b1")]
    queued = [runs.create("alice", "a2"), runs.create("bob", "b2")]
    for run in [*executing, *queued]:
        launcher.start(run)
    assert sorted(runs.wait_started(2)) == ["a1", "b1"]
    left = launcher.shutdown(wait=False)
    assert sorted(left) == sorted(run.run_id for run in executing)
    for run in [*executing, *queued]:
        runs.release(run)
    assert launcher.wait(TIMEOUT) == []
    assert [runs.status(run) for run in executing] == [RunStatus.COMPLETED] * 2
    assert [runs.status(run) for run in queued] == [RunStatus.CREATED] * 2
    assert sorted(runs.started) == ["a1", "b1"]


@pytest.mark.parametrize("tenant_workers", [0, 3])
def test_the_per_tenant_share_is_one_to_all_workers(runs: GatedRuns,
                                                    tenant_workers: int) -> None:
    with pytest.raises(ValueError, match="tenant_workers"):
        pool(runs, workers=2, tenant_workers=tenant_workers)
