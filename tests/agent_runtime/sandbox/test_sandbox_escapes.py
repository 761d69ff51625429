"""Escape attempts from the bubblewrap sandbox (issue 38, acceptance 2): each fails
inside the sandbox, and the host is unharmed afterwards."""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from pathlib import Path

import pytest
from sandbox_kit import bubblewrap_sandbox, processes_with, run_code

from agent_runtime.sandbox import SandboxSettings, SandboxUnavailable
from agent_runtime.sandbox.bubblewrap import BubblewrapSandbox


@pytest.fixture(scope="module")
def sandbox() -> BubblewrapSandbox:
    return bubblewrap_sandbox()


def _report(stdout: str) -> dict[str, str]:
    report: dict[str, str] = json.loads(stdout)
    return report


def test_files_outside_the_sandbox_cannot_be_read(sandbox: BubblewrapSandbox,
                                                  tmp_path: Path) -> None:
    secret = tmp_path / "host-secret.txt"
    secret.write_text("host secret 7f3a")
    secret.chmod(0o644)
    code = f"""
import json
report = {{}}
for path in [{str(secret)!r}, "/etc/shadow", "/etc/passwd", "/root/.bashrc",
             "/home", "{Path.cwd()}/pyproject.toml"]:
    try:
        with open(path) as handle:
            report[path] = "read: " + handle.read(64)
    except (OSError, IsADirectoryError) as error:
        report[path] = "refused: " + type(error).__name__
print(json.dumps(report))
"""
    result = run_code(sandbox, code)
    assert result.exit_code == 0, result.stderr
    report = _report(result.stdout)
    assert all(outcome.startswith("refused") for outcome in report.values()), report
    assert "7f3a" not in result.stdout


def test_writes_outside_its_workspace_fail_and_the_host_is_untouched(
        sandbox: BubblewrapSandbox, tmp_path: Path) -> None:
    target = tmp_path / "escaped.txt"
    tmp_path.chmod(0o777)  # the host would let anyone write here: only the sandbox stops it
    code = f"""
import json
report = {{}}
for path in [{str(target)!r}, "/usr/escaped.txt", "/etc/escaped.txt", "/escaped.txt"]:
    try:
        with open(path, "w") as handle:
            handle.write("escaped")
        report[path] = "written"
    except OSError as error:
        report[path] = "refused: " + type(error).__name__
with open("/workspace/output/inside.txt", "w") as handle:
    handle.write("fine")
report["workspace"] = "written"
print(json.dumps(report))
"""
    result = run_code(sandbox, code)
    assert result.exit_code == 0, result.stderr
    report = _report(result.stdout)
    assert report.pop("workspace") == "written"
    assert report.get(str(target), "").startswith("refused"), report
    assert not target.exists()
    assert not Path("/usr/escaped.txt").exists() and not Path("/escaped.txt").exists()
    assert not Path("/etc/escaped.txt").exists()


def test_no_network_tcp_udp_or_dns(sandbox: BubblewrapSandbox) -> None:
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(8)
    udp.bind(("127.0.0.1", 0))
    tcp.setblocking(False)
    udp.setblocking(False)
    try:
        code = f"""
import json, socket
report = {{}}
try:
    socket.create_connection(("127.0.0.1", {tcp.getsockname()[1]}), timeout=5)
    report["tcp"] = "connected"
except OSError as error:
    report["tcp"] = "refused: " + type(error).__name__
try:
    socket.create_connection(("1.1.1.1", 53), timeout=5)
    report["tcp-out"] = "connected"
except OSError as error:
    report["tcp-out"] = "refused: " + type(error).__name__
try:
    out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    out.sendto(b"escape", ("127.0.0.1", {udp.getsockname()[1]}))
    out.sendto(b"escape", ("8.8.8.8", 53))
    report["udp"] = "sent"
except OSError as error:
    report["udp"] = "refused: " + type(error).__name__
try:
    socket.getaddrinfo("example.com", 443)
    report["dns"] = "resolved"
except OSError as error:
    report["dns"] = "refused: " + type(error).__name__
report["interfaces"] = sorted(name for _, name in socket.if_nameindex())
print(json.dumps(report))
"""
        result = run_code(sandbox, code)
        assert result.exit_code == 0, result.stderr
        report = json.loads(result.stdout)
        assert report["tcp"].startswith("refused"), report
        assert report["tcp-out"].startswith("refused"), report
        assert report["dns"].startswith("refused"), report
        assert report["interfaces"] == ["lo"]  # its own loopback, no route out
        # Whatever the sandbox's sockets did, nothing reached the host's.
        with pytest.raises(BlockingIOError):
            tcp.accept()
        with pytest.raises(BlockingIOError):
            udp.recvfrom(64)
    finally:
        tcp.close()
        udp.close()


def test_a_fork_bomb_is_bounded_and_the_host_survives(sandbox: BubblewrapSandbox) -> None:
    token = f"forkbomb-{uuid.uuid4().hex}"
    code = f"""
import os, subprocess, sys, time
started = 0
try:
    for _ in range(10_000):
        subprocess.Popen(["/usr/bin/python3", "-c", "import time; time.sleep(3600)", "{token}"])
        started += 1
except (OSError, BlockingIOError) as error:
    print("stopped after", started, type(error).__name__)
    sys.exit(0)
print("unbounded", started)
"""
    result = run_code(sandbox, code)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("stopped after"), result.stdout
    assert int(result.stdout.split()[2]) <= 16  # maxProcesses
    _assert_gone(token)
    # The host still runs sandboxes, and forks.
    assert run_code(sandbox, "print('alive')").stdout == "alive\n"


def test_memory_past_the_limit_is_refused(sandbox: BubblewrapSandbox) -> None:
    code = """
try:
    hog = bytearray(512 * 1024 * 1024)
    print("allocated", len(hog))
except MemoryError:
    print("refused")
"""
    result = run_code(sandbox, code)
    assert "allocated" not in result.stdout
    assert result.stdout == "refused\n" or result.exit_code != 0


def test_memory_past_the_limit_in_javascript_is_refused(sandbox: BubblewrapSandbox) -> None:
    code = "const hog = []; for (;;) hog.push(Buffer.alloc(16 * 1024 * 1024, 1));"
    result = run_code(sandbox, code, language="javascript")
    assert result.exit_code != 0 and result.limit is None


def test_printing_past_the_output_limit_kills_the_code(sandbox: BubblewrapSandbox) -> None:
    token = f"chatty-{uuid.uuid4().hex}"
    code = f"""
import subprocess, sys
subprocess.Popen(["/usr/bin/python3", "-c", "import time; time.sleep(3600)", "{token}"])
while True:
    sys.stdout.write("x" * 65536)
"""
    result = run_code(sandbox, code)
    assert result.limit == "output"
    assert len(result.stdout) <= 4096
    _assert_gone(token)


def test_sleeping_past_the_timeout_kills_the_whole_tree(sandbox: BubblewrapSandbox) -> None:
    token = f"sleeper-{uuid.uuid4().hex}"
    code = f"""
import subprocess, time
subprocess.Popen(["/usr/bin/python3", "-c", "import time; time.sleep(3600)", "{token}"],
                 start_new_session=True)
print("started", flush=True)
time.sleep(3600)
"""
    result = run_code(sandbox, code, timeout_ms=3_000)
    assert result.limit == "timeout"
    assert result.stdout == "started\n"
    _assert_gone(token)


def test_the_hosts_environment_is_not_visible(sandbox: BubblewrapSandbox,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_RUNTIME_TEST_SECRET", "host-secret-91c2")
    code = """
import json, os
print(json.dumps({"environ": dict(os.environ),
                  "init": open("/proc/1/environ", "rb").read().decode(errors="replace")}))
"""
    result = run_code(sandbox, code, environment={"GREETING": "hello"})
    assert result.exit_code == 0, result.stderr
    assert "host-secret-91c2" not in result.stdout
    environ = json.loads(result.stdout)["environ"]
    assert environ["GREETING"] == "hello"
    assert set(environ) <= {"GREETING", "PATH", "HOME", "TMPDIR", "LANG", "PWD",
                            "AGENT_VARIABLES_FILE", "AGENT_OUTPUT_DIRECTORY"}
    node = run_code(sandbox, "console.log(JSON.stringify(process.env))", language="javascript")
    assert node.exit_code == 0 and "host-secret-91c2" not in node.stdout


def test_javascript_cannot_read_host_files_or_connect(sandbox: BubblewrapSandbox,
                                                      tmp_path: Path) -> None:
    secret = tmp_path / "host-secret.txt"
    secret.write_text("host secret 5d1e")
    code = f"""
const fs = require("fs"), net = require("net");
let read;
try {{ read = fs.readFileSync({json.dumps(str(secret))}, "utf8"); }} catch (e) {{ read = e.code; }}
const socket = net.connect(80, "1.1.1.1");
const report = (net) => {{ console.log(JSON.stringify({{read, net}})); process.exit(0); }};
socket.on("connect", () => report("connected"));
socket.on("error", (e) => report(e.code));
"""
    result = run_code(sandbox, code, language="javascript")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["read"] == "ENOENT" and report["net"] != "connected"


def test_cpu_time_past_the_limit_ends_the_code() -> None:
    sandbox = bubblewrap_sandbox(cpuSeconds=1)
    result = run_code(sandbox, "while True: pass")
    assert result.exit_code != 0
    assert result.limit in {"cpu", None}


def test_without_bubblewrap_the_adapter_refuses_and_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    sandbox = BubblewrapSandbox(SandboxSettings.model_validate({"bwrap": "/nonexistent/bwrap"}))
    refusal = sandbox.availability()
    assert refusal is not None and "cannot create a sandbox" in refusal
    with pytest.raises(SandboxUnavailable, match="code steps cannot run"):
        run_code(sandbox, f"open({str(marker)!r}, 'w').write('ran')")
    assert not marker.exists()


def _assert_gone(token: str) -> None:
    # Killing the pid namespace's parent ends every process in it; the kernel
    # reaps them a moment later, so poll (with a deadline far above that moment).
    deadline = time.monotonic() + 60
    while processes_with(token):
        assert time.monotonic() < deadline, f"processes of the sandbox outlived it: {token}"
        time.sleep(0.05)
    assert os.getpid() > 0
