"""`agent-runtime serve --processes N`: N serve processes on one socket and one store.

A run's Python between its waits (building a step, encoding a checkpoint,
answering a request) holds its interpreter's lock, so one process steps
runs on one core however many threads it has. With `--processes N` the
command becomes a supervisor: it binds the listening socket, then starts N
children, each the same `agent-runtime serve` with the same flags, serving
from the inherited socket. The kernel hands each new connection to one of
them, and a child executes the runs its requests start and the ones its
reconciler takes over. They share the store (a SQLite file: commits of
different processes take turns, `stores.sqlite_turns`), the `--events` log
(appended one whole turn of lines per write) and the artifacts.

The run limits stay the server's: `--max-concurrent-runs` and
`--tenant-concurrent-runs` bound the places of all children together, counted
in a `PlaceLedger` the supervisor makes and each child maps (its row, the
child's slot, is zeroed when the child is gone), so a request is refused only
when the server as a whole is at a bound. `--max-connections` is each child's
own (as a worker's connection limit is in other servers): it guards one
process's descriptors and memory, and the kernel does not spread connections
evenly, so a share of it would answer 503 to clients of a busy child while the
server as a whole had room.

The supervisor starts a new child in place of one that exits while serving
(its runs are taken over at once by the others' reconcilers, their owner being
a dead process of this host), and gives up, stopping the rest, when a child
exits `MAX_QUICK_EXITS` times in a row within `QUICK_EXIT_SECONDS` of its start
(a broken host, not a crash). SIGINT or SIGTERM is passed on to every child as
SIGTERM: each stops as a single `serve` does (`agent_runtime.api.server`); a
second signal is passed on too, and stops them at once. The exit code is 0 when
every child stopped cleanly, else 1. The children are in their own process
group, so a terminal's Ctrl-C reaches them only through the supervisor (once,
not twice); each holds a pipe from it and stops when the supervisor is gone,
even killed.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from types import FrameType

from agent_runtime.api.place_ledger import PlaceLedger
from agent_runtime.errors import InvalidInput

logger = logging.getLogger("agent_runtime.serve")

# A child that exits this soon after its start, this many times in a row, is
# failing to start: the supervisor stops instead of starting it forever.
QUICK_EXIT_SECONDS = 10.0
MAX_QUICK_EXITS = 3
# How often the supervisor looks at its children when no signal wakes it.
WATCH_SECONDS = 0.2
EXIT_FAILED = 1
# The hidden flag a child is started with: "<listening socket fd>,<supervisor pipe fd>,
# <place ledger fd>,<its slot>,<the server's start, seconds since the epoch>".
CHILD_FLAG = "--serve-process"


@dataclass(frozen=True)
class ChildEnds:
    """What a child inherits from its supervisor (`CHILD_FLAG`)."""

    listening: int
    supervisor: int
    ledger: int
    slot: int
    # When the supervisor started: the server's start, for every child's
    # reconciler (its first pass leaves runs queued since to their own requests).
    started: float

    @classmethod
    def parse(cls, value: str) -> ChildEnds:
        try:
            *descriptors, started = value.split(",")
            listening, supervisor, ledger, slot = (int(part) for part in descriptors)
            return cls(listening, supervisor, ledger, slot, float(started))
        except ValueError:
            raise InvalidInput("is set by `serve --processes` for its children only",
                               source=CHILD_FLAG) from None

    def flag(self) -> str:
        """`CHILD_FLAG`'s value that `parse` reads back as these ends."""
        return (f"{self.listening},{self.supervisor},{self.ledger},{self.slot},"
                f"{self.started!r}")

    def server_started(self) -> datetime:
        """When the supervisor started: a child's first reconcile pass takes only the
        runs queued before it (`ReconcileLoop(started=)`)."""
        return datetime.fromtimestamp(self.started, UTC)

    def socket(self) -> socket.socket:
        """The supervisor's listening socket."""
        return socket.socket(fileno=self.listening)

    def places(self) -> PlaceLedger:
        """The server's place ledger, in this child's row."""
        return PlaceLedger(self.ledger, slot=self.slot)

    def stop_with_supervisor(self) -> None:
        """SIGTERM this process once the supervisor is gone (its pipe ends), so that a
        killed supervisor leaves no children serving."""
        def watch() -> None:
            with os.fdopen(self.supervisor, "rb", buffering=0) as pipe:
                while pipe.read(1):
                    pass
            logger.warning("the supervising serve process is gone; stopping")
            os.kill(os.getpid(), signal.SIGTERM)

        threading.Thread(target=watch, name="serve-supervisor-watch", daemon=True).start()


@dataclass
class _Child:
    process: subprocess.Popen[bytes]
    started: float
    quick_exits: int = 0


class ServeProcesses:
    """Starts and watches `count` children running `command` on `sock`, counting their
    run places in `ledger` (see the module); `run` closes the socket and the ledger."""

    def __init__(self, command: list[str], count: int, sock: socket.socket,
                 ledger: PlaceLedger, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.command = command
        self.count = count
        self.sock = sock
        self.ledger = ledger
        self.clock = clock
        self.started = time.time()  # the server's start, which every child is told
        self._children: dict[int, _Child] = {}
        self._exits: dict[int, int] = {}
        self._signals = 0
        self._failed = False
        self._wake = threading.Event()
        # Re-entrant: a signal's handler runs on the main thread, maybe while it
        # holds the lock. With it, no child starts after a stop passed it by.
        self._lock = threading.RLock()

    def run(self) -> int:
        """Serve until a signal (or a child that cannot start); the exit code."""
        # The children inherit the read end; the write end, which only this process
        # holds, closes when it ends, however it ends.
        read_end, write_end = os.pipe()
        previous = {sig: signal.signal(sig, self._signal)
                    for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            with self._lock:
                for slot in range(self.count):
                    if self._signals:  # stopped while starting: start no more
                        break
                    self._start(slot, read_end, quick_exits=0)
            while self._children:
                self._wake.wait(WATCH_SECONDS)
                self._wake.clear()
                self._reap(read_end)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            os.close(read_end)
            os.close(write_end)
            self.sock.close()
            self.ledger.close()
        clean = not self._failed and all(code == 0 for code in self._exits.values())
        return 0 if clean else EXIT_FAILED

    def pids(self) -> list[int]:
        """The children serving now."""
        with self._lock:
            return [child.process.pid for child in self._children.values()]

    def _start(self, slot: int, read_end: int, *, quick_exits: int) -> None:
        ends = ChildEnds(self.sock.fileno(), read_end, self.ledger.fileno(), slot,
                         self.started)
        process = subprocess.Popen(
            [*self.command, CHILD_FLAG, ends.flag()], stdin=subprocess.DEVNULL,
            pass_fds=(ends.listening, ends.supervisor, ends.ledger), process_group=0)
        self._children[slot] = _Child(process, self.clock(), quick_exits)

    def _reap(self, read_end: int) -> None:
        with self._lock:
            self._reap_locked(read_end)

    def _reap_locked(self, read_end: int) -> None:
        for slot, child in list(self._children.items()):
            code = child.process.poll()
            if code is None:
                continue
            del self._children[slot]
            # Its places went with it; a successor in the slot starts with none.
            self.ledger.clear(slot)
            if self._signals:
                # Killed by the SIGTERM passed on before it took the signal (still
                # starting): it held no runs, so that is a clean stop too.
                self._exits[child.process.pid] = 0 if code == -signal.SIGTERM else code
                continue
            quick = self.clock() - child.started < QUICK_EXIT_SECONDS
            quick_exits = child.quick_exits + 1 if quick else 0
            if quick_exits >= MAX_QUICK_EXITS:
                logger.error("serve process %d exited with %d, the %dth time in a row within "
                             "%gs of its start; stopping the others", child.process.pid, code,
                             quick_exits, QUICK_EXIT_SECONDS)
                self._failed = True
                self.stop()
                continue
            logger.warning("serve process %d exited with %d; starting another in its place "
                           "(its runs are taken over by the others)", child.process.pid, code)
            self._start(slot, read_end, quick_exits=quick_exits)

    def _signal(self, signum: int, frame: FrameType | None) -> None:
        self.stop()

    def stop(self) -> None:
        """Pass SIGTERM on to every child (a second call: again, which stops them at
        once); `run` returns once they all exited."""
        with self._lock:
            self._signals += 1
            for child in list(self._children.values()):
                if child.process.poll() is None:
                    child.process.send_signal(signal.SIGTERM)
        self._wake.set()


def pin_to_cpu(slot: int) -> int:
    """Keep this process on one CPU of those it may run on, the `slot`th (round robin),
    and return it. Only the calling thread is moved, and the threads it starts
    from then on: call it before any starts.

    Under the interpreter lock a process steps its runs on one core at a time
    anyway; what pinning changes is where its threads hand work to each other
    (a run's loop to a store thread and back, for every commit). Measured on a
    2-core virtual machine, a bare round trip costs ~40 us on one core and
    ~146 us across two, where waking the other core's thread is costly."""
    cpus = sorted(os.sched_getaffinity(0))
    cpu = cpus[slot % len(cpus)]
    os.sched_setaffinity(0, {cpu})
    return cpu


def child_command(argv: list[str]) -> list[str]:
    """The command that starts one child: this interpreter, the same flags."""
    return [sys.executable, "-m", "agent_runtime.cli", *argv]


__all__ = ["CHILD_FLAG", "ChildEnds", "ServeProcesses", "child_command", "pin_to_cpu"]
