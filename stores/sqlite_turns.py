"""Writers of one SQLite store take turns: an advisory lock on a file beside it.

SQLite lets one writer in at a time and makes the others wait in its busy
handler, which sleeps 1, 2, 5, 10 ... ms between tries. A writer that has just
committed comes back for its next write long before a sleeping one wakes, so
with two processes on one file one of them mostly waits, and the two together
run fewer runs a second than one alone. So before each write transaction a
store takes its turn: an exclusive `flock` on `<file>-lock`. A writer waiting
for it is blocked in the kernel and woken the moment the one before it lets
go, so writers alternate instead of one sleeping while the other writes again.

The turn is only about order: SQLite's own locks still decide who writes, so a
store that cannot have the lock file (a read-only directory, a file system
without `flock`) writes without turns and is exactly as safe. A turn is held
only for one write of this store's code (no caller's code runs in it), and the
kernel releases it when its holder exits or is killed; the wait for it has no
timeout (a blocking `flock` cannot have one without a second thread, whose
hand-off costs more than the turn saves), while the wait for SQLite's lock
inside the turn keeps the store's busy timeout. So a writer stopped (SIGSTOP)
in the middle of a write holds up the other writers until it goes on or is
killed, where without turns they would fail with "database is locked" after
the busy timeout.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

LOCK_SUFFIX = "-lock"


class WriterTurns:
    """The turns of the writers of the SQLite file at `path` (see the module doc).

    One per store connection, whose lock serialises its own writes: threads
    of one store wait for that lock, stores (and processes) for the turn. The
    lock file is named after the real file, as SQLite names its -wal and -shm,
    so stores opened through different links share it, and it is created at
    the first write: a store only ever read leaves no file behind."""

    def __init__(self, path: Path) -> None:
        self.lock_path = Path(os.path.realpath(path) + LOCK_SUFFIX)
        self._fd: int | None = None
        self._opened_by = 0  # the process that opened `_fd`; 0: not opened yet
        self._usable = True

    @contextlib.contextmanager
    def turn(self) -> Iterator[None]:
        """Hold the turn for the block (or write without one, where there are none)."""
        fd = self._descriptor()
        held = False
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                held = True
            except OSError:
                self._give_up()  # no flock on this file system (ENOLCK): no turns
        try:
            yield
        finally:
            if held and fd is not None:
                fcntl.flock(fd, fcntl.LOCK_UN)

    def _descriptor(self) -> int | None:
        if self._opened_by != os.getpid():
            if self._fd is not None:
                # A forked child shares its parent's open lock file, and with it
                # the parent's turn: it opens one of its own. Closing its copy
                # of the parent's leaves the parent's turn with the parent.
                os.close(self._fd)
                self._fd = None
            self._opened_by = os.getpid()
            if self._usable:
                try:
                    self._fd = os.open(self.lock_path,
                                       os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                except OSError:
                    self._give_up()  # a directory it cannot write to: no turns
        return self._fd

    def _give_up(self) -> None:
        self._usable = False
        self.close()

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
