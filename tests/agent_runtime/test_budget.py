"""Token budgets, one test per rule of docs/design.md section 6.

The scripted model's request list is the counter: where a rule says no model
request may be issued, the test checks none was.
"""

from __future__ import annotations

from typing import Any

import pytest
from engine_harness import Harness, manifest

from agent_runtime import Budget, RunStatus, ToolContext, tool
from agent_runtime.testing import scripted


def prompts(*ids: str) -> Any:
    return manifest(*[{"id": step, "type": "prompt", "prompt": step} for step in ids])


def test_consumed_is_the_reported_total_when_there_is_one() -> None:
    h = Harness(scripted(responses=[
        {"text": "a", "usage": {"inputTokens": 5, "outputTokens": 5, "totalTokens": 40}}]))
    result = h.run(prompts("a"), budget=Budget(max_total_tokens=1000))
    assert result.usage["consumed_tokens"] == 40


def test_consumed_is_input_plus_output_without_a_total() -> None:
    h = Harness(scripted(responses=[{"text": "a", "usage": {"inputTokens": 7, "outputTokens": 3}}]))
    result = h.run(prompts("a"), budget=Budget(max_total_tokens=1000))
    assert result.usage["consumed_tokens"] == 10


def test_a_budgeted_call_that_reports_no_usage_is_an_error() -> None:
    h = Harness(scripted(responses=[{"text": "a", "usage": None}]))
    result = h.run(prompts("a"), budget=Budget(max_total_tokens=1000))
    assert result.status is RunStatus.FAILED
    assert result.error["type"] == "usage_missing"
    # without a budget the same answer is fine
    h = Harness(scripted(responses=[{"text": "a", "usage": None}]))
    assert h.run(prompts("a")).status is RunStatus.COMPLETED


def test_the_budget_is_cumulative_across_attempts() -> None:
    model = scripted(responses=[{"text": "a", "usage": {"totalTokens": 30}},
                                {"text": "b", "usage": {"totalTokens": 30}},
                                {"text": "c", "usage": {"totalTokens": 30}}])
    h = Harness(model)
    agent = manifest({"id": "a", "type": "prompt", "prompt": "a"},
                     {"id": "gate", "type": "approval", "prompt": "?"},
                     {"id": "b", "type": "prompt", "prompt": "b"},
                     {"id": "c", "type": "prompt", "prompt": "c"})
    first = h.run(agent, budget=Budget(max_total_tokens=60))
    assert first.status is RunStatus.SUSPENDED and first.usage["consumed_tokens"] == 30
    h.runtime.approve(first.run_id)
    second = h.resume(first.run_id)  # a new attempt: the 30 already spent still count
    assert second.status is RunStatus.SUSPENDED
    assert second.suspension["reason"] == "token-budget"
    assert second.suspension["details"]["consumed_tokens"] == 60
    assert len(model.requests) == 2


def test_suspends_before_a_model_request_once_consumed_reaches_the_limit() -> None:
    model = scripted(responses=[{"text": "a", "usage": {"totalTokens": 50}},
                                {"text": "b", "usage": {"totalTokens": 50}}])
    h = Harness(model)
    result = h.run(prompts("a", "b"), budget=Budget(max_total_tokens=50))
    assert result.status is RunStatus.SUSPENDED
    assert result.suspension == {"reason": "token-budget", "details": {
        "max_total_tokens": 50, "consumed_tokens": 50, "before": "model request"}}
    assert [r.step_id for r in model.requests] == ["a"]  # b was never asked
    assert h.store.load_run(result.run_id).status is RunStatus.SUSPENDED


def test_suspends_before_a_pending_tool_call_once_consumed_reaches_the_limit() -> None:
    calls: list[int] = []

    @tool
    def work(n: int, ctx: ToolContext) -> int:
        """Work."""
        calls.append(n)
        return n

    model = scripted(responses=[
        {"toolCalls": [{"name": "work", "arguments": {"n": 1}}], "usage": {"totalTokens": 80}},
        {"text": "done", "usage": {"totalTokens": 5}}])
    h = Harness(model, tools=[work])
    agent = manifest({"id": "p", "type": "prompt", "prompt": "go", "tools": ["work"]})
    result = h.run(agent, budget=Budget(max_total_tokens=80))
    assert result.status is RunStatus.SUSPENDED
    assert result.suspension["details"]["before"] == "tool call"
    assert calls == []  # the pending call was not made
    done = h.resume(result.run_id, budget=Budget(max_total_tokens=200))
    assert done.status is RunStatus.COMPLETED and calls == [1]
    assert len(model.requests) == 2  # the tool request was not asked again


def test_a_resume_limit_replaces_the_persisted_one() -> None:
    model = scripted(responses=[{"text": s, "usage": {"totalTokens": 40}} for s in "abc"])
    h = Harness(model)
    first = h.run(prompts("a", "b", "c"), budget=Budget(max_total_tokens=40))
    assert first.status is RunStatus.SUSPENDED and len(model.requests) == 1
    # a higher limit replaces 40 and is persisted: b runs, then c hits it
    second = h.resume(first.run_id, budget=Budget(max_total_tokens=80))
    assert second.status is RunStatus.SUSPENDED
    assert second.suspension["details"]["max_total_tokens"] == 80
    assert len(model.requests) == 2


def test_omitting_the_limit_on_resume_reuses_the_persisted_one() -> None:
    model = scripted(responses=[{"text": s, "usage": {"totalTokens": 40}} for s in "abc"])
    h = Harness(model)
    first = h.run(prompts("a", "b", "c"), budget=Budget(max_total_tokens=80))
    assert first.status is RunStatus.SUSPENDED and len(model.requests) == 2
    again = h.resume(first.run_id)  # no budget given: 80 still applies
    assert again.status is RunStatus.SUSPENDED
    assert again.suspension["details"]["max_total_tokens"] == 80
    assert len(model.requests) == 2


@pytest.mark.parametrize("new_limit", [40, 30])
def test_a_limit_not_above_consumed_suspends_at_once_without_any_request(
        new_limit: int) -> None:
    calls: list[int] = []

    @tool
    def work(n: int) -> int:
        """Work."""
        calls.append(n)
        return n

    model = scripted(responses=[
        {"toolCalls": [{"name": "work", "arguments": {"n": 1}}], "usage": {"totalTokens": 40}},
        {"text": "done", "usage": {"totalTokens": 5}}])
    h = Harness(model, tools=[work])
    agent = manifest({"id": "p", "type": "prompt", "prompt": "go", "tools": ["work"]})
    first = h.run(agent, budget=Budget(max_total_tokens=40))
    assert first.status is RunStatus.SUSPENDED
    again = h.resume(first.run_id, budget=Budget(max_total_tokens=new_limit))
    assert again.status is RunStatus.SUSPENDED
    assert again.suspension["details"]["max_total_tokens"] == new_limit
    assert len(model.requests) == 1 and calls == []  # no model request, no tool call


def test_the_cli_resume_flag_sets_a_new_limit(tmp_path: Any,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from agent_runtime.cli import main

    agent = tmp_path / "two.agent.yaml"
    agent.write_text("schemaVersion: '1.0'\nsteps:\n"
                     "  - {id: a, type: prompt, prompt: a}\n  - {id: b, type: prompt, prompt: b}\n")
    store = ["--store", str(tmp_path / "runs.sqlite"), "--events", "none", "--format", "json"]
    assert main(["run", str(agent), "--model", "scripted/echo", "--max-total-tokens", "3",
                 *store]) == 10
    suspended = json.loads(capsys.readouterr().out)
    assert suspended["suspension"]["reason"] == "token-budget"
    assert main(["resume", suspended["run_id"], "--max-total-tokens", "1000", *store]) == 0
    done = json.loads(capsys.readouterr().out)
    assert done["status"] == "completed" and done["usage"]["model_requests"] == 2
