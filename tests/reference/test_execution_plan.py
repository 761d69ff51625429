"""The reference's execution-plan cases, ported (packages/core/src/execution-plan.test.ts).

Each test names its upstream title; the waves are written as step indexes, as
upstream's `stepIndexes` are.
"""

from __future__ import annotations

from typing import Any

import pytest

from agent_runtime.execution_plan import build_execution_waves
from agent_runtime.manifest import AgentManifest, parse_agent_manifest
from agent_runtime.run_manifest import RunExecution


def _prompt(step_id: str, text: str, output: str | None = None, **extra: Any) -> dict[str, Any]:
    step: dict[str, Any] = {"id": step_id, "type": "prompt", "prompt": text, **extra}
    if output:
        step["outputVariable"] = output
    return step


def _manifest(steps: list[dict[str, Any]], **extra: Any) -> AgentManifest:
    return parse_agent_manifest({"schemaVersion": "1.0", "steps": steps, **extra},
                                source="plan.agent.yaml")


def _parallel(max_concurrency: int | None = None) -> RunExecution:
    return RunExecution(mode="parallel", max_concurrency=max_concurrency)


def _waves(manifest: AgentManifest, execution: RunExecution | None, *,
           start: int = 0, host: int = 8) -> list[list[int]]:
    return [list(wave.step_indexes) for wave in
            build_execution_waves(manifest, start, execution, host_max_concurrency=host)]


def test_keeps_sequential_execution_as_the_default() -> None:
    """execution-plan.test.ts: "keeps sequential execution as the default"."""
    manifest = _manifest([_prompt("one", "One", "one"), _prompt("two", "Two", "two")])
    assert _waves(manifest, None) == [[0], [1]]
    assert _waves(manifest, RunExecution(mode="sequential")) == [[0], [1]]


def test_fans_out_independent_prompts_and_joins_before_their_consumer() -> None:
    """execution-plan.test.ts: "fans out independent prompts and joins before their consumer"."""
    manifest = _manifest([
        _prompt("facts", "Find facts about {{ topic }}", "facts"),
        _prompt("audience", "Analyze {{ audience }}", "audienceNotes"),
        _prompt("final", "Use {{ facts }} for {{ audienceNotes }}", "final"),
    ], variables=[{"key": "topic", "type": "string", "value": "t"},
                  {"key": "audience", "type": "string", "value": "a"}])
    assert _waves(manifest, _parallel(4)) == [[0, 1], [2]]


def test_recognizes_dependencies_in_conditions_and_serializes_duplicate_writes() -> None:
    """execution-plan.test.ts: "recognizes dependencies in conditions and serializes
    duplicate writes"."""
    manifest = _manifest([
        _prompt("score", "Score", "score"),
        _prompt("conditional", "Continue", "result", when="score.value >= 0.8"),
        _prompt("replace", "Replace", "result"),
    ])
    assert _waves(manifest, _parallel()) == [[0], [1], [2]]


def test_uses_stateful_and_tool_enabled_steps_as_barriers() -> None:
    """execution-plan.test.ts: "uses stateful and tool-enabled steps as barriers"."""
    manifest = _manifest([
        _prompt("one", "One", "one"),
        _prompt("tool", "Call tool", "toolResult", tools=["search"]),
        _prompt("two", "Two", "two"),
        {"id": "approval", "type": "approval", "prompt": "Approve"},
        _prompt("three", "Three", "three"),
    ])
    assert _waves(manifest, _parallel()) == [[0], [1], [2], [3], [4]]


def test_honors_concurrency_limits_and_disables_parallel_projection_state() -> None:
    """execution-plan.test.ts: "honors concurrency limits and disables parallel
    projection state"."""
    steps = [_prompt("one", "One", "one"), _prompt("two", "Two", "two"),
             _prompt("three", "Three", "three")]
    assert _waves(_manifest(steps), _parallel(2)) == [[0, 1], [2]]
    projected = _manifest(steps, extensions={
        "agentRuntime": {"stateProjection": "step-output-state-v1"}})
    assert _waves(projected, _parallel()) == [[0], [1], [2]]


# -- beyond the upstream cases: the same rules at their edges ---------------------


def test_the_host_cap_bounds_the_requested_concurrency() -> None:
    steps = [_prompt(f"s{i}", "Independent", f"v{i}") for i in range(6)]
    assert _waves(_manifest(steps), _parallel(64), host=3) == [[0, 1, 2], [3, 4, 5]]
    assert _waves(_manifest(steps), _parallel(), host=8) == [[0, 1, 2, 3], [4, 5]]


def test_a_concurrency_of_one_plans_sequentially() -> None:
    steps = [_prompt("a", "A", "a"), _prompt("b", "B", "b")]
    assert _waves(_manifest(steps), _parallel(1)) == [[0], [1]]
    assert _waves(_manifest(steps), _parallel(4), host=1) == [[0], [1]]


def test_planning_starts_at_the_cursor() -> None:
    steps = [_prompt("a", "A", "a"), _prompt("b", "B", "b"), _prompt("c", "C", "c")]
    assert _waves(_manifest(steps), _parallel(), start=1) == [[1, 2]]


@pytest.mark.parametrize(("text", "reads"), [
    ("{{ facts }}", True), ("{{facts}}", True), ("{{ FACTS.title }}", True),
    ("{{ factsheet }}", False), ("facts", False),
])
def test_a_template_reads_a_variable_only_by_its_whole_name(text: str, reads: bool) -> None:
    manifest = _manifest([_prompt("facts", "F", "facts"), _prompt("use", text, "use")])
    assert (_waves(manifest, _parallel()) == [[0], [1]]) is reads


@pytest.mark.parametrize(("when", "reads"), [
    ("facts", True), ("facts.count > 2", True), ("!facts", True),
    ("my-facts", False), ("facts_old", False), ("x.facts", False),
])
def test_a_condition_reads_a_variable_by_its_whole_name(when: str, reads: bool) -> None:
    manifest = _manifest([_prompt("facts", "F", "facts"),
                          _prompt("use", "U", "use", when=when)])
    assert (_waves(manifest, _parallel()) == [[0], [1]]) is reads


def test_a_message_template_counts_as_a_read() -> None:
    """Deliberate difference: upstream looks only at prompt, systemPrompt and when."""
    manifest = _manifest([
        _prompt("facts", "F", "facts"),
        {"id": "use", "type": "prompt", "outputVariable": "use",
         "messages": [{"role": "user",
                       "content": [{"type": "text", "text": "Use {{ facts }}"}]}]},
    ])
    assert _waves(manifest, _parallel()) == [[0], [1]]


def test_extensions_on_a_step_make_it_a_barrier() -> None:
    manifest = _manifest([_prompt("a", "A", "a"),
                          _prompt("b", "B", "b", extensions={"x": 1}),
                          _prompt("c", "C", "c")])
    assert _waves(manifest, _parallel()) == [[0], [1], [2]]
