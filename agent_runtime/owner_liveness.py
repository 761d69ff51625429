"""Is the owner of a running run's lease still there? The reconciler asks before it
takes a run over (docs/design.md section 7): only an owner confirmed gone is replaced.

A local engine's owner is its process, named `host:pid` (`default_owner`), and
`ProcessLiveness` answers for such owners; the AWS
reconciler asks Step Functions (functions/reconciler/executions.py `ExecutionLiveness`).
"""

from __future__ import annotations

import functools
import os
import socket
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from stores.records import RunRecord


def default_owner() -> str:
    """Who holds a lease: host and pid, so the reconciler can tell whether it is alive."""
    return _owner_of(os.getpid())


@functools.cache
def _owner_of(pid: int) -> str:
    # Named once per process (a forked child has a pid, so a name, of its own):
    # `gethostname` is a system call, and `serve` builds every attempt's runtime,
    # which names its owner, on the event loop all its runs share.
    return f"{socket.gethostname()}:{pid}"


class Liveness(StrEnum):
    ALIVE = "alive"
    GONE = "gone"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class OwnerStatus:
    liveness: Liveness
    detail: str


class LivenessCheck(Protocol):
    def __call__(self, run: RunRecord) -> OwnerStatus:
        """Whether the owner of a running run's lease can still write to it.

        `GONE` only when certain: the reconciler then starts a competing
        attempt. When in doubt, `UNKNOWN`; the run is left alone.
        """
        ...


class ProcessLiveness:
    """Owners of the local engine, `host:pid`: a process on this host is asked directly.

    A pid that no longer exists, or a zombie (it exited and only waits for its
    parent to collect it), is gone. A pid that exists is alive, whoever's it
    is: a reused pid keeps a dead owner's run waiting, which is safe. An owner
    on another host, or not of the form `host:pid` (a Step Functions execution's
    ARN), is unknown.
    """

    def __init__(self, host: str | None = None) -> None:
        self.host = host or socket.gethostname()

    def __call__(self, run: RunRecord) -> OwnerStatus:
        owner = run.lease_owner or ""
        host, _, pid_text = owner.rpartition(":")
        if not host or not pid_text.isdigit() or int(pid_text) <= 0:
            return OwnerStatus(Liveness.UNKNOWN, f"owner {owner!r} is not host:pid")
        if host != self.host:
            return OwnerStatus(Liveness.UNKNOWN,
                               f"owner on host {host!r}, not this host ({self.host!r})")
        if os.name != "posix":  # os.kill(pid, 0) would signal the process on Windows
            return OwnerStatus(Liveness.UNKNOWN, "process checks need a POSIX system")
        pid = int(pid_text)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return OwnerStatus(Liveness.GONE, f"process {pid} on {host} no longer exists")
        except PermissionError:
            return OwnerStatus(Liveness.ALIVE, f"process {pid} on {host} exists "
                                               "(another user's)")
        if _is_zombie(pid):
            return OwnerStatus(Liveness.GONE, f"process {pid} on {host} exited (a zombie)")
        return OwnerStatus(Liveness.ALIVE, f"process {pid} on {host} is running")


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            # "pid (comm) state ...": comm may hold spaces and parentheses.
            return stat.read().rpartition(")")[2].split()[0] == "Z"
    except (OSError, IndexError):
        return False
