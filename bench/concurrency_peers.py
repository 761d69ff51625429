"""The peers of bench/serve_concurrency.py: its workload on LangGraph and on DBOS.

    python bench/concurrency_peers.py langgraph|dbos --model-url URL --runs N --workdir DIR

Each peer runs N conversations with the same fake model over HTTP and the
same tool (bench/concurrency_workload.py), all N at once, checkpointing on
SQLite: LangGraph as an async graph with its AsyncSqliteSaver (aiosqlite; WAL
and synchronous=FULL, as bench/engine_peers.py sets), DBOS as async
workflows on a queue whose worker concurrency is N (its SQLite system
database as DBOS configures it). It prints one JSON line: when each run was
submitted and when it finished, its errors, and its process's idle and peak
RSS. Where a peer is generous to itself it is said here: one pooled httpx
client per event loop (ours opens an SDK client per model call); a DBOS run
is finished when its workflow returns, before DBOS records its output, and its
queue is polled every 0.1 s (the default is 1 s); a LangGraph run's state is
plain dicts, without LangChain's message classes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from operator import add
from pathlib import Path
from typing import Annotated, Any, TypedDict

import httpx
from concurrency_workload import (
    MODEL_NAME,
    SYSTEM_PROMPT,
    TOOL_NAME,
    lookup_item,
    prompt_for,
    run_tag,
)
from process_memory import rss_kb

Message = dict[str, Any]
# Each run's [submitted, finished] by tag, and what failed.
Outcomes = tuple[dict[str, list[float]], list[str]]
TOOL_SPEC = {"type": "function", "function": {
    "name": TOOL_NAME, "description": "Look up one item of a bench run.",
    "parameters": {"type": "object", "required": ["item"],
                   "properties": {"item": {"type": "string"}}}}}
DBOS_QUEUE_POLL_SECONDS = 0.1


class ModelClient:
    """One pooled httpx client per event loop: DBOS runs workflows on its own loop."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.clients: dict[asyncio.AbstractEventLoop, httpx.AsyncClient] = {}

    async def chat(self, messages: list[Message]) -> Message:
        loop = asyncio.get_running_loop()
        client = self.clients.get(loop)
        if client is None:
            client = self.clients[loop] = httpx.AsyncClient(
                base_url=self.url, timeout=120.0, trust_env=False,
                limits=httpx.Limits(max_connections=None, max_keepalive_connections=None))
        response = await client.post("/v1/chat/completions", json={
            "model": MODEL_NAME, "messages": messages, "tools": [TOOL_SPEC]})
        response.raise_for_status()
        message: Message = response.json()["choices"][0]["message"]
        return message

    async def close(self) -> None:
        """Close this loop's client; another loop's closes with it (DBOS stops its own)."""
        client = self.clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()


def opening(tag: str) -> list[Message]:
    return [{"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": prompt_for(tag)}]


def tool_answer(call: Message) -> Message:
    result = lookup_item(**json.loads(call["function"]["arguments"]))
    return {"role": "tool", "tool_call_id": call["id"], "content": json.dumps(result)}


class ChatState(TypedDict):
    messages: Annotated[list[Message], add]


async def run_langgraph(model: ModelClient, tags: list[str], workdir: Path,
                        ready: Callable[[], None]) -> Outcomes:
    import aiosqlite
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    from langgraph.graph import END, StateGraph

    async def call_model(state: ChatState) -> dict[str, list[Message]]:
        return {"messages": [await model.chat(state["messages"])]}

    async def call_tool(state: ChatState) -> dict[str, list[Message]]:
        return {"messages": [tool_answer(state["messages"][-1]["tool_calls"][0])]}

    def route(state: ChatState) -> str:
        return "tool" if state["messages"][-1].get("tool_calls") else END

    graph = StateGraph(ChatState)
    graph.add_node("model", call_model)
    graph.add_node("tool", call_tool)
    graph.set_entry_point("model")
    graph.add_conditional_edges("model", route)
    graph.add_edge("tool", "model")
    connection = await aiosqlite.connect(workdir / "langgraph.sqlite")
    await connection.execute("PRAGMA journal_mode = WAL")
    await connection.execute("PRAGMA synchronous = FULL")
    saver = AsyncSqliteSaver(connection)
    await saver.setup()
    app = graph.compile(checkpointer=saver)

    async def one(tag: str) -> list[float]:
        submitted = time.time()
        await app.ainvoke({"messages": opening(tag)}, {"configurable": {"thread_id": tag}})
        return [submitted, time.time()]

    ready()
    try:
        return await _gather(tags, one)
    finally:
        await connection.close()


async def run_dbos(model: ModelClient, tags: list[str], workdir: Path,
                   ready: Callable[[], None]) -> Outcomes:
    import logging

    from dbos import DBOS

    logging.getLogger("dbos").setLevel(logging.WARNING)
    DBOS(config={"name": "bench-concurrency", "log_level": "WARNING",
                 "system_database_url": f"sqlite:///{workdir / 'dbos.sqlite'}"})

    @DBOS.step()
    async def call_model(messages: list[Message]) -> Message:
        return await model.chat(messages)

    @DBOS.step()
    async def call_tool(call: Message) -> Message:
        return tool_answer(call)

    @DBOS.workflow()
    async def conversation(tag: str) -> float:
        messages = opening(tag)
        while True:
            reply = await call_model(messages)
            messages.append(reply)
            if not reply.get("tool_calls"):
                return time.time()
            messages.append(await call_tool(reply["tool_calls"][0]))

    await asyncio.to_thread(DBOS.launch)
    queue = await DBOS.register_queue_async(
        "bench", worker_concurrency=len(tags), polling_interval_sec=DBOS_QUEUE_POLL_SECONDS)

    async def one(tag: str) -> list[float]:
        submitted = time.time()
        handle = await queue.enqueue_async(conversation, tag)
        finished: float = await handle.get_result(polling_interval_sec=0.1)
        return [submitted, finished]

    ready()
    try:
        return await _gather(tags, one)
    finally:
        await asyncio.to_thread(DBOS.destroy)


async def _gather(tags: list[str], one: Callable[[str], Awaitable[list[float]]]) -> Outcomes:
    """Every run at once; a run that raised is an error, not the end of the batch."""
    outcomes = await asyncio.gather(*(one(tag) for tag in tags), return_exceptions=True)
    times: dict[str, list[float]] = {}
    errors: list[str] = []
    for tag, outcome in zip(tags, outcomes, strict=True):
        if isinstance(outcome, BaseException):
            errors.append(f"{tag}: {type(outcome).__name__}: {str(outcome)[:200]}")
        else:
            times[tag] = outcome
    return times, errors


PEERS = {"langgraph": run_langgraph, "dbos": run_dbos}


async def measure(peer: str, model_url: str, runs: int, workdir: Path) -> dict[str, Any]:
    model = ModelClient(model_url)
    tags = [run_tag(peer, index) for index in range(runs)]
    idle: list[int] = []
    try:
        times, errors = await PEERS[peer](model, tags, workdir,
                                          lambda: idle.append(rss_kb()[0]))
    finally:
        await model.close()
    current, peak = rss_kb()
    return {"engine": peer, "runs": times, "errors": errors[:20], "error_count": len(errors),
            "idle_rss_kb": idle[0] if idle else current, "peak_rss_kb": peak}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("peer", choices=sorted(PEERS))
    parser.add_argument("--model-url", required=True)
    parser.add_argument("--runs", type=int, required=True)
    parser.add_argument("--workdir", type=Path, required=True)
    args = parser.parse_args()
    try:
        found = asyncio.run(measure(args.peer, args.model_url, args.runs, args.workdir))
    except ImportError as missing:
        found = {"engine": args.peer, "missing": str(missing)}
    sys.stdout.write(json.dumps(found) + "\n")


if __name__ == "__main__":
    main()
