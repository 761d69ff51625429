"""A fan-out of four independent prompts: a parallel wave against the same run in order.

The workload is issue 17's: a run of four independent prompt steps whose
scripted answers each take `--delay-ms` (300 by default), on the SQLite store
(checkpoints are real commits). Subjects, measured in the same process, in
rotating order, `--rounds` times:

- `one`: a run of one such step (the time of a single step);
- `sequential`: the four steps in order (no `execution`);
- `parallel`: the four steps with `execution: {mode: parallel, maxConcurrency: 4}`.

Printed: the median seconds of each, and the ratios to one step's time. The
target is parallel under 2x one step and sequential about 4x; the ratios are
taken within a round, so load on a shared machine cancels out of them.

    python bench/parallel_waves.py [--delay-ms 300] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from agent_runtime import AgentRuntime, RunStatus
from agent_runtime.testing import scripted
from stores.sqlite import SqliteRunStore

IDS = ("north", "south", "east", "west")


def agent(step_ids: tuple[str, ...]) -> dict[str, Any]:
    return {"schemaVersion": "1.0", "id": "fan-out",
            "steps": [{"id": step_id, "type": "prompt", "prompt": f"Report on the {step_id}.",
                       "outputVariable": step_id, "includeInFinalOutput": True}
                      for step_id in step_ids]}


def measure(directory: Path, name: str, step_ids: tuple[str, ...], delay_ms: int,
            execution: dict[str, Any] | None) -> float:
    model = scripted(by_step={step_id: [{"text": f"{step_id} report", "delayMs": delay_ms}]
                              for step_id in step_ids})
    options: dict[str, Any] = {"model": "scripted/test"}
    if execution is not None:
        options["execution"] = execution
    with SqliteRunStore(directory / f"{name}.sqlite") as store:
        runtime = AgentRuntime(store=store, models={"scripted": model})
        started = time.perf_counter()
        result = asyncio.run(runtime.run(manifest=agent(step_ids), options=options))
        seconds = time.perf_counter() - started
    if result.status is not RunStatus.COMPLETED:
        raise SystemExit(f"{name}: the run ended {result.status.value}: {result.error}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delay-ms", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    subjects: list[tuple[str, tuple[str, ...], dict[str, Any] | None]] = [
        ("one", IDS[:1], None),
        ("sequential", IDS, None),
        ("parallel", IDS, {"mode": "parallel", "maxConcurrency": 4}),
    ]
    seconds: dict[str, list[float]] = {name: [] for name, _, _ in subjects}
    ratios: dict[str, list[float]] = {"sequential": [], "parallel": []}
    with tempfile.TemporaryDirectory() as temporary:
        directory = Path(temporary)
        for round_number in range(args.rounds):
            shift = round_number % len(subjects)
            measured: dict[str, float] = {}
            for name, step_ids, execution in subjects[shift:] + subjects[:shift]:
                measured[name] = measure(directory, f"{name}-{round_number}", step_ids,
                                         args.delay_ms, execution)
                seconds[name].append(measured[name])
            for name, values in ratios.items():
                values.append(measured[name] / measured["one"])
    print(f"four independent prompts, {args.delay_ms} ms per answer, {args.rounds} rounds "
          "(medians)")
    for name, _, _ in subjects:
        print(f"  {name:<10} {statistics.median(seconds[name]):7.3f} s")
    for name, values in ratios.items():
        print(f"  {name:<10} {statistics.median(values):5.2f}x one step's time")
    speedup = [s / p for s, p in zip(seconds["sequential"], seconds["parallel"], strict=True)]
    print(f"  parallel is {statistics.median(speedup):.2f}x faster than sequential")


if __name__ == "__main__":
    main()
