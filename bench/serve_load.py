"""`agent-runtime serve` under the concurrency bench's load, over its HTTP API only.

`ServeProcess` starts a real `serve` (a child process, SQLite store and event
log in a scratch directory, `--port 0`, a tokens file) whose runtime config
points the `openai` provider at the fake model and lifts the per-tenant
quotas; `drive` submits the runs from an async client, waits until none is
`created` or `running`, then reads each run once. Nothing here depends on how
`serve` executes runs, so the bench measures today's launcher and any later
one alike.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
from concurrency_workload import MODEL_NAME, PROMPT, SYSTEM_PROMPT, TOOL_NAME
from process_cpu import tree_cpu_seconds
from process_memory import rss_kb, tree_rss_kb

REPO = Path(__file__).resolve().parents[1]
START_TIMEOUT = 120.0
# How long a rejected submission (429, 503) waits when the answer names no
# Retry-After, and the most it waits whatever the answer says.
DEFAULT_RETRY_AFTER = 1.0
MAX_RETRY_AFTER = 5.0
# A POST whose connection failed is sent again, with its Idempotency-Key, this often.
MAX_TRANSPORT_RETRIES = 3
POLL_EVERY = 0.5
# How long the client keeps an idle connection for its next request: less than
# serve's idle timeout (`serve --idle-timeout`, 5 s), so that it never sends on a
# connection serve is closing (the request would fail: "Server disconnected").
KEEPALIVE_SECONDS = 2.0
RSS_EVERY = 0.25
# The span `peak_cpus_busy` reads the CPUs serve kept busy over.
BUSY_WINDOW = 1.0

MANIFEST: dict[str, Any] = {
    "schemaVersion": "1.0", "id": "concurrency-bench", "name": "Concurrency bench",
    "model": {"provider": "openai", "model": MODEL_NAME},
    "variables": [{"key": "tag", "type": "string", "value": "bench-run-none-000000",
                   "description": "Which run this is, for the fake model."}],
    "steps": [{"id": "work", "type": "prompt", "systemPrompt": SYSTEM_PROMPT,
               "prompt": PROMPT.format(tag="{{ tag }}"),
               "tools": [TOOL_NAME], "outputVariable": "summary",
               "includeInFinalOutput": True}],
}
TOOLS_FILE = f'''"""The bench's tool for `serve --tools` (bench/serve_load.py writes it)."""
from agent_runtime import tool
from bench.concurrency_workload import {TOOL_NAME} as plain_{TOOL_NAME}

{TOOL_NAME} = tool(plain_{TOOL_NAME})
'''
# The quotas a shared host sets per tenant (8 unfinished runs, 60 a minute)
# would refuse the bench's burst: lifted, as a host that expects it would.
CONFIG_FILE = """version: '1.0'
providers:
  openai:
    driver: openai-compatible
    baseURL: {model_url}/v1
    includeUsage: false
policy:
  maxConcurrentRuns: null
  runsPerMinute: null
"""


def serve_command() -> list[str]:
    return [sys.executable, "-m", "agent_runtime.cli", "serve"]


def accepted_flags(wanted: list[str]) -> tuple[list[str], list[str]]:
    """The flags of `wanted` (`--flag` or `--flag=value`) that this `serve`'s --help
    lists, and those it does not."""
    shown = subprocess.run([*serve_command(), "--help"], capture_output=True, text=True,
                           check=True, timeout=START_TIMEOUT, env=_env()).stdout
    kept: list[str] = []
    dropped: list[str] = []
    for flag in wanted:
        name = flag.split("=", 1)[0]
        known = re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", shown) is not None
        (kept if name.startswith("--") and known else dropped).append(flag)
    return kept, dropped


def _env() -> dict[str, str]:
    # The tools file imports bench.concurrency_workload from the repository.
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return dict(os.environ, PYTHONPATH=path, PYTHONUNBUFFERED="1")


@dataclass
class ServeProcess:
    workdir: Path
    model_url: str
    flags: list[str]
    process: subprocess.Popen[bytes] | None = None
    base_url: str = ""
    token: str = field(default_factory=lambda: secrets.token_hex(24))

    @property
    def log(self) -> Path:
        return self.workdir / "serve.log"

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "bench.config.yaml"
        config.write_text(CONFIG_FILE.format(model_url=self.model_url), encoding="utf-8")
        tools = self.workdir / "bench_tools.py"
        tools.write_text(TOOLS_FILE, encoding="utf-8")
        tokens = self.workdir / "tokens.yaml"
        descriptor = os.open(tokens, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as out:
            out.write(f"{self.token}: local\n")
        command = [*serve_command(), "--host", "127.0.0.1", "--port", "0",
                   "--store", str(self.workdir / "runs.sqlite"),
                   "--events", str(self.workdir / "events.jsonl"),
                   "--artifacts", str(self.workdir / "artifacts"),
                   "--config", str(config), "--tools", str(tools), "--tokens", str(tokens),
                   *self.flags]
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(command, cwd=self.workdir, stdout=out,
                                            stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, env=_env())
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            found = re.search(r"listening on (http://\S+)", self.output())
            if found:
                self.base_url = found.group(1)
                return
            if self.process.poll() is not None:
                raise SystemExit(f"serve exited with {self.process.returncode}:\n"
                                 f"{self.output()[-3000:]}")
            time.sleep(0.1)
        self.stop()
        raise SystemExit(f"serve did not start within {START_TIMEOUT:.0f} s")

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM, then kill if it does not stop in time."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=timeout)


@dataclass
class Load:
    """What the bench saw of one batch of runs through serve."""

    post_ms: list[float] = field(default_factory=list)
    rejected: dict[int, int] = field(default_factory=dict)
    # POSTs whose connection failed (and were retried), by the error's name.
    transport_errors: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    # tag -> [POST answered (wall clock), finished (the run's updatedAt)]
    runs: dict[str, list[float]] = field(default_factory=dict)
    statuses: dict[str, int] = field(default_factory=dict)
    first_submit: float = 0.0
    peak_tree_rss_kb: int = 0
    # serve's CPU seconds (its process tree) from the first submission until
    # every run settled: what the load cost it, answering the POSTs included.
    cpu_seconds: float = math.nan
    cpu_wall_seconds: float = math.nan  # the wall time those CPU seconds were spent in
    # (monotonic time, the tree's CPU seconds so far), every RSS_EVERY seconds.
    cpu_samples: list[tuple[float, float]] = field(default_factory=list)
    timed_out: bool = False


async def drive(serve: ServeProcess, tags: list[str], *, connections: int,
                timeout: float) -> Load:
    """Submit one run per tag, wait for all to settle, and read each run once.

    The client is aiohttp's: with 200 connections in flight, httpx's pool took
    a whole core of the bench's process during the submissions, serve idling
    meanwhile, so `POST /runs` latency measured the client more than serve."""
    load = Load()
    connector = aiohttp.TCPConnector(limit=connections, limit_per_host=connections,
                                     keepalive_timeout=KEEPALIVE_SECONDS)
    async with aiohttp.ClientSession(
            base_url=serve.base_url, connector=connector,
            timeout=aiohttp.ClientTimeout(total=120.0),
            headers={"Authorization": f"Bearer {serve.token}"}) as http:
        gate = asyncio.Semaphore(connections)
        sampler = asyncio.create_task(_sample(serve.pid, load))
        cpu_before = tree_cpu_seconds(serve.pid)
        load.first_submit = time.time()
        ids = await asyncio.gather(*(_submit(http, gate, tag, load) for tag in tags))
        submitted = {tag: run_id for tag, run_id in zip(tags, ids, strict=True) if run_id}
        load.timed_out = not await _settled(http, timeout)
        load.cpu_seconds = tree_cpu_seconds(serve.pid) - cpu_before
        load.cpu_wall_seconds = time.time() - load.first_submit
        sampler.cancel()
        views = await asyncio.gather(*(_read(http, gate, run_id)
                                       for run_id in submitted.values()))
    for tag, view in zip(submitted, views, strict=True):
        status = str(view.get("status", "unreadable"))
        load.statuses[status] = load.statuses.get(status, 0) + 1
        if status == "completed":
            load.runs[tag].append(datetime.fromisoformat(view["updatedAt"]).timestamp())
        else:
            load.runs.pop(tag, None)
            if len(load.errors) < 20:
                load.errors.append(f"{tag}: {status} {str(view.get('error'))[:200]}")
    return load


async def _submit(http: aiohttp.ClientSession, gate: asyncio.Semaphore, tag: str,
                  load: Load) -> str | None:
    body = {"manifest": MANIFEST, "variables": {"tag": tag}}
    # As a careful client does: a repeat of the same key answers the run it made,
    # so a POST whose connection failed (the server may have made the run) is retried.
    headers = {"Idempotency-Key": tag}
    failures = 0
    while True:
        async with gate:
            started = time.perf_counter()
            try:
                async with http.post("/runs", json=body, headers=headers) as response:
                    status, answer = response.status, await response.read()
                    retry_after = response.headers.get("retry-after")
            except (aiohttp.ClientConnectionError, TimeoutError) as error:
                failures += 1
                load.transport_errors[type(error).__name__] = \
                    load.transport_errors.get(type(error).__name__, 0) + 1
                if failures < MAX_TRANSPORT_RETRIES:
                    continue
                load.errors.append(f"{tag}: POST /runs: {type(error).__name__}: {error}")
                return None
            load.post_ms.append((time.perf_counter() - started) * 1000)
        if status == 201:
            load.runs[tag] = [time.time()]
            run_id: str = json.loads(answer)["run"]["runId"]
            return run_id
        if status not in (429, 503):
            load.errors.append(f"{tag}: POST /runs answered {status}: "
                               f"{answer[:300].decode(errors='replace')}")
            return None
        load.rejected[status] = load.rejected.get(status, 0) + 1
        await asyncio.sleep(_retry_after(retry_after))


def _retry_after(header: str | None) -> float:
    try:
        wait = float(header if header is not None else DEFAULT_RETRY_AFTER)
    except ValueError:
        wait = DEFAULT_RETRY_AFTER
    return min(max(wait, 0.0), MAX_RETRY_AFTER)


async def _settled(http: aiohttp.ClientSession, timeout: float) -> bool:
    """Wait until no run is `created` or `running`; False if `timeout` passes first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pending = 0
        for status in ("created", "running"):
            async with http.get("/runs", params={"status": status, "limit": "1"}) as page:
                pending += (len((await page.json()).get("runs", [])) if page.status == 200
                            else 1)
        if not pending:
            return True
        await asyncio.sleep(POLL_EVERY)
    return False


async def _read(http: aiohttp.ClientSession, gate: asyncio.Semaphore,
                run_id: str) -> dict[str, Any]:
    async with gate, http.get(f"/runs/{run_id}") as response:
        if response.status != 200:
            return {"status": f"unreadable ({response.status})"}
        view: dict[str, Any] = (await response.json())["run"]
    return view


async def _sample(pid: int, load: Load) -> None:
    """The most the serve process tree held at once, and its CPU seconds so far, sampled
    while the load runs."""
    while True:
        load.peak_tree_rss_kb = max(load.peak_tree_rss_kb, tree_rss_kb(pid)[0])
        load.cpu_samples.append((time.monotonic(), tree_cpu_seconds(pid)))
        await asyncio.sleep(RSS_EVERY)


def peak_cpus_busy(samples: list[tuple[float, float]], window: float = BUSY_WINDOW) -> float:
    """The most CPUs a process tree kept busy over any `window` seconds, from samples of
    `(time, CPU seconds so far)` in time order (NaN: none spans the window). The
    average over a whole load hides a saturated burst behind its quiet tail."""
    peak = math.nan
    end = 0
    for start, (began, spent) in enumerate(samples):
        end = max(end, start + 1)
        while end < len(samples) and samples[end][0] - began < window:
            end += 1
        if end == len(samples):
            break
        ended, total = samples[end]
        busy = (total - spent) / (ended - began)
        peak = busy if math.isnan(peak) else max(peak, busy)
    return peak


def peak_rss_kb(serve: ServeProcess, load: Load) -> int:
    """The larger of the sampled tree's peak and the serve process's own high-water mark."""
    return max(load.peak_tree_rss_kb, rss_kb(serve.pid)[1])
