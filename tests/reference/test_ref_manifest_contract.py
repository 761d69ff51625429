"""Ports of packages/contracts/test/manifest.test.ts: the agent manifest, the run manifest
and the checkpoint contracts, through `parse_agent_manifest` / `parse_run_manifest`."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from agent_runtime.errors import ManifestError
from agent_runtime.manifest import AgentManifest, PromptStep, parse_agent_manifest
from agent_runtime.run_manifest import parse_run_manifest
from stores.records import Checkpoint


def parse(**fields: Any) -> AgentManifest:
    return parse_agent_manifest({"schemaVersion": "1.0", **fields}, source="test")


def refused(**fields: Any) -> ManifestError:
    with pytest.raises(ManifestError) as raised:
        parse(**fields)
    return raised.value


def prompt(step_id: str, **extra: Any) -> dict[str, Any]:
    return {"id": step_id, "type": "prompt", "prompt": step_id, **extra}


def test_accepts_complete_rich_prompt_histories_while_preserving_legacy_prompts() -> None:
    """contracts/test/manifest.test.ts: "accepts complete rich prompt histories while
    preserving legacy prompts"."""
    parse(steps=[{"id": "legacy", "type": "prompt", "systemPrompt": "Be concise.",
                  "prompt": "Answer."}])
    manifest = parse(steps=[{"id": "continued-chat", "type": "prompt", "messages": [
        {"role": "system", "content": [{"type": "text", "text": "Review {{topic}}."}],
         "metadata": {"source": "agent"}},
        {"role": "user", "content": [
            {"type": "text", "text": "Inspect this image."},
            {"type": "image", "url": "https://example.test/diagram.png",
             "mediaType": "image/png", "providerOptions": {"openai": {"detail": "high"}}}]},
        {"role": "assistant", "content": [{"type": "tool-call", "call": {
            "id": "call-1", "name": "lookup", "input": {"id": 1},
            "metadata": {"imported": True}}}]},
        {"role": "tool", "content": [{"type": "tool-result", "result": {
            "callId": "call-1", "name": "lookup", "output": {"found": True},
            "metadata": {"latencyMs": 10}}}]},
        {"role": "user", "content": [{"type": "text", "text": "Give the final answer."}]}]}])
    step = manifest.steps[0]
    assert isinstance(step, PromptStep) and step.messages is not None
    assert len(step.messages) == 5
    image = step.messages[1].content[1]
    assert (image.type, getattr(image, "media_type", None)) == ("image", "image/png")


@pytest.mark.parametrize("step", [
    {"id": "ambiguous", "type": "prompt", "prompt": "Legacy",
     "messages": [{"role": "user", "content": [{"type": "text", "text": "History"}]}]},
    {"id": "invalid-media", "type": "prompt", "messages": [{"role": "user", "content": [
        {"type": "image", "url": "https://example.test/image.png", "data": "also-inline"}]}]},
    {"id": "orphan-result", "type": "prompt", "messages": [{"role": "tool", "content": [
        {"type": "tool-result", "result": {"callId": "missing", "name": "lookup",
                                            "output": None}}]}]},
])
def test_rejects_ambiguous_histories_invalid_media_and_unpaired_tool_results(
        step: dict[str, Any]) -> None:
    """contracts/test/manifest.test.ts: "rejects ambiguous histories, invalid media, and
    unpaired tool results"."""
    assert refused(steps=[step]).field is not None


def test_accepts_explicit_variables_conditional_collection_loops_and_goal_loops() -> None:
    """contracts/test/manifest.test.ts: "accepts explicit variables, conditional collection
    loops, and goal loops"."""
    manifest = parse(name="Review documents", variables=[
        {"key": "documents", "type": "array",
         "value": [{"id": "one", "enabled": True}, {"id": "two", "enabled": False}]},
        {"key": "targetScore", "type": "number", "value": 90}], steps=[
        {"id": "review-documents", "type": "loop",
         "loop": {"source": "documents", "itemVariable": "document",
                  "condition": "document.enabled == true", "outputMode": "array"},
         "steps": [prompt("review-document", prompt="Review {{document.id}}")]},
        {"id": "improve-draft", "type": "loop",
         "loop": {"maxIterations": 5, "goal": "{{score}} >= {{targetScore}}",
                  "resultVariable": "draft", "outputMode": "final"},
         "steps": [prompt("revise", prompt="Improve {{draft}}")]}])
    declaration = manifest.variable("targetScore")
    assert declaration is not None and declaration.value == 90
    assert [step.type for step in manifest.steps] == ["loop", "loop"]


def test_rejects_excessive_manifest_nesting_with_a_controlled_validation_error() -> None:
    """contracts/test/manifest.test.ts: "rejects excessive manifest nesting with a controlled
    validation error" (the depth limit is docs/limits.md's)."""
    nested: dict[str, Any] = {"id": "leaf", "type": "approval", "prompt": "Approve"}
    for depth in range(2_000):
        nested = {"id": f"loop-{depth}", "type": "loop", "loop": {}, "steps": [nested]}
    assert "deep" in refused(steps=[nested]).reason
    metadata: dict[str, Any] = {}
    for _ in range(2_000):
        metadata = {"nested": metadata}
    assert "deep" in refused(steps=[], metadata=metadata).reason


def test_requires_an_exact_supported_schema_version() -> None:
    """contracts/test/manifest.test.ts: "requires an exact supported schema version"."""
    with pytest.raises(ManifestError) as raised:
        parse_agent_manifest({"schemaVersion": "2.0", "steps": []}, source="test")
    assert raised.value.field == "schemaVersion"


def test_accepts_model_profiles_and_connection_bindings_while_rejecting_alias_collisions(
) -> None:
    """contracts/test/manifest.test.ts: "accepts model profiles and connection bindings while
    rejecting alias collisions"."""
    parse(model={"ref": "quality"},
          connections=[{"ref": "documents", "alias": "docs", "mode": "read",
                        "tools": ["search"]}],
          steps=[prompt("answer", tools=["docs__search"])])
    error = refused(connections=[{"ref": "documents", "alias": "docs"},
                                 {"ref": "other-documents", "alias": "docs"}], steps=[])
    assert error.field == "connections[1].alias"


def test_requires_a_sub_run_manifest_or_reference() -> None:
    """contracts/test/manifest.test.ts: "requires a sub-run manifest or reference"."""
    assert "manifest or manifestRef" in refused(steps=[{"id": "child", "type": "sub-run"}]).reason


def test_rejects_ambiguous_sibling_ids_and_agent_variables() -> None:
    """contracts/test/manifest.test.ts: "rejects ambiguous sibling ids and agent variables":
    both problems are reported, not only the first."""
    error = refused(variables=[{"key": "subject", "type": "string"},
                               {"key": "Subject", "type": "string"}],
                    steps=[prompt("same"), prompt("same")])
    assert "duplicate variable key 'Subject'" in str(error)
    assert "steps[1].id: duplicate step id 'same'" in str(error)


def test_a_duplicate_step_id_is_reported_after_another_error() -> None:
    """The issue's case of the same rule: a field error elsewhere does not hide a duplicate
    step id (the model's own check runs only when every field is valid)."""
    error = refused(steps=[prompt("a", prompt=1), prompt("a")])
    assert error.field == "steps[0].prompt"
    assert "steps[1].id: duplicate step id 'a'" in error.reason


def test_rejects_the_discontinued_final_output_steps_manifest_field() -> None:
    """contracts/test/manifest.test.ts: "rejects the discontinued finalOutputSteps manifest
    field"."""
    error = refused(steps=[prompt("answer")], finalOutputSteps=["answer"])
    assert (error.field, error.reason) == ("finalOutputSteps", "unknown field")


@pytest.mark.parametrize("variable", [
    {"key": "release.name", "type": "string", "value": "AgentRuntime 1.0"},
    {"key": "maxWords", "type": "number", "value": "180"},
])
def test_rejects_dotted_variable_keys_and_defaults_that_do_not_match_their_type(
        variable: dict[str, Any]) -> None:
    """contracts/test/manifest.test.ts: "rejects dotted variable keys and defaults that do not
    match their declared type"."""
    assert refused(variables=[variable], steps=[]).field is not None


def test_allows_the_same_child_id_under_different_loop_parents() -> None:
    """contracts/test/manifest.test.ts: "allows the same child id under different loop
    parents"."""
    parse(steps=[{"id": "first-loop", "type": "loop", "loop": {"maxIterations": 1},
                  "steps": [prompt("child")]},
                 {"id": "second-loop", "type": "loop", "loop": {"maxIterations": 1},
                  "steps": [prompt("child")]}])


@pytest.mark.parametrize("output_variable", ["__proto__", "safe.__proto__.polluted",
                                             "constructor.prototype.polluted"])
def test_rejects_prototype_sensitive_variable_path(output_variable: str) -> None:
    """contracts/test/manifest.test.ts: "rejects prototype-sensitive variable path %s"."""
    error = refused(steps=[prompt("unsafe", outputVariable=output_variable)])
    assert error.field == "steps[0].outputVariable"


def test_rejects_dotted_output_variable_keys() -> None:
    """contracts/test/manifest.test.ts: "rejects dotted output variable keys"."""
    error = refused(steps=[prompt("draft", outputVariable="brief.draft")])
    assert error.field == "steps[0].outputVariable"


def run_manifest(**fields: Any) -> Any:
    return parse_run_manifest({"schemaVersion": "1.0", **fields}, source="run.yaml")


def test_parses_an_agent_reference_and_runtime_variable_overrides() -> None:
    """contracts/test/manifest.test.ts: "parses an agent reference and runtime variable
    overrides"."""
    run = run_manifest(agent={"ref": "release-brief"}, runId="release-brief-42",
                       variables=[{"key": "audience", "value": "partners"}],
                       execution={"mode": "parallel", "maxConcurrency": 2},
                       budget={"maxTotalTokens": 10_000})
    assert run.model_dump(by_alias=True, exclude_unset=True) == {
        "schemaVersion": "1.0", "agent": {"ref": "release-brief"}, "runId": "release-brief-42",
        "variables": [{"key": "audience", "value": "partners"}],
        "execution": {"mode": "parallel", "maxConcurrency": 2},
        "budget": {"maxTotalTokens": 10_000}}


@pytest.mark.parametrize(("execution", "field"), [
    ({"mode": "parallel", "maxConcurrency": 0}, "execution.maxConcurrency"),
    ({"mode": "graph"}, "execution.mode"),
])
def test_validates_agent_run_execution_options(execution: dict[str, Any], field: str) -> None:
    """contracts/test/manifest.test.ts: "validates agent run execution options"."""
    run_manifest(agent={"ref": "release-brief"}, execution={"mode": "sequential"})
    with pytest.raises(ManifestError) as raised:
        run_manifest(agent={"ref": "release-brief"}, execution=execution)
    assert raised.value.field == field


@pytest.mark.parametrize("tokens", [0, -1, 1.5, 2**53])
def test_requires_a_positive_safe_integer_token_budget(tokens: float) -> None:
    """contracts/test/manifest.test.ts: "requires a positive safe-integer token budget"."""
    run_manifest(agent={"ref": "release-brief"}, budget={"maxTotalTokens": 1})
    with pytest.raises(ManifestError) as raised:
        run_manifest(agent={"ref": "release-brief"}, budget={"maxTotalTokens": tokens})
    assert raised.value.field == "budget.maxTotalTokens"


def test_requires_an_agent_reference_and_rejects_agent_definition_fields() -> None:
    """contracts/test/manifest.test.ts: "requires an agent reference and rejects
    agent-definition fields"."""
    with pytest.raises(ManifestError):
        run_manifest(variables=[{"key": "audience", "value": "partners"}], steps=[])


CHECKPOINT: dict[str, Any] = {"run_id": "run-1", "seq": 1, "attempt": 1,
                              "manifest_hash": "sha256:test",
                              "created_at": "2026-07-22T12:00:00+00:00"}


def test_parses_a_versioned_checkpoint() -> None:
    """contracts/test/manifest.test.ts: "parses a versioned checkpoint with active-step
    accumulators" (our checkpoint record: stores/records.py; the active step's transcript is
    the run's append-only transcript)."""
    checkpoint = Checkpoint.model_validate({**CHECKPOINT, "budget": {
        "max_total_tokens": 1_000, "consumed_tokens": 200}})
    assert (checkpoint.seq, checkpoint.budget.consumed_tokens) == (1, 200)


@pytest.mark.parametrize("change", [{"created_at": "not-a-timestamp"}, {"unexpected": True}])
def test_rejects_a_malformed_or_ambiguous_checkpoint(change: dict[str, Any]) -> None:
    """contracts/test/manifest.test.ts: "rejects a malformed or ambiguous checkpoint". (Its
    `sequence: 0` case is not ported: our record accepts seq 0 and the stores own it.)"""
    with pytest.raises(ValidationError):
        Checkpoint.model_validate({**CHECKPOINT, **change})
