"""A group commit's leader wakes the writers it committed for on its own CPU when they
are our threads (a pool's workers, `serve`'s adopted request threads), and never pins
anyone else's (stores/thread_placement.py)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from stores.records import Checkpoint, RunRecord
from stores.sqlite import SqliteRunStore
from stores.thread_placement import Placement, adopt, ours
from tests.stores.sqlite_groups import HANG, together

NOW = datetime(2026, 1, 1, tzinfo=UTC)
RUNS = [f"r{index}" for index in range(5)]

pytestmark = pytest.mark.skipif(
    not Placement().active or len(os.sched_getaffinity(0)) < 2,
    reason="pins threads with Linux's sched_setaffinity, on a host with two CPUs or more")


def _started(store: SqliteRunStore) -> None:
    for run_id in RUNS:
        store.create_run(RunRecord(run_id=run_id, manifest_hash="sha256:m"))
        store.resume_run(run_id, owner="me", now=NOW, lease_seconds=600)


def _save(store: SqliteRunStore, run_id: str, *, as_ours: bool) -> Callable[[], Any]:
    """A save on its writer's thread, answering the CPUs that thread may use after it."""
    def save() -> set[int]:
        checkpoint = Checkpoint(run_id=run_id, seq=1, attempt=1, manifest_hash="sha256:m",
                                created_at=NOW)
        if as_ours:
            with ours():
                store.save_checkpoint(checkpoint, expected_attempt=1)
        else:
            store.save_checkpoint(checkpoint, expected_attempt=1)
        return os.sched_getaffinity(0)
    return save


def test_a_leader_wakes_the_pool_threads_it_committed_for_on_its_own_cpu(
        tmp_path: Path) -> None:
    allowed = os.sched_getaffinity(0)
    with SqliteRunStore(tmp_path / "runs.sqlite") as store:
        _started(store)
        outcomes = together(store, [_save(store, run_id, as_ours=True) for run_id in RUNS])
    masks = [outcome.result() for outcome in outcomes]
    # The first writer queued leads: its thread is never woken, so never pinned.
    # Every other is woken by it, onto the one CPU it runs on.
    assert masks[0] == allowed
    assert all(len(mask) == 1 and mask <= allowed for mask in masks[1:]), masks


def test_a_leader_never_pins_a_thread_that_is_not_ours(tmp_path: Path) -> None:
    allowed = os.sched_getaffinity(0)
    with SqliteRunStore(tmp_path / "runs.sqlite") as store:
        _started(store)
        outcomes = together(store, [_save(store, run_id, as_ours=False) for run_id in RUNS])
    assert [outcome.result() for outcome in outcomes] == [allowed] * len(RUNS)


def test_an_adopted_executor_thread_is_ours_for_its_life_and_no_other_is() -> None:
    """`serve` adopts its request threads (their executor's initializer): they create
    runs, so a group commit may wake them on its leader's CPU."""
    placement = Placement()
    allowed = os.sched_getaffinity(0)

    def pinned_here() -> set[int]:
        placement.pin_ours(threading.current_thread())
        mask = os.sched_getaffinity(0)
        os.sched_setaffinity(0, allowed)
        return mask

    with ThreadPoolExecutor(max_workers=1, initializer=adopt) as adopted, \
            ThreadPoolExecutor(max_workers=1) as foreign:
        for _ in range(3):
            assert len(adopted.submit(pinned_here).result(timeout=HANG)) == 1
            assert foreign.submit(pinned_here).result(timeout=HANG) == allowed
