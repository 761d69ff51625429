"""`event_sink_failure_policy`: a sink that cannot take an event goes unnoticed by the run
(`continue`, the default), or fails it at the step (`fail-run`), as the reference's
`eventSinkFailurePolicy`; a failure after a commit never undoes it."""

from __future__ import annotations

import pytest

from agent_runtime import AgentRuntime, RunStatus
from agent_runtime.events import Event, ListEventSink
from agent_runtime.manifest import parse_agent_manifest
from agent_runtime.testing import FakeClock, scripted

AGENT = parse_agent_manifest({"schemaVersion": "1.0", "id": "two", "steps": [
    {"id": "first", "type": "prompt", "prompt": "One."},
    {"id": "second", "type": "prompt", "prompt": "Two.", "includeInFinalOutput": True}]},
    source="test")


class Unavailable(ListEventSink):
    """Refuses every event of type `refused`."""

    def __init__(self, refused: str) -> None:
        super().__init__()
        self.refused = refused

    def emit(self, event: Event) -> None:
        if event.type == self.refused:
            raise OSError("the observer is unavailable")
        super().emit(event)


def run(refused: str, policy: str) -> tuple[AgentRuntime, list[tuple[str, str]], object]:
    heard: list[tuple[str, str]] = []
    runtime = AgentRuntime(models={"scripted": scripted()}, clock=FakeClock(),
                           event_sinks=[Unavailable(refused)], event_sink_failure_policy=policy,
                           on_event_sink_error=lambda error, event: heard.append(
                               (type(error).__name__, event.type)))
    return runtime, heard, runtime.run_sync(manifest=AGENT, options={"model": "scripted/echo"})


def test_by_default_a_failing_sink_is_reported_and_the_run_goes_on() -> None:
    _, heard, result = run("step.completed", "continue")
    assert result.status is RunStatus.COMPLETED
    assert heard == [("OSError", "step.completed")] * 2


def test_fail_run_fails_the_run_at_the_step_whose_event_was_not_delivered() -> None:
    runtime, heard, result = run("step.completed", "fail-run")
    assert result.status is RunStatus.FAILED
    assert result.error["type"] == "event_sink_failed"
    assert "step.completed of step first" in result.error["message"]
    assert "OSError" in result.error["message"]
    assert heard == [("OSError", "step.completed")]
    # The second step never ran.
    assert runtime.models["scripted"].requests[-1].step_id == "first"


def test_fail_run_never_undoes_a_commit_a_run_event_follows() -> None:
    runtime, heard, result = run("run.completed", "fail-run")
    assert result.status is RunStatus.COMPLETED
    assert heard == [("OSError", "run.completed")]
    record = runtime.store.load_run(result.run_id)
    assert record is not None and record.status is RunStatus.COMPLETED


def test_an_unknown_policy_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"'stop'.*continue, fail-run"):
        AgentRuntime(event_sink_failure_policy="stop")
