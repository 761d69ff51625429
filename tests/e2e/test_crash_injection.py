"""Crash injection: a goal loop around a collection loop around a prompt with tools
and an approval, SIGKILLed after every checkpoint, inside every tool call, at
every event, and at 100 random points, then resumed: every run ends exactly as
an uninterrupted run does, and every effect is in the ledger exactly once.

The harness (`crash_harness.py`) forks one child per attempt, kills it where
the plan says, and acts as the operator in between: it approves approvals,
takes over killed runs, and settles `effect-unknown` suspensions from the
tools' own execution log. The sweeps start each scenario from the reference
run's snapshot before the attempt that dies (the attempts before it are the
reference's, deterministically); the random scenarios run from the start and
may kill any attempt, several in a row, at a point or after a random delay.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from crash_harness import (
    CrashHarness,
    Kill,
    KillAfter,
    KillAfterDelay,
    Outcome,
    ToolRecorder,
    Workload,
    assert_same_run,
    normalised_transcript,
    repeated_executions,
)

from agent_runtime import RunStatus, Tool, ToolContext, tool
from agent_runtime.models.scripted import Script

pytestmark = pytest.mark.slow

ITEMS = ["alpha", "beta"]
ROUNDS = 2  # the judge is satisfied in the second round of at most three
SEED = 20260101
RANDOM_SCENARIOS = 100

MANIFEST: dict[str, Any] = {
    "schemaVersion": "1.0",
    "id": "crash-injection",
    "model": {"provider": "scripted", "model": "crash"},
    "variables": [{"key": "items", "type": "array", "value": ITEMS}],
    "steps": [
        {"id": "refine", "type": "loop", "outputVariable": "verdicts",
         "includeInFinalOutput": True,
         "loop": {"goal": "verdict.done == true", "maxIterations": 3, "indexVariable": "round",
                  "resultVariable": "verdict"},
         "steps": [
             {"id": "each", "type": "loop", "outputVariable": "drafts",
              "loop": {"source": "items", "itemVariable": "item", "resultVariable": "draft"},
              "steps": [
                  {"id": "work", "type": "prompt", "prompt": "Round {{ round }}: draft {{ item }}.",
                   "tools": ["lookup", "publish"], "outputVariable": "draft"},
                  {"id": "review", "type": "approval", "prompt": "Publish {{ item }}?"},
              ]},
             {"id": "judge", "type": "prompt", "prompt": "Judge the drafts: {{ drafts }}",
              "outputVariable": "verdict",
              "outputSchema": {"type": "object", "required": ["done", "score"],
                               "properties": {"done": {"type": "boolean"},
                                              "score": {"type": "integer"}}}},
         ]},
        {"id": "report", "type": "prompt", "prompt": "Report on {{ verdicts }}.",
         "includeInFinalOutput": True},
    ],
}

SCRIPT = Script(by_step={
    # `work` runs once per item per round: one response asking for both tools, then the draft.
    "work": [entry for revision in range(ROUNDS) for item in ITEMS for entry in (
        {"toolCalls": [{"name": "lookup", "arguments": {"item": item}},
                       {"name": "publish", "arguments": {"item": item, "revision": revision}}]},
        {"text": f"draft of {item}, round {revision}"})],
    "judge": [{"json": {"done": revision == ROUNDS - 1, "score": revision + 1}}
              for revision in range(ROUNDS)],
    "report": [{"text": "all drafts published"}],
})


def crash_tools(recorder: ToolRecorder) -> list[Tool]:
    @tool
    async def lookup(item: str, ctx: ToolContext) -> str:
        """Look up facts about an item (a read: safe to repeat)."""
        output = f"{item}: three facts"
        recorder.executed(ctx, {"item": item}, output)
        return output

    @tool(idempotent=False)
    async def publish(item: str, revision: int, ctx: ToolContext) -> dict[str, str]:
        """Publish a draft (not safe to repeat)."""
        output = {"published": f"{item}@{revision}"}
        recorder.executed(ctx, {"item": item, "revision": revision}, output)
        return output

    return [lookup, publish]


WORKLOAD = Workload(manifest=MANIFEST, script=SCRIPT, tools=crash_tools)
NON_IDEMPOTENT = WORKLOAD.non_idempotent_tools()


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> CrashHarness:
    return CrashHarness(WORKLOAD, tmp_path_factory.mktemp("crash"))


@pytest.fixture(scope="module")
def reference(harness: CrashHarness) -> Outcome:
    return harness.run("reference", keep_snapshots=True)


def locate(per_attempt: list[int], ordinal: int) -> tuple[int, int]:
    """(attempt index, count within that attempt) of the run's `ordinal`-th point."""
    for index, count in enumerate(per_attempt):
        if ordinal <= count:
            return index, ordinal
        ordinal -= count
    raise ValueError("past the run's last point")


def test_the_uninterrupted_run_is_the_reference(reference: Outcome) -> None:
    assert reference.record.status is RunStatus.COMPLETED
    # A loop without a source has no structured items, so (as in the reference) its
    # array output is the results as JSON, joined by blank lines.
    assert reference.record.output == [
        '{"done":false,"score":1}\n\n{"done":true,"score":2}', "all drafts published"]
    assert reference.kills == 0 and reference.resolutions == []
    # one approval per item per round; each suspension ends an attempt
    assert len(reference.approvals) == len(set(reference.approvals)) == ROUNDS * len(ITEMS)
    assert len(reference.attempts) == ROUNDS * len(ITEMS) + 1
    calls = ROUNDS * len(ITEMS) * 2
    assert len(reference.effects) == len(reference.executions) == calls
    # enough commit points to kill at (a loop iteration's last step shares the
    # iteration's commit point, so this run has 26)
    assert sum(attempt.checkpoints for attempt in reference.attempts) >= 25
    assert_same_run(reference, reference, non_idempotent=NON_IDEMPOTENT)


def test_killed_after_every_checkpoint_ends_as_the_uninterrupted_run(
        harness: CrashHarness, reference: Outcome) -> None:
    per_attempt = [attempt.checkpoints for attempt in reference.attempts]
    for ordinal in range(1, sum(per_attempt) + 1):
        index, count = locate(per_attempt, ordinal)
        crashed = harness.run(f"checkpoint-{ordinal}", {index: KillAfter(count)},
                              start_from=reference.snapshots[index])
        assert crashed.kills == 1 and crashed.attempts[index].killed, crashed.describe()
        assert_same_run(crashed, reference, non_idempotent=NON_IDEMPOTENT)
        # killed right after a commit: nothing is redone, nothing needs an operator
        assert repeated_executions(crashed) == 0 and crashed.resolutions == []


def test_killed_inside_every_tool_call_ends_as_the_uninterrupted_run(
        harness: CrashHarness, reference: Outcome) -> None:
    per_attempt = [attempt.tool_executions for attempt in reference.attempts]
    order = [entry["tool"] for entry in reference.executions]
    for ordinal in range(1, sum(per_attempt) + 1):
        index, count = locate(per_attempt, ordinal)
        crashed = harness.run(f"tool-{ordinal}", {index: KillAfter(count, "tool")},
                              start_from=reference.snapshots[index])
        assert crashed.kills == 1 and crashed.attempts[index].killed, crashed.describe()
        assert_same_run(crashed, reference, non_idempotent=NON_IDEMPOTENT)
        if order[ordinal - 1] in NON_IDEMPOTENT:
            # the effect happened but its result was lost: the operator supplies it
            assert [action for _, action in crashed.resolutions] == ["result"]
            assert repeated_executions(crashed) == 0
        else:
            # an idempotent call is simply dispatched again, with the same key
            assert crashed.resolutions == [] and repeated_executions(crashed) == 1


def test_killed_at_every_point_of_any_kind_ends_as_the_uninterrupted_run(
        harness: CrashHarness, reference: Outcome) -> None:
    """Every event the engine emits and every tool execution, in turn: between
    a reservation and its dispatch, a completed effect and its checkpoint, a
    suspension and its event, and every other gap between two commit points."""
    per_attempt = [attempt.points for attempt in reference.attempts]
    for ordinal in range(1, sum(per_attempt) + 1):
        index, count = locate(per_attempt, ordinal)
        crashed = harness.run(f"point-{ordinal}", {index: KillAfter(count, "any")},
                              start_from=reference.snapshots[index])
        assert crashed.kills == 1 and crashed.attempts[index].killed, crashed.describe()
        assert_same_run(crashed, reference, non_idempotent=NON_IDEMPOTENT)


def random_plan(rng: random.Random, reference: Outcome) -> dict[int, Kill]:
    """Kills for the first attempts of a scenario: each dies with probability 1/2,
    at a random point of any kind or after a random delay; later ones live."""
    points = max(attempt.points for attempt in reference.attempts)
    seconds = max(attempt.seconds for attempt in reference.attempts)
    plan: dict[int, Kill] = {}
    for index in range(3 * len(reference.attempts)):
        if rng.random() < 0.5:
            continue
        if rng.random() < 0.75:
            plan[index] = KillAfter(rng.randint(1, points), "any")
        else:
            plan[index] = KillAfterDelay(round(rng.uniform(0, seconds), 4))
    return plan


def test_killed_at_random_points_ends_as_the_uninterrupted_run(
        harness: CrashHarness, reference: Outcome) -> None:
    rng = random.Random(SEED)
    kills = delayed = recoveries = 0
    for number in range(RANDOM_SCENARIOS):
        crashed = harness.run(f"random-{number}", random_plan(rng, reference))
        assert_same_run(crashed, reference, non_idempotent=NON_IDEMPOTENT)
        kills += crashed.kills
        delayed += sum(attempt.killed and isinstance(attempt.kill, KillAfterDelay)
                       for attempt in crashed.attempts)
        recoveries += len(crashed.resolutions) + repeated_executions(crashed)
    # About two kills a scenario, a quarter of them timed; which effect recoveries
    # they reach varies with timing (the sweeps above reach each one for sure).
    assert kills >= RANDOM_SCENARIOS and delayed > 0 and recoveries > 0


def test_the_comparison_catches_a_tool_that_differs_on_a_new_attempt(tmp_path: Path) -> None:
    """A negative control: a tool whose result depends on the attempt that runs it,
    killed inside its call, changes the transcript, and the harness says so."""

    def unstable_tools(recorder: ToolRecorder) -> list[Tool]:
        stable = {tool.name: tool for tool in crash_tools(recorder)}

        @tool
        async def lookup(item: str, ctx: ToolContext) -> str:
            """Look up facts, differently on every attempt."""
            output = f"{item}: attempt {ctx.attempt}"
            recorder.executed(ctx, {"item": item}, output)
            return output

        return [lookup, stable["publish"]]

    harness = CrashHarness(Workload(manifest=MANIFEST, script=SCRIPT, tools=unstable_tools),
                           tmp_path)
    reference = harness.run("reference")
    crashed = harness.run("killed-in-lookup", {0: KillAfter(1, "tool")})
    assert normalised_transcript(crashed.checkpoint.transcript) != \
        normalised_transcript(reference.checkpoint.transcript)
    with pytest.raises(AssertionError):
        assert_same_run(crashed, reference, non_idempotent=NON_IDEMPOTENT)
