"""Per-checkpoint cost of SqliteRunStore against a raw SQLite floor, measured in one run.

An N-step run where every step appends a ~200-byte transcript entry and saves a
checkpoint. The floor does the least any durable SQLite checkpointer must: one
INSERT of the same stored bytes and a COMMIT per step, in WAL mode at the same
synchronous level. With the optional `bench` extra installed, LangGraph's
`SqliteSaver` runs an equivalent N-step loop on the same kind of file.

Prints ratios (ours / floor, and LangGraph / ours), the median of three rounds.

    python bench/step_overhead.py [--steps 200] [--rounds 3] [--synchronous FULL]
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from operator import add
from pathlib import Path
from typing import Annotated, TypedDict

from stores.deltas import encode_body
from stores.records import Checkpoint, CheckpointBudget, Frame, RunRecord
from stores.sqlite import SqliteRunStore

ENTRY_TEXT = "x" * 110  # with its keys, one transcript entry is ~200 bytes of JSON
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _entry(step: int) -> dict[str, object]:
    return {"id": f"t{step:06d}", "type": "message", "role": "assistant",
            "content": [{"type": "text", "text": ENTRY_TEXT}]}


def _checkpoints(steps: int) -> list[Checkpoint]:
    """What the engine hands the store: shared entries, as its own lists are."""
    transcript: list[dict[str, object]] = []
    made = []
    for step in range(1, steps + 1):
        transcript.append(_entry(step))
        made.append(Checkpoint.model_construct(
            run_id="bench", seq=step, attempt=1, manifest_hash="sha256:bench",
            contract_version="1.0", runtime_version="bench",
            cursor=[Frame(step_path=f"s{step}", step_id=f"s{step}", step_index=step)],
            variables={"topic": "checkpoints"}, step_results=[], transcript=list(transcript),
            artifacts=[], budget=CheckpointBudget(consumed_tokens=step * 10),
            created_at=NOW + timedelta(milliseconds=step)))
    return made


def _bodies(checkpoints: list[Checkpoint]) -> list[str]:
    """The bytes our store writes per step (delta bodies), for the floor to insert raw."""
    bodies, previous = [], None
    for checkpoint in checkpoints:
        body, previous = encode_body(checkpoint, previous)
        bodies.append(body)
    return bodies


def interleaved_round(directory: Path, checkpoints: list[Checkpoint],
                      synchronous: str) -> tuple[float, float]:
    """(ours, floor) seconds per step, the two timed step by step in turn so both
    see the same disk at the same moments: fsync latency drifts, and this keeps
    the drift out of the ratio. Each is the mean over the N steps: what a run pays."""
    bodies = _bodies(checkpoints)
    conn = sqlite3.connect(directory / "floor.sqlite", isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    conn.execute("CREATE TABLE checkpoints (run_id TEXT, seq INTEGER, body TEXT, "
                 "PRIMARY KEY (run_id, seq))")
    ours_steps: list[float] = []
    floor_steps: list[float] = []
    with SqliteRunStore(directory / "ours.sqlite", synchronous=synchronous) as store:
        store.create_run(RunRecord(run_id="bench", manifest_hash="sha256:bench"))
        store.resume_run("bench", owner="bench", now=NOW, lease_seconds=3600)
        lease = NOW + timedelta(hours=1)
        for seq, (checkpoint, body) in enumerate(zip(checkpoints, bodies, strict=True), 1):
            started = time.perf_counter()
            store.save_checkpoint(checkpoint, expected_attempt=1, lease_expires_at=lease)
            ours_steps.append(time.perf_counter() - started)
            started = time.perf_counter()
            conn.execute("BEGIN")
            conn.execute("INSERT INTO checkpoints VALUES (?, ?, ?)", ("bench", seq, body))
            conn.execute("COMMIT")
            floor_steps.append(time.perf_counter() - started)
    conn.close()
    return statistics.fmean(ours_steps), statistics.fmean(floor_steps)


class LoopState(TypedDict):
    """LangGraph state for the equivalent loop: the transcript grows by one entry a step."""

    transcript: Annotated[list[dict[str, object]], add]
    step: int


def langgraph(directory: Path, steps: int, synchronous: str) -> float | None:
    """LangGraph's SqliteSaver on an N-step loop appending the same entries, if installed."""
    try:
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.graph import END, StateGraph
    except ImportError:
        return None

    def work(state: LoopState) -> dict[str, object]:
        return {"transcript": [_entry(state["step"] + 1)], "step": state["step"] + 1}

    def route(state: LoopState) -> str:
        return END if state["step"] >= steps else "work"

    graph = StateGraph(LoopState)
    graph.add_node("work", work)
    graph.set_entry_point("work")
    graph.add_conditional_edges("work", route)
    conn = sqlite3.connect(directory / "langgraph.sqlite", check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    app = graph.compile(checkpointer=SqliteSaver(conn))
    started = time.perf_counter()
    app.invoke({"transcript": [], "step": 0},
               {"configurable": {"thread_id": "bench"}, "recursion_limit": steps + 10})
    elapsed = (time.perf_counter() - started) / steps
    conn.close()
    return elapsed


def in_fresh_directory(measure: Callable[[Path], float | None]) -> float | None:
    with tempfile.TemporaryDirectory(prefix="agent-runtime-bench-") as directory:
        return measure(Path(directory))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--synchronous", choices=("FULL", "NORMAL"), default="FULL")
    args = parser.parse_args()
    checkpoints = _checkpoints(args.steps)
    sync = args.synchronous
    # The reported figure is the median of the rounds' ratios.
    rounds = []
    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="agent-runtime-bench-") as directory:
            our_cost, floor_cost = interleaved_round(Path(directory), checkpoints, sync)
        peer_cost = in_fresh_directory(lambda d: langgraph(d, args.steps, sync))
        rounds.append((our_cost, floor_cost, peer_cost))
    our_cost = statistics.median(r[0] for r in rounds)
    floor_cost = statistics.median(r[1] for r in rounds)
    ratio = statistics.median(r[0] / r[1] for r in rounds)
    print(f"step overhead: N={args.steps} steps, ~200-byte transcript entry per step, "
          f"WAL, synchronous={sync}; mean step, median of {args.rounds} rounds")
    print(f"  SqliteRunStore.save_checkpoint   {our_cost * 1e6:9.1f} us/step")
    print(f"  raw SQLite floor (INSERT+COMMIT) {floor_cost * 1e6:9.1f} us/step")
    print(f"  ratio ours / floor               {ratio:9.2f}  (target <= 1.5)")
    if rounds[0][2] is None:
        print("  LangGraph SqliteSaver: not installed (pip install -e '.[bench]' to compare)")
    else:
        peer_cost = statistics.median(r[2] for r in rounds if r[2] is not None)
        peer_ratio = statistics.median(r[2] / r[0] for r in rounds if r[2] is not None)
        print(f"  LangGraph SqliteSaver            {peer_cost * 1e6:9.1f} us/step")
        print(f"  ratio LangGraph / ours           {peer_ratio:9.2f}")


if __name__ == "__main__":
    main()
