"""Concurrent runs through one `serve` process, and the same workload on LangGraph and DBOS.

    python bench/serve_concurrency.py [--runs 1000] [--model-delay 1.0] [--quick]
        [--serve-arg=--flag=value ...] [--connections 200] [--no-peers]

A fake OpenAI-compatible model (bench/fake_chat_server.py, its own process)
answers every request after --model-delay seconds; each run is 5 tool
iterations (the model asks for one call of a cheap Python tool, five times)
and a text answer (bench/concurrency_workload.py). N runs are submitted at
once to a real `agent-runtime serve` (bench/serve_load.py: SQLite store,
`POST /runs` from an aiohttp client holding up to --connections connections),
then the same N runs are run on LangGraph (async graph, AsyncSqliteSaver) and
on DBOS (async workflows on a queue of concurrency N, SQLite), each in a
process of its own, against the same model (bench/concurrency_peers.py).

Figures (issue 34, acceptance 1 and 2):

- runs/s: completed runs over the time from the first submission to the last
  completion (ours: the run's `updatedAt`; peers: when the run returned);
  our ratio to each peer.
- added per step: the runtime's own time per step, i.e. the step's wall
  time minus the model's delay, read at the model: from answering one
  request of a run to receiving its next (the tool call, the checkpoints, the
  next request), and from the last answer to the run's completion; p50/p99
  over every step of every completed run.
- start delay: from the run's submission answered (ours) or made (peers) to
  its first model request: how long a run waits for the engine to take it.
- runs in flight, peak: the most runs at once between their first model
  request and their completion, i.e. how many the engine really held side by
  side (a server that admits runs only as fast as it completes them holds
  few, and its added time per step looks small).
- POST /runs latency p50/p99 (every answer, 429/503 included; their count is
  shown), each timed from sending to the answer read. Each POST carries an
  Idempotency-Key, and one whose connection failed (e.g. the server closed it
  as idle as the request was sent) is sent again; how many is shown.
- serve's CPU: the CPU seconds of its process tree from the first submission
  until every run settled (answering the POSTs included), per run; and how
  many CPUs it kept busy, on average over that time and at most over any
  second of it (sampled with the RSS). Near the CPUs it may use, serve was
  saturated, and the added time per step and the POST latency are mostly
  waiting for a turn (ours only).
- peak RSS of the serve process (its process tree, sampled, and its own
  VmHWM), its idle RSS after one warm-up run, and (peak - idle) / N: the
  memory of a waiting run. Peers' the same, from their own process.
- the fake model's loop lag p99 while each engine ran: how late its loop
  woke from 50 ms sleeps. Tens of ms there mean the model, not the engine,
  was slow, and the added time per step overstates the engine's.

Flags given with --serve-arg that this `serve` does not list in its --help
are left out, with a note, so the bench runs against older and newer servers
alike (e.g. --serve-arg=--max-concurrent-runs=2000). Exit status 1 when a
run of ours did not complete.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from concurrency_workload import TOOL_ITERATIONS, percentile, run_tag
from process_memory import tree_rss_kb
from serve_load import (
    BUSY_WINDOW,
    Load,
    ServeProcess,
    accepted_flags,
    drive,
    peak_cpus_busy,
    peak_rss_kb,
)

BENCH = Path(__file__).resolve().parent
PEERS = ("langgraph", "dbos")
QUICK_RUNS, QUICK_DELAY = 50, 0.2
START_TIMEOUT = 60.0
# Acceptance 1's bounds, printed beside the figures.
ADDED_P99_TARGET_MS = 50.0
POST_P99_TARGET_MS = 100.0


@dataclass
class Figures:
    """One engine's figures on the workload."""

    engine: str
    runs: int
    completed: int = 0
    runs_per_second: float = math.nan
    added_ms: list[float] = field(default_factory=list)
    start_delay_s: list[float] = field(default_factory=list)
    peak_in_flight: int = 0
    idle_rss_kb: int = 0
    peak_rss_kb: int = 0
    model_lag_ms: float = math.nan
    errors: list[str] = field(default_factory=list)
    missing: str | None = None

    @property
    def rss_per_run_kb(self) -> float:
        if not self.peak_rss_kb or not self.runs:
            return math.nan
        return (self.peak_rss_kb - self.idle_rss_kb) / self.runs


def timing_figures(figures: Figures, calls: dict[str, list[list[float]]],
                   runs: dict[str, list[float]], first_submit: float) -> None:
    """Fill runs/s, added time per step and start delay from the model's log of
    each run's requests (`[arrived, answered]`) and each completed run's
    `[submitted, finished]`."""
    figures.completed = len(runs)
    spans: list[tuple[float, int]] = []
    if runs:
        last = max(finished for _, finished in runs.values())
        figures.runs_per_second = len(runs) / max(last - first_submit, 1e-9)
    for tag, (submitted, finished) in runs.items():
        requests = sorted(calls.get(tag, []))
        if not requests:
            continue
        figures.start_delay_s.append(requests[0][0] - submitted)
        spans += [(requests[0][0], 1), (finished, -1)]
        answered = [answer for _, answer in requests]
        arrived = [arrival for arrival, _ in requests[1:]] + [finished]
        figures.added_ms.extend((next_start - answer) * 1000
                                for answer, next_start in zip(answered, arrived, strict=True))
    figures.peak_in_flight = peak_overlap(spans)


def peak_overlap(changes: list[tuple[float, int]]) -> int:
    """The highest running sum of `(time, +1 | -1)` changes taken in time order;
    at equal times an end counts before a start, so back-to-back spans do not
    overlap."""
    peak = current = 0
    for _, change in sorted(changes):
        current += change
        peak = max(peak, current)
    return peak


def model_calls(model_url: str, engine: str) -> dict[str, list[list[float]]]:
    answer = httpx.get(f"{model_url}/calls", params={"prefix": f"bench-run-{engine}-"},
                       timeout=120.0, trust_env=False)
    answer.raise_for_status()
    calls: dict[str, list[list[float]]] = answer.json()["calls"]
    return calls


class ModelServer:
    """bench/fake_chat_server.py in a child process."""

    def lag_ms(self) -> float:
        """Its loop's lag p99 since the last call (the first call starts the count)."""
        answer = httpx.get(f"{self.url}/lag", timeout=120.0, trust_env=False)
        answer.raise_for_status()
        found = answer.json()["p99_ms"]
        return math.nan if found is None else float(found)

    def __init__(self, delay: float) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(BENCH / "fake_chat_server.py"), "--delay", str(delay)],
            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.startswith("listening on "):
            self.stop()
            raise SystemExit("the fake model server did not start")
        self.url = line.split()[-1]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


def measure_ours(model: ModelServer, args: argparse.Namespace, flags: list[str],
                 workdir: Path) -> tuple[Figures, Load]:
    serve = ServeProcess(workdir, model.url, flags)
    serve.start()
    figures = Figures("ours", args.runs)
    try:
        # One run first: imports, the provider's SDK and the store's caches are
        # then in place, so the idle figure is what a warm server holds.
        warm = asyncio.run(drive(serve, [run_tag("warmup", 0)], connections=1,
                                 timeout=args.timeout))
        if warm.statuses.get("completed") != 1:
            raise SystemExit(f"the warm-up run did not complete: {warm.errors}\n"
                             f"{serve.output()[-3000:]}")
        figures.idle_rss_kb = tree_rss_kb(serve.pid)[0]
        tags = [run_tag("ours", index) for index in range(args.runs)]
        model.lag_ms()
        load = asyncio.run(drive(serve, tags, connections=args.connections,
                                 timeout=args.timeout))
        figures.model_lag_ms = model.lag_ms()
        figures.peak_rss_kb = peak_rss_kb(serve, load)
    finally:
        serve.stop()
    timing_figures(figures, model_calls(model.url, "ours"), load.runs, load.first_submit)
    figures.errors = load.errors
    if load.timed_out:
        figures.errors.insert(0, f"runs still pending after {args.timeout:.0f} s")
    return figures, load


def measure_peer(peer: str, model: ModelServer, args: argparse.Namespace,
                 workdir: Path) -> Figures:
    figures = Figures(peer, args.runs)
    directory = workdir / peer
    directory.mkdir()
    command = [sys.executable, str(BENCH / "concurrency_peers.py"), peer,
               "--model-url", model.url, "--runs", str(args.runs), "--workdir", str(directory)]
    model.lag_ms()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout,
                              check=False)
    except subprocess.TimeoutExpired:
        figures.errors.append(f"did not finish within {args.timeout:.0f} s")
        return figures
    figures.model_lag_ms = model.lag_ms()
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        figures.errors.append(f"exited {done.returncode}: {done.stderr.strip()[-600:]}")
        return figures
    found: dict[str, Any] = json.loads(lines[-1])
    if "missing" in found:
        figures.missing = found["missing"]
        return figures
    runs: dict[str, list[float]] = found["runs"]
    first = min((submitted for submitted, _ in runs.values()), default=0.0)
    timing_figures(figures, model_calls(model.url, peer), runs, first)
    figures.errors = found["errors"]
    figures.idle_rss_kb, figures.peak_rss_kb = found["idle_rss_kb"], found["peak_rss_kb"]
    return figures


def _cell(value: float, digits: int = 1) -> str:
    return "n/a" if math.isnan(value) else f"{value:,.{digits}f}"


def report(args: argparse.Namespace, engines: list[Figures], load: Load,
           flags: list[str], dropped: list[str]) -> None:
    ours = engines[0]
    print(f"serve concurrency: {args.runs} runs of {TOOL_ITERATIONS} tool iterations each, "
          f"model answers in {args.model_delay:g} s, all submitted at once")
    if flags:
        print(f"  serve {' '.join(flags)}")
    for flag in dropped:
        print(f"  note: this serve does not take {flag.split('=', 1)[0]}; left out")
    present = [figures for figures in engines if figures.missing is None]
    print(f"  {'':28s}" + "".join(f"{figures.engine:>14s}" for figures in present))

    def row(label: str, cells: list[str], note: str = "") -> None:
        print(f"  {label:28s}" + "".join(f"{cell:>14s}" for cell in cells) + note)

    row("completed", [f"{f.completed}/{f.runs}" for f in present])
    row("runs/s", [_cell(f.runs_per_second, 2) for f in present])
    for name, fraction in (("p50", 0.5), ("p99", 0.99)):
        row(f"added per step {name} (ms)",
            [_cell(percentile(f.added_ms, fraction)) for f in present],
            f"   (target p99 <= {ADDED_P99_TARGET_MS:g} ms)" if name == "p99" else "")
    for name, fraction in (("p50", 0.5), ("p99", 0.99)):
        row(f"start delay {name} (s)",
            [_cell(percentile(f.start_delay_s, fraction), 3) for f in present])
    row("runs in flight, peak", [str(f.peak_in_flight) for f in present])
    blank = ["-"] * (len(present) - 1)
    for name, fraction in (("p50", 0.5), ("p99", 0.99)):
        row(f"POST /runs {name} (ms)", [_cell(percentile(load.post_ms, fraction)), *blank],
            f"   (target p99 <= {POST_P99_TARGET_MS:g} ms)" if name == "p99" else "")
    rejected = ", ".join(f"{count} x {status}" for status, count in sorted(load.rejected.items()))
    row("POST /runs rejected", [rejected or "0", *blank])
    failed = ", ".join(f"{count} x {name}" for name, count in sorted(load.transport_errors.items()))
    row("POST /runs connection failed", [failed or "0", *blank],
        "   (each sent again with its Idempotency-Key)" if failed else "")
    # The CPU the load took: per run, and how many CPUs it kept busy on average.
    # A busy figure near the CPUs serve may use means it was saturated, and a
    # step or a POST then waits its turn behind the others.
    row("serve CPU per run (ms)", [_cell(load.cpu_seconds * 1000 / ours.runs), *blank])
    row("serve CPUs busy, mean", [_cell(load.cpu_seconds / load.cpu_wall_seconds, 2), *blank],
        f"   (of {os.cpu_count()} on this machine)")
    row(f"serve CPUs busy, peak {BUSY_WINDOW:g} s", [_cell(peak_cpus_busy(load.cpu_samples), 2),
                                                     *blank])
    row("idle RSS (MiB)", [_cell(f.idle_rss_kb / 1024) for f in present])
    row("peak RSS (MiB)", [_cell(f.peak_rss_kb / 1024) for f in present])
    row("RSS per waiting run (KiB)", [_cell(f.rss_per_run_kb) for f in present])
    row("model loop lag p99 (ms)", [_cell(f.model_lag_ms) for f in present])
    for figures in engines[1:]:
        if figures.missing is not None:
            print(f"  {figures.engine}: not installed ({figures.missing}); "
                  "pip install -e '.[bench]'")
        elif figures.completed:
            print(f"  ratio runs/s ours / {figures.engine}: "
                  f"{ours.runs_per_second / figures.runs_per_second:5.2f}   (target >= 1)")
        else:
            print(f"  ratio runs/s ours / {figures.engine}: n/a (no run completed)")
    for figures in engines:
        for error in figures.errors[:5]:
            print(f"  {figures.engine} error: {error[:300]}")


def raise_file_limit() -> None:
    """Thousands of open connections need as many descriptors in every process;
    children (serve, the model, the peers) inherit the raised limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 65536 if hard == resource.RLIM_INFINITY else min(hard, 65536)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, help="concurrent runs (default 1000; quick: 50)")
    parser.add_argument("--model-delay", type=float,
                        help="seconds the model takes per answer (default 1; quick: 0.2)")
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK_RUNS} runs, {QUICK_DELAY} s answers, unless given")
    parser.add_argument("--serve-arg", action="append", default=[], metavar="--FLAG[=VALUE]",
                        help="pass a flag to serve (repeatable); left out if serve lacks it")
    parser.add_argument("--connections", type=int, default=200,
                        help="the client's connections to serve (default 200: under serve's "
                             "--max-connections 256)")
    parser.add_argument("--timeout", type=float, default=3600.0,
                        help="seconds each engine's batch may take (default 3600)")
    parser.add_argument("--no-peers", action="store_true", help="measure serve only")
    args = parser.parse_args(argv)
    if args.runs is None:
        args.runs = QUICK_RUNS if args.quick else 1000
    if args.model_delay is None:
        args.model_delay = QUICK_DELAY if args.quick else 1.0
    if args.runs < 1 or args.model_delay < 0 or args.connections < 1 or args.timeout <= 0:
        parser.error("--runs and --connections must be at least 1, --model-delay at least 0, "
                     "--timeout positive")
    return args


def main() -> None:
    args = parse_args()
    raise_file_limit()
    flags, dropped = accepted_flags(args.serve_arg)
    model = ModelServer(args.model_delay)
    started = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="agent-runtime-serve-concurrency-") as scratch:
            workdir = Path(scratch)
            ours, load = measure_ours(model, args, flags, workdir / "serve")
            engines = [ours]
            if not args.no_peers:
                engines += [measure_peer(peer, model, args, workdir) for peer in PEERS]
    finally:
        model.stop()
    report(args, engines, load, flags, dropped)
    print(f"  (bench took {time.monotonic() - started:.0f} s)")
    if ours.completed != args.runs:
        raise SystemExit(f"{args.runs - ours.completed} of our runs did not complete")


if __name__ == "__main__":
    main()
