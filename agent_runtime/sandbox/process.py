"""One sandbox process: started in its own session under resource limits, its output
read up to a cap, killed (its whole group) at the cap, the timeout or a cancellation.

The limits are set in the child between fork and exec (`preexec_fn`), so
they hold for bwrap and everything the code starts: inherited, never raised
(the hard limit is set too). The user to run as is set there too, first, as
`subprocess` does for `user=`: uvloop (the loop of `serve`'s runs when it is
installed) refuses the `user`, `group` and `extra_groups` arguments.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from agent_runtime.sandbox.contract import SandboxResult

READ_CHUNK = 65_536


@dataclass(frozen=True)
class ProcessLimits:
    address_space_bytes: int
    cpu_seconds: int
    processes: int
    file_bytes: int
    output_bytes: int
    timeout_seconds: float


def _child_setup(limits: ProcessLimits, user: int | None) -> Callable[[], None]:
    """What the child does before exec: become `user` (its group too, and no
    supplementary groups), then set the limits."""
    pairs = ((resource.RLIMIT_AS, limits.address_space_bytes),
             (resource.RLIMIT_CPU, limits.cpu_seconds),
             (resource.RLIMIT_NPROC, limits.processes),
             (resource.RLIMIT_FSIZE, limits.file_bytes),
             (resource.RLIMIT_CORE, 0))

    def apply() -> None:
        if user is not None:
            os.setgroups([])
            os.setregid(user, user)
            os.setreuid(user, user)
        for kind, value in pairs:
            resource.setrlimit(kind, (value, value))

    return apply


def _kill_group(process: asyncio.subprocess.Process) -> None:
    # The process leads its own session and group (start_new_session): the
    # group is bwrap and anything that left its namespaces, which is nothing.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        process.kill()


async def _drain(stream: asyncio.StreamReader, cap: int, into: bytearray,
                 overflowed: Callable[[], None]) -> None:
    """Keep up to `cap` bytes of `stream`, read (and drop) the rest to its end: the
    pipe must be read until it closes for the process's end to be seen."""
    while True:
        chunk = await stream.read(READ_CHUNK)
        if not chunk:
            return
        room = cap - len(into)
        into.extend(chunk[:max(room, 0)])
        if len(chunk) > room:
            overflowed()


async def run_limited(argv: Sequence[str], *, env: Mapping[str, str], limits: ProcessLimits,
                      pass_fds: Sequence[int] = (), user: int | None = None) -> SandboxResult:
    """Run `argv` to its end or a limit's; the result names the limit that ended it."""
    process = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env=dict(env), pass_fds=tuple(pass_fds),
        start_new_session=True, close_fds=True, preexec_fn=_child_setup(limits, user))
    stdout, stderr = bytearray(), bytearray()
    assert process.stdout is not None and process.stderr is not None
    ended_by: list[str] = []

    def over_output() -> None:
        if not ended_by:
            ended_by.append("output")
            _kill_group(process)

    finished = asyncio.gather(
        _drain(process.stdout, limits.output_bytes, stdout, over_output),
        _drain(process.stderr, limits.output_bytes, stderr, over_output),
        process.wait())
    try:
        await asyncio.wait_for(asyncio.shield(finished), limits.timeout_seconds)
    except TimeoutError:
        ended_by.append("timeout")
    finally:
        # Whatever ended the wait (the timeout, a cancellation, an error), nothing
        # the code started outlives it: killing bwrap ends its pid namespace, whose
        # processes hold the pipes' other ends, so the reads end too.
        if process.returncode is None:
            _kill_group(process)
        await asyncio.shield(finished)
    code = process.returncode if process.returncode is not None else -signal.SIGKILL
    limit = ended_by[0] if ended_by else None
    if limit is None and code in {-signal.SIGXCPU, 128 + signal.SIGXCPU}:
        limit = "cpu"
    return SandboxResult(exit_code=code, stdout=stdout.decode("utf-8", "replace"),
                         stderr=stderr.decode("utf-8", "replace"), limit=limit)
