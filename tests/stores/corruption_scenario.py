"""The store the corruption tests damage (issue 11, acceptance 3), and what they check.

A real run leaves it: a prompt that calls a tool (an effect, completed), an
approval it suspended on and whose decision is recorded, several checkpoints
stored as deltas (the transcript grows). Then, for each damage:

* every read of the run either returns exactly what it returned before or
  raises `CorruptRecord` / `StoreUnavailable` naming the run or the store,
  never another exception, never different data (`check_reads`);
* `resume` and `fork` make no model request and no tool call unless the
  run's own reads were all unchanged, and end in a result or a store error
  (`check_engine`). A resume that found damage leaves the run failed
  (`corrupt_record`), never `running`.

`list_runs` is a read of the store, not of the run: its damage (say, the
SQLite store's run count) is checked like any read, but the engine, which
never lists, may still run from a run whose own records are intact.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from agent_runtime import AgentRuntime, RunStatus, ToolContext, tool
from agent_runtime.manifest import AgentManifest, parse_agent_manifest
from agent_runtime.models.scripted import ScriptedModel
from agent_runtime.testing import FakeClock, scripted
from stores.base import CorruptRecord, RunStore, StoreError, StoreUnavailable

RUN_ID = "victim"
FORK_SEQ = 1  # before the tool call: a fork from it calls the model and the tool again
T0 = datetime(2026, 1, 1, tzinfo=UTC)
SCRIPTED = {"model": "scripted/test"}
# The errors a damaged store may raise; anything else fails the test.
STORE_ERRORS = (CorruptRecord, StoreUnavailable)


def agent() -> AgentManifest:
    def prompt(step_id: str) -> dict[str, Any]:
        return {"id": step_id, "type": "prompt", "prompt": f"Do {step_id}.",
                "tools": ["record"]}

    return parse_agent_manifest({
        "schemaVersion": "1.0", "id": "damaged", "variables": [],
        "steps": [prompt("work"), {"id": "gate", "type": "approval", "prompt": "Go on?"},
                  prompt("after")]}, source="test")


def _model() -> ScriptedModel:
    def calls(n: int) -> dict[str, Any]:
        return {"toolCalls": [{"name": "record", "arguments": {"n": n}}]}

    return scripted(by_step={"work": [calls(1), {"text": "worked"}],
                             "after": [calls(2), {"text": "done"}]})


@dataclass
class Engine:
    """A runtime on a store, with a scripted model and a tool that records its calls."""

    store: RunStore
    start: datetime = T0
    calls: list[int] = field(default_factory=list)
    model: ScriptedModel = field(default_factory=_model)

    def __post_init__(self) -> None:
        calls = self.calls

        @tool(idempotent=False)
        def record(n: int, ctx: ToolContext) -> int:
            """Record a call."""
            calls.append(n)
            return n

        self.runtime = AgentRuntime(store=self.store, models={"scripted": self.model},
                                    tools=[record], clock=FakeClock(self.start),
                                    owner="tester", lease_seconds=60)

    @property
    def activity(self) -> int:
        """Model requests and tool calls so far."""
        return len(self.model.requests) + len(self.calls)


def build(store: RunStore) -> None:
    """Leave the run on `store`: suspended on its approval, the decision recorded."""
    engine = Engine(store)
    result = engine.runtime.run_sync(manifest=agent(), run_id=RUN_ID, options=SCRIPTED)
    assert result.status is RunStatus.SUSPENDED, result
    engine.runtime.approve(RUN_ID, response={"note": "go"})
    assert engine.calls == [1]
    assert len(store.list_checkpoints(RUN_ID)) >= 4
    assert len(store.list_effects(RUN_ID)) == 1


Outcome = Any  # a read's value, or the exception it raised


def reads(store: RunStore) -> dict[str, Outcome]:
    """Every read, by name: its value or its exception."""
    calls: dict[str, Callable[[], object]] = {
        "load_run": lambda: store.load_run(RUN_ID),
        "load_latest_checkpoint": lambda: store.load_latest_checkpoint(RUN_ID),
        "list_checkpoints": lambda: store.list_checkpoints(RUN_ID),
        "list_effects": lambda: store.list_effects(RUN_ID),
        "list_runs": store.list_runs,
    }
    outcomes = {name: _outcome(call) for name, call in calls.items()}
    listed = outcomes["list_checkpoints"]
    count = 8 if isinstance(listed, BaseException) else len(listed)
    for seq in range(1, count + 1):
        outcomes[f"load_checkpoint({seq})"] = _outcome(
            lambda seq=seq: store.load_checkpoint(RUN_ID, seq))
    return outcomes


def _outcome(call: Callable[[], object]) -> Outcome:
    try:
        return call()
    except Exception as error:
        return error


def check_reads(original: dict[str, Outcome], damaged: dict[str, Outcome], *,
                location: str, damage: str) -> bool:
    """Each damaged read is the original or a store error naming the run or the store.

    Returns whether the run's own reads (all but `list_runs`) were unchanged.
    """
    unchanged = True
    for name, before in original.items():
        after = damaged.get(name)
        if name not in damaged:  # fewer seqs listed: the list itself raised
            continue
        if isinstance(after, BaseException):
            assert isinstance(after, STORE_ERRORS), (
                f"{damage}: {name} raised {type(after).__name__}: {after}")
            text = str(after)
            assert RUN_ID in text or location in text, (
                f"{damage}: {name}: {type(after).__name__} names neither the run nor "
                f"the store: {text}")
            unchanged = unchanged and name == "list_runs"
        else:
            assert after == before, f"{damage}: {name} returned different data: {after!r}"
    return unchanged


def check_engine(open_store: Callable[[], RunStore], *, unchanged: bool, damage: str) -> None:
    """Resume and fork from the damaged store: no activity unless the run's reads held."""
    for action in ("resume", "fork"):
        try:
            store = open_store()
        except StoreError as error:
            assert isinstance(error, STORE_ERRORS), f"{damage}: opening: {error!r}"
            return  # nothing can run from a store that does not open
        engine = Engine(store, start=T0 + timedelta(hours=1))
        try:
            if action == "resume":
                result = engine.runtime.run_sync(run_id=RUN_ID, resume=True)
            else:
                result = asyncio.run(engine.runtime.fork(RUN_ID, seq=FORK_SEQ,
                                                         new_run_id="fork"))
        except StoreError as error:
            assert unchanged or isinstance(error, STORE_ERRORS), f"{damage}: {action}: {error!r}"
            result = None
        if not unchanged:
            assert engine.activity == 0, (
                f"{damage}: {action} ran from a damaged store: {len(engine.model.requests)} "
                f"model requests, tool calls {engine.calls} (result {result})")
            if action == "resume":
                _not_left_running(store, damage)
        close = getattr(store, "close", None)
        if close is not None:
            close()


def _not_left_running(store: RunStore, damage: str) -> None:
    try:
        run = store.load_run(RUN_ID)
    except StoreError:
        return
    if run is not None:
        assert run.status is not RunStatus.RUNNING, f"{damage}: resume left the run running"
        if run.status is RunStatus.FAILED and run.error is not None:
            assert run.error.type == "corrupt_record", f"{damage}: {run.error}"
