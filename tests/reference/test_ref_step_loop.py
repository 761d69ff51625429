"""Ports of packages/step-loop/src/index.test.ts (LoopStepExecutor)."""

from __future__ import annotations

import asyncio
from typing import Any

from reference_harness import Host, StandInChild, agent, declared

from agent_runtime import RunStatus

UPSTREAM = "packages/step-loop/src/index.test.ts"


def prompt(step_id: str, output_variable: str) -> dict[str, Any]:
    return {"id": step_id, "type": "prompt", "prompt": step_id,
            "outputVariable": output_variable}


def test_filters_collection_items_while_retaining_source_indices() -> None:
    """step-loop/src/index.test.ts: "filters collection items while retaining source indices"."""
    visited: list[tuple[str, str]] = []

    def process(step: Any, variables: dict[str, Any]) -> str:
        name, index = variables["candidate"]["name"], variables["candidateIndex"]
        visited.append((name, index))
        return f"{index}:{name}"

    host = Host(child=StandInChild(process))
    result = host.run(agent(
        {"id": "candidates-loop", "type": "loop", "outputVariable": "processed",
         "loop": {"source": "candidates", "itemVariable": "candidate",
                  "indexVariable": "candidateIndex", "condition": "candidate.enabled == true",
                  "outputMode": "array"},
         "steps": [prompt("process", "candidateResult")]},
        variables=declared({"candidates": [{"name": "alpha", "enabled": True},
                                           {"name": "beta", "enabled": False},
                                           {"name": "gamma", "enabled": True}]})))
    assert visited == [("alpha", "0"), ("gamma", "2")]  # the index variable is a string
    assert result.output == ["0:alpha", "2:gamma"]
    assert host.variables(result.run_id)["processed"] == ["0:alpha", "2:gamma"]


def test_carries_previous_iteration_state_and_stops_when_a_goal_is_met() -> None:
    """step-loop/src/index.test.ts: "carries previous iteration state and stops when a goal
    is met"."""
    previous_scores: list[Any] = []

    def child(step: Any, variables: dict[str, Any]) -> Any:
        memory = variables["loop"]
        if step.id == "draft":
            previous = memory.get("previous") or {}
            previous_scores.append(((previous.get("variables") or {}).get("review") or {})
                                   .get("score"))
            return f"draft-{memory['iteration']}"
        return {"score": memory["iteration"], "draft": str(variables["draft"])}

    host = Host(child=StandInChild(child))
    result = host.run(agent(
        {"id": "goal-loop", "type": "loop", "outputVariable": "acceptedScore",
         "loop": {"maxIterations": 5, "goal": "{{review.score}} >= {{targetScore}}",
                  "resultVariable": "review.score", "outputMode": "final"},
         "steps": [prompt("draft", "draft"), prompt("review", "review")]},
        variables=declared({"targetScore": "3"})))
    assert previous_scores == [None, 1, 2]
    assert result.output == 3
    variables = host.variables(result.run_id)
    assert variables["acceptedScore"] == 3
    assert variables["review"] == {"score": 3, "draft": "draft-3"}  # dotted: nested, not flat
    assert "review.score" not in variables
    loop = variables["loop"]
    assert (loop["outputs"], loop["goalMet"], loop["goalMetAtIteration"]) == ([1, 2, 3], True, 3)


def test_replaces_a_result_variable_with_each_final_child_output_when_no_child_writes_it(
) -> None:
    """step-loop/src/index.test.ts: "replaces a result variable with each final child output
    when no child writes it"."""
    host = Host(child=StandInChild(lambda step, variables: int(variables.get("result") or 0) + 1))
    result = host.run(agent(
        {"id": "accumulator-loop", "type": "loop",
         "loop": {"maxIterations": 10, "goal": "{{number}} > 5", "resultVariable": "result",
                  "outputMode": "final"},
         "steps": [prompt("increment", "number")]}))
    assert result.output == 6
    variables = host.variables(result.run_id)
    assert (variables["number"], variables["result"]) == (6, 6)
    loop = variables["loop"]
    assert (loop["outputs"], loop["goalMet"], loop["goalMetAtIteration"]) == (
        [1, 2, 3, 4, 5, 6], True, 6)


def test_resumes_at_the_next_child_without_replaying_the_committed_child() -> None:
    """step-loop/src/index.test.ts: "resumes at the next child without replaying the committed
    child". Deliberate difference 1: the failed run is terminal here, so it is retried with
    `fork` from its latest checkpoint instead of resumed; the committed child is not replayed
    either way."""
    fail_finalize = [True]

    def child(step: Any, variables: dict[str, Any]) -> str:
        if step.id == "draft":
            return f"{variables['item']['name']}-draft"
        if fail_finalize[0]:
            fail_finalize[0] = False
            raise RuntimeError("temporary child failure")
        return f"{variables['draft']}-final"

    stand_in = StandInChild(child)
    host = Host(child=stand_in)
    first = host.run(agent(
        {"id": "resume-loop", "type": "loop", "outputVariable": "processed",
         "loop": {"source": "items", "itemVariable": "item", "indexVariable": "itemIndex",
                  "outputMode": "array"},
         "steps": [prompt("draft", "draft"), prompt("finalize", "finalItem")]},
        variables=declared({"items": [{"name": "alpha"}]})))
    assert first.status is RunStatus.FAILED
    assert "temporary child failure" in first.error["message"]
    assert [call for call, _ in stand_in.calls] == ["draft", "finalize"]
    latest = host.store.load_latest_checkpoint(first.run_id)
    assert latest is not None and latest.cursor[-1].step_path == "resume-loop/0/finalize"

    retried = asyncio.run(host.runtime.fork(first.run_id))
    assert [call for call, _ in stand_in.calls] == ["draft", "finalize", "finalize"]
    assert retried.output == ["alpha-draft-final"]
    assert host.variables(retried.run_id)["processed"] == ["alpha-draft-final"]
