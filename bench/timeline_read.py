"""Reading a run's whole timeline: every checkpoint, measured against reading the last.

A run's timeline (the API's GET /runs/{id}/checkpoints, `inspect --checkpoints`)
needs every checkpoint in full. Loaded one by one, each is refolded from the
run's first body, so the timeline costs N times the latest checkpoint;
`load_checkpoints` folds once. For N = 100, 500 and 1,000 checkpoints (each
appends a ~200-byte transcript entry and a step result) this prints the time of
`load_checkpoints(1..N)` as a multiple of one `load_latest_checkpoint`, and the
same for loading a sample of checkpoints one by one, scaled to all N.

    python bench/timeline_read.py [--sizes 100 500 1000] [--stores sqlite file memory]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from stores import open_store
from stores.base import RunStore
from stores.records import Checkpoint, CheckpointBudget, Frame, RunRecord

NOW = datetime(2026, 1, 1, tzinfo=UTC)
RUN = "timeline"
SAMPLE = 20  # checkpoints loaded one by one, spread over the run


def fill(store: RunStore, steps: int) -> None:
    store.create_run(RunRecord(run_id=RUN, manifest_hash="sha256:bench"))
    store.resume_run(RUN, owner="bench", now=NOW, lease_seconds=3600)
    transcript: list[dict[str, object]] = []
    results: list[dict[str, object]] = []
    for step in range(1, steps + 1):
        transcript.append({"role": "assistant", "content": f"{step:06d} " + "x" * 180})
        results.append({"step_id": f"s{step}", "output": step})
        store.save_checkpoint(Checkpoint(
            run_id=RUN, seq=step, attempt=1, manifest_hash="sha256:bench",
            cursor=[Frame(step_path=f"s{step}", step_id=f"s{step}", step_index=step)],
            variables={"items": list(range(200)), "step": step}, step_results=list(results),
            transcript=list(transcript), budget=CheckpointBudget(consumed_tokens=step),
            created_at=NOW + timedelta(milliseconds=step)), expected_attempt=1)


def seconds(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def measure(driver: str, steps: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory(prefix="agent-runtime-bench-") as directory:
        location = Path(directory) / ("runs.sqlite" if driver == "sqlite" else "runs")
        with open_store(driver, location) as store:
            fill(store, steps)
            # Best of 3 for both sides of the targeted ratio: with one timing of
            # load_checkpoints, one pause (a collection, a preemption) moved memory's
            # N=1000 ratio from about x7 to x23 in one `make bench` run.
            latest = min(seconds(lambda: store.load_latest_checkpoint(RUN)) for _ in range(3))
            every = min(seconds(lambda: store.load_checkpoints(RUN, 1, steps)) for _ in range(3))
            sample = range(steps // SAMPLE, steps + 1, steps // SAMPLE)
            one_by_one = seconds(lambda: [store.load_checkpoint(RUN, seq) for seq in sample])
            return every / latest, one_by_one * steps / len(sample) / latest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 500, 1000])
    parser.add_argument("--stores", nargs="+", default=["sqlite", "file", "memory"])
    args = parser.parse_args()
    print("timeline read: every checkpoint of a run, in multiples of loading its latest one")
    for driver in args.stores:
        for size in args.sizes:
            every, one_by_one = measure(driver, size)
            print(f"  {driver:<7} N={size:<5} load_checkpoints x{every:6.1f} (target <= 10)   "
                  f"one by one x{one_by_one:7.1f}")


if __name__ == "__main__":
    main()
