"""Crash and resume inside one process: a tool that raises a BaseException stands
in for a killed process (the engine must not catch it), leaving the run
`running` under a lease, exactly as a SIGKILL would."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from engine_harness import ECHO, Harness, manifest

from agent_runtime import Budget, RunStatus, ToolContext, tool
from agent_runtime.errors import InvalidInput, ManifestMismatch
from agent_runtime.manifest import manifest_hash, manifest_json
from agent_runtime.testing import scripted
from stores.base import LeaseHeld
from stores.records import EffectStatus, RunRecord


class Crash(BaseException):
    """The process dies here."""


def crash_once(calls: list[Any], when: int) -> Any:
    def maybe_crash() -> None:
        if len(calls) == when:
            calls.append("crash")
            raise Crash()
    return maybe_crash


def test_resume_is_refused_while_the_lease_is_live_then_takes_over() -> None:
    calls: list[Any] = []
    boom = crash_once(calls, 1)

    @tool
    def step_tool(n: int, ctx: ToolContext) -> int:
        """Record a call."""
        boom()
        calls.append((n, ctx.idempotency_key))
        return n

    model = scripted(by_step={
        "first": [{"text": "one"}],
        "second": [{"toolCalls": [{"name": "step_tool", "arguments": {"n": 1}},
                                  {"name": "step_tool", "arguments": {"n": 2}}]},
                   {"text": "two"}],
        "third": [{"text": "three"}]})
    h = Harness(model, tools=[step_tool], lease_seconds=30)
    agent = manifest({"id": "first", "type": "prompt", "prompt": "1"},
                     {"id": "second", "type": "prompt", "prompt": "2", "tools": ["step_tool"]},
                     {"id": "third", "type": "prompt", "prompt": "3", "includeInFinalOutput": True})
    with pytest.raises(Crash):
        h.run(agent)
    run_id = h.store.list_runs().runs[0].run_id
    record = h.store.load_run(run_id)
    assert record.status is RunStatus.RUNNING and record.attempt == 1

    with pytest.raises(LeaseHeld, match="until 2026-01-01T00:00:30") as refused:
        h.resume(run_id, allow_running_takeover=True)
    assert refused.value.expires_at == record.lease_expires_at
    with pytest.raises(LeaseHeld):
        h.resume(run_id)  # without takeover, never

    h.clock.advance(31)
    requests_before = len(model.requests)
    result = h.resume(run_id, allow_running_takeover=True)
    assert result.status is RunStatus.COMPLETED and result.output == "three"
    assert result.attempt == 2
    # `first` was not asked again; `second` resumed at its second tool call
    resumed = [r.step_id for r in model.requests[requests_before:]]
    assert resumed == ["second", "third"]
    done = [c for c in calls if c != "crash"]
    assert [n for n, _ in done] == [1, 2]
    keys = {key for _, key in done}
    assert keys == {e.key for e in h.store.list_effects(run_id)}


def test_three_tool_calls_killed_after_the_second_result_runs_only_the_third() -> None:
    calls: list[Any] = []
    boom = crash_once(calls, 2)

    @tool
    def act(n: int, ctx: ToolContext) -> int:
        """Act."""
        boom()
        calls.append((n, ctx.idempotency_key, ctx.attempt))
        return n * 10

    tool_calls = [{"name": "act", "arguments": {"n": n}} for n in (1, 2, 3)]
    model = scripted(responses=[{"toolCalls": tool_calls}, {"text": "done"}])
    h = Harness(model, tools=[act])
    with pytest.raises(Crash):
        h.run(manifest({"id": "p", "type": "prompt", "prompt": "go", "tools": ["act"]}))
    run_id = h.store.list_runs().runs[0].run_id
    first_keys = [key for _, key, _ in calls[:2]]
    h.clock.advance(60)
    result = h.resume(run_id, allow_running_takeover=True)
    assert result.output == "done"
    executed = [(n, attempt) for n, _, attempt in [c for c in calls if c != "crash"]]
    assert executed == [(1, 1), (2, 1), (3, 2)]
    checkpoint = h.store.load_latest_checkpoint(run_id)
    call_parts = [part["call"] for item in checkpoint.transcript for part in item["content"]
                  if part["type"] == "tool-call"]
    assert [part["idempotencyKey"] for part in call_parts][:2] == first_keys
    assert calls[-1][1] == call_parts[2]["idempotencyKey"]  # same key on the new attempt
    assert len(model.requests) == 2  # the tool request was not asked again


def test_a_non_idempotent_call_with_unknown_outcome_suspends() -> None:
    calls: list[Any] = []

    @tool(idempotent=False)
    def charge(amount: int, ctx: ToolContext) -> str:
        """Charge a card."""
        if not calls:
            calls.append("crash")
            raise Crash()
        calls.append(amount)
        return "charged"

    model = scripted(responses=[{"toolCalls": [{"name": "charge", "arguments": {"amount": 5}}]},
                                {"text": "ok"}])
    h = Harness(model, tools=[charge])
    with pytest.raises(Crash):
        h.run(manifest({"id": "pay", "type": "prompt", "prompt": "pay", "tools": ["charge"]}))
    run_id = h.store.list_runs().runs[0].run_id
    h.clock.advance(60)
    result = h.resume(run_id, allow_running_takeover=True)
    assert result.status is RunStatus.SUSPENDED
    assert result.suspension["reason"] == "effect-unknown"
    key = result.suspension["details"]["key"]
    assert calls == ["crash"]  # not charged again
    # an operator supplies the outcome; the run continues without calling the tool
    done = h.runtime.run_sync(run_id=run_id, resume=True,
                              effect_resolutions={key: {"action": "result", "result": "charged"}})
    assert done.status is RunStatus.COMPLETED
    assert calls == ["crash"]
    effect = h.store.list_effects(run_id)[0]
    assert effect.status is EffectStatus.COMPLETED and effect.result == {"output": "charged"}


def test_crash_inside_a_loop_resumes_at_the_same_iteration() -> None:
    seen: list[str] = []

    @tool
    def visit(item: str) -> str:
        """Visit."""
        if item == "c" and "crashed" not in seen:
            seen.append("crashed")
            raise Crash()
        seen.append(item)
        return item.upper()

    model = scripted(by_step={"v": [
        {"toolCalls": [{"name": "visit", "arguments": {"item": item}}]} if i % 2 == 0
        else {"text": f"did {item}"}
        for i, item in enumerate(["a", "a", "b", "b", "c", "c", "d", "d"])]})
    h = Harness(model, tools=[visit])
    agent = manifest({"id": "each", "type": "loop", "includeInFinalOutput": True,
                      "loop": {"source": "items", "itemVariable": "it"},
                      "steps": [{"id": "v", "type": "prompt", "prompt": "{{ it }}",
                                 "tools": ["visit"]}]},
                     variables=[{"key": "items", "type": "array", "value": list("abcd")}])
    with pytest.raises(Crash):
        h.run(agent)
    run_id = h.store.list_runs().runs[0].run_id
    cursor = h.store.load_latest_checkpoint(run_id).cursor
    assert [f.step_path for f in cursor] == ["each", "each/2/v"]
    h.clock.advance(60)
    result = h.resume(run_id, allow_running_takeover=True)
    assert result.output == ["did a", "did b", "did c", "did d"]
    assert seen == ["a", "b", "crashed", "c", "d"]
    assert [r.step_request_index for r in model.requests if r.step_path == "each/2/v"] == [5, 6]


def test_changed_manifest_is_refused_and_the_run_left_untouched() -> None:
    h = Harness()
    agent = manifest({"id": "ok", "type": "approval", "prompt": "?"})
    suspended = h.run(agent, options=ECHO)
    before = h.store.load_run(suspended.run_id)
    changed = manifest({"id": "ok", "type": "approval", "prompt": "changed?"})
    assert manifest_hash(changed) != manifest_hash(agent)
    with pytest.raises(ManifestMismatch, match="manifest changed"):
        h.runtime.run_sync(run_id=suspended.run_id, resume=True, manifest=changed)
    assert h.store.load_run(suspended.run_id) == before


def test_budget_suspends_before_the_request_and_a_new_limit_continues() -> None:
    model = scripted(responses=[{"text": "a", "usage": {"totalTokens": 60}},
                                {"text": "b", "usage": {"inputTokens": 30, "outputTokens": 20}},
                                {"text": "c", "usage": {"totalTokens": 10}}])
    h = Harness(model)
    agent = manifest(*[{"id": s, "type": "prompt", "prompt": s} for s in "abc"])
    first = h.run(agent, budget=Budget(max_total_tokens=100))
    assert first.status is RunStatus.SUSPENDED
    assert first.suspension["details"]["consumed_tokens"] == 110
    assert len(model.requests) == 2
    # a limit not above consumed suspends again at once, with no request
    again = h.resume(first.run_id, budget=Budget(max_total_tokens=110))
    assert again.status is RunStatus.SUSPENDED and len(model.requests) == 2
    done = h.resume(first.run_id, budget=Budget(max_total_tokens=200))
    assert done.status is RunStatus.COMPLETED and done.usage["consumed_tokens"] == 120
    assert len(model.requests) == 3


def test_advance_stops_at_the_deadline_and_continues_later() -> None:
    h = Harness()
    agent = manifest(*[{"id": s, "type": "prompt", "prompt": s} for s in "abc"])
    # a run reserved by someone else, as the state machine's Reserve step does
    h.store.create_run(RunRecord(run_id="adv", manifest_hash=manifest_hash(agent),
                                 manifest=manifest_json(agent), options=ECHO))
    reserved = h.store.resume_run("adv", owner="sfn", now=h.clock.now(), lease_seconds=60)

    deadline = h.clock.now() - timedelta(seconds=1)  # already passed: stop at the first commit
    partial = asyncio.run(h.runtime.advance("adv", deadline=deadline))
    assert partial.status is RunStatus.RUNNING
    assert h.store.load_latest_checkpoint("adv").seq == 1
    stale = asyncio.run(h.runtime.advance("adv", expected_attempt=reserved.attempt + 1))
    assert stale.status is RunStatus.RUNNING and h.store.load_latest_checkpoint("adv").seq == 1
    finished = asyncio.run(h.runtime.advance("adv", expected_attempt=reserved.attempt))
    assert finished.status is RunStatus.COMPLETED
    assert finished.output == "[echo] c"
    assert finished.usage["model_requests"] == 3  # `a` was not asked twice
    # both executions belong to attempt 1: their events stay in one order
    sequences = [e.sequence for e in h.events.events if e.run_id == "adv"]
    assert sequences == sorted(sequences) and len(set(sequences)) == len(sequences)


def test_create_run_stores_a_run_another_executor_starts() -> None:
    h = Harness()
    agent = manifest(*[{"id": s, "type": "prompt", "prompt": s} for s in "ab"],
                     variables=[{"key": "topic", "type": "string", "value": "x"}])
    # bad input is refused before a run exists
    with pytest.raises(InvalidInput):
        h.runtime.create_run(manifest=agent, variables={"nope": 1}, options=ECHO)
    record = h.runtime.create_run(manifest=agent, run_id="queued", options=ECHO)
    assert record.status is RunStatus.CREATED and record.attempt == 0
    assert h.store.load_run("queued") == record
    with pytest.raises(InvalidInput, match="already exists"):
        h.runtime.create_run(manifest=agent, run_id="queued", options=ECHO)
    # the executor's reservation, then its advance, as Reserve and Advance do
    h.store.resume_run("queued", owner="sfn", now=h.clock.now(), lease_seconds=60)
    done = asyncio.run(h.runtime.advance("queued", expected_attempt=1))
    assert done.status is RunStatus.COMPLETED and done.output == "[echo] b"


def test_a_checkpoint_saved_first_by_another_execution_of_the_attempt_stops_this_one() -> None:
    # Two executions of one attempt (a retried Lambda invocation): whichever
    # saves a seq second loses and stops without failing the run.
    h = Harness()
    rival: list[Any] = []

    @tool
    def slow(ctx: ToolContext) -> str:
        """Meanwhile, another execution of this attempt saves the next checkpoint."""
        latest = h.store.load_latest_checkpoint(ctx.run_id)
        assert latest is not None
        rival.append(latest.model_copy(update={"seq": latest.seq + 1,
                                               "variables": {"rival": True}}))
        h.store.save_checkpoint(rival[0], expected_attempt=ctx.attempt)
        return "done"

    h.tools.append(slow)
    h.model = scripted(responses=[{"toolCalls": [{"name": "slow", "arguments": {}}]},
                                  {"text": "ok"}])
    h.runtime = h.make_runtime()
    result = h.run(manifest({"id": "p", "type": "prompt", "prompt": "go", "tools": ["slow"]}))
    assert result.status is RunStatus.RUNNING  # this execution stopped, the run is not failed
    assert result.error["type"] == "lost_ownership"
    record = h.store.load_run(result.run_id)
    assert record.status is RunStatus.RUNNING
    assert h.store.load_latest_checkpoint(result.run_id).variables == {"rival": True}
