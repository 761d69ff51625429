"""The README's first hour, run as written: the shell commands of "Write your first
agent" against the manifest it shows, and the curl demo against a real `serve`.

What a test cannot do as a reader would is swapped, and only that: `make
install` is not run (the venv running this test stands in for `.venv`), RUN_ID
is the id the offline `run` printed, the live model is a local fake
OpenAI-compatible server (OPENAI_BASE_URL), and the demo's address is the
port this test's `serve` picked. Every command must succeed; every HTTP answer
must be a success (curl --fail-with-body), so a 409 anywhere fails the test.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.api.serve_process import start_serve
from tests.local_http import Answer, Request, serve_http

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")
SCRIPT_TIMEOUT = 300  # a guard against a hang, not a speed limit


def _section(heading: str) -> str:
    start = README.index(heading)
    end = README.find("\n## ", start + len(heading))
    return README[start:end if end != -1 else None]


def _blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", text, flags=re.DOTALL | re.MULTILINE)


def _venv_command() -> Path:
    command = Path(sys.prefix) / "bin" / "agent-runtime"
    if not command.is_file():
        pytest.skip(f"{command} is not installed (make install puts it there)")
    return command


def _fake_openai(request: Request) -> Answer:
    """An OpenAI-compatible chat endpoint: one answer, streamed or not."""
    body = json.loads(request.body or b"{}")
    text = "A lease is held while a run executes; a crash lets it lapse."
    usage = {"prompt_tokens": 12, "completion_tokens": 14, "total_tokens": 26}
    if not body.get("stream"):
        return Answer(200, {"Content-Type": "application/json"}, json.dumps({
            "id": "c1", "object": "chat.completion", "created": 1, "model": body.get("model"),
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": text}}],
            "usage": usage}).encode())
    chunks = [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": text},
                            "finish_reason": None}]},
              {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
              {"choices": [], "usage": usage}]
    events = "".join(f"data: {json.dumps({'id': 'c1', 'object': 'chat.completion.chunk', 'created': 1, 'model': body.get('model'), **chunk})}\n\n"  # noqa: E501
                     for chunk in chunks) + "data: [DONE]\n\n"
    return Answer(200, {"Content-Type": "text/event-stream"}, events.encode())


@pytest.mark.slow
def test_write_your_first_agent_runs_as_written(tmp_path: Path) -> None:
    section = _section("## Write your first agent")
    (manifest,) = _blocks(section, "yaml")
    assert "Save this as `first.agent.yaml`" in section
    (tmp_path / "first.agent.yaml").write_text(manifest, encoding="utf-8")
    (tmp_path / ".venv").symlink_to(Path(_venv_command()).parents[1])
    commands = [line for block in _blocks(section, "sh") for line in block.splitlines()
                if line.strip()]
    assert any(".venv/bin/agent-runtime run" in line for line in commands)
    assert all(line.startswith(("make ", ".venv/bin/", "OPENAI_API_KEY=")) for line in commands), \
        "a first-agent command needs the venv activated: write .venv/bin/agent-runtime"
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")

    with serve_http(_fake_openai) as fake:
        env = {key: value for key, value in os.environ.items()
               if not key.startswith(("OPENAI_", "AGENT_RUNTIME_"))}
        env["OPENAI_BASE_URL"] = f"{fake}/v1"
        run_id = None
        for line in commands:
            if line.startswith("make "):
                target = line.split()[1]
                assert re.search(rf"^{target}:", makefile, flags=re.MULTILINE), line
                continue  # the venv running this test is the one `make install` makes
            assert run_id is not None or "RUN_ID" not in line, "RUN_ID before a run printed one"
            command = line.replace("RUN_ID", run_id or "RUN_ID")
            done = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env,
                                  capture_output=True, text=True, timeout=SCRIPT_TIMEOUT,
                                  check=False)
            assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
            assert "Traceback" not in done.stderr, done.stderr
            printed = re.search(r"^run (run_\S+): completed", done.stdout, flags=re.MULTILINE)
            if run_id is None and printed:
                run_id = printed.group(1)
            if "OPENAI_API_KEY=" in line:
                assert "A lease is held while a run executes" in done.stdout
    assert run_id is not None


@pytest.mark.slow
def test_the_serve_curl_demo_runs_as_written(tmp_path: Path) -> None:
    if shutil.which("curl") is None:
        pytest.skip("the demo needs curl")
    section = _section("### Locally: `agent-runtime serve`")
    (demo,) = [block for block in _blocks(section, "sh") if block.startswith("API=")]
    fixtures = tmp_path / "tests" / "fixtures" / "manifests"
    shutil.copytree(REPO / "tests" / "fixtures" / "manifests", fixtures)
    serve = start_serve(tmp_path, token=None)  # its token in .agent-runtime/serve.token
    try:
        script = demo.replace("API=http://127.0.0.1:8000", f"API={serve.base_url}", 1)
        assert script != demo, "the demo no longer starts with the default address"
        # Any HTTP error ends the demo with curl's exit code and the answer's body.
        prelude = "set -euo pipefail\ncurl() { command curl --fail-with-body \"$@\"; }\n"
        done = subprocess.run(["bash", "-c", prelude + script + "\necho\necho \"FORK=$FORK\"\n"],
                              cwd=tmp_path, capture_output=True, text=True,
                              timeout=SCRIPT_TIMEOUT, check=False)
        assert done.returncode == 0, f"{done.stdout}\n{done.stderr}\n{serve.output()}"
        assert '"status":409' not in done.stdout
        fork = done.stdout.rsplit("FORK=", 1)[1].strip()
        with serve.client(token=(tmp_path / ".agent-runtime" / "serve.token").read_text()
                          .strip()) as http:
            runs = {run["runId"]: run["status"] for run in http.get("/runs").json()["runs"]}
        assert sorted(runs.values()) == ["cancelled", "completed"]
        assert runs[fork] == "cancelled"
    finally:
        serve.stop()
