"""The run places held by every process of one `serve --processes N`, counted in one file.

With one process, `RunPlaces` counts the runs it executes in memory. With N,
each child executes the runs its own requests start, yet `--max-concurrent-runs`
and `--tenant-concurrent-runs` bound the server: a request must be refused
(429) only when the server as a whole is at its bound, not when the child
the kernel handed the connection to happens to hold more than its share.

So the supervisor makes a ledger: an unnamed temporary file, mapped into
memory by every child, that holds one row of counters per child (the places
it holds in all, then per tenant). A child changes only its own row and sums
every row to decide, all under a POSIX record lock on the file (`lockf`: per
process, so children that inherited the same open file still exclude each
other; the threads of one process are kept in turn by `RunPlaces`' own lock).
A child that dies leaves its row behind: the supervisor zeroes it before a new
child takes its slot, since a dead process executes no run.

Tenants have the columns the supervisor's tokens name, written into the file
with the counters, so a child started later reads the same columns whatever
the tokens file says by then. A run whose tenant no token names (one the
reconciler takes over from an earlier token file, or a run with no tenant)
counts in one shared column, bounded as one tenant.
"""

from __future__ import annotations

import fcntl
import json
import mmap
import os
import struct
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

# processes, columns, length of the tenant names' JSON: the file's header.
_HEADER = struct.Struct("<III")
_CELL = 8  # one signed 64-bit counter
_TOTAL = 0  # a row's first column: every place the process holds
_OTHER = 1  # then the tenants no token names (and runs with no tenant)
_FIRST_TENANT = 2


class PlaceLedger:
    """The places each process holds, shared through a file (see the module doc).

    `slot` is this process's row; the supervisor, which holds no places, has
    none. Not thread-safe by itself: `RunPlaces` calls it under its own lock."""

    def __init__(self, fd: int, *, slot: int | None = None) -> None:
        """The ledger in file `fd`, which becomes this object's to close."""
        self._fd = fd
        size = os.fstat(fd).st_size
        self._map = mmap.mmap(fd, size)
        self.processes, self._width, names_length = _HEADER.unpack_from(self._map, 0)
        names: list[str] = json.loads(self._map[_HEADER.size:_HEADER.size + names_length])
        self._columns = {name: _FIRST_TENANT + index for index, name in enumerate(names)}
        start = _cells_start(names_length)
        self._cells = memoryview(self._map)[start:start + self.processes * self._width * _CELL] \
            .cast("q")
        if slot is not None and not 0 <= slot < self.processes:
            raise ValueError(f"slot {slot} of a ledger of {self.processes} processes")
        self.slot = slot

    @classmethod
    def create(cls, processes: int, tenants: Sequence[str]) -> PlaceLedger:
        """A new ledger of `processes` rows, all zero, for `tenants` (the supervisor's)."""
        columns = sorted(set(tenants))
        names = json.dumps(columns).encode()
        width = _FIRST_TENANT + len(columns)
        with tempfile.TemporaryFile(prefix="agent-runtime-places-") as made:
            # The file lives on while a descriptor does; a child gets it by pass_fds.
            fd = os.dup(made.fileno())
        os.ftruncate(fd, _cells_start(len(names)) + processes * width * _CELL)
        os.pwrite(fd, _HEADER.pack(processes, width, len(names)) + names, 0)
        return cls(fd)

    def fileno(self) -> int:
        return self._fd

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Every process's rows held still (the caller's own threads: its lock)."""
        fcntl.lockf(self._fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.lockf(self._fd, fcntl.LOCK_UN)

    def total(self) -> int:
        """Places held by every process (under `locked`)."""
        return sum(self._cells[_TOTAL::self._width])

    def of(self, tenant: str | None) -> int:
        """Places `tenant`'s runs hold in every process (under `locked`)."""
        return sum(self._cells[self._column(tenant)::self._width])

    def add(self, tenant: str | None, count: int) -> None:
        """Change this process's places for `tenant` by `count` (under `locked`)."""
        if self.slot is None:
            raise RuntimeError("the supervisor's ledger holds no places")
        row = self.slot * self._width
        self._cells[row + _TOTAL] += count
        self._cells[row + self._column(tenant)] += count

    def clear(self, slot: int) -> None:
        """Zero row `slot`: its process is gone, and so are the runs it executed."""
        with self.locked():
            row = slot * self._width
            for cell in range(row, row + self._width):
                self._cells[cell] = 0

    def close(self) -> None:
        self._cells.release()
        self._map.close()
        os.close(self._fd)

    def _column(self, tenant: str | None) -> int:
        return _OTHER if tenant is None else self._columns.get(tenant, _OTHER)


def _cells_start(names_length: int) -> int:
    """Where the counters begin: after the header and the names, on a cell boundary."""
    end = _HEADER.size + names_length
    return -(-end // _CELL) * _CELL


__all__ = ["PlaceLedger"]
