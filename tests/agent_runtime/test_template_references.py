"""`undeclared_references` finds the names a manifest reads and never declares, by field."""

from __future__ import annotations

from typing import Any

from agent_runtime.manifest import parse_agent_manifest
from agent_runtime.template_references import undeclared_references


def findings(*steps: dict[str, Any], variables: list[dict[str, Any]] | None = None,
             ) -> list[tuple[str, str]]:
    manifest = parse_agent_manifest({"schemaVersion": "1.0", "id": "t",
                                     "variables": variables or [], "steps": list(steps)},
                                    source="t")
    return [(finding.field, finding.message) for finding in undeclared_references(manifest)]


OUTLINE = [{"key": "outline", "type": "string", "value": "a plan"}]


def test_a_misspelled_variable_in_a_prompt_is_named_by_field() -> None:
    found = findings({"id": "draft", "type": "prompt", "prompt": "Write {{ outlin }}."},
                     variables=OUTLINE)
    assert found == [("steps[0].prompt", "'outlin' is not a declared variable or any step's "
                                         "outputVariable: it reads as empty (null in a "
                                         "condition)")]


def test_declared_names_are_not_reported_whatever_their_case_or_path() -> None:
    assert findings(
        {"id": "a", "type": "prompt", "prompt": "{{ OUTLINE }} {{ later.text }}",
         "systemPrompt": "{{ outline.length }}"},
        {"id": "b", "type": "prompt", "prompt": "{{ a_out }}", "outputVariable": "later"},
        {"id": "c", "type": "prompt", "prompt": "x", "outputVariable": "a_out",
         "when": "outline != null && later.text"},
        variables=OUTLINE) == []


def test_a_loops_own_names_are_known_inside_it_only() -> None:
    loop = {"id": "each", "type": "loop",
            "loop": {"source": "items", "itemVariable": "item", "indexVariable": "i",
                     "goal": "loop.iteration > 2 && done", "maxIterations": 5},
            "steps": [{"id": "say", "type": "prompt", "outputVariable": "done",
                       "prompt": "{{ item }} #{{ i }} after {{ loop.previous.output }}"}]}
    after = {"id": "after", "type": "prompt", "prompt": "{{ item }} {{ loop.iterations }}"}
    found = findings(loop, after, variables=[{"key": "items", "type": "array", "value": [1]}])
    assert [field for field, _ in found] == ["steps[1].prompt"]
    assert "'item'" in found[0][1]


def test_conditions_messages_and_loop_sources_are_checked() -> None:
    found = findings(
        {"id": "m", "type": "prompt", "when": "flag == true", "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Hi {{ nmae }}"}]}]},
        {"id": "l", "type": "loop", "loop": {"source": "{{ itmes }}"},
         "steps": [{"id": "x", "type": "prompt", "prompt": "x"}]})
    assert [field for field, _ in found] == [
        "steps[0].when", "steps[0].messages[0].content[0].text", "steps[1].loop.source"]


def test_a_placeholder_in_an_approval_prompt_is_reported_as_shown_verbatim() -> None:
    found = findings({"id": "ok", "type": "approval", "prompt": "Ship job {{ outline }}?"},
                     variables=OUTLINE)
    assert found == [("steps[0].prompt", "an approval's prompt is shown as written, not "
                                         "rendered: {{ outline }} will appear verbatim")]
