"""The peers of bench/engine_overhead.py: its loop on LangGraph and on DBOS.

Each measure runs the same N-iteration loop as our engine's (plain: one
entry per iteration; tool: a tool call's entry, then the model's), appending
transcript entries the size of ours, and returns its seconds, or None when
the peer is not installed (the `bench` extra).
"""

from __future__ import annotations

import sqlite3
import time
from operator import add
from pathlib import Path
from typing import Annotated, Any, TypedDict

ENTRY_TEXT = "x" * 110  # a transcript entry of ~200 bytes, as bench/step_overhead.py


class LoopState(TypedDict):
    """LangGraph's state for the loop: the transcript grows by one entry per node."""

    transcript: Annotated[list[dict[str, object]], add]
    done: int


def measure_langgraph(size: int, variant: str, directory: Path) -> dict[str, Any] | None:
    try:
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.graph import END, StateGraph
    except ImportError:
        return None
    def entry(index: int, kind: str) -> dict[str, object]:
        return {"id": f"t{index:06d}-{kind}", "type": "message", "text": ENTRY_TEXT}

    def model(state: LoopState) -> dict[str, object]:
        return {"transcript": [entry(state["done"], "model")], "done": state["done"] + 1}

    def call_tool(state: LoopState) -> dict[str, object]:
        return {"transcript": [entry(state["done"], "tool")]}

    def route(state: LoopState) -> str:
        return END if state["done"] >= size else "first"

    graph = StateGraph(LoopState)
    if variant == "tool":
        graph.add_node("first", call_tool)
        graph.add_node("model", model)
        graph.add_edge("first", "model")
        graph.add_conditional_edges("model", route)
    else:
        graph.add_node("first", model)
        graph.add_conditional_edges("first", route)
    graph.set_entry_point("first")
    conn = sqlite3.connect(directory / "langgraph.sqlite", check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    app = graph.compile(checkpointer=SqliteSaver(conn))
    started = time.perf_counter()
    app.invoke({"transcript": [], "done": 0},
               {"configurable": {"thread_id": "bench"}, "recursion_limit": 3 * size + 10})
    elapsed = time.perf_counter() - started
    conn.close()
    return {"seconds": elapsed}


def measure_dbos(size: int, variant: str, directory: Path) -> dict[str, Any] | None:
    try:
        from dbos import DBOS
    except ImportError:
        return None
    import logging

    logging.getLogger("dbos").setLevel(logging.WARNING)
    DBOS(config={"name": "bench", "run_admin_server": False,
                 "system_database_url": f"sqlite:///{directory / 'dbos.sqlite'}"})

    @DBOS.step()
    def model(index: int) -> dict[str, object]:
        return {"id": f"t{index:06d}", "type": "message", "text": ENTRY_TEXT}

    @DBOS.step()
    def call_tool(index: int) -> dict[str, object]:
        return {"item": index, "text": ENTRY_TEXT}

    @DBOS.workflow()
    def loop(count: int) -> int:
        transcript = []
        for index in range(count):
            if variant == "tool":
                transcript.append(call_tool(index))
            transcript.append(model(index))
        return len(transcript)

    DBOS.launch()
    started = time.perf_counter()
    loop(size)
    elapsed = time.perf_counter() - started
    DBOS.destroy()
    return {"seconds": elapsed}
