"""A tool call's effect rides in the checkpoints that record it, on a store that can.

On a store that settles in checkpoints (`SettlesInCheckpoint`: SQLite, memory)
the effect's completion and the checkpoint holding its tool-result are one
transaction, and an idempotent tool's reservation is one with the checkpoint
that makes the call the next to run, so the call costs no commit of its own.
A tool that is not idempotent is still reserved by a commit of its own right
before it goes out (a crash after a checkpoint never leaves its outcome in
doubt). On a store without it the engine reserves, settles and checkpoints
in commits of their own, as before.
"""

from __future__ import annotations

from pathlib import Path

from engine_harness import Harness, manifest

from agent_runtime import AgentRuntime, RunStatus, ToolContext, tool
from agent_runtime.execution import Execution
from agent_runtime.manifest import PromptStep
from agent_runtime.steps import default_steps
from agent_runtime.testing import scripted
from stores.base import SettlesInCheckpoint
from stores.file import FileRunStore
from stores.records import EffectStatus, Frame, JsonValue
from stores.sqlite import SqliteRunStore

# How a checkpoint is written: an owner's save goes through the connection's own
# view (stores/sqlite_schema.py); the reading path inserts into the table.
CHECKPOINT_INSERTS = ("INSERT INTO checkpoints", "INSERT INTO temp.checkpoint_saves")


class Transactions:
    """The write statements of one connection, grouped by the commit they belong to."""

    def __init__(self) -> None:
        self.commits: list[list[str]] = []
        self._open: list[str] | None = None
        self._previous = ""

    def trace(self, statement: str) -> None:
        if statement == self._previous:
            return  # SQLite traces a statement again for each trigger it runs
        self._previous = statement
        head = statement.lstrip()[:6].upper()
        if head.startswith("BEGIN"):
            self._open = []
        elif head.startswith("COMMIT"):
            assert self._open is not None
            self.commits.append(self._open)
            self._open = None
        elif head.startswith(("INSERT", "UPDATE", "DELETE")):
            if self._open is None:
                self.commits.append([statement])  # autocommit: a commit of its own
            else:
                self._open.append(statement)


def _adder(calls: list[str]) -> object:
    @tool
    def add(a: int, b: int, ctx: ToolContext) -> int:
        """Add two numbers."""
        calls.append(ctx.idempotency_key)
        return a + b

    return add


def _unsafe_adder(calls: list[str]) -> object:
    @tool(idempotent=False)
    def add(a: int, b: int, ctx: ToolContext) -> int:
        """Add two numbers, once."""
        calls.append(ctx.idempotency_key)
        return a + b

    return add


def _traced_run(path: Path, adder: object) -> tuple[Transactions, list[str], str]:
    """Run the two-call prompt on SQLite: its commits, the calls' keys, its run id."""
    calls: list[str] = []
    with SqliteRunStore(path) as store:
        log = Transactions()
        store._conn.set_trace_callback(log.trace)
        h = Harness(_two_calls(), tools=[adder(calls)], store=store)  # type: ignore[operator]
        result = h.run(manifest({"id": "ask", "type": "prompt", "prompt": "Add.",
                                 "tools": ["add"], "includeInFinalOutput": True}))
        store._conn.set_trace_callback(None)
        assert result.status is RunStatus.COMPLETED and result.output == "3 and 7"
        effects = store.list_effects(result.run_id)
        assert sorted(effect.key for effect in effects) == sorted(calls)
        assert all(effect.status is EffectStatus.COMPLETED for effect in effects)
    return log, calls, result.run_id


def _starts(commit: list[str], *heads: str) -> list[str]:
    return [statement for statement in commit if statement.lstrip().startswith(heads)]


def test_an_idempotent_call_is_reserved_in_the_checkpoint_that_makes_it_next(
        tmp_path: Path) -> None:
    log, calls, _ = _traced_run(tmp_path / "runs.sqlite", _adder)
    reserving = [commit for commit in log.commits if _starts(commit, "INSERT INTO effects")]
    assert len(reserving) == 2
    first, second = reserving
    # The first call is reserved with the checkpoint that records the model's
    # request for both calls; the second with the one holding the first result.
    for commit, key in ((first, calls[0]), (second, calls[1])):
        (checkpoint,) = _starts(commit, *CHECKPOINT_INSERTS)
        (effect,) = _starts(commit, "INSERT INTO effects")
        assert key in effect and key in checkpoint
    assert '"tool-call"' in _starts(first, *CHECKPOINT_INSERTS)[0]
    assert not _starts(first, "UPDATE effects")
    assert calls[0] in _starts(second, "UPDATE effects")[0]
    assert '"tool-result"' in _starts(second, *CHECKPOINT_INSERTS)[0]


def test_a_call_that_is_not_idempotent_is_reserved_by_a_commit_of_its_own(
        tmp_path: Path) -> None:
    log, calls, _ = _traced_run(tmp_path / "runs.sqlite", _unsafe_adder)
    reserving = [commit for commit in log.commits if _starts(commit, "INSERT INTO effects")]
    assert len(reserving) == 2
    for commit, key in zip(reserving, calls, strict=True):
        assert key in _starts(commit, "INSERT INTO effects")[0]
        assert not _starts(commit, *CHECKPOINT_INSERTS), commit


def _two_calls() -> object:
    return scripted(responses=[
        {"toolCalls": [{"name": "add", "arguments": {"a": 1, "b": 2}},
                       {"name": "add", "arguments": {"a": 3, "b": 4}}]},
        {"text": "3 and 7"}])


def test_each_settlement_commits_with_the_checkpoint_of_its_result(tmp_path: Path) -> None:
    calls: list[str] = []
    with SqliteRunStore(tmp_path / "runs.sqlite") as store:
        assert isinstance(store, SettlesInCheckpoint)
        log = Transactions()
        store._conn.set_trace_callback(log.trace)
        h = Harness(_two_calls(), tools=[_adder(calls)], store=store)  # type: ignore[arg-type]
        result = h.run(manifest({"id": "ask", "type": "prompt", "prompt": "Add.",
                                 "tools": ["add"], "includeInFinalOutput": True}))
        store._conn.set_trace_callback(None)
        assert result.status is RunStatus.COMPLETED and result.output == "3 and 7"

        settling = [commit for commit in log.commits
                    if any(s.lstrip().startswith("UPDATE effects") for s in commit)]
        assert len(settling) == 2
        for commit in settling:
            assert any(s.lstrip().startswith(CHECKPOINT_INSERTS) for s in commit), commit
        effects = store.list_effects(result.run_id)
        assert sorted(effect.key for effect in effects) == sorted(calls)
        assert all(effect.status is EffectStatus.COMPLETED for effect in effects)
        outputs = {effect.key: effect.result["output"] for effect in effects}
        assert [outputs[key] for key in calls] == [3, 7]
        # Every settled effect's result is in the checkpoint committed with it.
        for commit in settling:
            key = next(key for key in calls if any(key in s and s.lstrip().startswith(
                "UPDATE effects") for s in commit))
            insert = next(s for s in commit if s.lstrip().startswith(CHECKPOINT_INSERTS))
            assert key in insert and '"tool-result"' in insert


def test_a_store_without_it_settles_before_the_checkpoint(tmp_path: Path) -> None:
    calls: list[str] = []
    with FileRunStore(tmp_path / "runs") as store:
        assert not isinstance(store, SettlesInCheckpoint)
        h = Harness(_two_calls(), tools=[_adder(calls)], store=store)  # type: ignore[arg-type]
        result = h.run(manifest({"id": "ask", "type": "prompt", "prompt": "Add.",
                                 "tools": ["add"]}))
        assert result.status is RunStatus.COMPLETED
        effects = store.list_effects(result.run_id)
        assert len(effects) == 2
        assert all(effect.status is EffectStatus.COMPLETED for effect in effects)


class _SettlesLast:
    """A prompt step that settles an effect and ends (no checkpoint of its own after it)."""

    async def execute(self, step: PromptStep, frame: Frame, ctx: Execution,
                      resume: list[Frame]) -> JsonValue:
        await ctx.begin_effect("last-effect")
        await ctx.settle_effect("last-effect", {"output": "sent"})
        return "done"


def test_an_effect_the_last_step_settles_is_saved_before_the_run_completes() -> None:
    # The run's completion stands for its last step's checkpoint, but a completion
    # carries no settlement: the engine checkpoints it first.
    steps = default_steps()
    steps.register("prompt", PromptStep, _SettlesLast())
    h = Harness()
    runtime = AgentRuntime(store=h.store, clock=h.clock, steps=steps)
    result = runtime.run_sync(manifest=manifest({"id": "only", "type": "prompt",
                                                 "prompt": "hi"}),
                              options={"model": "scripted/echo"})
    assert result.status is RunStatus.COMPLETED
    [effect] = h.store.list_effects(result.run_id)
    assert effect.status is EffectStatus.COMPLETED and effect.result == {"output": "sent"}
    assert [info.seq for info in h.store.list_checkpoints(result.run_id)] == [1, 2]
