"""`sub-run` steps: a child run in the same store, suspended and resumed with its
parent, drawing on the parent's token budget."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from engine_harness import SCRIPTED, Harness, manifest

from agent_runtime import Budget, RunStatus, ToolContext, tool
from agent_runtime.sandbox import SandboxRequest, SandboxResult
from agent_runtime.steps.subrun import child_run_id_for
from agent_runtime.testing import scripted
from stores.file import check_run_id
from stores.records import ParentRef


class Crash(BaseException):
    """The process dies here."""


def child(*steps: dict[str, Any], variables: list[dict[str, Any]] | None = None
          ) -> dict[str, Any]:
    """An inline child agent manifest."""
    return {"schemaVersion": "1.0", "id": "child", "variables": variables or [],
            "steps": list(steps)}


def prompt(step_id: str, **extra: Any) -> dict[str, Any]:
    return {"id": step_id, "type": "prompt", "prompt": step_id, **extra}


def sub_run(step_id: str = "delegate", **extra: Any) -> dict[str, Any]:
    return {"id": step_id, "type": "sub-run", **extra}


def said(text: str, tokens: int | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"text": text}
    if tokens is not None:
        entry["usage"] = {"totalTokens": tokens}
    return entry


def asked(h: Harness) -> list[str]:
    """Step ids of every model request so far, in order."""
    return [request.step_id for request in h.model.requests]


def children(h: Harness, parent_id: str) -> list[Any]:
    return h.store.list_runs(parent_run_id=parent_id).runs


# -- running a child -----------------------------------------------------------


def test_inline_child_output_flows_to_the_parent_under_a_deterministic_id() -> None:
    h = Harness(scripted(by_step={"draft": [said("from child")],
                                  "finish": [said("done")]}))
    agent = manifest(
        sub_run(manifest=child(prompt("draft")), outputVariable="answer",
                includeInFinalOutput=True),
        prompt("finish", prompt="Summarise {{ answer }}"))
    result = h.run(agent)
    assert result.status is RunStatus.COMPLETED
    assert result.output == "from child"

    child_id = child_run_id_for(result.run_id, "delegate")
    digest = hashlib.sha256(b"delegate").hexdigest()[:12]
    assert child_id == f"{result.run_id}.sub-{digest}"
    check_run_id(child_id)  # a valid directory name for the File store
    record = h.store.load_run(child_id)
    assert record.status is RunStatus.COMPLETED and record.output == "from child"
    assert record.parent == ParentRef(run_id=result.run_id, step_path="delegate")
    assert record.options == SCRIPTED  # the parent's runtime options are inherited
    assert [run.run_id for run in children(h, result.run_id)] == [child_id]
    # the child's output is the parent's variable, seen by the next step
    checkpoint = h.store.load_latest_checkpoint(result.run_id)
    assert checkpoint.variables["answer"] == "from child"
    finish = h.model.requests[-1]
    assert "Summarise from child" in str(finish.messages)
    sub_events = [(e.run_id, e.type) for e in h.events.events if e.type.startswith("sub-run.")]
    assert sub_events == [(result.run_id, "sub-run.started"),
                          (result.run_id, "sub-run.completed")]
    started = next(e for e in h.events.events if e.type == "sub-run.started")
    assert started.data == {"child_run_id": child_id}


def test_each_loop_iteration_gets_its_own_child() -> None:
    h = Harness(scripted())
    agent = manifest(
        {"id": "each", "type": "loop", "includeInFinalOutput": True,
         "loop": {"source": "items", "itemVariable": "it"},
         "steps": [sub_run(manifest=child(prompt("shout", prompt="{{ word }}"),
                                          variables=[{"key": "word", "type": "string"}]),
                           variableMappings={"word": "it"})]},
        variables=[{"key": "items", "type": "array", "value": ["a", "b"]}])
    result = h.run(agent, options={"model": "scripted/echo"})
    assert result.status is RunStatus.COMPLETED
    ids = [run.run_id for run in children(h, result.run_id)]
    assert ids == sorted(child_run_id_for(result.run_id, f"each/{i}/delegate")
                         for i in (0, 1))
    assert len(result.output) == 2


# -- manifestRef ----------------------------------------------------------------


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


LEAF = """schemaVersion: "1.0"
id: leaf
steps:
  - {id: leaf_step, type: prompt, prompt: leaf}
"""


def test_manifest_ref_is_resolved_next_to_the_parent_manifest(tmp_path: Path) -> None:
    agents = tmp_path / "agents"
    leaf = write(agents / "sub" / "leaf.yaml", LEAF)
    parent_file = agents / "parent.yaml"
    h = Harness(scripted(by_step={"leaf_step": [said("from leaf")]}))
    h.runtime.base_dir = tmp_path / "elsewhere"  # not where the refs are
    agent = manifest(sub_run("by_ref", manifestRef="sub/leaf.yaml"),
                     # an inline child's own refs are resolved next to the parent's file too
                     sub_run("inline", includeInFinalOutput=True,
                             manifest=child(sub_run("nested", manifestRef="sub/leaf.yaml"))))
    options = {**SCRIPTED, "manifest_path": str(parent_file)}
    result = h.run(agent, options=options)
    assert result.status is RunStatus.COMPLETED
    assert result.output == "from leaf"
    by_ref = h.store.load_run(child_run_id_for(result.run_id, "by_ref"))
    assert by_ref.output == "from leaf"
    # the child remembers its own file, so `resume CHILD` checks the right hash
    assert by_ref.options == {**SCRIPTED, "manifest_path": str(leaf.resolve())}
    inline_id = child_run_id_for(result.run_id, "inline")
    inline = h.store.load_run(inline_id)
    assert "manifest_path" not in inline.options
    grandchild = h.store.load_run(child_run_id_for(inline_id, "nested"))
    assert grandchild.status is RunStatus.COMPLETED
    assert grandchild.parent == ParentRef(run_id=inline_id, step_path="nested")


def test_manifest_ref_without_a_manifest_path_uses_the_runtime_base_dir(
        tmp_path: Path) -> None:
    write(tmp_path / "leaf.yaml", LEAF)
    h = Harness(scripted(by_step={"leaf_step": [said("based")]}))
    h.runtime.base_dir = tmp_path
    result = h.run(manifest(sub_run(manifestRef="leaf.yaml")))
    assert result.status is RunStatus.COMPLETED and result.output == "based"


def test_a_bad_child_manifest_fails_the_step_naming_the_file_and_field(
        tmp_path: Path) -> None:
    bad = write(tmp_path / "bad.yaml", LEAF.replace("prompt: leaf}", "prompt: leaf, bogus: 1}"))
    h = Harness()
    options = {**SCRIPTED, "manifest_path": str(tmp_path / "parent.yaml")}
    result = h.run(manifest(sub_run(manifestRef="bad.yaml")), options=options)
    assert result.status is RunStatus.FAILED
    assert result.error["type"] == "sub_run_invalid"
    assert str(bad.resolve()) in result.error["message"]
    assert "not a valid agent manifest at steps[0].bogus" in result.error["message"]
    missing = h.run(manifest(sub_run(manifestRef="nope.yaml")), options=options)
    assert missing.error["type"] == "sub_run_invalid"
    assert "nope.yaml" in missing.error["message"] and "file not found" in missing.error["message"]
    assert children(h, result.run_id) == [] and h.model.requests == []


# -- variableMappings --------------------------------------------------------------

CHILD_VARIABLES = [{"key": "subject", "type": "string"},
                   {"key": "count", "type": "number", "value": 1}]


def test_variable_mappings_pass_parent_values_to_the_child() -> None:
    h = Harness(scripted(by_step={"write": [said("ok")]}))
    agent = manifest(
        sub_run(manifest=child(prompt("write", prompt="{{ subject }} x {{ count }}"),
                               variables=CHILD_VARIABLES),
                variableMappings={"subject": "topic", "count": "settings.n"}),
        variables=[{"key": "topic", "type": "string", "value": "leases"},
                   {"key": "settings", "type": "object", "value": {"n": 3}}])
    result = h.run(agent)
    assert result.status is RunStatus.COMPLETED
    record = h.store.load_run(child_run_id_for(result.run_id, "delegate"))
    assert record.variables == {"subject": "leases", "count": 3}
    assert "leases x 3" in str(h.model.requests[0].messages)


def test_a_mapped_value_of_the_wrong_type_fails_the_step_clearly() -> None:
    h = Harness()
    agent = manifest(
        sub_run(manifest=child(prompt("write"), variables=CHILD_VARIABLES),
                variableMappings={"subject": "topic", "count": "topic"}),
        variables=[{"key": "topic", "type": "string", "value": "leases"}])
    result = h.run(agent)
    assert result.status is RunStatus.FAILED
    assert result.error["type"] == "sub_run_invalid"
    assert "variableMappings.count" in result.error["message"]
    assert "declared as number" in result.error["message"]
    assert children(h, result.run_id) == []


# -- suspension and resume ------------------------------------------------------


def approval_family() -> Any:
    return manifest(prompt("before"),
                    sub_run(manifest=child({"id": "confirm", "type": "approval",
                                            "prompt": "Go?"}, prompt("after"))),
                    prompt("finish", includeInFinalOutput=True))


def test_a_child_waiting_for_approval_suspends_the_parent_until_approved() -> None:
    h = Harness(scripted(by_step={"before": [said("b")], "after": [said("a")],
                                  "finish": [said("done")]}))
    first = h.run(approval_family())
    assert first.status is RunStatus.SUSPENDED
    assert first.suspension["reason"] == "sub-run"
    child_id = child_run_id_for(first.run_id, "delegate")
    details = first.suspension["details"]
    assert details["child_run_id"] == child_id and details["child_reason"] == "approval"
    assert h.store.load_run(first.run_id).status is RunStatus.SUSPENDED
    assert h.store.load_run(child_id).status is RunStatus.SUSPENDED
    assert asked(h) == ["before"]

    h.runtime.approve(child_id)
    done = h.resume(first.run_id)
    assert done.status is RunStatus.COMPLETED and done.output == "done"
    record = h.store.load_run(child_id)
    assert record.status is RunStatus.COMPLETED and record.output == "a"
    assert record.attempt == 2  # started once, resumed exactly once
    assert asked(h) == ["before", "after", "finish"]  # no parent step repeated
    assert h.types("sub-run.") == ["sub-run.started", "sub-run.suspended",
                                   "sub-run.resumed", "sub-run.completed"]


def test_a_cancelled_child_fails_the_step_and_is_not_resumed() -> None:
    h = Harness(scripted())
    first = h.run(approval_family())
    child_id = child_run_id_for(first.run_id, "delegate")
    h.runtime.cancel(child_id)
    result = h.resume(first.run_id)
    assert result.status is RunStatus.FAILED
    assert result.error["type"] == "sub_run_cancelled"
    assert child_id in result.error["message"]
    assert h.store.load_run(child_id).attempt == 1
    assert "sub-run.resumed" not in h.types()


class _ExitsWithOne:
    """A sandbox whose code always exits 1: a child step that fails at run time."""

    idempotent = False

    def languages(self) -> frozenset[str]:
        return frozenset({"python"})

    def availability(self) -> str | None:
        return None

    async def execute(self, request: SandboxRequest) -> SandboxResult:
        return SandboxResult(exit_code=1, stdout="", stderr="boom")


def test_a_failing_child_fails_the_parent_step() -> None:
    h = Harness()
    h.runtime.sandbox = _ExitsWithOne()
    agent = manifest(sub_run(manifest=child({"id": "run_code", "type": "code",
                                             "language": "python", "code": "print(1)"})),
                     prompt("never"))
    result = h.run(agent)
    assert result.status is RunStatus.FAILED
    assert result.error["type"] == "sub_run_failed"
    child_id = child_run_id_for(result.run_id, "delegate")
    assert child_id in result.error["message"]
    assert "code_failed" in result.error["message"]
    assert result.error["details"]["child_error"]["type"] == "code_failed"
    assert h.store.load_run(child_id).status is RunStatus.FAILED
    assert h.model.requests == []


# -- budget ---------------------------------------------------------------------


def test_child_tokens_are_added_to_the_parent_once_across_parent_attempts() -> None:
    h = Harness(scripted(by_step={"before": [said("b", 30)], "first": [said("f", 40)],
                                  "after": [said("a", 20)], "finish": [said("done", 5)]}))
    agent = manifest(prompt("before"),
                     sub_run(manifest=child(prompt("first", prompt="x"),
                                            {"id": "confirm", "type": "approval",
                                             "prompt": "Go?"},
                                            prompt("after"))),
                     prompt("finish"))
    first = h.run(agent, budget=Budget(max_total_tokens=100))
    assert first.status is RunStatus.SUSPENDED
    child_id = child_run_id_for(first.run_id, "delegate")
    # the child may spend what the parent had left when it started
    assert h.store.load_run(child_id).budget.max_total_tokens == 70
    assert h.store.load_run(first.run_id).consumed_tokens == 70

    h.runtime.approve(child_id)
    done = h.resume(first.run_id)
    assert done.status is RunStatus.COMPLETED
    assert h.store.load_run(child_id).consumed_tokens == 60
    # 30 (before) + 40 + 20 (child) + 5 (finish): the child's first 40 counted once
    assert done.usage["consumed_tokens"] == 95
    assert h.store.load_run(first.run_id).consumed_tokens == 95


def test_a_child_exceeding_the_parents_remaining_budget_suspends_the_parent() -> None:
    h = Harness(scripted(by_step={"before": [said("b", 60)], "c1": [said("1", 50)],
                                  "c2": [said("2", 20)], "finish": [said("done", 5)]}))
    agent = manifest(prompt("before"),
                     sub_run(manifest=child(prompt("c1"), prompt("c2"))),
                     prompt("finish"))
    first = h.run(agent, budget=Budget(max_total_tokens=100))
    assert first.status is RunStatus.SUSPENDED
    assert first.suspension["reason"] == "token-budget"
    details = first.suspension["details"]
    assert details["consumed_tokens"] == 110 and details["max_total_tokens"] == 100
    child_id = child_run_id_for(first.run_id, "delegate")
    assert details["child_run_id"] == child_id
    assert asked(h) == ["before", "c1"]  # c2 was never requested

    again = h.resume(first.run_id)  # the same limit: suspends at once
    assert again.suspension["reason"] == "token-budget"
    assert asked(h) == ["before", "c1"]
    assert h.store.load_run(child_id).attempt == 1  # not even resumed

    done = h.resume(first.run_id, budget=Budget(max_total_tokens=200))
    assert done.status is RunStatus.COMPLETED
    assert asked(h) == ["before", "c1", "c2", "finish"]
    assert done.usage["consumed_tokens"] == 135
    # the child's limit followed the parent's new one: its 50 plus the parent's 90 left
    checkpoint = h.store.load_latest_checkpoint(child_id)
    assert checkpoint.budget.max_total_tokens == 140


def test_an_exhausted_parent_does_not_start_the_child() -> None:
    h = Harness(scripted(by_step={"before": [said("b", 100)]}))
    agent = manifest(prompt("before"), sub_run(manifest=child(prompt("c1"))))
    result = h.run(agent, budget=Budget(max_total_tokens=100))
    assert result.suspension["reason"] == "token-budget"
    assert result.suspension["details"]["before"] == "sub-run"
    assert children(h, result.run_id) == []
    assert asked(h) == ["before"]


# -- crashes and takeover ----------------------------------------------------------


def crash_family(calls: list[Any]) -> tuple[Harness, Any]:
    @tool
    def act(n: int, ctx: ToolContext) -> int:
        """Act."""
        if n == 2 and "crash" not in calls:
            calls.append("crash")
            raise Crash()
        calls.append((n, ctx.run_id))
        return n

    model = scripted(by_step={
        "before": [said("b")], "c1": [said("one")],
        "c2": [{"toolCalls": [{"name": "act", "arguments": {"n": 1}},
                              {"name": "act", "arguments": {"n": 2}}]}, said("two")],
        "finish": [said("done")]})
    h = Harness(model, tools=[act], lease_seconds=30)
    agent = manifest(prompt("before"),
                     sub_run(manifest=child(prompt("c1"), prompt("c2", tools=["act"]))),
                     prompt("finish", includeInFinalOutput=True))
    return h, agent


def test_a_crash_inside_the_child_resumes_parent_and_child_without_repeats() -> None:
    calls: list[Any] = []
    h, agent = crash_family(calls)
    with pytest.raises(Crash):
        h.run(agent)
    parent_id = next(run.run_id for run in h.store.list_runs().runs if run.parent is None)
    child_id = child_run_id_for(parent_id, "delegate")
    assert h.store.load_run(parent_id).status is RunStatus.RUNNING
    assert h.store.load_run(child_id).status is RunStatus.RUNNING

    h.clock.advance(31)
    result = h.resume(parent_id, allow_running_takeover=True)
    assert result.status is RunStatus.COMPLETED and result.output == "done"
    record = h.store.load_run(child_id)
    assert record.status is RunStatus.COMPLETED and record.output == "two"
    # taken over once; its checkpoints since reset the count (takeovers in a row)
    assert record.attempt == 2 and record.takeovers == 0
    # c1 and the tool request were not asked again; tool 1 ran once
    assert asked(h) == ["before", "c1", "c2", "c2", "finish"]
    assert calls == [(1, child_id), "crash", (2, child_id)]
    assert "sub-run.resumed" in h.types()


def test_a_child_running_under_a_live_lease_suspends_the_parent() -> None:
    calls: list[Any] = []
    h, agent = crash_family(calls)
    with pytest.raises(Crash):
        h.run(agent)
    parent_id = next(run.run_id for run in h.store.list_runs().runs if run.parent is None)
    child_id = child_run_id_for(parent_id, "delegate")
    h.clock.advance(31)
    # someone else holds the child now
    h.store.renew_lease(child_id, expected_attempt=1, now=h.clock.now(), lease_seconds=300)
    waiting = h.resume(parent_id, allow_running_takeover=True)
    assert waiting.status is RunStatus.SUSPENDED
    assert waiting.suspension["reason"] == "sub-run"
    assert waiting.suspension["details"]["child_reason"] == "running"
    assert h.store.load_run(child_id).attempt == 1  # left alone
    assert asked(h) == ["before", "c1", "c2"]

    h.clock.advance(301)  # its owner never came back
    done = h.resume(parent_id)
    assert done.status is RunStatus.COMPLETED
    assert h.store.load_run(child_id).attempt == 2
    assert calls == [(1, child_id), "crash", (2, child_id)]
