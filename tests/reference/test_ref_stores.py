"""Ports of packages/store-sqlite/src/index.test.ts and packages/store-local/src/
run-store.memory.test.ts / run-store.file.test.ts, on each of our local stores (memory,
file, SQLite). The full contract is stores/conformance; these are the reference's cases."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from reference_harness import Host, StandInChild, agent

from agent_runtime import RunStatus
from stores.base import (
    CheckpointConflict,
    LeaseHeld,
    RunAlreadyExists,
    RunStore,
    RunTerminal,
    StaleAttempt,
)
from stores.file import FileRunStore
from stores.memory import MemoryRunStore
from stores.records import Checkpoint, RunError, RunRecord
from stores.sqlite import SqliteRunStore

NOW = datetime(2026, 7, 22, tzinfo=UTC)
Opener = Callable[[], RunStore]


@pytest.fixture(params=["memory", "file", "sqlite"])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Opener:
    """Opens the same store again on each call (a new instance over the same data)."""
    if request.param == "memory":
        store = MemoryRunStore()
        return lambda: store
    if request.param == "file":
        return lambda: FileRunStore(tmp_path / "runs")
    return lambda: SqliteRunStore(tmp_path / "runs.sqlite")


def checkpoint(run_id: str, seq: int, attempt: int = 1, **extra: Any) -> Checkpoint:
    return Checkpoint(run_id=run_id, seq=seq, attempt=attempt, manifest_hash="sha256:test",
                      created_at=NOW, **extra)


def started(store: RunStore, run_id: str) -> None:
    store.create_run(RunRecord(run_id=run_id, manifest_hash="sha256:test"))
    store.resume_run(run_id, owner="first", now=NOW, lease_seconds=60)


def test_persists_runs_and_monotonically_sequenced_checkpoints_across_instances(
        opener: Opener, tmp_path: Path) -> None:
    """store-sqlite/src/index.test.ts: "persists runs and monotonically sequenced checkpoints
    across instances"."""
    first = opener()
    started(first, "run-1")
    first.save_checkpoint(checkpoint("run-1", 1, variables={"count": 1}), expected_attempt=1)
    first.save_checkpoint(checkpoint("run-1", 2, variables={"count": 2}), expected_attempt=1)
    first.save_checkpoint(checkpoint("run-1", 2, variables={"count": 2}), expected_attempt=1)
    with pytest.raises(CheckpointConflict, match="3"):
        first.save_checkpoint(checkpoint("run-1", 4), expected_attempt=1)
    second = opener()
    assert second.load_run("run-1") is not None
    latest = second.load_latest_checkpoint("run-1")
    assert latest is not None and (latest.seq, latest.variables) == (2, {"count": 2})
    database = tmp_path / "runs.sqlite"
    if database.exists():
        assert os.stat(database).st_mode & 0o777 == 0o600


def test_supports_core_failure_recovery_without_replaying_a_committed_step(
        opener: Opener) -> None:
    """store-sqlite/src/index.test.ts: "supports core failure recovery without replaying a
    committed step". Deliberate difference 1: the failed run is retried with `fork`."""
    fail_second = [True]

    def body(step: Any, variables: dict[str, Any]) -> int:
        if step.id == "second" and fail_second[0]:
            fail_second[0] = False
            raise RuntimeError("temporary failure")
        return int(variables.get("count") or 0) + 1

    stand_in = StandInChild(body)
    host = Host(child=stand_in, store=opener())
    manifest = agent({"id": "first", "type": "prompt", "prompt": "first",
                      "outputVariable": "count"},
                     {"id": "second", "type": "prompt", "prompt": "second",
                      "outputVariable": "count"})
    failed = host.run(manifest)
    assert failed.status is RunStatus.FAILED
    retried = asyncio.run(host.runtime.fork(failed.run_id))
    assert [call for call, _ in stand_in.calls] == ["first", "second", "second"]
    assert host.variables(retried.run_id)["count"] == 2


def test_rejects_duplicate_runs_and_conflicting_checkpoint_identities(opener: Opener) -> None:
    """store-sqlite/src/index.test.ts: "rejects duplicate runs and conflicting checkpoint
    identities"."""
    store = opener()
    started(store, "run-conflict")
    with pytest.raises(RunAlreadyExists):
        store.create_run(RunRecord(run_id="run-conflict", manifest_hash="sha256:test"))
    store.save_checkpoint(checkpoint("run-conflict", 1), expected_attempt=1)
    with pytest.raises(CheckpointConflict):
        store.save_checkpoint(checkpoint("run-conflict", 1, variables={"count": 99}),
                              expected_attempt=1)


def test_fences_checkpoint_and_terminal_mutations_from_a_superseded_attempt(
        opener: Opener) -> None:
    """store-sqlite/src/index.test.ts: "fences checkpoint and terminal mutations from a
    superseded attempt"; store-local run-store.memory.test.ts: "enforces checkpoint order,
    terminal immutability, and attempt fencing"."""
    store = opener()
    started(store, "run-fenced")
    store.save_checkpoint(checkpoint("run-fenced", 1), expected_attempt=1)
    with pytest.raises(LeaseHeld):
        store.resume_run("run-fenced", owner="second", now=NOW, lease_seconds=60)
    later = NOW + timedelta(seconds=61)
    taken = store.resume_run("run-fenced", owner="second", now=later, lease_seconds=60,
                             allow_running_takeover=True)
    assert taken.attempt == 2
    with pytest.raises(StaleAttempt):
        store.save_checkpoint(checkpoint("run-fenced", 2), expected_attempt=1)
    with pytest.raises(StaleAttempt):
        store.complete_run("run-fenced", expected_attempt=1, output=None, at=later)
    with pytest.raises(StaleAttempt):
        store.fail_run("run-fenced", expected_attempt=1,
                       error=RunError(type="stale", message="stale"), at=later)
    store.save_checkpoint(checkpoint("run-fenced", 2, attempt=2), expected_attempt=2)
    store.cancel_run("run-fenced", at=later, expected_attempt=2)
    with pytest.raises(RunTerminal):
        store.save_checkpoint(checkpoint("run-fenced", 3, attempt=2), expected_attempt=2)


def test_records_completed_and_failed_terminal_runs(opener: Opener) -> None:
    """store-local run-store.memory.test.ts: "records completed and failed terminal runs";
    run-store.file.test.ts: "persists terminal completion and failure records"."""
    store = opener()
    started(store, "done")
    store.complete_run("done", expected_attempt=1, output={"ok": True}, at=NOW)
    started(store, "broken")
    store.fail_run("broken", expected_attempt=1, error=RunError(type="boom", message="boom"),
                   at=NOW)
    reopened = opener()
    done, broken = reopened.load_run("done"), reopened.load_run("broken")
    assert done is not None and (done.status, done.output) == (RunStatus.COMPLETED,
                                                               {"ok": True})
    assert broken is not None and broken.status is RunStatus.FAILED
    assert broken.error is not None and broken.error.type == "boom"
    with pytest.raises(RunTerminal):
        reopened.complete_run("broken", expected_attempt=1, output=None, at=NOW)
