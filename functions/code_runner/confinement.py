"""One code step's process inside a code-runner Lambda: limited, watched, and gone after.

Lambda gives no namespaces to unshare: the code runs as the function's own
user, in its own session, with resource limits set between fork and exec
(address space, CPU time, processes, file size, no core), its stdout and
stderr read up to a cap, and the step's timeout. What the function's
isolation does not give, the runner adds:

* nothing outlives the invocation: on Lambda the handler's process is made a
  child subreaper (`PR_SET_CHILD_SUBREAPER`), so a process the code detached
  (a double fork, `setsid`) is still its descendant, and every descendant
  is killed and reaped before the answer goes back (and before the next run
  starts, should a sweep not have finished).
  An execution environment is reused by later invocations (other runs'
  code); a process left behind could read their requests.
* the handler's own memory and environment are not readable by the code,
  which runs as the same user: `PR_SET_DUMPABLE` 0 makes its /proc entries
  root's.

Runs are serialised per process (Lambda sends one invocation at a time to
an environment anyway), and on Lambda the handler starts no process of its
own: every descendant is code's.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
READ_CHUNK = 65_536
# How long the sweep keeps killing what the code started (a fork bomb races
# it, bounded by the process limit), and how long the readers get after it.
SWEEP_SECONDS = 10.0
DRAIN_SECONDS = 5.0

_ONE_RUN_AT_A_TIME = threading.Lock()


@dataclass(frozen=True)
class Limits:
    memory_bytes: int
    cpu_seconds: int
    processes: int
    file_bytes: int
    output_bytes: int
    timeout_seconds: float


@dataclass(frozen=True)
class Outcome:
    """How the code ended; `limit` names the limit that ended it, if one did."""

    exit_code: int
    stdout: bytes
    stderr: bytes
    limit: str | None


def _prctl(option: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(option, value, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def guard_this_process() -> bool:
    """Make this (the handler's) process the reaper of everything the code detaches,
    and its memory and environment unreadable by the code. Lambda only: in another
    host's process it would change how that host's orphans are reaped."""
    return _prctl(PR_SET_CHILD_SUBREAPER, 1) and _prctl(PR_SET_DUMPABLE, 0)


def _limit_setter(limits: Limits, processes: int) -> Callable[[], None]:
    pairs = ((resource.RLIMIT_AS, limits.memory_bytes),
             (resource.RLIMIT_CPU, limits.cpu_seconds),
             (resource.RLIMIT_NPROC, processes),
             (resource.RLIMIT_FSIZE, limits.file_bytes),
             (resource.RLIMIT_CORE, 0))

    def apply() -> None:
        for kind, value in pairs:
            resource.setrlimit(kind, (value, value))

    return apply


def _children() -> dict[int, list[int]]:
    """Every live process's children, from /proc (zombies left out: they hold nothing)."""
    found: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry.name}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if fields and fields[0] != "Z":
            found.setdefault(int(fields[1]), []).append(int(entry.name))
    return found


def descendants(root: int) -> set[int]:
    children = _children()
    found: set[int] = set()
    pending = [root]
    while pending:
        for child in children.get(pending.pop(), []):
            if child not in found:
                found.add(child)
                pending.append(child)
    return found


def _reap() -> None:
    """Collect the exit of every child that has ended (the code's orphans are ours)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def sweep() -> None:
    """Kill every descendant of this process until none is left (or SWEEP_SECONDS
    have passed), and reap them."""
    deadline = time.monotonic() + SWEEP_SECONDS
    while time.monotonic() < deadline:
        started = descendants(os.getpid())
        if not started:
            break
        for pid in started:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)
    _reap()


def _processes_of(uid: int) -> int:
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if entry.stat().st_uid == uid:
                    count += 1
    return count


def _drain(stream: IO[bytes], cap: int, into: bytearray, overflowed: Callable[[], None]) -> None:
    """Keep up to `cap` bytes, read (and drop) the rest until the stream ends; then
    close it (the reader owns it: a process that escaped the sweep may hold it open
    after the run, and closing it under a blocked read would not be safe)."""
    with stream:
        while True:
            chunk = os.read(stream.fileno(), READ_CHUNK)
            if not chunk:
                return
            room = cap - len(into)
            into.extend(chunk[:max(room, 0)])
            if len(chunk) > room:
                overflowed()


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


def run_confined(argv: Sequence[str], *, env: Mapping[str, str], cwd: Path, limits: Limits,
                 sweep_descendants: bool) -> Outcome:
    """Run `argv` to its end or a limit's. `sweep_descendants`: kill everything it
    started, detached or not, before returning (with `guard_this_process`)."""
    with _ONE_RUN_AT_A_TIME:
        if sweep_descendants:
            # On Lambda the handler has no children of its own: anything there is
            # code's, left by an earlier run the last sweep could not finish.
            sweep()
        # RLIMIT_NPROC counts every process of the user: the code's allowance comes on top.
        processes = limits.processes + _processes_of(os.getuid())
        process = subprocess.Popen(
            list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, env=dict(env), cwd=cwd, start_new_session=True,
            # Only setrlimit runs between fork and exec: no lock a thread could hold.
            close_fds=True, preexec_fn=_limit_setter(limits, processes))  # noqa: PLW1509
        assert process.stdout is not None and process.stderr is not None
        ended_by: list[str] = []
        lock = threading.Lock()

        def over_output() -> None:
            with lock:
                if not ended_by:
                    ended_by.append("output")
                    _kill_group(process)

        stdout, stderr = bytearray(), bytearray()
        readers = [threading.Thread(target=_drain, daemon=True,
                                    args=(stream, limits.output_bytes, into, over_output))
                   for stream, into in ((process.stdout, stdout), (process.stderr, stderr))]
        for reader in readers:
            reader.start()
        try:
            process.wait(timeout=limits.timeout_seconds)
        except subprocess.TimeoutExpired:
            with lock:
                if not ended_by:
                    ended_by.append("timeout")
        finally:
            # Whatever ended the wait, what the code started goes with it: its
            # group, then (on Lambda) every descendant, however detached.
            _kill_group(process)
            process.wait()
            if sweep_descendants:
                sweep()
            drained_by = time.monotonic() + DRAIN_SECONDS
            for reader in readers:
                reader.join(timeout=max(0.0, drained_by - time.monotonic()))
        code = process.returncode
        limit = ended_by[0] if ended_by else None
        if limit is None and code == -signal.SIGXCPU:
            limit = "cpu"
        return Outcome(exit_code=code, stdout=bytes(stdout), stderr=bytes(stderr), limit=limit)
