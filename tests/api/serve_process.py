"""A real `agent-runtime serve` in a child process, for tests that speak HTTP to it.

    with running_serve(tmp_path) as server:      # --token TEST_TOKEN
        with server.client() as http:
            http.get("/runs")

It listens on 127.0.0.1 with a port the server picks itself (`--port 0`,
read from its first line), uses a SQLite store and an event log under the
given directory, and is stopped with SIGTERM (then killed, if it must be)
however the test ends. Waiting is bounded and generous: a slow machine makes
a test slower, never wrong.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "manifests"
START_TIMEOUT = 90.0
POLL_TIMEOUT = 90.0

ECHO = {"model": "scripted/echo"}
TERMINAL = ("completed", "failed", "cancelled")
# serve refuses tokens shorter than 32 characters or with fewer than 8 different ones.
TEST_TOKEN = "test-token-of-serve-0123456789abcdef"
# Webhook steps may call the test's receiver on 127.0.0.1.
ALLOW_LOOPBACK_WEBHOOKS = "version: '1.0'\nwebhooks:\n  allowPrivateNetworks: true\n"
# Lifts the per-tenant bounds on concurrent runs and runs per minute, for tests
# that post many runs back to back (on a slow machine many are still running).
UNMETERED_POLICY = "policy:\n  maxConcurrentRuns: null\n  runsPerMinute: null\n"

T = TypeVar("T")


@dataclass
class Serve:
    process: subprocess.Popen[bytes]
    base_url: str
    token: str | None
    workdir: Path
    log: Path

    def client(self, token: str | None = None, *, auth: bool = True,
               **kwargs: Any) -> httpx.Client:
        """A client with `Authorization: Bearer <token>` (this server's, unless given)."""
        headers = dict(kwargs.pop("headers", {}))
        chosen = token if token is not None else self.token
        if auth and chosen is not None:
            headers["Authorization"] = f"Bearer {chosen}"
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=30.0,
                            trust_env=False, **kwargs)

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def events(self) -> list[dict[str, Any]]:
        import json

        path = self.workdir / "events.jsonl"
        if not path.is_file():
            return []
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
                if line.strip()]

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM, then wait; killed if it does not stop in time. The exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=timeout)
                raise AssertionError(f"serve did not stop on SIGTERM:\n{self.output()}") from None
        return self.process.returncode


def start_serve(workdir: Path, *, token: str | None = TEST_TOKEN,
                args: Sequence[str] = (), pythonpath: Sequence[Path] = ()) -> Serve:
    """Start `agent-runtime serve` in `workdir` and wait until it answers (with
    `pythonpath` importable too: an installed plugin's directory)."""
    log = workdir / "serve.log"
    command = [sys.executable, "-m", "agent_runtime.cli", "serve", "--host", "127.0.0.1",
               "--port", "0", "--store", str(workdir / "runs.sqlite"),
               "--events", str(workdir / "events.jsonl"),
               "--artifacts", str(workdir / "artifacts")]
    if token is not None:
        command += ["--token", token]
    command += list(args)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(map(str, [REPO, *pythonpath])),
               PYTHONUNBUFFERED="1")
    with open(log, "wb") as out:
        process = subprocess.Popen(command, cwd=workdir, stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, env=env)
    serve = Serve(process, "", token, workdir, log)
    try:
        serve.base_url = _wait_for_url(serve)
        wait_until(lambda: _answers(serve.base_url), what="serve answering",
                   timeout=START_TIMEOUT)
    except BaseException:
        serve.stop()
        raise
    return serve


@contextmanager
def running_serve(workdir: Path, *, token: str | None = TEST_TOKEN,
                  args: Sequence[str] = (), pythonpath: Sequence[Path] = ()) -> Iterator[Serve]:
    serve = start_serve(workdir, token=token, args=args, pythonpath=pythonpath)
    try:
        yield serve
    finally:
        serve.stop()


def write_tokens_file(path: Path, tokens: dict[str, str]) -> Path:
    """A `--tokens` file as serve takes it: token -> tenant, readable by its owner only."""
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.writelines(f"{token}: {tenant}\n" for token, tenant in tokens.items())
    os.chmod(path, 0o600)
    return path


def _wait_for_url(serve: Serve) -> str:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        found = re.search(r"listening on (http://\S+)", serve.output())
        if found:
            return found.group(1)
        if serve.process.poll() is not None:
            raise AssertionError(f"serve exited with {serve.process.returncode}:\n"
                                 f"{serve.output()}")
        time.sleep(0.1)
    raise AssertionError(f"serve did not start within {START_TIMEOUT}s:\n{serve.output()}")


def _answers(base_url: str) -> bool:
    try:
        httpx.get(base_url + "/openapi.json", timeout=5.0, trust_env=False)
    except httpx.TransportError:
        return False
    return True


def wait_until(check: Callable[[], T | None], *, what: str,
               timeout: float = POLL_TIMEOUT, every: float = 0.1) -> T:
    """Poll `check` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)


# -- what the tests ask of a serve --------------------------------------------------


def approval_manifest() -> str:
    return (FIXTURES / "approval.agent.yaml").read_text(encoding="utf-8")


def webhook_manifest(receiver_url: str, name: str) -> dict[str, Any]:
    return {"schemaVersion": "1.0", "id": name, "steps": [
        {"id": "call", "type": "webhook", "url": f"{receiver_url}/{name}/first",
         "timeoutMs": 120_000, "retries": 0, "body": {"hello": "world"}},
        {"id": "after", "type": "webhook", "url": f"{receiver_url}/{name}/second",
         "timeoutMs": 120_000, "retries": 0}]}


def start(http: httpx.Client, manifest: Any, **extra: Any) -> dict[str, Any]:
    response = http.post("/runs", json={"manifest": manifest, "options": ECHO, **extra})
    assert response.status_code == 201, response.text
    run: dict[str, Any] = response.json()["run"]
    assert response.headers["location"] == f"/runs/{run['runId']}"
    return run


def run_of(http: httpx.Client, run_id: str) -> dict[str, Any]:
    response = http.get(f"/runs/{run_id}")
    assert response.status_code == 200, response.text
    run: dict[str, Any] = response.json()["run"]
    return run


def wait_for_status(http: httpx.Client, run_id: str, status: str) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        run = run_of(http, run_id)
        if run["status"] == status:
            return run
        assert run["status"] not in TERMINAL, run
        return None

    return wait_until(reached, what=f"run {run_id} to be {status}")


def assert_problem(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    problem: dict[str, Any] = response.json()
    assert problem["status"] == status
    assert {"type", "title", "detail"} <= set(problem)
    assert "Traceback" not in response.text
    return problem
