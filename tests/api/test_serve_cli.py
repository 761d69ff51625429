"""`agent-runtime serve` as a command: without its extra installed, with bad flags, on a
port that is taken. Every other command works without the serve extra."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from serve_process import REPO, TEST_TOKEN

from agent_runtime.cli import main

HIDE = ("import sys\n"
        "for name in {hidden!r}:\n"
        "    sys.modules[name] = None  # as if not installed\n"
        "from agent_runtime.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n")


def cli_without(hidden: tuple[str, ...], *args: str,
                cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", HIDE.format(hidden=hidden), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120, check=False,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})


@pytest.mark.parametrize(("hidden", "missing"), [
    (("aws_lambda_powertools",), "aws-lambda-powertools is not installed"),
    (("uvicorn",), "uvicorn is not installed"),
])
def test_serve_without_its_extra_says_what_to_install(tmp_path: Path, hidden: tuple[str, ...],
                                                      missing: str) -> None:
    done = cli_without(hidden, "serve", cwd=tmp_path)
    assert done.returncode == 1
    assert missing in done.stderr
    assert "pip install 'agent-runtime-durable[serve]'" in done.stderr
    assert "make serve" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / ".agent-runtime").exists()  # nothing created, nothing served


def test_other_commands_need_no_serve_extra(tmp_path: Path) -> None:
    hidden = ("aws_lambda_powertools", "uvicorn")
    assert cli_without(hidden, "--help", cwd=tmp_path).returncode == 0
    manifest = REPO / "tests" / "fixtures" / "manifests" / "hello.agent.yaml"
    done = cli_without(hidden, "validate", str(manifest), cwd=tmp_path)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("flags", [["--workers", "0"], ["--workers", "65"], ["--port", "70000"],
                                   ["--reconcile-interval", "0"], ["--grace-seconds", "-1"],
                                   ["--lease-seconds", "0"], ["--max-concurrent-runs", "0"],
                                   ["--store-threads", "0"], ["--store-threads", "257"],
                                   ["--tenant-concurrent-runs", "0"]])
def test_bad_serve_flags_are_invalid_input(flags: list[str],
                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", *flags]) == 2
    assert flags[0] in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--tenant-concurrent-runs", "--tenant-workers"])
def test_one_tenants_share_is_at_most_the_hosts_bound(
        flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--max-concurrent-runs", "4", flag, "5"]) == 2
    error = capsys.readouterr().err
    assert "--tenant-concurrent-runs" in error and "--max-concurrent-runs (4)" in error


def test_a_port_in_use_is_an_error_naming_it(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "agent_runtime.cli", "serve", "--port", str(port),
             "--token", TEST_TOKEN, "--store", str(tmp_path / "runs.sqlite"),
             "--events", "none"],
            cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1
    assert f"cannot listen on http://127.0.0.1:{port}" in done.stderr
    assert "Traceback" not in done.stderr
