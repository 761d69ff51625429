"""A step kind added by a host, as docs/architecture.md describes: a model and an
executor registered together with `register_step_kind`, and no engine change."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

import pytest
from engine_harness import Harness, manifest

from agent_runtime import RunStatus
from agent_runtime.errors import ManifestError
from agent_runtime.execution import Execution
from agent_runtime.manifest import manifest_hash, manifest_json, parse_agent_manifest
from agent_runtime.step_kinds import StepBase, StepKindError, step_kinds
from agent_runtime.steps import default_steps, register_step_kind, unregister_step_kind
from stores.records import Frame, JsonValue


class EchoStep(StepBase):
    type: Literal["echo"] = "echo"
    text: str


class EchoExecutor:
    def __init__(self) -> None:
        self.seen: list[str] = []

    async def execute(self, step: EchoStep, frame: Frame, ctx: Execution,
                      resume: list[Frame]) -> JsonValue:
        self.seen.append(frame.step_path)
        return step.text


@pytest.fixture
def echo() -> Iterator[EchoExecutor]:
    executor = EchoExecutor()
    register_step_kind("echo", EchoStep, executor)
    yield executor
    unregister_step_kind("echo")


def test_a_registered_kind_runs_top_level_and_in_a_loop(echo: EchoExecutor) -> None:
    agent = manifest(
        {"type": "echo", "id": "x", "text": "hello", "outputVariable": "said"},
        {"type": "loop", "id": "twice", "loop": {"maxIterations": 2},
         "steps": [{"type": "echo", "id": "again", "text": "{{ said }}"}]},
        {"type": "echo", "id": "last", "text": "bye", "includeInFinalOutput": True})
    h = Harness()
    result = h.run(agent)
    assert result.status is RunStatus.COMPLETED
    assert result.output == "bye"
    assert echo.seen == ["x", "twice/0/again", "twice/1/again", "last"]
    checkpoint = h.store.load_latest_checkpoint(result.run_id)
    assert checkpoint is not None and checkpoint.variables["said"] == "hello"
    # The stored manifest is read back with the kind's model: fields kept, hash unchanged.
    stored = h.store.load_run(result.run_id)
    assert stored is not None and stored.manifest["steps"][0]["text"] == "hello"
    assert manifest_hash(parse_agent_manifest(manifest_json(agent), source="again")) == \
        manifest_hash(agent)


def test_a_stored_run_with_the_kind_resumes(echo: EchoExecutor) -> None:
    agent = manifest({"type": "echo", "id": "x", "text": "hi"},
                     {"type": "approval", "id": "ok", "prompt": "go on?"},
                     {"type": "echo", "id": "y", "text": "done"})
    h = Harness()
    first = h.run(agent)
    assert first.status is RunStatus.SUSPENDED
    h.runtime.approve(first.run_id)
    resumed = h.resume(first.run_id)
    assert resumed.status is RunStatus.COMPLETED and resumed.output == "done"
    assert echo.seen == ["x", "y"]  # x is not run again


@pytest.mark.parametrize(("step", "field", "reason"), [
    ({"type": "echo", "id": "x"}, "steps[0].text", "required field is missing"),
    ({"type": "echo", "id": "x", "text": 5}, "steps[0].text", "expected a string"),
    ({"type": "echo", "id": "x", "text": "a", "txt": "b"}, "steps[0].txt", "unknown field"),
    ({"type": "echo", "id": "x", "text": "a", "output_variable": "v"},
     "steps[0].output_variable", "unknown field"),
])
def test_errors_in_a_registered_kind_name_the_field(echo: EchoExecutor, step: dict[str, object],
                                                    field: str, reason: str) -> None:
    with pytest.raises(ManifestError) as caught:
        manifest(step)
    assert caught.value.field == field
    assert reason in caught.value.reason


def test_an_unregistered_kind_is_an_unknown_step_type() -> None:
    with pytest.raises(ManifestError) as caught:
        manifest({"type": "echo", "id": "x", "text": "a"})
    assert caught.value.field == "steps[0].type"
    assert "unknown step type 'echo'" in caught.value.reason
    assert "echo" not in step_kinds() and default_steps().get("echo") is None


def test_the_unknown_type_error_lists_registered_kinds(echo: EchoExecutor) -> None:
    with pytest.raises(ManifestError) as caught:
        manifest({"type": "ecco", "id": "x"})
    assert "'prompt'" in caught.value.reason and "'echo'" in caught.value.reason


def test_a_kind_is_registered_once_with_a_model_that_declares_it(echo: EchoExecutor) -> None:
    class LoudEcho(EchoStep):
        volume: int = 11

    class Other(StepBase):
        type: Literal["other"] = "other"

    with pytest.raises(StepKindError, match="'echo' is already registered"):
        register_step_kind("echo", LoudEcho, EchoExecutor())
    with pytest.raises(StepKindError, match=r"Other.type must be Literal\['shout'\]"):
        register_step_kind("shout", Other, EchoExecutor())  # type: ignore[arg-type]
    assert "shout" not in step_kinds()
    register_step_kind("echo", LoudEcho, EchoExecutor(), replace=True)
    assert manifest({"type": "echo", "id": "x", "text": "a", "volume": 3}).steps[0] == \
        LoudEcho(id="x", text="a", volume=3)


def test_a_kind_registered_for_one_runtime_is_parseable_and_another_model_refused() -> None:
    steps = default_steps()
    executor = EchoExecutor()
    steps.register("echo", EchoStep, executor)
    try:
        agent = manifest({"id": "say", "type": "echo", "text": "hi",
                          "includeInFinalOutput": True})
        h = Harness()
        h.runtime.steps = steps
        assert h.run(agent).output == "hi" and executor.seen == ["say"]

        class OtherEcho(StepBase):
            type: Literal["echo"] = "echo"
            words: str

        with pytest.raises(StepKindError, match="already registered"):
            default_steps().register("echo", OtherEcho, EchoExecutor())
    finally:
        unregister_step_kind("echo")


@pytest.mark.parametrize("version", [0, -1, True, "2"])
def test_a_kind_whose_continuation_version_no_frame_could_hold_is_refused(
        version: object) -> None:
    """A frame's `continuation_version` is at least 1: a kind declaring another is
    refused when it registers, not when its first frame is saved."""

    class Versioned(StepBase):
        type: Literal["versioned"] = "versioned"
        continuation_version = version  # type: ignore[assignment]

    with pytest.raises(StepKindError, match="continuation_version must be an integer"):
        register_step_kind("versioned", Versioned, EchoExecutor())  # type: ignore[arg-type]
    assert "versioned" not in step_kinds()
