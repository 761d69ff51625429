"""Many small runs on one SQLite store: runs/s sequential and from 2 processes.

200 runs of the README's `hello` manifest (one prompt step, answered by the
`scripted/echo` model: no network) through the Python API, all on one
`SqliteRunStore` file: first one process running all of them in turn, then
two processes running half each at the same time on the same file. Every run
must complete; a store error (SQLITE_BUSY surfacing as "database is locked",
say) counts as an error, and the bench exits non-zero if any run erred.

    python bench/many_runs.py [--runs 200] [--processes 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HELLO: dict[str, Any] = {
    "schemaVersion": "1.0", "id": "hello", "name": "Hello",
    "model": {"provider": "openai", "model": "gpt-5.6"},
    "variables": [{"key": "topic", "type": "string", "value": "durable agent checkpoints",
                   "description": "Subject to explain."}],
    "steps": [{"id": "explain", "type": "prompt",
               "systemPrompt": "You explain technical topics clearly and concisely.",
               "prompt": "Explain {{ topic }} in three sentences.",
               "outputVariable": "answer", "includeInFinalOutput": True}],
}


def child(path: str, runs: int) -> None:
    """Run `runs` hello runs on the store at `path`; print one JSON line."""
    from agent_runtime.engine import AgentRuntime
    from stores.sqlite import SqliteRunStore

    errors: list[str] = []
    completed = 0
    with SqliteRunStore(path) as store:
        runtime = AgentRuntime(store=store)
        started = time.perf_counter()
        for _ in range(runs):
            try:
                result = runtime.run_sync(manifest=HELLO, options={"model": "scripted/echo"})
            except Exception as error:  # a bench counts every failure, whatever its kind
                errors.append(f"{type(error).__name__}: {error}")
                continue
            if result.status.value == "completed":
                completed += 1
            else:
                errors.append(f"run ended {result.status.value}: {result.error}")
        elapsed = time.perf_counter() - started
    print(json.dumps({"seconds": elapsed, "completed": completed, "errors": errors}))


def _spawn(path: Path, runs: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, __file__, "--child", str(path), str(runs)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)})


def _collect(process: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = process.communicate()
    if process.returncode != 0:
        raise SystemExit(f"a bench process failed:\n{err[-2000:]}")
    found: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return found


def measure(path: Path, runs: int, processes: int) -> tuple[float, int, list[str]]:
    """The slowest process's time for its share, completed runs, errors.
    The store file is created first, so the processes race on runs, not on the schema."""
    from stores.sqlite import SqliteRunStore

    SqliteRunStore(path).close()
    shares = [runs // processes + (1 if index < runs % processes else 0)
              for index in range(processes)]
    children = [_spawn(path, share) for share in shares]
    results = [_collect(process) for process in children]
    # Each child's own clock excludes its interpreter start-up; the wall time
    # of the slowest child is the batch's.
    elapsed: float = max(result["seconds"] for result in results)
    errors = [error for result in results for error in result["errors"]]
    return elapsed, sum(result["completed"] for result in results), errors


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--processes", type=int, default=2)
    args = parser.parse_args()
    if args.runs < 1 or args.processes < 2:
        parser.error("--runs must be at least 1 and --processes at least 2")
    print(f"{args.runs} hello runs (scripted/echo) on one SQLite store (synchronous=FULL)")
    failed = False
    figures: dict[int, float] = {}
    with tempfile.TemporaryDirectory(prefix="agent-runtime-many-runs-") as directory:
        for processes in (1, args.processes):
            path = Path(directory) / f"runs-{processes}.sqlite"
            elapsed, completed, errors = measure(path, args.runs, processes)
            figures[processes] = completed / elapsed
            label = "sequential" if processes == 1 else f"{processes} processes"
            print(f"  {label:12s} {figures[processes]:7.1f} runs/s  {completed}/{args.runs}"
                  f" completed  {len(errors)} errors")
            for error in errors[:5]:
                print(f"    {error[:300]}")
            failed = failed or bool(errors) or completed != args.runs
    ratio = figures[args.processes] / figures[1]
    print(f"  ratio {args.processes} processes / sequential {ratio:5.2f}  (target >= 1, 0 errors)")
    if failed:
        raise SystemExit("some runs failed")


if __name__ == "__main__":
    main()
