"""A process killed with SIGKILL while saving checkpoints never leaves a store unreadable.

What this proves, for `FileRunStore` and `SqliteRunStore`, 100 kills each: a
forked child opens its own store, reserves the run (taking over the previous,
dead attempt), loads the latest checkpoint and saves checkpoints seq + 1,
seq + 2, ... as fast as it can, until the parent kills it with SIGKILL after a
random delay (seeded; 0-40 ms after the child says it has opened its store, so
kills land while it reserves, while it loads, before its first save and in the
middle of a stream of saves). Then, every time, a fresh store instance on the
same path:

* loads the run, its latest checkpoint and the checkpoint list without error;
* finds as latest a checkpoint that was completely saved: equal, field for
  field (all but `created_at`), to the deterministic checkpoint of its seq and
  of the attempt that saved it, with every seq from 1 to it listed, and an
  earlier one loading intact too;
* finds the run record agreeing with it: `checkpoint_seq`, `consumed_tokens`,
  and the lease renewed in the same write, or the record exactly as it was
  when the kill came before the reservation committed;
* takes the run over with a new attempt (its lease long expired), saves
  seq + 1 and loads it back.

Each run goes through four kills, so recovery is also proven to compose: every
child continues a run whose previous owner was killed. Runs share one
directory or database file, and at the end every run is checked again, so a
crash never damages another run either. The File store must show no torn
file under a name it reads (only temp files may be partial, and the next
reservation removes them); the SQLite file must pass `integrity_check`.
"""

from __future__ import annotations

import contextlib
import os
import random
import select
import signal
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from stores.atomic_files import is_temp, read_bytes, unseal
from stores.base import CorruptRecord, RunStore
from stores.file import FileRunStore
from stores.records import Checkpoint, CheckpointBudget, Frame, RunRecord, RunStatus
from stores.sqlite import SqliteRunStore

KILLS = 100
KILLS_PER_RUN = 4
MAX_DELAY_SECONDS = 0.040
LEASE_SECONDS = 60
CHILD_LIMIT_SECONDS = 30.0  # a child saves until killed; this only bounds a lost one
MANIFEST_HASH = "sha256:crash"
T0 = datetime(2025, 1, 1, tzinfo=UTC)

# Store kind -> (how to open it, where it lives under the test's directory).
STORES: dict[str, tuple[Callable[[Path], RunStore], str]] = {
    "file": (FileRunStore, "file-store"),
    "sqlite": (SqliteRunStore, "runs.sqlite"),
}


# -- the deterministic checkpoints -------------------------------------------------

def _entry(n: int) -> dict[str, Any]:
    """Transcript entry n, about 200 bytes."""
    return {"role": "assistant", "seq": n, "text": f"entry {n}: " + "w" * 170}


def _checkpoint(run_id: str, seq: int, attempt: int,
                transcript: list[dict[str, Any]] | None = None) -> Checkpoint:
    """What checkpoint `seq` of a run holds when `attempt` saved it.

    The transcript grows by one entry per seq, step results by one every fifth
    seq, the variables change every fourth seq, and the cursor and budget name
    the seq, so every part of a stored body is exercised. A child passes the
    transcript it continued from its loaded checkpoint, as an engine does.
    """
    return Checkpoint(
        run_id=run_id, seq=seq, attempt=attempt, manifest_hash=MANIFEST_HASH,
        cursor=[Frame(step_path="work", step_id="work", step_index=0, child_index=0),
                Frame(step_path=f"work/{seq}/save", step_id="save", step_index=0,
                      loop_iteration=seq, continuation={"seq": seq, "phase": "saved"})],
        variables={"stage": seq // 4},
        step_results=[{"step": "save", "seq": n} for n in range(5, seq + 1, 5)],
        transcript=[_entry(n) for n in range(1, seq + 1)] if transcript is None else transcript,
        budget=CheckpointBudget(max_total_tokens=10_000_000, consumed_tokens=seq * 10),
    )


def _lease_at(now: datetime, seq: int | None = None) -> datetime:
    """The lease a reservation at `now` grants, and what the save of `seq` renews it to."""
    return now + timedelta(seconds=LEASE_SECONDS + (seq or 0))


def _differences(found: Checkpoint, expected: Checkpoint) -> list[str]:
    got = found.model_dump(exclude={"created_at"})
    want = expected.model_dump(exclude={"created_at"})
    return [name for name in want if got.get(name) != want[name]]


# -- the child ---------------------------------------------------------------------

@dataclass(frozen=True)
class _Child:
    """A child's job: take `run_id` over as `owner` at `now` and save until killed."""

    kind: str
    location: Path
    run_id: str
    owner: str
    now: datetime


def _save_until_killed(child: _Child, started_fd: int) -> None:
    run_id, now = child.run_id, child.now
    with STORES[child.kind][0](child.location) as store:
        os.write(started_fd, b"S")
        run = store.resume_run(run_id, owner=child.owner, now=now, lease_seconds=LEASE_SECONDS,
                               allow_running_takeover=True)
        latest = store.load_latest_checkpoint(run_id)
        seq = 0 if latest is None else latest.seq
        transcript = [] if latest is None else list(latest.transcript)
        deadline = time.monotonic() + CHILD_LIMIT_SECONDS
        while time.monotonic() < deadline:
            seq += 1
            transcript.append(_entry(seq))
            store.save_checkpoint(_checkpoint(run_id, seq, run.attempt, list(transcript)),
                                  expected_attempt=run.attempt,
                                  lease_expires_at=_lease_at(now, seq))


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks)


def _run_and_kill(child: _Child, delay: float) -> tuple[int, str]:
    """Fork a child that saves checkpoints; SIGKILL it `delay` seconds after it started.

    Returns the child's wait status and the error it reported ("" when none).
    """
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest, whatever happens
        code = 1
        try:
            os.close(read_fd)
            _save_until_killed(child, write_fd)
            code = 0
        except BaseException as error:
            with contextlib.suppress(BaseException):
                os.write(write_fd, f"E{error!r}".encode())
        finally:
            os._exit(code)
    os.close(write_fd)
    reaped = False
    try:
        ready, _, _ = select.select([read_fd], [], [], CHILD_LIMIT_SECONDS)
        started = os.read(read_fd, 1) if ready else b""
        if started == b"S":
            time.sleep(delay)
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        reaped = True
        rest = (started + _read_all(read_fd)).decode(errors="replace")
        error = rest.removeprefix("S").removeprefix("E")
        if started != b"S" and not error:
            error = "the child never said it had started"
        return status, error
    finally:
        if not reaped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(read_fd)


# -- what a fresh instance must find ---------------------------------------------------

@dataclass
class _Known:
    """What the parent knows of a run: the record it last saw, and who saved each seq."""

    run: RunRecord
    saved_by: list[int] = field(default_factory=list)  # attempt of seq n at [n - 1]

    @property
    def seq(self) -> int:
        return len(self.saved_by)


@dataclass
class _Tally:
    """Where the kills landed, and what they left behind."""

    before_reservation: int = 0
    before_first_save: int = 0
    mid_stream: int = 0
    uncommitted_checkpoints: int = 0  # File: checkpoint files written, run.json not yet
    torn_temp_files: int = 0  # File: partial temp files a kill left behind


def _check_loaded(store: RunStore, known: _Known, child: _Child, rng: random.Random,
                  where: str) -> _Known:
    """Everything a fresh instance must find after the child was killed; the updated knowledge."""
    run_id = child.run_id
    run = store.load_run(run_id)
    assert run is not None, f"{where}: the run is gone"
    latest = store.load_latest_checkpoint(run_id)
    seq = 0 if latest is None else latest.seq
    reserved = run.attempt == known.run.attempt + 1
    assert reserved or run.attempt == known.run.attempt, (
        f"{where}: attempt {run.attempt} after attempt {known.run.attempt} and one child")
    assert seq >= known.seq, f"{where}: latest checkpoint went back from {known.seq} to {seq}"
    assert reserved or seq == known.seq, (
        f"{where}: checkpoints {known.seq + 1}..{seq} appeared without a reservation")
    saved_by = known.saved_by + [run.attempt] * (seq - known.seq)

    assert (run.checkpoint_seq or 0) == seq, (
        f"{where}: run.checkpoint_seq is {run.checkpoint_seq}, the latest checkpoint is {seq}")
    assert run.consumed_tokens == seq * 10, (
        f"{where}: run.consumed_tokens is {run.consumed_tokens}, checkpoint {seq} has {seq * 10}")
    if latest is not None:
        expected = _checkpoint(run_id, seq, saved_by[seq - 1])
        assert latest.same_content(expected), (
            f"{where}: latest checkpoint {seq} differs from the one saved in "
            f"{_differences(latest, expected)}")
    infos = store.list_checkpoints(run_id)
    assert [(info.seq, info.attempt) for info in infos] == list(
        zip(range(1, seq + 1), saved_by, strict=True)), f"{where}: checkpoint list {infos}"
    if seq > 1:
        earlier = rng.randrange(1, seq)
        loaded = store.load_checkpoint(run_id, earlier)
        assert loaded is not None and loaded.same_content(
            _checkpoint(run_id, earlier, saved_by[earlier - 1])), (
            f"{where}: checkpoint {earlier} did not load intact")

    if not reserved:
        assert run == known.run, f"{where}: the record changed without a reservation"
    else:
        assert (run.status, run.lease_owner) == (RunStatus.RUNNING, child.owner), (
            f"{where}: reserved run is {run.status.value} owned by {run.lease_owner!r}")
        renewed = _lease_at(child.now, seq if seq > known.seq else None)
        assert run.lease_expires_at == renewed, (
            f"{where}: lease expires at {run.lease_expires_at}, the last write set {renewed}")
    return _Known(run=run, saved_by=saved_by)


def _take_over_and_save(store: RunStore, run_id: str, known: _Known, now: datetime,
                        where: str) -> _Known:
    """A new attempt takes the run over and saves the next checkpoint."""
    run = store.resume_run(run_id, owner="verifier", now=now, lease_seconds=LEASE_SECONDS,
                           allow_running_takeover=True)
    assert run.attempt == known.run.attempt + 1, f"{where}: takeover got attempt {run.attempt}"
    following = _checkpoint(run_id, known.seq + 1, run.attempt)
    store.save_checkpoint(following, expected_attempt=run.attempt,
                          lease_expires_at=_lease_at(now, following.seq))
    loaded = store.load_latest_checkpoint(run_id)
    assert loaded is not None and loaded.same_content(following), (
        f"{where}: checkpoint {following.seq} saved after the takeover did not load back")
    saved = store.load_run(run_id)
    assert saved is not None and saved.checkpoint_seq == following.seq, (
        f"{where}: run after the takeover save: {saved}")
    return _Known(run=saved, saved_by=[*known.saved_by, run.attempt])


# -- store-specific damage checks ------------------------------------------------------

def _tear(path: Path) -> str | None:
    """Why the sealed file at `path` is not whole, or None when it is (or is gone)."""
    data = read_bytes(path)
    try:
        if data is not None:
            unseal(path, data)
    except CorruptRecord as error:
        return str(error)
    return None


def _file_leftovers(location: Path, run_id: str, latest_seq: int, tally: _Tally,
                    where: str) -> None:
    """Every file the File store could read is whole; count what only a crash leaves."""
    run_dir = location / "runs" / run_id
    for folder in (run_dir, *(run_dir / sub for sub in ("checkpoints", "effects", "approvals"))):
        for name in sorted(os.listdir(folder)) if folder.is_dir() else []:
            path = folder / name
            if path.is_dir():
                continue
            problem = _tear(path)
            if is_temp(name):
                # A dead writer's temp file may be partial: the store never reads one.
                tally.torn_temp_files += problem is not None
                continue
            assert problem is None, f"{where}: a torn file under a name the store reads: {problem}"
            seq = name.removesuffix(".json")
            if folder.name == "checkpoints" and seq.isdigit() and int(seq) > latest_seq:
                tally.uncommitted_checkpoints += 1


def _file_swept(location: Path, run_id: str, latest_seq: int, where: str) -> None:
    """After a reservation, no temp file and no uncommitted checkpoint is left."""
    run_dir = location / "runs" / run_id
    names = sorted(os.listdir(run_dir / "checkpoints"))
    assert names == [f"{seq:010d}.json" for seq in range(1, latest_seq + 1)], (
        f"{where}: checkpoint files after the takeover: {names}")
    temps = [name for folder in (run_dir, run_dir / "checkpoints")
             for name in os.listdir(folder) if is_temp(name)]
    assert not temps, f"{where}: temp files left after the takeover: {temps}"


@contextlib.contextmanager
def _raw(location: Path) -> Iterator[sqlite3.Connection]:
    with contextlib.closing(sqlite3.connect(location, isolation_level=None)) as raw:
        yield raw


def _sqlite_intact(location: Path, where: str, *, full: bool = False) -> None:
    pragma = "integrity_check" if full else "quick_check"
    with _raw(location) as raw:
        rows = raw.execute(f"PRAGMA {pragma}").fetchall()
    assert rows == [("ok",)], f"{where}: PRAGMA {pragma} says {rows}"


# -- the test --------------------------------------------------------------------------

def _kill_repeatedly(kind: str, location: Path, seed: str) -> tuple[dict[str, _Known], _Tally]:
    """KILLS kills, KILLS_PER_RUN per run, each checked by a fresh instance."""
    opener = STORES[kind][0]
    opener(location).close()  # create it; the parent never holds it open across a fork
    rng = random.Random(seed)
    tally = _Tally()
    runs: dict[str, _Known] = {}
    hour = 0  # every reservation happens an hour after the last: each lease has expired
    for kill in range(KILLS):
        run_id = f"crash-{kill // KILLS_PER_RUN:03d}"
        if run_id not in runs:
            created = RunRecord(run_id=run_id, manifest_hash=MANIFEST_HASH, created_at=T0)
            with opener(location) as store:
                store.create_run(created)
                stored = store.load_run(run_id)
            assert stored is not None
            runs[run_id] = _Known(run=stored)
        known = runs[run_id]
        hour += 1
        child = _Child(kind, location, run_id, f"child-{kill}", T0 + timedelta(hours=hour))
        delay = rng.uniform(0, MAX_DELAY_SECONDS)
        status, error = _run_and_kill(child, delay)
        where = (f"{kind} kill {kill} (seed {seed!r}, run {run_id}, "
                 f"{delay * 1000:.1f} ms after start)")
        assert not error, f"{where}: the child failed on its own: {error}"
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (
            f"{where}: the child was not killed by SIGKILL (wait status {status})")

        with opener(location) as fresh:
            found = _check_loaded(fresh, known, child, rng, where)
            if kind == "file":
                _file_leftovers(location, run_id, found.seq, tally, where)
            if kind == "sqlite":
                _sqlite_intact(location, where)
            if found.run.attempt == known.run.attempt:
                tally.before_reservation += 1
            elif found.seq == known.seq:
                tally.before_first_save += 1
            else:
                tally.mid_stream += 1
            hour += 1
            runs[run_id] = _take_over_and_save(fresh, run_id, found,
                                               T0 + timedelta(hours=hour), where)
            if kind == "file":
                _file_swept(location, run_id, runs[run_id].seq, where)
    return runs, tally


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(STORES))
def test_a_store_killed_while_saving_checkpoints_loads_its_last_complete_one(
        kind: str, tmp_path: Path) -> None:
    opener, name = STORES[kind]
    location = tmp_path / name
    runs, tally = _kill_repeatedly(kind, location, seed=f"crash-safety-{kind}")

    # The kills were real: at least one landed in the middle of a stream of saves.
    assert tally.mid_stream > 0, tally
    # No crash damaged another run: every run still loads exactly as last verified.
    with opener(location) as final:
        for run_id, known in runs.items():
            assert final.load_run(run_id) == known.run, run_id
            latest = final.load_latest_checkpoint(run_id)
            assert latest is not None and latest.same_content(
                _checkpoint(run_id, known.seq, known.saved_by[-1])), run_id
            assert [info.seq for info in final.list_checkpoints(run_id)] == list(
                range(1, known.seq + 1)), run_id
    if kind == "sqlite":
        _sqlite_intact(location, "after every kill", full=True)
