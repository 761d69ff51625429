"""Each `sandbox:` setting has its effect (tests/reference/test_ref_field_table.py names
these): the default timeout, file and workspace sizes, the uid, language profiles and
their binds; `network: restricted` is refused by name."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError
from sandbox_kit import GENEROUS_MS, SMALL_LIMITS, bubblewrap_sandbox, run_code

from agent_runtime import AgentRuntime, RunStatus
from agent_runtime.config import parse_config
from agent_runtime.errors import ConfigError
from agent_runtime.manifest import parse_agent_manifest
from agent_runtime.sandbox import SandboxSettings


def test_network_other_than_none_is_refused_by_name() -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config({"version": "1.0", "sandbox": {"network": "restricted"}}, source="host")
    assert "sandbox.network" in str(refused.value)
    with pytest.raises(ValidationError):
        SandboxSettings.model_validate({"allowedEnvironment": ["AGENT_VARIABLES_FILE"]})


def test_a_step_without_timeout_gets_the_hosts_default() -> None:
    bubblewrap_sandbox()
    config = parse_config({"version": "1.0", "sandbox": {**SMALL_LIMITS, "timeoutMs": 1500}},
                          source="host")
    agent = parse_agent_manifest({"schemaVersion": "1.0", "steps": [
        {"id": "spin", "type": "code", "language": "python", "code": "while True: pass"}]},
        source="test")
    result = AgentRuntime(config=config).run_sync(manifest=agent)
    assert result.status is RunStatus.FAILED
    assert result.error["type"] == "code_timeout" and "1500 ms" in result.error["message"]


def test_files_are_bounded_in_size_and_in_total() -> None:
    sandbox = bubblewrap_sandbox(maxFileBytes=1024 * 1024, workspaceBytes=3 * 1024 * 1024)
    code = """
import errno
try:
    with open("/workspace/big", "wb") as handle:
        handle.write(b"x" * (2 * 1024 * 1024))
    print("big written")
except OSError as error:
    print("big", errno.errorcode[error.errno])
written = 0
try:
    for index in range(10):
        with open(f"/workspace/part{index}", "wb") as handle:
            handle.write(b"x" * (1024 * 1024 - 1))
        written += 1
except OSError as error:
    print("parts", written, errno.errorcode[error.errno])
"""
    result = run_code(sandbox, code)
    lines = result.stdout.splitlines()
    assert lines[0] == "big EFBIG", result.stdout + result.stderr
    if "--size" in _bwrap_help():
        assert lines[1].startswith("parts") and lines[1].endswith("ENOSPC")
        assert int(lines[1].split()[1]) <= 3


def _bwrap_help() -> str:
    from agent_runtime.sandbox.bubblewrap import _help, bwrap_candidates

    return _help(bwrap_candidates(None)[0])


def test_the_code_runs_as_the_run_as_uid_under_root() -> None:
    sandbox = bubblewrap_sandbox(runAs=54321)
    result = run_code(sandbox, "import os; print(os.getuid(), os.getgid())")
    expected = 54321 if os.geteuid() == 0 else os.getuid()
    assert result.stdout.split()[0] == str(expected)


@pytest.fixture
def shared_directory() -> Iterator[Path]:
    # Readable by any uid (runAs too), unlike pytest's per-user temporary root.
    directory = Path(tempfile.mkdtemp(prefix="sandbox-binds-"))
    directory.chmod(0o755)
    (directory / "greeting.py").write_text("WORDS = 'from a bound directory'\n")
    (directory / "greeting.py").chmod(0o644)
    yield directory
    shutil.rmtree(directory)


def test_language_profiles_and_their_binds(shared_directory: Path) -> None:
    profile = {"command": ["/usr/bin/python3", "-I"], "extension": "py",
               "binds": [str(shared_directory)]}
    sandbox = bubblewrap_sandbox(languages={"py3": profile})
    assert sandbox.languages() == frozenset({"py3"})
    code = (f"import sys; sys.path.insert(0, {str(shared_directory)!r})\n"
            "from greeting import WORDS; print(WORDS)")
    result = run_code(sandbox, code, language="py3", timeout_ms=GENEROUS_MS)
    assert result.stdout == "from a bound directory\n", result.stderr
    # Without the bind the directory is not there at all.
    unbound = bubblewrap_sandbox(languages={"py3": {**profile, "binds": []}})
    assert run_code(unbound, code, language="py3").exit_code != 0
