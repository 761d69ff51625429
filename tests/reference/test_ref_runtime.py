"""Ports of packages/core/src/agent-runtime.test.ts (the AgentRuntime), through the Python
API. The parallel-wave cases (independent steps run concurrently, producers before
dependents, undeclared shared-state mutation) belong to the execution-plan issue."""

from __future__ import annotations

import errno
import hashlib
import json
from typing import Any

import pytest
from reference_harness import Host, StandInChild, agent

from agent_runtime import RunStatus
from agent_runtime.errors import ManifestError, ManifestMismatch, VariableError
from agent_runtime.events import Event
from agent_runtime.manifest import manifest_hash, manifest_json
from agent_runtime.run_manifest import VariableOverride
from agent_runtime.testing import scripted
from agent_runtime.variables import resolve_variables
from stores.base import LeaseHeld
from stores.memory import MemoryRunStore
from stores.records import Budget, Checkpoint


def step(step_id: str, **extra: Any) -> dict[str, Any]:
    return {"id": step_id, "type": "prompt", "prompt": step_id, **extra}


def test_uses_a_canonical_sha256_manifest_fingerprint() -> None:
    """core/src/agent-runtime.test.ts: "uses a canonical SHA-256 manifest fingerprint by
    default"."""
    manifest = agent(step("only"))
    canonical = json.dumps(manifest_json(manifest), sort_keys=True, separators=(",", ":"))
    assert manifest_hash(manifest) == "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()
    host = Host()
    result = host.run(manifest)
    record = host.store.load_run(result.run_id)
    assert record is not None and record.manifest_hash == manifest_hash(manifest)


def test_executes_steps_in_order_and_checkpoints_state_before_starting_the_next_step() -> None:
    """core/src/agent-runtime.test.ts: "executes steps in order and checkpoints state before
    starting the next step"."""
    store = MemoryRunStore()
    seen_checkpoints: list[int] = []

    def body(current: Any, variables: dict[str, Any]) -> str:
        run_id = store.list_runs().runs[0].run_id
        latest = store.load_latest_checkpoint(run_id)
        seen_checkpoints.append(0 if latest is None else len(latest.step_results))
        return f"{current.id}-done"

    host = Host(child=StandInChild(body), store=store)
    result = host.run(agent(step("first", outputVariable="first"),
                            step("second", outputVariable="second")))
    assert result.output == "second-done"
    assert seen_checkpoints == [0, 1]  # the first step's result was saved before the second
    assert host.variables(result.run_id) == {"first": "first-done", "second": "second-done"}


class DiskFull(MemoryRunStore):
    def save_checkpoint(self, checkpoint: Checkpoint, **kwargs: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")


def test_does_not_execute_a_later_step_when_a_committed_state_checkpoint_fails() -> None:
    """core/src/agent-runtime.test.ts: "does not execute a later step when a committed state
    checkpoint fails"."""
    stand_in = StandInChild(lambda current, variables: "done")
    host = Host(child=stand_in, store=DiskFull())
    result = host.run(agent(step("first"), step("second")))
    assert result.status is RunStatus.FAILED
    assert result.error["type"] == "checkpoint_unavailable"
    assert [call for call, _ in stand_in.calls] == ["first"]


def test_rejects_overlapping_attempts_for_the_same_run() -> None:
    """core/src/agent-runtime.test.ts: "rejects overlapping attempts for the same run in one
    Agent Runtime process" (a run under a live lease is not taken over)."""
    host = Host()
    created, _ = host.runtime.new_run(manifest=agent(step("only")), options={
        "model": "scripted/test"})
    host.store.create_run(created)
    host.store.resume_run(created.run_id, owner="other", now=host.clock.now(),
                          lease_seconds=60)
    with pytest.raises(LeaseHeld):
        host.resume(created.run_id)


def test_rejects_manifests_and_outputs_that_exceed_declared_limits() -> None:
    """core/src/agent-runtime.test.ts: "rejects manifests and outputs that exceed declared
    limits"."""
    host = Host(model=scripted(responses=[{"text": "too large"}]))
    with pytest.raises(ManifestError, match="declares 2 steps"):
        host.run(agent(step("first"), step("second"), limits={"maxSteps": 1}))
    with pytest.raises(ManifestError, match="declares 2 steps"):
        host.run(agent({"id": "outer", "type": "loop", "loop": {"maxIterations": 1},
                        "steps": [step("nested")]}, limits={"maxSteps": 1}))
    assert host.store.list_runs().runs == []
    result = host.run(agent(step("only"), limits={"maxOutputBytes": 4}))
    assert (result.status, result.error["type"]) == (RunStatus.FAILED, "output_too_large")


def test_validates_runtime_manifests_before_creating_a_run() -> None:
    """core/src/agent-runtime.test.ts: "validates runtime manifests before creating a run"."""
    host = Host()
    with pytest.raises(ManifestError, match="duplicate step id 'duplicate'"):
        host.run({"schemaVersion": "1.0", "steps": [step("duplicate"), step("duplicate")]})
    assert host.store.list_runs().runs == []


def test_resolves_typed_agent_variables_and_run_overrides() -> None:
    """core/src/agent-runtime.test.ts: "resolves typed agent variables and run overrides"."""
    stand_in = StandInChild(lambda current, variables: None)
    host = Host(child=stand_in)
    configured = agent(step("only"), variables=[
        {"key": "region", "type": "string", "value": "manifest"},
        {"key": "nested", "type": "object", "value": {"retained": True, "defaulted": 42}},
        {"key": "required", "type": "string", "requiresOverride": True}])
    host.run(configured, variables={"region": "supplied", "required": "present"})
    assert stand_in.calls[0][1] == {"region": "supplied",
                                    "nested": {"retained": True, "defaulted": 42},
                                    "required": "present"}
    with pytest.raises(VariableError, match="required"):
        host.run(configured)
    assert len(host.store.list_runs().runs) == 1


@pytest.mark.parametrize(("overrides", "reason"), [
    ([{"key": "other", "value": 1}], "other"),
    ([{"key": "count", "value": 1}, {"key": "count", "value": 2}], "duplicate"),
    ([{"key": "count", "value": "one"}], "number"),
])
def test_rejects_unknown_duplicate_and_incorrectly_typed_run_overrides(
        overrides: list[dict[str, Any]], reason: str) -> None:
    """core/src/agent-runtime.test.ts: "rejects unknown, duplicate, and incorrectly typed run
    overrides" (a run manifest's `[{key, value}]` list, as the runtime resolves it before a
    run is created)."""
    configured = agent(step("only"), variables=[{"key": "count", "type": "number",
                                                 "value": 1}])
    with pytest.raises(VariableError, match=reason):
        resolve_variables(configured, [VariableOverride(**o) for o in overrides],
                          source="run.yaml")


class Offline:
    def emit(self, event: Event) -> None:
        raise ConnectionError("offline")


def test_does_not_let_a_non_critical_event_sink_failure_invalidate_execution() -> None:
    """core/src/agent-runtime.test.ts: "does not let a non-critical event sink failure
    invalidate execution"."""
    host = Host(model=scripted(responses=[{"text": "done"}]))
    host.runtime.event_sinks.insert(0, Offline())
    result = host.run(agent(step("only")))
    assert (result.status, result.output) == (RunStatus.COMPLETED, "done")
    record = host.store.load_run(result.run_id)
    assert record is not None and record.status is RunStatus.COMPLETED


class OfflineAtTheEnd:
    def emit(self, event: Event) -> None:
        if event.type == "run.completed":
            raise ConnectionError("offline")


def test_does_not_roll_back_durable_completion_when_the_terminal_event_sink_fails() -> None:
    """core/src/agent-runtime.test.ts: "does not roll back durable completion when the
    terminal event sink fails"."""
    host = Host(model=scripted(responses=[{"text": "done"}]))
    host.runtime.event_sinks.insert(0, OfflineAtTheEnd())
    result = host.run(agent(step("only")))
    assert (result.status, result.output) == (RunStatus.COMPLETED, "done")
    record = host.store.load_run(result.run_id)
    assert record is not None and (record.status, record.output) == (RunStatus.COMPLETED, "done")


def test_persists_cancellation_as_cancellation_rather_than_failure() -> None:
    """core/src/agent-runtime.test.ts: "persists cancellation as cancellation rather than
    failure" (a suspended run cancelled by the operator)."""
    host = Host()
    suspended = host.run(agent({"id": "wait", "type": "approval", "prompt": "Go?"}))
    host.runtime.cancel(suspended.run_id)
    record = host.store.load_run(suspended.run_id)
    assert record is not None and record.status is RunStatus.CANCELLED and record.error is None


def test_resumes_at_the_latest_committed_cursor_without_replaying_completed_steps() -> None:
    """core/src/agent-runtime.test.ts: "resumes at the latest committed cursor without
    replaying completed steps" (the stop is an approval: deliberate difference 4)."""
    stand_in = StandInChild(lambda current, variables: f"{current.id}-done")
    host = Host(child=stand_in)
    suspended = host.run(agent(step("first"), {"id": "wait", "type": "approval",
                                               "prompt": "Go?"}, step("second")))
    host.runtime.approve(suspended.run_id)
    result = host.resume(suspended.run_id)
    assert result.output == "second-done"
    assert [call for call, _ in stand_in.calls] == ["first", "second"]


def test_persists_a_cumulative_token_budget_and_requires_a_higher_resume_limit() -> None:
    """core/src/agent-runtime.test.ts: "persists a cumulative token budget and requires a
    higher resume limit"."""
    model = scripted(responses=[{"text": "one", "usage": {"totalTokens": 10}},
                                {"text": "continued", "usage": {"totalTokens": 1}}])
    host = Host(model=model)
    manifest = agent(step("first"), step("budgeted"))
    first = host.run(manifest, budget=Budget(max_total_tokens=10))
    assert (first.status, first.suspension["reason"]) == (RunStatus.SUSPENDED, "token-budget")
    checkpoint = host.store.load_latest_checkpoint(first.run_id)
    assert checkpoint is not None
    assert (checkpoint.budget.max_total_tokens, checkpoint.budget.consumed_tokens) == (10, 10)
    again = host.resume(first.run_id)
    assert again.status is RunStatus.SUSPENDED and len(model.requests) == 1
    done = host.resume(first.run_id, budget=Budget(max_total_tokens=11))
    assert (done.status, done.output) == (RunStatus.COMPLETED, "continued")
    checkpoint = host.store.load_latest_checkpoint(first.run_id)
    assert checkpoint is not None
    assert (checkpoint.budget.max_total_tokens, checkpoint.budget.consumed_tokens) == (11, 11)


def test_rejects_resume_when_the_supplied_manifest_differs_from_the_checkpoint() -> None:
    """core/src/agent-runtime.test.ts: "rejects resume when the supplied manifest differs from
    the checkpoint"."""
    host = Host()
    suspended = host.run(agent({"id": "wait", "type": "approval", "prompt": "Go?"}))
    with pytest.raises(ManifestMismatch):
        host.resume(suspended.run_id, manifest=agent({"id": "changed", "type": "approval",
                                                      "prompt": "Go?"}))


def test_executes_registered_child_steps_with_nested_event_paths() -> None:
    """core/src/agent-runtime.test.ts: "executes registered child steps with nested event
    paths". Deliberate difference 2: a nested path carries the iteration index
    (`outer/0/child`), so each iteration's events and results are told apart."""
    host = Host(child=StandInChild(lambda current, variables: "ok"))
    host.run(agent({"id": "outer", "type": "loop", "loop": {"maxIterations": 2},
                    "steps": [step("child")]}))
    paths = [event.step_path for event in host.events.events
             if event.type == "step.completed" and event.step_id == "child"]
    assert paths == ["outer/0/child", "outer/1/child"]


def test_selects_steps_marked_for_final_output_in_manifest_order() -> None:
    """core/src/agent-runtime.test.ts: "selects steps marked for final output in manifest
    order"."""
    host = Host(child=StandInChild(lambda current, variables: current.id))
    result = host.run(agent(step("a", includeInFinalOutput=True), step("b"),
                            step("c", includeInFinalOutput=True)))
    assert result.output == ["a", "c"]


def test_resuming_a_finished_run_returns_its_result() -> None:
    """Ours, from the issue: resuming a completed run answers its result (the reference
    throws "is already completed"); nothing runs again."""
    stand_in = StandInChild(lambda current, variables: "done")
    host = Host(child=stand_in)
    first = host.run(agent(step("only")))
    again = host.resume(first.run_id)
    assert (again.status, again.output, again.executed) == (RunStatus.COMPLETED, "done", False)
    assert len(stand_in.calls) == 1
