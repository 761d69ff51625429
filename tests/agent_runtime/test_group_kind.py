"""A step kind with child steps, registered from this test module alone: it validates,
counts toward `maxSteps`, suspends at an approval inside it, resumes, and ends as it
does uninterrupted when killed at every commit point (agent_runtime.crash_kit)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar, Literal

import pytest
from engine_harness import ECHO, Harness

from agent_runtime import AgentRuntime, RunStatus
from agent_runtime.errors import ManifestError
from agent_runtime.execution import Execution
from agent_runtime.manifest import parse_agent_manifest
from agent_runtime.results import RunResult
from agent_runtime.step_kinds import Step, StepBase
from agent_runtime.steps import register_step_kind, unregister_step_kind
from agent_runtime.testing import FakeClock, assert_crash_safe, crash_at_every_commit, scripted
from stores.base import RunStore
from stores.records import Frame, JsonValue


class GroupStep(StepBase):
    """Runs its steps in order, as one step; its output is its last step's variable."""

    type: Literal["group"] = "group"
    child_steps_field: ClassVar[str | None] = "steps"
    steps: list[Step]


class GroupExecutor:
    async def execute(self, step: GroupStep, frame: Frame, ctx: Execution,
                      resume: list[Frame]) -> JsonValue:
        await ctx.run_sequence(step.steps, prefix=frame.step_path, loop_iteration=None,
                               resume=resume)
        last = step.steps[-1].output_variable
        return None if last is None else ctx.state.variables.get(last)


@pytest.fixture(autouse=True)
def group_kind() -> Iterator[None]:
    register_step_kind("group", GroupStep, GroupExecutor())
    yield
    unregister_step_kind("group")


def agent_document(max_steps: int | None = None) -> dict[str, object]:
    document: dict[str, object] = {"schemaVersion": "1.0", "id": "grouped", "steps": [
        {"type": "group", "id": "work", "includeInFinalOutput": True, "steps": [
            {"type": "prompt", "id": "draft", "prompt": "draft", "outputVariable": "draft"},
            {"type": "loop", "id": "polish", "loop": {"maxIterations": 2},
             "steps": [{"type": "prompt", "id": "pass", "outputVariable": "polished",
                        "prompt": "polish {{ draft }} #{{ loop.iteration }}"}]},
            {"type": "approval", "id": "ok", "prompt": "Ship it?"},
            {"type": "prompt", "id": "final", "prompt": "ship {{ polished }}",
             "outputVariable": "shipped"}]}]}
    if max_steps is not None:
        document["limits"] = {"maxSteps": max_steps}
    return document


def test_the_kind_validates_and_its_children_count_toward_max_steps() -> None:
    parse_agent_manifest(agent_document(max_steps=6), source="grouped")  # 6 steps: fits
    with pytest.raises(ManifestError, match="declares 6 steps"):
        parse_agent_manifest(agent_document(max_steps=5), source="grouped")


def approve_and_resume(runtime: AgentRuntime, run_id: str) -> RunResult:
    runtime.approve(run_id)
    return runtime.run_sync(run_id=run_id, resume=True)


def test_a_group_suspends_at_its_approval_and_resumes_to_its_end() -> None:
    h = Harness()
    agent = parse_agent_manifest(agent_document(), source="grouped")
    first = h.run(agent, options=ECHO)
    assert first.status is RunStatus.SUSPENDED
    done = approve_and_resume(h.runtime, first.run_id)
    assert done.status is RunStatus.COMPLETED
    assert done.output == "[echo] ship [echo] polish [echo] draft #2"
    # Nothing before the approval ran again: each prompt started once (draft, two
    # polishes, final); only the group and its approval were resumed.
    started = [(event.data["kind"], bool(event.data.get("resumed")))
               for event in h.events.events if event.type == "step.started"]
    assert [kind for kind, resumed in started if kind == "prompt"] == ["prompt"] * 4
    assert [kind for kind, resumed in started if resumed] == ["group", "approval"]


def test_killed_at_every_commit_point_it_ends_as_it_does_uninterrupted() -> None:
    clock = FakeClock()
    agent = parse_agent_manifest(agent_document(), source="grouped")

    def runtime(store: RunStore, owner: str) -> AgentRuntime:
        return AgentRuntime(store=store, models={"scripted": scripted()}, clock=clock,
                            owner=owner, lease_seconds=30)

    reference, trials = crash_at_every_commit(agent, runtime=runtime, clock=clock,
                                              options=ECHO, settle=approve_and_resume)
    assert reference.result.status is RunStatus.COMPLETED
    # Every commit was a point of death: checkpoints, the suspension, the end.
    assert [trial.commit for trial in trials] == list(range(1, len(trials) + 1))
    assert len(trials) >= 8
    assert_crash_safe(reference, trials)


class ForgetfulGroupExecutor:
    """A faulty kind: it ignores where its children stopped and runs them all again."""

    async def execute(self, step: GroupStep, frame: Frame, ctx: Execution,
                      resume: list[Frame]) -> JsonValue:
        await ctx.run_sequence(step.steps, prefix=frame.step_path, loop_iteration=None,
                               resume=[])
        return None


def test_the_kit_reports_a_kind_that_runs_finished_children_again() -> None:
    unregister_step_kind("group")
    register_step_kind("group", GroupStep, ForgetfulGroupExecutor())
    clock = FakeClock()
    document = agent_document()
    document["steps"][0]["steps"] = document["steps"][0]["steps"][:2]  # type: ignore[index]
    agent = parse_agent_manifest(document, source="forgetful")

    def runtime(store: RunStore, owner: str) -> AgentRuntime:
        return AgentRuntime(store=store, models={"scripted": scripted()}, clock=clock,
                            owner=owner, lease_seconds=30)

    reference, trials = crash_at_every_commit(agent, runtime=runtime, clock=clock, options=ECHO)
    with pytest.raises(AssertionError, match=r"\(1, \['steps', 'spent'\]\)"):
        assert_crash_safe(reference, trials)
