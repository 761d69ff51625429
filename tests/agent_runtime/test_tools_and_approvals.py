"""Python tools through a prompt step, and approval steps."""

from __future__ import annotations

from typing import Any, Literal

import pytest
from engine_harness import ECHO, Harness, manifest

from agent_runtime import RunStatus, ToolContext, tool
from agent_runtime.testing import scripted
from stores.base import ApprovalConflict
from stores.records import EffectStatus


def tool_prompt(step_id: str = "ask", tools: list[str] | None = None,
                **extra: Any) -> dict[str, Any]:
    return {"id": step_id, "type": "prompt", "prompt": "Use the tools.",
            "tools": tools or ["add"], **extra}


def test_tool_schema_comes_from_signature_and_docstring() -> None:
    @tool(idempotent=False)
    def book(city: str, nights: int, ctx: ToolContext, tier: Literal["std", "vip"] = "std",
             notes: list[str] | None = None) -> str:
        """Book a hotel.

        Args:
            city: Where to stay.
            nights: How many nights.
        """
        return city

    assert book.name == "book"
    assert book.description == "Book a hotel."
    assert not book.idempotent
    assert book.parameters["required"] == ["city", "nights"]
    props = book.parameters["properties"]
    assert "ctx" not in props
    assert props["city"] == {"type": "string", "description": "Where to stay."}
    assert props["nights"]["type"] == "integer"
    assert props["tier"] == {"enum": ["std", "vip"], "default": "std"}
    assert props["notes"]["anyOf"][0] == {"type": "array", "items": {"type": "string"}}


def test_tool_calls_drive_a_prompt_to_its_final_answer() -> None:
    seen: list[ToolContext] = []

    @tool
    def add(a: int, b: int, ctx: ToolContext) -> int:
        """Add two numbers."""
        seen.append(ctx)
        return a + b

    model = scripted(responses=[
        {"toolCalls": [{"name": "add", "arguments": {"a": 1, "b": 2}},
                       {"name": "add", "arguments": {"a": 3, "b": 4}}]},
        {"text": "3 and 7"}])
    h = Harness(model, tools=[add])
    result = h.run(manifest(tool_prompt(includeInFinalOutput=True)))
    assert result.status is RunStatus.COMPLETED
    assert result.output == "3 and 7"
    assert [ctx.step_path for ctx in seen] == ["ask", "ask"]
    keys = [ctx.idempotency_key for ctx in seen]
    assert len(set(keys)) == 2 and all(keys)
    # the model saw the results, tied to its calls
    final_request = model.requests[-1]
    results = [part["result"] for message in final_request.messages
               for part in message["content"] if part["type"] == "tool-result"]
    assert [r["output"] for r in results] == [3, 7]
    assert [r["idempotencyKey"] for r in results] == keys
    assert final_request.tools[0].name == "add"
    # the ledger holds each effect once, completed
    effects = h.store.list_effects(result.run_id)
    assert sorted(e.key for e in effects) == sorted(keys)
    assert all(e.status is EffectStatus.COMPLETED for e in effects)
    # one checkpoint after the tool request, one per tool result, and the final one,
    # which is the step's commit point too
    assert len(h.store.list_checkpoints(result.run_id)) == 4


def test_tool_errors_and_bad_arguments_go_back_to_the_model() -> None:
    @tool
    def add(a: int, b: int) -> int:
        """Add."""
        raise RuntimeError("adder offline")

    model = scripted(responses=[
        {"toolCalls": [{"name": "add", "arguments": {"a": "x"}},
                       {"name": "add", "arguments": {"a": 1, "b": 2}},
                       {"name": "nope", "arguments": {}}]},
        {"text": "gave up"}])
    h = Harness(model, tools=[add])
    result = h.run(manifest(tool_prompt()))
    assert result.output == "gave up"
    errors = [part["result"]["error"]["type"] for message in model.requests[-1].messages
              for part in message["content"] if part["type"] == "tool-result"]
    assert errors == ["invalid_arguments", "tool_error", "unknown_tool"]


def test_too_many_tool_calls_in_one_response_fails() -> None:
    @tool
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    calls = [{"name": "add", "arguments": {"a": 1, "b": 1}}] * 3
    h = Harness(scripted(responses=[{"toolCalls": calls}]), tools=[add])
    result = h.run(manifest(tool_prompt(), limits={"maxToolCallsPerIteration": 2}))
    assert result.status is RunStatus.FAILED
    assert result.error["type"] == "too_many_tool_calls"


def test_a_step_naming_an_unregistered_tool_is_refused_up_front() -> None:
    from agent_runtime.errors import ConfigError

    h = Harness()
    with pytest.raises(ConfigError, match=r"steps\[0\]\.tools: tool 'missing' is not registered"):
        h.run(manifest(tool_prompt(tools=["missing"])))
    assert h.store.list_runs().runs == []


APPROVAL_FLOW = [
    {"id": "prepare", "type": "prompt", "prompt": "Prepare.", "outputVariable": "proposal"},
    {"id": "approve", "type": "approval", "prompt": "Ship it?"},
    {"id": "finalize", "type": "prompt", "prompt": "Final: {{ proposal }}",
     "includeInFinalOutput": True},
]


def test_approval_suspends_and_resumes_after_a_decision() -> None:
    h = Harness()
    suspended = h.run(manifest(*APPROVAL_FLOW), options=ECHO)
    assert suspended.status is RunStatus.SUSPENDED
    assert suspended.suspension["reason"] == "approval"
    details = suspended.suspension["details"]
    assert details["prompt"] == "Ship it?" and details["step_path"] == "approve"
    # resuming without a decision asks again and does not repeat `prepare`
    again = h.resume(suspended.run_id)
    assert again.status is RunStatus.SUSPENDED
    approval_id = h.runtime.approve(suspended.run_id, response={"note": "go"})
    assert approval_id == details["approval_id"]
    done = h.resume(suspended.run_id)
    assert done.status is RunStatus.COMPLETED
    assert done.output == "[echo] Final: [echo] Prepare."
    assert done.attempt == 3
    record = h.store.load_run(done.run_id)
    checkpoint = h.store.load_latest_checkpoint(done.run_id)
    approval = next(r for r in checkpoint.step_results if r["step_path"] == "approve")
    assert approval["output"]["approved"] is True
    assert approval["output"]["response"] == {"note": "go"}
    assert record.status is RunStatus.COMPLETED
    assert done.usage["model_requests"] == 2  # prepare ran once across three attempts


def test_a_different_second_answer_is_refused() -> None:
    h = Harness()
    suspended = h.run(manifest(*APPROVAL_FLOW), options=ECHO)
    h.runtime.approve(suspended.run_id)
    h.runtime.approve(suspended.run_id)  # the same answer again is a no-op
    with pytest.raises(ApprovalConflict):
        h.runtime.approve(suspended.run_id, approved=False)


@pytest.mark.parametrize(("action", "status", "error"), [
    ("pause", RunStatus.FAILED, "approval_rejected"),
    ("cancel", RunStatus.CANCELLED, None),
    ("complete", RunStatus.COMPLETED, None),
])
def test_rejection_honours_the_action(action: str, status: RunStatus, error: str | None) -> None:
    steps = [dict(APPROVAL_FLOW[0], includeInFinalOutput=True),
             dict(APPROVAL_FLOW[1], action=action), APPROVAL_FLOW[2]]
    h = Harness()
    suspended = h.run(manifest(*steps), options=ECHO)
    h.runtime.approve(suspended.run_id, approved=False)
    result = h.resume(suspended.run_id)
    assert result.status is status
    assert h.store.load_run(result.run_id).status is status
    if error:
        assert result.error["type"] == error
    if status is RunStatus.COMPLETED:
        assert result.output == "[echo] Prepare."  # the outputs so far


def test_approvals_inside_a_loop_are_asked_per_iteration() -> None:
    h = Harness()
    agent = manifest({"id": "each", "type": "loop", "loop": {"source": "items"},
                      "steps": [{"id": "ok", "type": "approval", "prompt": "Next?"}]},
                     variables=[{"key": "items", "type": "array", "value": [1, 2]}])
    result = h.run(agent, options=ECHO)
    ids = []
    while result.status is RunStatus.SUSPENDED:
        ids.append(result.suspension["details"]["approval_id"])
        assert result.suspension["details"]["step_path"] == f"each/{len(ids) - 1}/ok"
        h.runtime.approve(result.run_id)
        result = h.resume(result.run_id)
    assert result.status is RunStatus.COMPLETED
    assert len(set(ids)) == 2
    assert [o["approved"] for o in result.output] == [True, True]


def test_tools_save_artifacts_once_by_content(tmp_path: Any) -> None:
    from stores.artifacts import LocalArtifactStore
    from stores.base import CorruptRecord

    @tool
    def render(text: str, ctx: ToolContext) -> dict[str, Any]:
        """Render a report."""
        ref = ctx.save_artifact(text.encode(), media_type="text/plain")
        return {"uri": ref.uri, "sha256": ref.sha256}

    calls = [{"name": "render", "arguments": {"text": "report"}}] * 2
    h = Harness(scripted(responses=[{"toolCalls": calls}, {"text": "done"}]), tools=[render])
    artifacts = LocalArtifactStore(tmp_path / "artifacts")
    h.runtime.artifacts = artifacts
    result = h.run(manifest(tool_prompt(tools=["render"])))
    checkpoint = h.store.load_latest_checkpoint(result.run_id)
    assert len(checkpoint.artifacts) == 1  # the same bytes twice are one artifact
    ref = checkpoint.artifacts[0]
    assert (ref.size, ref.media_type) == (6, "text/plain")
    assert artifacts.get(ref.uri) == b"report"
    assert h.types("artifact.") == ["artifact.created", "artifact.created"]
    stored = tmp_path / "artifacts" / "runs" / result.run_id / ref.sha256
    stored.write_bytes(b"tampered")
    with pytest.raises(CorruptRecord, match="does not match its sha256"):
        artifacts.get(ref.uri)
