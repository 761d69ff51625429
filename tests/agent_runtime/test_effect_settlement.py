"""A tool call's result is settled in the checkpoint that records it, on a store that can.

On SQLite (`SettlesInCheckpoint`) the effect's completion and the checkpoint
holding its tool-result are one transaction, so a tool call costs two commits
(the reservation, then result and checkpoint), not three. On a store without
it the engine settles first and checkpoints after, as before.
"""

from __future__ import annotations

from pathlib import Path

from engine_harness import Harness, manifest

from agent_runtime import RunStatus, ToolContext, tool
from agent_runtime.testing import scripted
from stores.base import SettlesInCheckpoint
from stores.file import FileRunStore
from stores.records import EffectStatus
from stores.sqlite import SqliteRunStore


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
            assert any(s.lstrip().startswith("INSERT INTO checkpoints") for s in commit), commit
        effects = store.list_effects(result.run_id)
        assert sorted(effect.key for effect in effects) == sorted(calls)
        assert all(effect.status is EffectStatus.COMPLETED for effect in effects)
        outputs = {effect.key: effect.result["output"] for effect in effects}
        assert [outputs[key] for key in calls] == [3, 7]
        # Every settled effect's result is in the checkpoint committed with it.
        for commit in settling:
            key = next(key for key in calls if any(key in s and s.lstrip().startswith(
                "UPDATE effects") for s in commit))
            insert = next(s for s in commit if s.lstrip().startswith("INSERT INTO checkpoints"))
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
