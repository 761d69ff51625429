"""The code runner's handler and the adapter's reading of its answers, without the stack.

The handler runs here in-process (its subprocess under limits, its clean
environment, its workspace); what it does only on Lambda (kill what the code
detached, clear /tmp, hide its own memory) runs in a child Python process
that plays the execution environment (`AWS_LAMBDA_RUNTIME_API` set, its
/tmp a test directory), so this test process's own orphans and /tmp are
never touched.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from aws_stack import FakeContext

from agent_runtime.sandbox import SandboxSettings, SandboxUnavailable
from functions.code_runner import app
from functions.code_runner.app import handler
from functions.lambda_sandbox import _result, with_code_runners

REPO = Path(__file__).resolve().parents[2]
LIMITS = {"memory_mb": 256, "cpu_seconds": 30, "max_processes": 32,
          "max_file_bytes": 1024 * 1024, "max_output_bytes": 4096}
# A guard against a hung run, not a speed limit.
GENEROUS_MS = 120_000


def request(code: str, **fields: Any) -> dict[str, Any]:
    return {"version": 1, "language": "python", "code": code, "variables": "{}",
            "environment": {}, "timeout_ms": GENEROUS_MS, "limits": dict(LIMITS), **fields}


def invoke(event: dict[str, Any]) -> dict[str, Any]:
    answer: dict[str, Any] = handler(event, FakeContext("CodeRunnerPythonFunction", 300_000))
    return answer


def stdout_of(answer: dict[str, Any]) -> str:
    return base64.b64decode(answer["stdout"]).decode()


@pytest.fixture(autouse=True)
def _scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The handler's /tmp: a directory of this test's."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    return scratch


def test_the_code_reads_its_variables_and_prints_its_output(_scratch: Path) -> None:
    code = ("import json, os\n"
            "variables = json.load(open(os.environ['AGENT_VARIABLES_FILE']))\n"
            "print(json.dumps({'count': len(variables['items']), 'g': os.environ['GREETING']}))")
    answer = invoke(request(code, variables=json.dumps({"items": [1, 2, 3]}),
                            environment={"GREETING": "hi"}))
    assert (answer["exit_code"], answer["limit"]) == (0, None)
    assert json.loads(stdout_of(answer)) == {"count": 3, "g": "hi"}
    # Its workspace went with the run.
    assert list(_scratch.iterdir()) == []


def test_output_past_the_cap_and_time_past_the_timeout_end_the_code() -> None:
    loud = invoke(request("import sys\nwhile True: sys.stdout.write('x' * 65536)"))
    assert loud["limit"] == "output"
    assert len(base64.b64decode(loud["stdout"])) == LIMITS["max_output_bytes"]
    slow = invoke(request("import time\ntime.sleep(120)", timeout_ms=500))
    assert slow["limit"] == "timeout" and slow["exit_code"] < 0


def test_memory_past_the_limit_fails_inside_the_code() -> None:
    answer = invoke(request("x = bytearray(512 * 1024 * 1024)"))
    assert answer["exit_code"] != 0
    assert b"MemoryError" in base64.b64decode(answer["stderr"])


NODE = shutil.which("node")
needs_node = pytest.mark.skipif(NODE is None, reason="node is not installed here")


@needs_node
def test_javascript_runs_where_node_is_and_its_heap_is_the_memory_asked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # This machine's node plays the node layer's (/opt/node/bin/node on Lambda).
    monkeypatch.setattr(app, "NODE", NODE)
    code = ("const fs = require('fs');\n"
            "const v = JSON.parse(fs.readFileSync(process.env.AGENT_VARIABLES_FILE));\n"
            "const heap = require('v8').getHeapStatistics().heap_size_limit;\n"
            "console.log(JSON.stringify({count: v.items.length, heapMb: heap / 1048576}));")
    answer = invoke(request(code, language="javascript",
                            variables=json.dumps({"items": [1, 2, 3]})))
    assert (answer["exit_code"], answer["limit"]) == (0, None), answer
    printed = json.loads(stdout_of(answer))
    assert printed["count"] == 3
    # --max-old-space-size is the request's memory_mb (256); V8 adds a little of its own.
    assert LIMITS["memory_mb"] <= printed["heapMb"] < 2 * LIMITS["memory_mb"]
    hungry = invoke(request("const keep = []; while (true) keep.push(new Array(1e6).fill(1));",
                            language="javascript"))
    assert hungry["exit_code"] != 0 and hungry["limit"] is None


def test_javascript_does_not_run_without_the_node_layer(monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    # The python runner has no node layer: it refuses javascript by name.
    monkeypatch.setattr(app, "NODE", str(tmp_path / "absent" / "node"))
    with pytest.raises(ValueError, match="language 'javascript' does not run here"):
        invoke(request("console.log(1)", language="javascript"))


@pytest.mark.parametrize(("change", "field"), [
    ({"version": 2}, "version"), ({"language": "ruby"}, "language"),
    ({"timeout_ms": "1"}, "timeout_ms"), ({"environment": {"PATH": "/evil"}}, "environment"),
    ({"limits": {**LIMITS, "max_output_bytes": 64 * 1024 * 1024}}, "max_output_bytes")])
def test_a_request_out_of_shape_is_refused_by_field(change: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        invoke({**request("print(1)"), **change})


ON_LAMBDA = """
import json, os, sys
from aws_stack import FakeContext
from functions.code_runner.app import handler
event = json.loads(sys.argv[1])
answer = handler(event, FakeContext("CodeRunnerPythonFunction", 300_000))
print(json.dumps(answer))
"""


def on_lambda(scratch: Path, event: dict[str, Any]) -> dict[str, Any]:
    """The handler in a process of its own, as Lambda runs it."""
    environment = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TMPDIR": str(scratch),
                   "AWS_LAMBDA_RUNTIME_API": "127.0.0.1:9001",
                   "PYTHONPATH": f"{REPO}:{REPO / 'tests' / 'functions'}",
                   "AWS_SECRET_ACCESS_KEY": "the-function-s-own"}
    done = subprocess.run([sys.executable, "-c", ON_LAMBDA, json.dumps(event)], env=environment,
                          capture_output=True, check=True, timeout=GENEROUS_MS / 1000)
    answer: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return answer


def test_on_lambda_nothing_the_code_started_outlives_the_invocation(
        _scratch: Path, tmp_path: Path) -> None:
    pid_file = tmp_path / "detached.pid"
    # A grandchild in a session of its own, its parent gone: no process group or
    # parent links it to the code any more.
    code = ("import os, time\n"
            "if os.fork() == 0:\n"
            "    os.setsid()\n"
            "    if os.fork() == 0:\n"
            "        open(os.environ['PID_FILE'], 'w').write(str(os.getpid()))\n"
            "        time.sleep(600)\n"
            "    os._exit(0)\n"
            "while not os.path.exists(os.environ['PID_FILE']): time.sleep(0.01)\n"
            "print('detached')")
    answer = on_lambda(_scratch, request(code, environment={"PID_FILE": str(pid_file)}))
    assert stdout_of(answer) == "detached\n"
    detached = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(detached, 0)


def test_on_lambda_tmp_is_cleared_around_each_run(_scratch: Path) -> None:
    (_scratch / "left-by-an-earlier-run").write_text("another tenant's data")
    code = ("import os, tempfile\n"
            "print(sorted(os.listdir(os.path.dirname(os.environ['HOME']))))\n"
            "open(os.path.join(os.path.dirname(os.environ['HOME']), 'mine'), 'w').write('x')")
    answer = on_lambda(_scratch, request(code))
    # It saw only its own workspace, and what it wrote outside it is gone too.
    (workspace,) = json.loads(stdout_of(answer).replace("'", '"'))
    assert workspace.startswith("code-")
    assert list(_scratch.iterdir()) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any process's memory and "
                    "environment; on Lambda the code runs as an unprivileged user")
def test_on_lambda_the_code_cannot_read_the_function_s_environment(_scratch: Path) -> None:
    code = ("import os\n"
            "try:\n"
            "    print(open(f'/proc/{os.getppid()}/environ', 'rb').read().count(b'own'))\n"
            "except OSError as error:\n"
            "    print(type(error).__name__)")
    answer = on_lambda(_scratch, request(code))
    assert stdout_of(answer) == "PermissionError\n"


# -- the adapter's reading of an answer (functions/lambda_sandbox.py) ---------------


def _answer(**fields: Any) -> bytes:
    return json.dumps({"version": 1, "exit_code": 0, "stdout": "", "stderr": "",
                       "limit": None, **fields}).encode()


def test_lambda_ending_the_invocation_is_a_limit_of_the_step() -> None:
    timed_out = json.dumps({"errorMessage": "2026-12-03T11:00:00Z abc Task timed out after "
                            "300.00 seconds"}).encode()
    assert _result("runner", "Unhandled", timed_out).limit == "timeout"
    out_of_memory = json.dumps({"errorType": "Runtime.OutOfMemory",
                                "errorMessage": "Runtime exited with error"}).encode()
    assert _result("runner", "Unhandled", out_of_memory).limit == "memory"


def test_other_runner_failures_are_the_sandbox_s_and_never_echo_its_message() -> None:
    crashed = json.dumps({"errorType": "Runtime.ExitError",
                          "errorMessage": "the variables were SECRET"}).encode()
    with pytest.raises(SandboxUnavailable, match=r"Runtime\.ExitError") as raised:
        _result("runner", "Unhandled", crashed)
    assert "SECRET" not in str(raised.value)
    for answer in (b"not json", _answer(version=2), _answer(stdout="%%%"),
                   _answer(limit="reboot"), _answer(exit_code="0")):
        with pytest.raises(SandboxUnavailable, match="does not read"):
            _result("runner", None, answer)


def test_a_good_answer_is_the_local_adapter_s_result() -> None:
    answer = _answer(exit_code=3, stdout=base64.b64encode(b"out\n").decode(),
                     stderr=base64.b64encode(b"err").decode(), limit="cpu")
    result = _result("runner", None, answer)
    assert (result.exit_code, result.stdout, result.stderr, result.limit) == (
        3, "out\n", "err", "cpu")


def test_a_step_s_timeout_is_capped_below_the_runner_s_and_a_local_choice_stays() -> None:
    settings = with_code_runners(None, runner_timeout_seconds=30)
    assert settings.adapter == "lambda"
    assert (settings.timeout_ms, settings.max_timeout_ms) == (20_000, 20_000)
    chosen = SandboxSettings.model_validate({"adapter": "lambda", "timeoutMs": 5_000,
                                             "allowedEnvironment": ["REGION"]})
    capped = with_code_runners(chosen, runner_timeout_seconds=300)
    assert (capped.timeout_ms, capped.max_timeout_ms) == (5_000, 290_000)
    assert capped.allowed_environment == ["REGION"]
    with pytest.raises(ValueError, match="maxOutputBytes"):
        SandboxSettings.model_validate({"adapter": "lambda", "maxOutputBytes": 4 * 1024 * 1024})
    # What only bubblewrap reads would do nothing: refused by name.
    with pytest.raises(ValueError, match="runAs, workspaceBytes"):
        SandboxSettings.model_validate({"adapter": "lambda", "runAs": 1000,
                                        "workspaceBytes": 1024})
