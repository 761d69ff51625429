"""FileRunStore specifics: durability, corruption, crash leftovers, process races.

The general contract is checked by the shared conformance suite; this file
covers what only a store on a filesystem can get wrong.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from stores import atomic_files, file, file_approvals
from stores.atomic_files import seal
from stores.base import (
    ApprovalConflict,
    CorruptRecord,
    InvalidTransition,
    LeaseHeld,
    RunAlreadyExists,
    RunNotFound,
    RunStore,
    StaleAttempt,
    StoreError,
    StoreUnavailable,
)
from stores.file import FileRunStore
from stores.memory import MemoryRunStore
from stores.records import Checkpoint, RunError, RunRecord, RunStatus

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def checkpoint(run_id: str, seq: int, attempt: int, *, entries: int | None = None,
               text: str = "entry") -> Checkpoint:
    count = seq if entries is None else entries
    return Checkpoint(run_id=run_id, seq=seq, attempt=attempt, manifest_hash="m",
                      transcript=[{"n": n, "text": text} for n in range(count)],
                      variables={"seq": seq}, created_at=at(seq))


def started(store: RunStore, run_id: str = "r1", *, seconds: float = 0) -> int:
    store.create_run(RunRecord(run_id=run_id, manifest_hash="m", created_at=at(seconds)))
    return store.resume_run(run_id, owner="me", now=at(seconds), lease_seconds=60).attempt


@pytest.fixture
def store(tmp_path: Path) -> Iterator[FileRunStore]:
    with FileRunStore(tmp_path / "store") as opened:
        yield opened


def run_dir(store: FileRunStore, run_id: str = "r1") -> Path:
    return store.path / "runs" / run_id


def all_names(root: Path) -> list[str]:
    return sorted(name for _, dirs, files in os.walk(root) for name in dirs + files)


# -- durability and layout --------------------------------------------------------


def test_data_survives_reopen(tmp_path: Path) -> None:
    with FileRunStore(tmp_path) as first:
        attempt = started(first)
        for seq in (1, 2, 3):
            first.save_checkpoint(checkpoint("r1", seq, attempt), expected_attempt=attempt)
        first.begin_effect("k1", run_id="r1", expected_attempt=attempt, at=at(4))
        first.complete_effect("k1", run_id="r1", expected_attempt=attempt, result={"ok": 1},
                              at=at(5))
        first.suspend_run("r1", expected_attempt=attempt, reason="approval",
                          details={"approval_id": "a1"}, at=at(6),
                          checkpoint=checkpoint("r1", 4, attempt))
        first.resolve_approval("r1", "a1", approved=True, response="yes", responded_by="bob",
                               at=at(7))
        before = (first.load_run("r1"), first.load_latest_checkpoint("r1"),
                  first.list_checkpoints("r1"), first.list_effects("r1"))
    with FileRunStore(tmp_path) as second:
        after = (second.load_run("r1"), second.load_latest_checkpoint("r1"),
                 second.list_checkpoints("r1"), second.list_effects("r1"))
        assert after == before
        assert after[1] == checkpoint("r1", 4, attempt)
        assert [info.seq for info in after[2]] == [1, 2, 3, 4]
        assert after[3][0].result == {"ok": 1}
        # The recorded answer still guards against a different one after reopening.
        with pytest.raises(ApprovalConflict):
            second.resolve_approval("r1", "a1", approved=False, response="no",
                                    responded_by="eve", at=at(8))


def test_layout_is_one_directory_per_run(store: FileRunStore) -> None:
    attempt = started(store)
    store.save_checkpoint(checkpoint("r1", 1, attempt), expected_attempt=attempt)
    store.begin_effect("k", run_id="r1", expected_attempt=attempt, at=at(1))
    assert sorted(os.listdir(run_dir(store))) == ["approvals", "checkpoints", "effects",
                                                  "run.json"]
    assert os.listdir(run_dir(store) / "checkpoints") == ["0000000001.json"]
    assert os.listdir(store.path / "locks") == ["r1"]
    assert (run_dir(store) / "run.json").stat().st_mode & 0o077 == 0


def test_unknown_ids_leave_nothing_behind(store: FileRunStore) -> None:
    assert store.load_run("ghost") is None
    assert store.load_latest_checkpoint("ghost") is None
    with pytest.raises(RunNotFound):
        store.list_checkpoints("ghost")
    store.delete_run("ghost")
    assert all_names(store.path) == ["locks", "runs"]


def test_no_temp_files_after_writes(store: FileRunStore) -> None:
    attempt = started(store)
    for seq in range(1, 6):
        store.save_checkpoint(checkpoint("r1", seq, attempt), expected_attempt=attempt)
    store.renew_lease("r1", expected_attempt=attempt, now=at(9), lease_seconds=5)
    store.begin_effect("k", run_id="r1", expected_attempt=attempt, at=at(9))
    store.complete_effect("k", run_id="r1", expected_attempt=attempt, result=1, at=at(9))
    store.complete_run("r1", expected_attempt=attempt, output="done", at=at(10))
    assert not [name for name in all_names(store.path) if name.endswith(".tmp")]


def test_a_failed_write_leaves_the_old_file_and_no_temp(store: FileRunStore,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    attempt = started(store)
    before = (run_dir(store) / "run.json").read_bytes()

    def broken_fsync(fd: int) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(atomic_files.os, "fsync", broken_fsync)
    with pytest.raises(StoreUnavailable, match="disk full"):
        store.renew_lease("r1", expected_attempt=attempt, now=at(5), lease_seconds=5)
    assert (run_dir(store) / "run.json").read_bytes() == before
    assert not [name for name in all_names(store.path) if name.endswith(".tmp")]


# -- corruption --------------------------------------------------------------------


def _flip(path: Path, offset_from_end: int = 5) -> None:
    data = bytearray(path.read_bytes())
    data[-offset_from_end] ^= 0x01
    path.write_bytes(bytes(data))


def _corruptible(store: FileRunStore) -> dict[str, tuple[Path, Callable[[], object]]]:
    attempt = started(store)
    store.save_checkpoint(checkpoint("r1", 1, attempt), expected_attempt=attempt)
    store.begin_effect("k", run_id="r1", expected_attempt=attempt, at=at(1))
    store.suspend_run("r1", expected_attempt=attempt, reason="approval",
                      details={"approval_id": "a1"}, at=at(2))
    store.resolve_approval("r1", "a1", approved=True, response=None, responded_by=None,
                           at=at(3))
    folder = run_dir(store)

    def answer_again() -> None:
        store.resolve_approval("r1", "a1", approved=True, response=None, responded_by=None,
                               at=at(4))

    return {
        "run": (folder / "run.json", lambda: store.load_run("r1")),
        "checkpoint": (folder / "checkpoints" / "0000000001.json",
                       lambda: store.load_latest_checkpoint("r1")),
        "checkpoint-list": (folder / "checkpoints" / "0000000001.json",
                            lambda: store.list_checkpoints("r1")),
        "effect": (next((folder / "effects").iterdir()), lambda: store.list_effects("r1")),
        "approval": (next((folder / "approvals").iterdir()), answer_again),
    }


@pytest.mark.parametrize("target", ["run", "checkpoint", "checkpoint-list", "effect",
                                    "approval"])
@pytest.mark.parametrize("damage", ["flip-body", "flip-header", "truncate", "empty",
                                    "append"])
def test_damaged_files_raise_corrupt_record_naming_the_file(
        store: FileRunStore, target: str, damage: str) -> None:
    path, read = _corruptible(store)[target]
    read()  # intact: fine
    data = path.read_bytes()
    if damage == "flip-body":
        _flip(path)
    elif damage == "flip-header":
        _flip(path, len(data) - 30)
    elif damage == "truncate":
        path.write_bytes(data[: len(data) * 2 // 3])
    elif damage == "empty":
        path.write_bytes(b"")
    else:
        path.write_bytes(data + b"x")
    with pytest.raises(CorruptRecord, match=str(path)):
        read()


def test_well_sealed_garbage_is_corrupt_not_defaulted(store: FileRunStore) -> None:
    attempt = started(store)
    store.save_checkpoint(checkpoint("r1", 1, attempt), expected_attempt=attempt)
    cp_path = run_dir(store) / "checkpoints" / "0000000001.json"
    cp_path.write_bytes(seal('{"format": "checkpoint-delta/1", "head": {}}',
                             {"run_id": "r1", "seq": 1}))
    with pytest.raises(CorruptRecord, match=f"{cp_path}.*does not assemble"):
        store.load_latest_checkpoint("r1")
    run_path = run_dir(store) / "run.json"
    run_path.write_bytes(seal('{"run_id": "r1"}', {"latest_seq": 1, "incarnation": "x",
                                                   "effects": 0}))
    with pytest.raises(CorruptRecord, match=f"{run_path}.*RunRecord"):
        store.load_run("r1")
    run_path.write_bytes(seal(RunRecord(run_id="r1", manifest_hash="m").model_dump_json(), {}))
    with pytest.raises(CorruptRecord, match="latest_seq"):
        store.load_run("r1")


def test_a_missing_committed_checkpoint_is_corrupt(store: FileRunStore) -> None:
    attempt = started(store)
    for seq in (1, 2):
        store.save_checkpoint(checkpoint("r1", seq, attempt), expected_attempt=attempt)
    (run_dir(store) / "checkpoints" / "0000000001.json").unlink()
    with pytest.raises(CorruptRecord, match="committed checkpoint 1 is missing"):
        store.load_latest_checkpoint("r1")


# -- crash leftovers -----------------------------------------------------------------


def _crash_before_run_json(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the next run.json write die as a killed process would: target untouched."""
    real = file.write_atomic

    def dying(path: Path, data: bytes) -> None:
        if path.name == "run.json":
            monkeypatch.setattr(file, "write_atomic", real)
            raise SystemExit("killed")
        real(path, data)

    monkeypatch.setattr(file, "write_atomic", dying)


def test_an_uncommitted_checkpoint_is_invisible_and_overwritten(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = FileRunStore(tmp_path)
    attempt = started(store)
    for seq in (1, 2):
        store.save_checkpoint(checkpoint("r1", seq, attempt), expected_attempt=attempt)
    _crash_before_run_json(monkeypatch)
    with pytest.raises(SystemExit):
        store.save_checkpoint(checkpoint("r1", 3, attempt, text="lost"),
                              expected_attempt=attempt)
    assert (run_dir(store) / "checkpoints" / "0000000003.json").exists()  # the orphan

    for reader in (store, FileRunStore(tmp_path)):
        assert reader.load_latest_checkpoint("r1") == checkpoint("r1", 2, attempt)
        assert reader.load_checkpoint("r1", 3) is None
        assert [info.seq for info in reader.list_checkpoints("r1")] == [1, 2]
        run = reader.load_run("r1")
        assert run is not None and run.checkpoint_seq == 2

    # The same attempt carries on (its process survived the failed write) ...
    kept = checkpoint("r1", 3, attempt, entries=1, text="kept")
    store.save_checkpoint(kept, expected_attempt=attempt)
    assert FileRunStore(tmp_path).load_latest_checkpoint("r1") == kept
    store.save_checkpoint(checkpoint("r1", 4, attempt, entries=2, text="kept"),
                          expected_attempt=attempt)
    assert FileRunStore(tmp_path).load_checkpoint("r1", 3) == kept


def test_a_state_change_with_its_checkpoint_commits_together(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = FileRunStore(tmp_path)
    attempt = started(store)
    store.save_checkpoint(checkpoint("r1", 1, attempt), expected_attempt=attempt)
    _crash_before_run_json(monkeypatch)
    with pytest.raises(SystemExit):
        store.complete_run("r1", expected_attempt=attempt, output="x", at=at(5),
                           checkpoint=checkpoint("r1", 2, attempt))
    reader = FileRunStore(tmp_path)
    run = reader.load_run("r1")
    assert run is not None and run.status is RunStatus.RUNNING
    assert reader.load_latest_checkpoint("r1") == checkpoint("r1", 1, attempt)
    # A new owner takes over: the crash leftovers are swept, the run goes on.
    (run_dir(store) / "effects" / ".k.json.0123.tmp").write_bytes(b"half")
    taken = reader.resume_run("r1", owner="next", now=at(100), lease_seconds=60,
                              allow_running_takeover=True).attempt
    assert os.listdir(run_dir(store) / "checkpoints") == ["0000000001.json"]
    assert not os.listdir(run_dir(store) / "effects")
    reader.complete_run("r1", expected_attempt=taken, output="y", at=at(101),
                        checkpoint=checkpoint("r1", 2, taken))
    assert FileRunStore(tmp_path).load_latest_checkpoint("r1") == checkpoint("r1", 2, taken)


def test_an_approval_lost_between_its_two_writes_is_restored(
        store: FileRunStore, monkeypatch: pytest.MonkeyPatch) -> None:
    attempt = started(store)
    store.suspend_run("r1", expected_attempt=attempt, reason="approval",
                      details={"approval_id": "a1"}, at=at(1))
    real = file_approvals.write_atomic

    def dying(path: Path, data: bytes) -> None:
        if path.parent.name == "approvals":
            raise SystemExit("killed")
        real(path, data)

    monkeypatch.setattr(file_approvals, "write_atomic", dying)
    with pytest.raises(SystemExit):
        store.resolve_approval("r1", "a1", approved=True, response=1, responded_by=None,
                               at=at(2))
    monkeypatch.setattr(file_approvals, "write_atomic", real)
    assert not os.listdir(run_dir(store) / "approvals")
    # run.json committed the answer: a different one is refused, the same is a no-op.
    with pytest.raises(ApprovalConflict):
        store.resolve_approval("r1", "a1", approved=False, response=1, responded_by=None,
                               at=at(3))
    store.resolve_approval("r1", "a1", approved=True, response=1, responded_by=None, at=at(3))
    assert len(os.listdir(run_dir(store) / "approvals")) == 1


def test_an_interrupted_delete_is_finished_on_open(tmp_path: Path) -> None:
    trash = tmp_path / "runs" / ".trash-0123"
    (trash / "checkpoints").mkdir(parents=True)
    FileRunStore(tmp_path)
    assert not trash.exists()


def test_a_crashed_create_does_not_block_the_id(store: FileRunStore) -> None:
    (run_dir(store) / "checkpoints").mkdir(parents=True)  # died before run.json
    assert store.load_run("r1") is None
    assert store.list_runs().runs == []
    started(store)
    assert store.list_runs().runs[0].run_id == "r1"


# -- run ids -------------------------------------------------------------------------


@pytest.mark.parametrize("run_id", ["", ".", "..", ".hidden", "a/b", "../up", "a\\b",
                                    "nul\0", "x..y", "x" * 201])
def test_unsafe_run_ids_are_refused(store: FileRunStore, run_id: str) -> None:
    with pytest.raises(ValueError, match="run id") as raised:
        store.create_run(RunRecord(run_id=run_id, manifest_hash="m"))
    assert repr(run_id) in str(raised.value)
    for call in (lambda: store.load_run(run_id), lambda: store.delete_run(run_id),
                 lambda: store.resume_run(run_id, owner="o", now=T0, lease_seconds=1),
                 lambda: store.save_checkpoint(checkpoint(run_id, 1, 1), expected_attempt=1)):
        with pytest.raises(ValueError, match="run id"):
            call()
    assert all_names(store.path) == ["locks", "runs"]


@pytest.mark.parametrize("run_id", ["run:1 é", "foo.lock", "a.b", "UPPER-lower_09", "x" * 200])
def test_unusual_but_safe_run_ids_work(store: FileRunStore, run_id: str) -> None:
    started(store, run_id)
    assert [run.run_id for run in store.list_runs().runs] == [run_id]


# -- deletion ------------------------------------------------------------------------


def test_delete_removes_everything_and_the_id_starts_fresh(store: FileRunStore) -> None:
    attempt = started(store)
    store.save_checkpoint(checkpoint("r1", 1, attempt), expected_attempt=attempt)
    with pytest.raises(InvalidTransition):
        store.delete_run("r1")
    store.cancel_run("r1", at=at(1))
    store.delete_run("r1")
    assert all_names(store.path) == ["locks", "runs"]
    attempt = started(store)
    assert store.load_latest_checkpoint("r1") is None
    store.save_checkpoint(checkpoint("r1", 1, attempt, text="new"), expected_attempt=attempt)
    assert store.load_latest_checkpoint("r1") == checkpoint("r1", 1, attempt, text="new")


def test_create_races_create_and_delete(tmp_path: Path) -> None:
    stores = [FileRunStore(tmp_path) for _ in range(8)]
    outcomes: list[str] = []

    def create(store: FileRunStore, barrier: threading.Barrier) -> None:
        barrier.wait()
        try:
            store.create_run(RunRecord(run_id="r1", manifest_hash="m"))
            outcomes.append("created")
        except RunAlreadyExists:
            outcomes.append("exists")

    def delete(store: FileRunStore, barrier: threading.Barrier) -> None:
        barrier.wait()
        store.delete_run("r1")

    for _ in range(5):
        outcomes.clear()
        barrier = threading.Barrier(len(stores))
        threads = [threading.Thread(target=create, args=(s, barrier)) for s in stores]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(outcomes) == ["created"] + ["exists"] * 7
        stores[0].cancel_run("r1", at=T0)
        # Delete and re-create at once: either order is fine, a mix never is.
        barrier = threading.Barrier(2)
        deleter = threading.Thread(target=delete, args=(stores[1], barrier))
        deleter.start()
        create(stores[2], barrier)
        deleter.join()
        run = stores[3].load_run("r1")
        assert (run is None) == (outcomes[-1] == "exists")
        if run is not None:
            assert run.status is RunStatus.CREATED
            stores[3].cancel_run("r1", at=T0)
        stores[3].delete_run("r1")


# -- fencing across instances and processes -------------------------------------------


def test_two_instances_fence_each_other(tmp_path: Path) -> None:
    first, second = FileRunStore(tmp_path), FileRunStore(tmp_path)
    old = started(first)
    first.save_checkpoint(checkpoint("r1", 1, old), expected_attempt=old)
    with pytest.raises(LeaseHeld):
        second.resume_run("r1", owner="b", now=at(1), lease_seconds=60)
    new = second.resume_run("r1", owner="b", now=at(61), lease_seconds=60,
                            allow_running_takeover=True).attempt
    with pytest.raises(StaleAttempt):
        first.save_checkpoint(checkpoint("r1", 2, old), expected_attempt=old)
    # The second instance extends differently; the first one's cached lists
    # (from seq 1) must not be trusted for seq 3.
    second.save_checkpoint(checkpoint("r1", 2, new, entries=1, text="b"), expected_attempt=new)
    third = first.resume_run("r1", owner="a", now=at(200), lease_seconds=60,
                             allow_running_takeover=True).attempt
    first.save_checkpoint(checkpoint("r1", 3, third, entries=2, text="b"),
                          expected_attempt=third)
    assert second.load_latest_checkpoint("r1") == checkpoint("r1", 3, third, entries=2,
                                                             text="b")


def test_a_cache_never_outlives_a_deleted_run(tmp_path: Path) -> None:
    first, second = FileRunStore(tmp_path), FileRunStore(tmp_path)
    attempt = started(first)
    first.save_checkpoint(checkpoint("r1", 1, attempt, text="old"), expected_attempt=attempt)
    first.cancel_run("r1", at=at(1))
    second.delete_run("r1")
    attempt = started(second)
    second.save_checkpoint(checkpoint("r1", 1, attempt, text="new"), expected_attempt=attempt)
    second.suspend_run("r1", expected_attempt=attempt, reason="wait", details={}, at=at(2))
    # `first` still caches seq 1 of the deleted run, which this save extends.
    attempt = first.resume_run("r1", owner="a", now=at(3), lease_seconds=60).attempt
    first.save_checkpoint(checkpoint("r1", 2, attempt, text="old"), expected_attempt=attempt)
    assert second.load_latest_checkpoint("r1") == checkpoint("r1", 2, attempt, text="old")


def test_a_waiter_on_a_deleted_lock_file_does_not_share_the_new_one(tmp_path: Path) -> None:
    lock = tmp_path / "lock"
    inside: list[str] = []
    waiter_opened, new_holder_in, release_new = (threading.Event() for _ in range(3))

    def waiter() -> None:
        waiter_opened.set()
        with atomic_files.locked(lock, shared=False, create=True):
            inside.append("waiter")

    def new_holder() -> None:
        with atomic_files.locked(lock, shared=False, create=True):
            inside.append("new")
            new_holder_in.set()
            release_new.wait(5)
            inside.append("new leaving")

    with atomic_files.locked(lock, shared=False, create=True):
        thread = threading.Thread(target=waiter)
        thread.start()
        waiter_opened.wait(5)
        time.sleep(0.2)  # the waiter is now blocked on the file about to be unlinked
        lock.unlink()
        other = threading.Thread(target=new_holder)
        other.start()
        new_holder_in.wait(5)
    time.sleep(0.2)  # the waiter wakes on the dead file; it must not get in now
    assert inside == ["new"]
    release_new.set()
    thread.join(5)
    other.join(5)
    assert inside == ["new", "new leaving", "waiter"]


def test_threads_sharing_one_instance_have_one_winner(store: FileRunStore) -> None:
    store.create_run(RunRecord(run_id="r1", manifest_hash="m"))
    barrier = threading.Barrier(8)
    results: list[str] = []

    def resume(owner: str) -> None:
        barrier.wait()
        try:
            store.resume_run("r1", owner=owner, now=T0, lease_seconds=60)
            results.append("won")
        except LeaseHeld:
            results.append("held")

    threads = [threading.Thread(target=resume, args=(f"t{n}",)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == ["held"] * 7 + ["won"]


ROUNDS = 10
RACERS = 8


def _racer(root: str, name: str, barrier: Any, results: Any) -> None:
    store = FileRunStore(root)
    for round_ in range(ROUNDS):
        barrier.wait()
        try:
            run = store.resume_run(f"race-{round_}", owner=name, now=T0, lease_seconds=60)
            outcome = f"won:{run.lease_owner}"
        except LeaseHeld:
            outcome = "held"
        except BaseException as error:
            outcome = f"error:{error!r}"
        results.put((round_, outcome))


@pytest.mark.slow
def test_resume_race_across_processes_has_exactly_one_winner(tmp_path: Path) -> None:
    store = FileRunStore(tmp_path)
    for round_ in range(ROUNDS):
        store.create_run(RunRecord(run_id=f"race-{round_}", manifest_hash="m"))
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(RACERS)
    results = context.Queue()
    processes = [context.Process(target=_racer, args=(str(tmp_path), f"p{n}", barrier, results))
                 for n in range(RACERS)]
    for process in processes:
        process.start()
    outcomes: dict[int, list[str]] = {round_: [] for round_ in range(ROUNDS)}
    for _ in range(ROUNDS * RACERS):
        round_, outcome = results.get(timeout=60)
        outcomes[round_].append(outcome)
    for process in processes:
        process.join(timeout=30)
        assert process.exitcode == 0
    for round_, seen in outcomes.items():
        winners = [outcome for outcome in seen if outcome.startswith("won:")]
        assert len(winners) == 1 and seen.count("held") == RACERS - 1, seen
        run = store.load_run(f"race-{round_}")
        assert run is not None and run.attempt == 1
        assert winners == [f"won:{run.lease_owner}"]


# -- delta storage -------------------------------------------------------------------


def test_checkpoint_storage_grows_with_the_work_not_its_square(store: FileRunStore) -> None:
    attempt = started(store)
    entry = "x" * 180
    transcript: list[dict[str, Any]] = []
    for seq in range(1, 301):
        transcript.append({"n": seq, "text": entry})
        store.save_checkpoint(
            Checkpoint(run_id="r1", seq=seq, attempt=attempt, manifest_hash="m",
                       transcript=list(transcript), created_at=at(seq)),
            expected_attempt=attempt)
    sizes = [info.size_bytes for info in store.list_checkpoints("r1")]
    assert sizes[299] <= 2 * sizes[9]
    latest = store.load_latest_checkpoint("r1")
    assert latest is not None and latest.transcript == transcript


def test_a_cached_save_reads_one_file_and_writes_two(store: FileRunStore,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    attempt = started(store)
    for seq in range(1, 51):
        store.save_checkpoint(checkpoint("r1", seq, attempt), expected_attempt=attempt)
    reads: list[str] = []
    writes: list[str] = []
    real_read, real_write = atomic_files.read_bytes, file.write_atomic
    monkeypatch.setattr(atomic_files, "read_bytes", lambda path: reads.append(path.name) or
                        real_read(path))
    monkeypatch.setattr(file, "write_atomic", lambda path, data: writes.append(path.name) or
                        real_write(path, data))
    store.save_checkpoint(checkpoint("r1", 51, attempt), expected_attempt=attempt)
    assert reads == ["run.json"]
    assert writes == ["0000000051.json", "run.json"]
    # A cold store falls back to reading the run's bodies once, then is cached again.
    cold = FileRunStore(store.path)
    reads.clear()
    cold.save_checkpoint(checkpoint("r1", 52, attempt), expected_attempt=attempt)
    assert len(reads) == 52
    reads.clear()
    cold.save_checkpoint(checkpoint("r1", 53, attempt), expected_attempt=attempt)
    assert reads == ["run.json"]


# -- same behaviour as the model store -------------------------------------------------


def _random_call(rng: random.Random, step: int,
                 model: MemoryRunStore) -> tuple[str, dict[str, Any]]:
    """A call that is valid often enough to reach deep states, and often wrong too."""
    run_id = rng.choice(["a", "b"])
    run = model.load_run(run_id)
    current = 0 if run is None else run.attempt
    attempt = current if rng.random() < 0.8 else rng.randint(0, 3)
    latest = 0 if run is None else len(model.list_checkpoints(run_id))
    seq = latest + 1 if rng.random() < 0.7 else rng.randint(1, latest + 2)
    previous = model.load_checkpoint(run_id, seq - 1)
    entries = (len(previous.transcript) if previous else 0) + rng.choice([0, 1, 1, 2, -1])
    cp = checkpoint(run_id, seq, attempt, entries=max(entries, 0))
    stored = model.load_checkpoint(run_id, seq)
    if stored is not None and rng.random() < 0.5:
        cp = stored.model_copy(update={"created_at": at(step)})  # an identical re-save
    now = at(step)
    finished = run is not None and run.status.terminal
    # (weight, method, arguments): mostly progress, some lifecycle ends, deletes
    # mainly of finished runs so the walk keeps reaching fresh runs.
    choices: list[tuple[float, str, dict[str, Any]]] = [
        (4 if run is None else 0.3, "create_run",
         {"run": RunRecord(run_id=run_id, manifest_hash="m", created_at=now)}),
        (2, "resume_run", {"run_id": run_id, "owner": "o", "now": now, "lease_seconds": 2,
                           "allow_running_takeover": rng.random() < 0.5}),
        (1, "renew_lease", {"run_id": run_id, "expected_attempt": attempt, "now": now,
                            "lease_seconds": 2}),
        (6, "save_checkpoint", {"checkpoint": cp, "expected_attempt": attempt}),
        (1, "suspend_run", {"run_id": run_id, "expected_attempt": attempt,
                            "reason": "approval", "details": {"approval_id": "x"}, "at": now,
                            "checkpoint": rng.choice([None, cp])}),
        (0.5, "complete_run", {"run_id": run_id, "expected_attempt": attempt, "output": seq,
                               "at": now, "checkpoint": rng.choice([None, cp])}),
        (0.3, "fail_run", {"run_id": run_id, "expected_attempt": attempt,
                           "error": RunError(type="E", message="m"), "at": now,
                           "checkpoint": rng.choice([None, cp])}),
        (0.3, "cancel_run", {"run_id": run_id, "at": now,
                             "expected_attempt": rng.choice([None, attempt])}),
        (1, "resolve_approval", {"run_id": run_id, "approval_id": "x",
                                 "approved": rng.random() < 0.5, "response": None,
                                 "responded_by": None, "at": now}),
        (2, "begin_effect", {"key": f"k{seq}", "run_id": run_id,
                             "expected_attempt": attempt, "at": now}),
        (2, "complete_effect", {"key": f"k{seq}", "run_id": run_id,
                                "expected_attempt": attempt, "result": rng.randint(0, 1),
                                "at": now}),
        (4 if finished else 0.2, "delete_run", {"run_id": run_id}),
        (1, "load_checkpoint", {"run_id": run_id, "seq": seq}),
        (1, "list_checkpoints", {"run_id": run_id}),
        (1, "list_effects", {"run_id": run_id}),
        (1, "list_runs", {"limit": 1, "cursor": rng.choice([None, "a"])}),
    ]
    _, name, kwargs = rng.choices(choices, weights=[choice[0] for choice in choices])[0]
    return name, kwargs


@pytest.mark.parametrize("seed", range(5))
def test_random_calls_behave_exactly_like_the_memory_store(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    model = MemoryRunStore()
    stores: list[RunStore] = [model, FileRunStore(tmp_path)]
    for step in range(400):
        name, kwargs = _random_call(rng, step, model)
        outcomes = []
        for store in stores:
            try:
                result = getattr(store, name)(**kwargs)
                if name == "list_checkpoints":  # what a checkpoint adds differs by medium
                    result = [info.model_copy(update={"size_bytes": 0}) for info in result]
                outcomes.append(("ok", result))
            except StoreError as error:
                outcomes.append(("error", type(error)))
        assert outcomes[0] == outcomes[1], (step, name, kwargs)
        for run_id in ("a", "b"):
            assert stores[0].load_run(run_id) == stores[1].load_run(run_id)
            assert (stores[0].load_latest_checkpoint(run_id)
                    == stores[1].load_latest_checkpoint(run_id))
