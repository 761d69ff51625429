"""`resume_run` is atomic across processes: of eight racing reservations exactly one wins.

What this proves, for `FileRunStore` and `SqliteRunStore`: eight OS processes,
each with its own store instance on the same directory or database file, are
released at once to reserve the same freshly created run, 50 times in a row.
Every time exactly one of them gets the new attempt, the other seven get
`LeaseHeld`, and nothing else happens (no `database is locked`, no
`OperationalError`, no corrupt read); afterwards the stored run is at attempt 1
and its lease belongs to the process that was told it won.

The workers are forked once per store and kept for all trials, so the test
costs a store call per process per trial rather than a process start. Each
worker opens its own store after the fork (an SQLite connection, or a file
lock, must never be shared across a fork), and the parent opens its store only
after forking, so no child inherits an open SQLite handle to the file.
"""

from __future__ import annotations

import multiprocessing
import queue
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from stores.base import LeaseHeld, RunStore
from stores.file import FileRunStore
from stores.records import RunRecord, RunStatus
from stores.sqlite import SqliteRunStore

RACERS = 8
TRIALS = 50
T0 = datetime(2025, 1, 1, tzinfo=UTC)
WAIT_SECONDS = 60.0  # how long anyone waits for the others: only a hang gets near it

# Store kind -> (how to open it, where it lives under the test's directory).
STORES: dict[str, tuple[Callable[[Path], RunStore], str]] = {
    "file": (FileRunStore, "file-store"),
    "sqlite": (SqliteRunStore, "runs.sqlite"),
}


def _run_id(trial: int) -> str:
    return f"race-{trial:03d}"


def _racer(kind: str, location: str, owner: str, barrier: Any, results: Any) -> None:
    """A worker: open its own store, then reserve the trial's run whenever released."""
    opener = STORES[kind][0]
    try:
        store = opener(Path(location))
    except BaseException as error:
        results.put(("ready", owner, repr(error)))
        return
    with store:
        results.put(("ready", owner, "ok"))
        for trial in range(TRIALS):
            try:
                barrier.wait(timeout=WAIT_SECONDS)
            except threading.BrokenBarrierError:
                return  # the parent gave up; it reports why
            try:
                run = store.resume_run(_run_id(trial), owner=owner, now=T0, lease_seconds=60)
            except LeaseHeld:
                outcome = "LeaseHeld"
            except BaseException as error:
                outcome = repr(error)
            else:
                outcome = "won" if (run.attempt, run.lease_owner) == (1, owner) else (
                    f"won, but was returned attempt {run.attempt} owned by {run.lease_owner!r}")
            results.put((trial, owner, outcome))


def _unexpected(outcomes: dict[int, dict[str, str]]) -> dict[int, dict[str, str]]:
    """The trials that did not end in one winner and seven `LeaseHeld`."""
    expected = sorted(["LeaseHeld"] * (RACERS - 1) + ["won"])
    return {trial: seen for trial, seen in outcomes.items()
            if sorted(seen.values()) != expected}


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(STORES))
def test_of_eight_processes_resuming_one_run_exactly_one_wins_every_time(
        kind: str, tmp_path: Path) -> None:
    opener, name = STORES[kind]
    location = tmp_path / name
    # Create the directory or database (and its schema) before the workers
    # start, and close it again: nothing open may be inherited by a fork.
    opener(location).close()

    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(RACERS + 1)  # the workers and the parent
    results = context.Queue()
    owners = [f"{kind}-racer-{n}" for n in range(RACERS)]
    workers = [context.Process(target=_racer, args=(kind, str(location), owner, barrier, results),
                               name=owner, daemon=True)
               for owner in owners]
    for worker in workers:
        worker.start()
    outcomes: dict[int, dict[str, str]] = {}
    try:
        ready = dict(results.get(timeout=WAIT_SECONDS)[1:] for _ in workers)
        assert ready == dict.fromkeys(owners, "ok"), f"a worker could not open its store: {ready}"
        with opener(location) as store:
            for trial in range(TRIALS):
                store.create_run(RunRecord(run_id=_run_id(trial), manifest_hash="sha256:race",
                                           created_at=T0))
                barrier.wait(timeout=WAIT_SECONDS)  # releases all eight at once
                seen: dict[str, str] = {}
                for _ in workers:
                    try:
                        got_trial, owner, outcome = results.get(timeout=WAIT_SECONDS)
                    except queue.Empty:
                        pytest.fail(f"trial {trial}: only {len(seen)} of {RACERS} workers "
                                    f"answered within {WAIT_SECONDS}s: {seen}")
                    assert got_trial == trial, (got_trial, owner, outcome)
                    seen[owner] = outcome
                outcomes[trial] = seen
    finally:
        barrier.abort()  # frees any worker still waiting, should a trial have failed
        for worker in workers:
            worker.join(timeout=WAIT_SECONDS)
            if worker.is_alive():
                worker.kill()
                worker.join()
        results.close()

    assert not _unexpected(outcomes), (
        f"{kind}: trials without exactly one winner and {RACERS - 1} LeaseHeld "
        f"(owner -> outcome): {_unexpected(outcomes)}")
    assert [worker.exitcode for worker in workers] == [0] * RACERS

    winners = {trial: next(owner for owner, outcome in seen.items() if outcome == "won")
               for trial, seen in outcomes.items()}
    with opener(location) as fresh:
        stored = {trial: fresh.load_run(_run_id(trial)) for trial in range(TRIALS)}
    wrong = {trial: None if run is None else (run.status.value, run.attempt, run.lease_owner)
             for trial, run in stored.items()
             if run is None or (run.status, run.attempt, run.lease_owner)
             != (RunStatus.RUNNING, 1, winners[trial])}
    assert not wrong, (f"{kind}: stored (status, attempt, lease owner) disagrees with the "
                       f"winner: {wrong}; winners: {winners}")
