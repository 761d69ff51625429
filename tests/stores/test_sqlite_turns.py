"""Writers of one SQLite file take turns (stores/sqlite_turns.py): a writer waits,
blocked in the kernel, while another store holds the turn, and writes the moment
it is let go; the lock file is private and made by the first write; where it
cannot be made the store writes without turns; a forked child has a turn of its
own, never its parent's."""

from __future__ import annotations

import fcntl
import os
import stat
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from stores.records import RunRecord
from stores.sqlite import SqliteRunStore
from stores.sqlite_turns import LOCK_SUFFIX

T0 = datetime(2025, 1, 1, tzinfo=UTC)
HANG_SECONDS = 60.0  # only a hang gets near it: no assertion rests on timing


def _run(run_id: str) -> RunRecord:
    return RunRecord(run_id=run_id, manifest_hash="sha256:m", created_at=T0)


def _lock_file(path: Path) -> Path:
    return Path(f"{os.path.realpath(path)}{LOCK_SUFFIX}")


def _blocked_flocks(lock_file: Path) -> int:
    """How many flock requests on `lock_file` the kernel holds waiting (/proc/locks)."""
    inode = os.stat(lock_file).st_ino
    with open("/proc/locks", encoding="ascii") as locks:
        return sum(1 for line in locks
                   if "->" in line and "FLOCK" in line
                   and line.split()[-3].rsplit(":", 1)[-1] == str(inode))


@pytest.mark.skipif(not os.path.exists("/proc/locks"), reason="needs Linux's /proc/locks")
def test_a_writer_waits_for_the_turn_another_store_holds(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    with SqliteRunStore(path) as holder, SqliteRunStore(path) as waiter:
        holder.create_run(_run("first"))  # makes the lock file
        written = threading.Event()

        def write() -> None:
            waiter.create_run(_run("second"))
            written.set()

        with holder._turns.turn():
            thread = threading.Thread(target=write, daemon=True)
            thread.start()
            deadline = time.monotonic() + HANG_SECONDS
            while _blocked_flocks(_lock_file(path)) == 0:
                assert time.monotonic() < deadline, "the second writer never waited"
                time.sleep(0.001)  # a poll: only the hang deadline above is a limit
            # It waits in the kernel for this turn, having written nothing.
            assert not written.is_set()
            assert holder.load_run("second") is None
        thread.join(HANG_SECONDS)
        assert written.is_set()
        assert holder.load_run("second") is not None


def test_the_lock_file_is_private_and_made_by_the_first_write(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    with SqliteRunStore(path) as store:
        assert store.load_run("r1") is None
        assert not _lock_file(path).exists()  # a store only read leaves none behind
        store.create_run(_run("r1"))
        assert stat.S_IMODE(_lock_file(path).stat().st_mode) == 0o600


def test_stores_opened_through_a_link_share_the_turns(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    link = tmp_path / "link.sqlite"
    with SqliteRunStore(path) as store:
        store.create_run(_run("r1"))
    link.symlink_to(path)
    with SqliteRunStore(link) as linked:
        assert linked._turns.lock_path == _lock_file(path)


def test_a_store_that_cannot_make_its_lock_file_writes_without_turns(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    _lock_file(path).mkdir()  # opening it as a file fails
    with SqliteRunStore(path) as store:
        store.create_run(_run("r1"))
        store.create_run(_run("r2"))
        assert {run.run_id for run in store.list_runs().runs} == {"r1", "r2"}


def test_a_forked_child_takes_a_turn_of_its_own(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    with SqliteRunStore(path) as store:
        store.create_run(_run("r1"))
        with store._turns.turn():
            child = os.fork()
            if child == 0:  # pragma: no cover - the child reports through its exit code
                code = 3
                try:
                    fd = store._turns._descriptor()
                    try:
                        # The parent's shared descriptor would grant it at once.
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # type: ignore[arg-type]
                        code = 1
                    except BlockingIOError:
                        code = 0
                finally:
                    os._exit(code)
            _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        store.create_run(_run("r2"))  # the parent's turns still work
