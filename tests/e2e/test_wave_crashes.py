"""Crash injection in a parallel run: a wave of three prompts, a barrier step with a
non-idempotent tool, then a wave of two, SIGKILLed after every checkpoint and at
50 random points (any event, a tool execution, or a random delay), then resumed.

Every run ends as the uninterrupted one did, per step (a wave's members finish
in whatever order their answers arrive, so the transcript is compared step by
step); the scripted model's request log shows that no member whose output was
checkpointed is asked again, and the tools' log that no effect ran twice.
"""

from __future__ import annotations

import json
import os
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from crash_harness import (
    RUN_ID,
    CrashHarness,
    Kill,
    KillAfter,
    KillAfterDelay,
    Outcome,
    ScenarioPaths,
    ToolRecorder,
    Workload,
    ledger,
    normalised_transcript,
    repeated_executions,
)

from agent_runtime import RunStatus, Tool, ToolContext, tool
from agent_runtime.models.scripted import REQUEST_LOG_ENV, Script
from stores.sqlite import SqliteRunStore

pytestmark = pytest.mark.slow

SEED = 20261201
RANDOM_SCENARIOS = 50
WIDEST_WAVE = 3

MANIFEST: dict[str, Any] = {
    "schemaVersion": "1.0",
    "id": "wave-crashes",
    "model": {"provider": "scripted", "model": "waves"},
    "steps": [
        {"id": "scan_a", "type": "prompt", "prompt": "Scan A.", "outputVariable": "a"},
        {"id": "scan_b", "type": "prompt", "prompt": "Scan B.", "outputVariable": "b"},
        {"id": "scan_c", "type": "prompt", "prompt": "Scan C.", "outputVariable": "c"},
        {"id": "publish", "type": "prompt", "prompt": "Publish {{ a }}, {{ b }}, {{ c }}.",
         "tools": ["publish"], "outputVariable": "published"},
        {"id": "tell_x", "type": "prompt", "prompt": "Tell X: {{ published }}",
         "includeInFinalOutput": True},
        {"id": "tell_y", "type": "prompt", "prompt": "Tell Y: {{ published }}",
         "includeInFinalOutput": True},
    ],
}

SCRIPT = Script(by_step={
    # scan_a asks for a tool it does not have first: a commit point inside the wave
    "scan_a": [{"toolCalls": [{"name": "peek", "arguments": {}}], "delayMs": 4},
               {"text": "a found", "delayMs": 4}],
    "scan_b": [{"text": "b found", "delayMs": 12}],
    "scan_c": [{"text": "c found", "delayMs": 8}],
    "publish": [{"toolCalls": [{"name": "publish", "arguments": {"what": "abc"}}]},
                {"text": "published abc"}],
    "tell_x": [{"text": "told x", "delayMs": 8}],
    "tell_y": [{"text": "told y", "delayMs": 4}],
})


def wave_tools(recorder: ToolRecorder) -> list[Tool]:
    @tool(idempotent=False)
    async def publish(what: str, ctx: ToolContext) -> dict[str, str]:
        """Publish the findings (not safe to repeat)."""
        output = {"published": what}
        recorder.executed(ctx, {"what": what}, output)
        return output

    return [publish]


WORKLOAD = Workload(manifest=MANIFEST, script=SCRIPT, tools=wave_tools,
                    options={"execution": {"mode": "parallel", "maxConcurrency": 4}})


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> CrashHarness:
    return CrashHarness(WORKLOAD, tmp_path_factory.mktemp("wave-crashes"))


def request_log(harness: CrashHarness, name: str) -> Path:
    return harness.directory / f"{name}.requests.jsonl"


def run_logged(harness: CrashHarness, name: str, kills: Any = None) -> Outcome:
    """A scenario with the scripted model's request log on (the children inherit it)."""
    before = os.environ.get(REQUEST_LOG_ENV)
    os.environ[REQUEST_LOG_ENV] = str(request_log(harness, name))
    try:
        return harness.run(name, kills)
    finally:
        if before is None:
            del os.environ[REQUEST_LOG_ENV]
        else:
            os.environ[REQUEST_LOG_ENV] = before


def requests(harness: CrashHarness, name: str) -> list[dict[str, Any]]:
    path = request_log(harness, name)
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def reference(harness: CrashHarness) -> Outcome:
    return run_logged(harness, "reference")


def by_step(items: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = {}
    for item in items:
        grouped.setdefault(item["step_path"], []).append(item)
    return grouped


def step_transcripts(outcome: Outcome) -> dict[str, list[dict[str, Any]]]:
    """Each step's own transcript, normalised; without the run-wide request number,
    which in a wave depends on which member asked first."""
    return {path: [{k: v for k, v in item.items() if k != "request"}
                   for item in normalised_transcript(items)]
            for path, items in by_step(outcome.checkpoint.transcript).items()}


def assert_same_outcome(crashed: Outcome, reference: Outcome) -> None:
    where = crashed.describe()
    assert crashed.record.status is reference.record.status is RunStatus.COMPLETED, where
    assert crashed.record.output == reference.record.output, where
    assert crashed.checkpoint.variables == reference.checkpoint.variables, where
    assert crashed.checkpoint.budget == reference.checkpoint.budget, where

    def results(outcome: Outcome) -> dict[str, dict[str, Any]]:
        return {entry["step_path"]: {k: v for k, v in entry.items() if k != "at"}
                for entry in outcome.checkpoint.step_results}

    assert results(crashed) == results(reference), where
    assert len(crashed.checkpoint.step_results) == len(reference.checkpoint.step_results), where
    assert step_transcripts(crashed) == step_transcripts(reference), where
    # the effect: one completed ledger entry, and the tool ran exactly once
    assert ledger(crashed) == ledger(reference), where
    assert len(crashed.executions) == 1 and repeated_executions(crashed) == 0, where


def test_the_uninterrupted_run_is_the_reference(harness: CrashHarness,
                                                reference: Outcome) -> None:
    assert reference.record.status is RunStatus.COMPLETED
    assert reference.record.output == ["told x", "told y"]
    assert reference.kills == 0
    waves = [event.data["steps"] for event in reference.attempts[0].events
             if event.type == "wave.started"]
    assert waves == [["scan_a", "scan_b", "scan_c"], ["tell_x", "tell_y"]]
    counts = Counter(entry["step_id"] for entry in requests(harness, "reference"))
    assert counts == {"scan_a": 2, "scan_b": 1, "scan_c": 1, "publish": 2, "tell_x": 1,
                      "tell_y": 1}
    assert reference.attempts[0].checkpoints >= 10


def finished_at(harness: CrashHarness, name: str, seq: int) -> set[str]:
    """The top-level steps whose outputs checkpoint `seq` of a scenario holds."""
    with SqliteRunStore(ScenarioPaths(harness.directory / name).store) as store:
        checkpoint = store.load_checkpoint(RUN_ID, seq)
    assert checkpoint is not None
    return {entry["step_id"] for entry in checkpoint.step_results if entry["depth"] == 0}


def test_killed_after_every_checkpoint_only_unfinished_members_run_again(
        harness: CrashHarness, reference: Outcome) -> None:
    reference_requests = len(requests(harness, "reference"))
    for ordinal in range(1, reference.attempts[0].checkpoints + 1):
        name = f"checkpoint-{ordinal}"
        crashed = run_logged(harness, name, {0: KillAfter(ordinal)})
        killed = crashed.attempts[0]
        assert crashed.kills == 1 and killed.killed, crashed.describe()
        assert_same_outcome(crashed, reference)
        # the log's first lines are the killed attempt's requests, the rest came after
        issued = requests(harness, name)
        before_kill = sum(event.type == "model.started" for event in killed.events)
        last_seq = [event.data["seq"] for event in killed.events
                    if event.type == "checkpoint.saved"][-1]
        finished = finished_at(harness, name, last_seq)
        again = [entry["step_id"] for entry in issued[before_kill:]]
        assert not finished & set(again), (finished, again, crashed.describe())
        # what was asked twice is what was in flight, unsaved, at the kill
        assert len(issued) - reference_requests <= WIDEST_WAVE, crashed.describe()
        assert crashed.resolutions == []


def random_plan(rng: random.Random, reference: Outcome) -> dict[int, Kill]:
    """Kills for a scenario's first attempts: the first dies at a random point of
    any kind; the next three each with probability 2/3, at a random point or after
    a random delay."""
    points = reference.attempts[0].points
    seconds = reference.attempts[0].seconds
    plan: dict[int, Kill] = {0: KillAfter(rng.randint(1, points), "any")}
    for index in range(1, 4):
        if rng.random() < 1 / 3:
            continue
        if rng.random() < 0.75:
            plan[index] = KillAfter(rng.randint(1, points), "any")
        else:
            plan[index] = KillAfterDelay(round(rng.uniform(0, seconds), 4))
    return plan


def test_killed_at_random_points_ends_as_the_uninterrupted_run(
        harness: CrashHarness, reference: Outcome) -> None:
    rng = random.Random(SEED)
    kills = 0
    reference_counts = Counter(entry["step_id"] for entry in requests(harness, "reference"))
    for number in range(RANDOM_SCENARIOS):
        name = f"random-{number}"
        crashed = run_logged(harness, name, random_plan(rng, reference))
        assert_same_outcome(crashed, reference)
        kills += crashed.kills
        counts = Counter(entry["step_id"] for entry in requests(harness, name))
        for step_id, count in counts.items():
            # each kill loses at most the one request a step had in flight
            assert count <= reference_counts[step_id] + crashed.kills, (step_id, name)
    assert kills >= RANDOM_SCENARIOS


def test_the_comparison_catches_a_member_answering_differently(tmp_path: Path) -> None:
    """A negative control: a different answer for one member is caught."""
    other = Script(by_step={**SCRIPT.by_step, "scan_b": [{"text": "b lost"}]})
    harness = CrashHarness(Workload(manifest=MANIFEST, script=other, tools=wave_tools,
                                    options=WORKLOAD.options), tmp_path)
    base = CrashHarness(WORKLOAD, tmp_path / "base")
    (tmp_path / "base").mkdir()
    with pytest.raises(AssertionError):
        assert_same_outcome(harness.run("other"), base.run("reference"))
