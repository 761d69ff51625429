"""Ports of packages/step-prompt/src/index.test.ts (PromptStepExecutor), through a run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from reference_harness import Host, agent, declared

from agent_runtime import RunStatus, ToolContext, tool
from agent_runtime.testing import scripted
from stores.artifacts import LocalArtifactStore


def test_replays_complete_rich_histories_templates_text_only_and_resolves_artifact_media(
        tmp_path: Path) -> None:
    """step-prompt/src/index.test.ts: "replays complete rich histories, templates text only,
    and resolves artifact media". Our artifact store addresses bytes by `uri`, so the
    references carry the uri the store gave, and a run reads only its own artifacts
    (agent_runtime.artifact_access): the bytes are stored under the run that reads them."""
    artifacts = LocalArtifactStore(tmp_path / "artifacts")
    uri, _ = artifacts.put(bytes([1, 2, 3]), media_type="image/png", run_id="run-1")
    model = scripted(responses=[{"text": "done"}])
    host = Host(model=model, artifacts=artifacts)
    unrendered = "{{ shouldNotCompile }}"
    result = host.run(agent({"id": "history", "type": "prompt", "messages": [
        {"role": "system", "content": [{"type": "text", "text": "Topic: {{ topic }}"}],
         "metadata": {"source": "fixture"},
         "providerOptions": {"anthropic": {"cacheControl": {"type": "ephemeral"}}}},
        {"role": "user", "content": [
            {"type": "text", "text": "Inspect {{ imageLabel }}"},
            {"type": "image", "artifact": {"id": "artifact-1", "name": "diagram.png",
                                           "mediaType": "image/png", "uri": uri},
             "metadata": {"alt": unrendered}}]},
        {"role": "assistant", "content": [{"type": "tool-call", "call": {
            "id": "historical-call", "name": "lookup", "input": {"query": unrendered}}}]},
        {"role": "tool", "content": [{"type": "tool-result", "result": {
            "callId": "historical-call", "name": "lookup", "output": {"answer": unrendered},
            "metadata": {"cached": True},
            "artifacts": [{"id": "artifact-2", "name": "tool-image.png",
                           "mediaType": "image/png", "uri": uri}]}}]},
        {"role": "user", "content": [{"type": "text", "text": "Continue."}]}]},
        variables=declared({"topic": "architecture", "imageLabel": "the diagram",
                            "shouldNotCompile": "secret"})), run_id="run-1")
    assert result.status is RunStatus.COMPLETED
    request, = model.requests
    system, user, assistant, tool_message, _ = request.messages
    assert system["content"] == [{"type": "text", "text": "Topic: architecture"}]
    assert system["metadata"] == {"source": "fixture"}
    assert system["providerOptions"] == {"anthropic": {"cacheControl": {"type": "ephemeral"}}}
    assert user["content"][0] == {"type": "text", "text": "Inspect the diagram"}
    image = user["content"][1]
    assert (image["data"], image["mediaType"], image["metadata"]) == (
        "AQID", "image/png", {"alt": unrendered})
    assert assistant["content"][0]["call"]["input"] == {"query": unrendered}
    tool_result = tool_message["content"][0]["result"]
    assert tool_result["output"] == {"answer": unrendered}
    assert tool_result["metadata"] == {"cached": True}
    inlined, = tool_result["artifacts"]
    assert (inlined["id"], inlined["uri"], inlined["size"]) == (
        "artifact-2", "data:image/png;base64,AQID", 3)
    # the transcript keeps the reference, not the bytes
    checkpoint = host.store.load_latest_checkpoint(result.run_id)
    assert checkpoint is not None and "AQID" not in str(checkpoint.transcript)


def test_a_media_artifact_without_a_store_or_uri_fails_the_step() -> None:
    """step-prompt/src/index.ts `resolveMediaPart`: "Prompt media artifact ... requires an
    ArtifactStore or URI"."""
    host = Host()
    result = host.run(agent({"id": "look", "type": "prompt", "messages": [
        {"role": "user", "content": [{"type": "image", "artifact": {
            "id": "artifact-1", "name": "diagram.png", "mediaType": "image/png"}}]}]}))
    assert result.status is RunStatus.FAILED
    assert result.error["type"] == "artifact_unavailable"


def test_enforces_configured_complete_history_input_limits() -> None:
    """step-prompt/src/index.test.ts: "enforces configured complete-history input limits"."""
    model = scripted(responses=[{"text": "should not run"}])
    host = Host(model=model)
    result = host.run(agent({"id": "limited", "type": "prompt", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "one"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "two"}]}]},
        limits={"maxMessagesPerPrompt": 1}))
    assert result.status is RunStatus.FAILED
    assert result.error["type"] == "too_many_messages"
    assert model.requests == []


def test_executes_tool_calls_sequentially_before_continuing() -> None:
    """step-prompt/src/index.test.ts: "streams deltas and executes tool calls sequentially
    before continuing" (the tool-call half; streaming is a driver's, tested with each
    driver)."""
    order: list[str] = []

    @tool
    def lookup(id: int, ctx: ToolContext) -> dict[str, Any]:
        """Look a record up."""
        order.append(f"lookup:{id}")
        return {"id": id}

    model = scripted(responses=[
        {"toolCalls": [{"name": "lookup", "arguments": {"id": 1}},
                       {"name": "lookup", "arguments": {"id": 2}}]},
        {"text": "final"}])
    host = Host(model=model, tools=[lookup])
    result = host.run(agent({"id": "ask", "type": "prompt", "prompt": "Look.",
                             "tools": ["lookup"]}))
    assert (result.status, result.output) == (RunStatus.COMPLETED, "final")
    assert order == ["lookup:1", "lookup:2"]
    second = model.requests[1].messages
    results = [part["result"]["output"] for message in second if message["role"] == "tool"
               for part in message["content"]]
    assert results == [{"id": 1}, {"id": 2}]


def test_fails_truncated_output_by_default_and_allows_an_explicit_partial_output_policy(
) -> None:
    """step-prompt/src/index.test.ts: "fails truncated output by default and allows an
    explicit partial-output policy"."""
    truncated = {"text": "", "finishReason": "length"}
    host = Host(model=scripted(responses=[truncated]))
    failed = host.run(agent({"id": "truncated", "type": "prompt", "prompt": "Answer."}))
    assert failed.status is RunStatus.FAILED
    assert failed.error["type"] == "output_truncated"
    assert failed.error["details"] == {"finish_reason": "length"}

    host = Host(model=scripted(responses=[truncated]))
    accepted = host.run(agent({"id": "truncated", "type": "prompt", "prompt": "Answer.",
                               "completionPolicy": {"onTruncation": "accept"}}))
    assert (accepted.status, accepted.output) == (RunStatus.COMPLETED, "")


def test_can_require_non_empty_final_output() -> None:
    """step-prompt/src/index.test.ts: "can require non-empty final output"."""
    host = Host(model=scripted(responses=[{"text": "   "}]))
    result = host.run(agent({"id": "required-output", "type": "prompt", "prompt": "Answer.",
                             "completionPolicy": {"requireOutput": True}}))
    assert result.status is RunStatus.FAILED
    assert result.error["type"] == "output_required"
    # without the policy a blank answer completes the step, as in the reference
    host = Host(model=scripted(responses=[{"text": "   "}]))
    assert host.run(agent({"id": "blank", "type": "prompt", "prompt": "Answer."})).status \
        is RunStatus.COMPLETED
