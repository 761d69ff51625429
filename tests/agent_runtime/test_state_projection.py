"""`extensions.agentRuntime.stateProjection: "step-output-state-v1"`: each step's output,
parsed, kept as `step-N`, `step-previous` (or its `stateKey`) and its outputVariable;
the run's output as the marked outputs' text. Ported from the reference's documented
behaviour (docs/reference.md there, `withProjectedStepState` and `selectRunOutput`)."""

from __future__ import annotations

from typing import Any

import pytest
from engine_harness import SCRIPTED, Harness

from agent_runtime import RunStatus
from agent_runtime.errors import ManifestError
from agent_runtime.manifest import parse_agent_manifest
from agent_runtime.state_projection import parsed_output
from agent_runtime.template_references import undeclared_references
from agent_runtime.testing import scripted

PROJECTED = {"agentRuntime": {"stateProjection": "step-output-state-v1"}}


def agent(*steps: dict[str, Any], extensions: dict[str, Any] | None = None) -> Any:
    return parse_agent_manifest({"schemaVersion": "1.0", "id": "p", "steps": list(steps),
                                 "extensions": PROJECTED if extensions is None else extensions},
                                source="p")


def run(manifest: Any, *answers: str) -> tuple[Harness, Any]:
    h = Harness(scripted(responses=[{"text": answer} for answer in answers]))
    return h, h.run(manifest, options=SCRIPTED)


def prompts(h: Harness) -> list[str]:
    return [str(request.messages[-1]["content"][0]["text"]) for request in h.model.requests]


def test_each_output_is_kept_parsed_as_step_n_and_step_previous() -> None:
    manifest = agent(
        {"id": "facts", "type": "prompt", "prompt": "Facts."},
        {"id": "use", "type": "prompt", "outputVariable": "used",
         "prompt": "a={{ step-1.a }} prev={{ step-previous.a }}"},
        {"id": "last", "type": "prompt", "prompt": "{{ used }} / {{ step-2 }}",
         "includeInFinalOutput": True})
    h, result = run(manifest, '```json\n{"a": 7}\n```', "plain text", "done")
    assert result.status is RunStatus.COMPLETED, result.error
    assert prompts(h)[1:] == ["a=7 prev=7", "plain text / plain text"]
    assert result.output == "done"
    checkpoint = h.store.load_latest_checkpoint(result.run_id)
    assert checkpoint.variables["step-1"] == {"a": 7}
    assert checkpoint.variables["step-previous"] == "done"


def test_a_state_key_names_the_steps_own_entry() -> None:
    manifest = agent(
        {"id": "facts", "type": "prompt", "prompt": "Facts.",
         "extensions": {"agentRuntime": {"stateKey": "facts"}}},
        {"id": "use", "type": "prompt", "prompt": "{{ facts.n }} {{ step-1.n }}"})
    h, _ = run(manifest, '{"n": 3}', "ok")
    assert prompts(h)[1] == "3 "  # step-1 is not written: the step named its own key


def test_the_run_output_is_the_marked_outputs_as_text_joined_by_blank_lines() -> None:
    manifest = agent(
        {"id": "a", "type": "prompt", "prompt": "A.", "includeInFinalOutput": True},
        {"id": "b", "type": "prompt", "prompt": "B.", "includeInFinalOutput": True})
    _, result = run(manifest, "first", '{"b": [1, 2.0]}')
    assert result.output == 'first\n\n{"b": [1, 2.0]}'  # raw outputs, as text


def test_without_a_projection_outputs_are_kept_as_they_came() -> None:
    manifest = agent({"id": "a", "type": "prompt", "prompt": "A.", "outputVariable": "x"},
                     {"id": "b", "type": "prompt", "prompt": "{{ x.a }}|{{ step-1 }}"},
                     extensions={})
    h, _ = run(manifest, '{"a": 1}', "ok")
    assert prompts(h)[1] == "|"


@pytest.mark.parametrize(("text", "parsed"), [
    ('{"a": 1}', {"a": 1}), ("[1, 2]", [1, 2]),
    ("```yaml\na: 1\nb: [x]\n```", {"a": 1, "b": ["x"]}),
    ("```\n[true]\n```", [True]), ("just words", "just words"), ("{not json", "{not json"),
    ("```yaml\nplain\n```", "```yaml\nplain\n```"), ("```python\n{}\n```", "```python\n{}\n```"),
])
def test_text_outputs_are_parsed_as_the_reference_parses_them(text: str, parsed: Any) -> None:
    assert parsed_output(text) == parsed


def test_an_unknown_projection_is_refused_by_name() -> None:
    with pytest.raises(ManifestError, match=r"extensions\.agentRuntime\.stateProjection: "
                                            r"unknown state projection 'v2'"):
        agent({"id": "a", "type": "prompt", "prompt": "A."},
              extensions={"agentRuntime": {"stateProjection": "v2"}})


def test_projected_names_are_declared_for_validate() -> None:
    manifest = agent({"id": "a", "type": "prompt", "prompt": "A."},
                     {"id": "b", "type": "prompt", "prompt": "{{ step-1 }} {{ step-previous }}"})
    assert undeclared_references(manifest) == []
