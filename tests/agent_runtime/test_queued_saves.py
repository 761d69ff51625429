"""A runtime's checkpoint saved through a store pool is queued from the event loop when its
store queues saves (`QueuesCheckpoints`, the SQLite store): no pool thread waits for its
commit, the caller hears once it committed, and the run's store calls keep their order.
A store whose `save_checkpoint` a subclass or a wrapper changed is called through it."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agent_runtime.crash_kit import DyingStore
from agent_runtime.store_thread import StorePool, StoreThread, queues_saves
from stores.base import Settlement, StaleAttempt
from stores.records import Checkpoint, RunRecord
from stores.sqlite import SqliteRunStore

NOW = datetime(2026, 1, 1, tzinfo=UTC)
HANG = 60.0  # seconds: a wait this long means a hang, not a slow machine


def _checkpoint(run_id: str, seq: int) -> Checkpoint:
    return Checkpoint(run_id=run_id, seq=seq, attempt=1, manifest_hash="sha256:m",
                      transcript=[{"n": index} for index in range(seq)],
                      created_at=NOW + timedelta(seconds=seq))


def _owned(store: SqliteRunStore, *run_ids: str) -> None:
    for run_id in run_ids:
        store.create_run(RunRecord(run_id=run_id, manifest_hash="sha256:m"))
        store.resume_run(run_id, owner="me", now=NOW, lease_seconds=600)


def _committed_seq(path: Path, run_id: str) -> int | None:
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        row = conn.execute("SELECT max(seq) FROM checkpoints WHERE run_id = ?",
                           (run_id,)).fetchone()
    return None if row is None else row[0]


async def _save(lane: StoreThread, store: Any, checkpoint: Checkpoint) -> None:
    await lane.save_checkpoint(store, checkpoint, expected_attempt=1,
                               lease_expires_at=NOW + timedelta(seconds=600))


@pytest.fixture
def pool() -> Iterator[StorePool]:
    """The store pool of a host (serve's), shut down after the test."""
    shared = StorePool(2)
    try:
        yield shared
    finally:
        shared.shutdown()


class CountedSaves(SqliteRunStore):
    """A store whose `save_checkpoint` a subclass changed (as a fault injector does)."""

    saves = 0

    def save_checkpoint(self, checkpoint: Checkpoint, *, expected_attempt: int,
                        lease_expires_at: datetime | None = None) -> None:
        type(self).saves += 1
        super().save_checkpoint(checkpoint, expected_attempt=expected_attempt,
                                lease_expires_at=lease_expires_at)


def test_saves_through_a_pool_are_queued_and_no_pool_thread_waits(tmp_path: Path,
                                                                   pool: StorePool) -> None:
    path = tmp_path / "runs.sqlite"
    runs = [f"r{index}" for index in range(8)]

    async def main(store: SqliteRunStore) -> None:
        lanes = [StoreThread(pool=pool) for _ in runs]
        for seq in (1, 2, 3):
            await asyncio.gather(*(_save(lane, store, _checkpoint(run_id, seq))
                                   for lane, run_id in zip(lanes, runs, strict=True)))
            # Heard only once committed: another connection sees each.
            assert {run_id: _committed_seq(path, run_id) for run_id in runs} == \
                dict.fromkeys(runs, seq)

    with SqliteRunStore(path) as store:
        _owned(store, *runs)
        asyncio.run(main(store))
        assert pool._workers.workers == 0  # no call went to a pool thread
        assert store.load_latest_checkpoint("r3") == _checkpoint("r3", 3)


def test_a_refused_queued_save_raises_the_stores_own_error(tmp_path: Path, pool: StorePool) -> None:
    path = tmp_path / "runs.sqlite"
    with SqliteRunStore(path) as store:
        _owned(store, "r0")
        store.save_checkpoint(_checkpoint("r0", 1), expected_attempt=1)
        with SqliteRunStore(path) as other:  # another process takes r0 over
            other.resume_run("r0", owner="them", now=NOW + timedelta(seconds=900),
                             lease_seconds=600, allow_running_takeover=True)
        with pytest.raises(StaleAttempt):
            asyncio.run(_save(StoreThread(pool=pool), store, _checkpoint("r0", 2)))
        assert _committed_seq(path, "r0") == 1


def test_a_changed_save_checkpoint_is_called_not_bypassed(tmp_path: Path, pool: StorePool) -> None:
    with CountedSaves(tmp_path / "counted.sqlite") as counted, \
            SqliteRunStore(tmp_path / "plain.sqlite") as plain:
        _owned(counted, "r0")
        assert not queues_saves(counted)
        assert not queues_saves(DyingStore(plain))  # the crash kit's wrapper
        assert queues_saves(plain)
        asyncio.run(_save(StoreThread(pool=pool), counted, _checkpoint("r0", 1)))
        assert CountedSaves.saves == 1
        assert counted.load_latest_checkpoint("r0") == _checkpoint("r0", 1)


def test_a_runs_next_store_call_waits_for_its_queued_save(tmp_path: Path, pool: StorePool) -> None:
    path = tmp_path / "runs.sqlite"
    seen: list[int | None] = []

    def next_call() -> None:  # the run's next store call, made on a pool thread
        seen.append(_committed_seq(path, "r0"))

    async def main(store: SqliteRunStore) -> None:
        lane = StoreThread(pool=pool)
        with store._lock:  # the save's transaction cannot begin yet
            saving = asyncio.create_task(_save(lane, store, _checkpoint("r0", 1)))
            await asyncio.sleep(0)  # queued
            calling = asyncio.create_task(lane.call(next_call))
            for _ in range(20):
                await asyncio.sleep(0)
            assert seen == []  # it waits in the run's lane
        await asyncio.wait_for(asyncio.gather(saving, calling), HANG)

    with SqliteRunStore(path) as store:
        _owned(store, "r0")
        asyncio.run(main(store))
    assert seen == [1]  # made once the save had committed


def test_a_cancelled_caller_sees_its_queued_save_end_first(tmp_path: Path, pool: StorePool) -> None:
    path = tmp_path / "runs.sqlite"

    async def main(store: SqliteRunStore) -> int | None:
        lane = StoreThread(pool=pool)
        store._lock.acquire()  # the save's transaction cannot begin yet
        released = False
        try:
            saving = asyncio.create_task(_save(lane, store, _checkpoint("r0", 1)))
            await asyncio.sleep(0)  # queued
            saving.cancel()
            for _ in range(20):
                await asyncio.sleep(0)
            assert not saving.done()  # it cannot be taken back: it waits for its end
            store._lock.release()
            released = True
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(saving, HANG)
            return _committed_seq(path, "r0")
        finally:
            if not released:
                store._lock.release()

    with SqliteRunStore(path) as store:
        _owned(store, "r0")
        assert asyncio.run(main(store)) == 1  # the save landed before the caller went on


def test_without_a_pool_the_save_is_made_on_the_runtimes_store_thread(tmp_path: Path) -> None:
    # A runtime of its own (the CLI's) waits for its commit on its store thread,
    # where the save leads its own transaction: the store's committer never starts.
    path = tmp_path / "runs.sqlite"
    with SqliteRunStore(path) as store:
        _owned(store, "r0")
        asyncio.run(_save(StoreThread(), store, _checkpoint("r0", 1)))
        assert store._commits._committer is None
        assert _committed_seq(path, "r0") == 1


def test_a_settling_save_through_a_pool_is_queued_too(tmp_path: Path, pool: StorePool) -> None:
    path = tmp_path / "runs.sqlite"

    async def main(store: SqliteRunStore) -> None:
        lane = StoreThread(pool=pool)
        await lane.save_checkpoint_settling(store, _checkpoint("r0", 1), [],
                                            expected_attempt=1, at=NOW, lease_expires_at=None,
                                            reservations=["call-1"])
        await lane.save_checkpoint_settling(store, _checkpoint("r0", 2),
                                            [Settlement("call-1", "done")], expected_attempt=1,
                                            at=NOW, lease_expires_at=None, reservations=())

    with SqliteRunStore(path) as store:
        _owned(store, "r0")
        asyncio.run(main(store))
        assert pool._workers.workers == 0  # no call went to a pool thread
        [effect] = store.list_effects("r0")
        assert effect.result == "done"
        assert _committed_seq(path, "r0") == 2
