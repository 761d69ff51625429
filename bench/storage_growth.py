"""Bytes stored per step as a run grows: linear storage, measured in one run.

Each step appends a ~200-byte transcript entry and saves a checkpoint; a store
that kept every checkpoint in full would store O(N^2) bytes. For N = 100,
1,000 and 5,000 this prints the bytes each store added per step (the sum of
`CheckpointInfo.size_bytes` over N), its ratio to N = 100, and its ratio to the
payload (the JSON size of one appended entry).

    python bench/storage_growth.py [--sizes 100 1000 5000] [--stores sqlite file memory]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

from stores import open_store
from stores.base import RunStore
from stores.records import Checkpoint, CheckpointBudget, Frame, RunRecord

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def entry(step: int) -> dict[str, object]:
    return {"id": f"t{step:06d}", "type": "message", "role": "assistant",
            "content": [{"type": "text", "text": "x" * 110}]}


PAYLOAD_BYTES = len(json.dumps(entry(1), separators=(",", ":")))


@contextmanager
def opened(driver: str) -> Iterator[RunStore]:
    with tempfile.TemporaryDirectory(prefix="agent-runtime-bench-") as directory:
        location = Path(directory) / ("runs.sqlite" if driver == "sqlite" else "runs")
        with open_store(driver, location) as store:
            yield store


def bytes_per_step(driver: str, steps: int) -> float:
    with opened(driver) as store:
        store.create_run(RunRecord(run_id="growth", manifest_hash="sha256:bench"))
        store.resume_run("growth", owner="bench", now=NOW, lease_seconds=3600)
        transcript: list[dict[str, object]] = []
        for step in range(1, steps + 1):
            transcript.append(entry(step))
            store.save_checkpoint(Checkpoint.model_construct(
                run_id="growth", seq=step, attempt=1, manifest_hash="sha256:bench",
                contract_version="1.0", runtime_version="bench",
                cursor=[Frame(step_path=f"s{step}", step_id=f"s{step}", step_index=step)],
                variables={"step": step}, step_results=[], transcript=list(transcript),
                artifacts=[], budget=CheckpointBudget(consumed_tokens=step),
                created_at=NOW + timedelta(milliseconds=step)), expected_attempt=1)
        total = sum(info.size_bytes for info in store.list_checkpoints("growth"))
        loaded = store.load_latest_checkpoint("growth")
        assert loaded is not None and len(loaded.transcript) == steps
        return total / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 5000])
    parser.add_argument("--stores", nargs="+", default=["sqlite", "file", "memory"])
    args = parser.parse_args()
    print(f"storage growth: one ~{PAYLOAD_BYTES}-byte transcript entry appended per step")
    for driver in args.stores:
        results = {size: bytes_per_step(driver, size) for size in args.sizes}
        base = results[args.sizes[0]]
        for size, per_step in results.items():
            print(f"  {driver:<7} N={size:<5} {per_step:8.1f} bytes/step   "
                  f"x{per_step / base:5.2f} of N={args.sizes[0]} (target <= 1.25)   "
                  f"x{per_step / PAYLOAD_BYTES:5.2f} of payload (target <= 3)")


if __name__ == "__main__":
    main()
