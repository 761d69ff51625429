"""The event log costs SQLite no statement or transaction of its own: what a run's
iterations add is the one statement of each checkpoint's save
(tests/stores/test_sqlite_fast_save.py), whatever number of events they emit."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from agent_runtime import AgentRuntime
from stores.sqlite import SqliteRunStore


def loop(iterations: int) -> dict[str, Any]:
    return {"schemaVersion": "1.0", "id": "spin", "steps": [
        {"id": "spin", "type": "loop", "loop": {"maxIterations": iterations},
         "steps": [{"id": "ask", "type": "prompt",
                    "prompt": "iteration {{ loop.iteration }}"}]}]}


def measured(path: Path, iterations: int) -> tuple[Counter[str], int]:
    """(the statements the run executed, by their first words; its events)."""
    store = SqliteRunStore(path)
    statements: Counter[str] = Counter()
    store._conn.set_trace_callback(  # the store's one connection
        lambda statement: statements.update([" ".join(statement.split()[:3])]))
    result = AgentRuntime(store=store).run_sync(manifest=loop(iterations),
                                                options={"model": "scripted/echo"})
    store._conn.set_trace_callback(None)
    events = len(store.list_events(result.run_id, limit=1000))
    store.close()
    return statements, events


def test_events_add_no_statement_or_transaction_per_iteration(tmp_path: Path) -> None:
    few, few_events = measured(tmp_path / "few.sqlite", 10)
    many, many_events = measured(tmp_path / "many.sqlite", 30)
    added = many - few
    print(f"\nSQLite statements per iteration: "
          f"{ {name: count / 20 for name, count in added.items()} }; "
          f"events per iteration: {(many_events - few_events) / 20:g}")
    assert set(added) == {"INSERT INTO temp.checkpoint_saves"}  # the save, and nothing else
    assert many["BEGIN IMMEDIATE"] == few["BEGIN IMMEDIATE"]
    assert many_events - few_events >= 3 * 20
