"""The engine's step semantics: prompts, loops, conditions, outputs, limits."""

from __future__ import annotations

from typing import Any

import pytest
from engine_harness import ECHO, Harness, manifest

from agent_runtime import RunStatus
from agent_runtime.errors import ConfigError, ManifestError
from agent_runtime.testing import scripted


def prompt(step_id: str, text: str = "Say something.", **extra: Any) -> dict[str, Any]:
    return {"id": step_id, "type": "prompt", "prompt": text, **extra}


def test_prompt_chain_passes_outputs_through_templates() -> None:
    model = scripted(responses=[{"text": "draft one"}, {"text": "final"}])
    h = Harness(model)
    result = h.run(manifest(
        prompt("draft", "Write about {{ topic }}.", outputVariable="draft"),
        prompt("revise", "Revise: {{ DRAFT }}", includeInFinalOutput=True),
        variables=[{"key": "topic", "type": "string", "value": "leases"}]))
    assert result.status is RunStatus.COMPLETED
    assert result.output == "final"
    first, second = model.requests
    assert first.messages[-1]["content"][0]["text"] == "Write about leases."
    # template lookup is case-insensitive
    assert second.messages[-1]["content"][0]["text"] == "Revise: draft one"
    assert [r.request_index for r in model.requests] == [1, 2]


def test_system_prompt_and_messages_are_rendered() -> None:
    model = scripted()
    h = Harness(model)
    h.run(manifest(
        prompt("a", "Hi {{ name }}", systemPrompt="You help {{ name }}."),
        {"id": "b", "type": "prompt", "messages": [
            {"role": "system", "content": [{"type": "text", "text": "Be brief, {{ name }}."}]},
            {"role": "user", "content": [{"type": "text", "text": "Go {{ name }}"}]}]},
        variables=[{"key": "name", "type": "string", "value": "Ada"}]))
    first, second = model.requests
    assert [m["role"] for m in first.messages] == ["system", "user"]
    assert first.messages[0]["content"][0]["text"] == "You help Ada."
    assert second.messages[0]["content"][0]["text"] == "Be brief, Ada."
    assert second.messages[1]["content"][0]["text"] == "Go Ada"


def test_final_output_rules() -> None:
    h = Harness(scripted(responses=[{"text": "one"}, {"text": "two"}, {"text": "three"}]))
    several = h.run(manifest(prompt("a", includeInFinalOutput=True), prompt("b"),
                             prompt("c", includeInFinalOutput=True)))
    assert several.output == ["one", "three"]

    h = Harness(scripted(responses=[{"text": "one"}, {"text": "two"}]))
    unmarked = h.run(manifest(prompt("a"), prompt("b")))
    assert unmarked.output == "two"

    h = Harness(scripted(responses=[{"text": "one"}, {"text": "two"}]))
    skipped = h.run(manifest(prompt("a"), prompt("b", when="false", includeInFinalOutput=True)))
    assert skipped.output == "one"  # a skipped marked step is left out


def test_when_false_skips_and_sets_no_variable() -> None:
    model = scripted(responses=[{"text": "ran"}])
    h = Harness(model)
    result = h.run(manifest(
        prompt("skip", when="mode == 'fast'", outputVariable="x"),
        prompt("use", "x is [{{ x }}]", when="x == null"),
        variables=[{"key": "mode", "type": "string", "value": "slow"}]))
    assert result.status is RunStatus.COMPLETED
    assert len(model.requests) == 1
    assert model.requests[0].messages[-1]["content"][0]["text"] == "x is []"
    assert "step.skipped" in h.types()


def test_collection_loop_array_output_and_loop_scope() -> None:
    model = scripted()
    h = Harness(model)
    result = h.run(manifest(
        {"id": "each", "type": "loop", "includeInFinalOutput": True,
         "loop": {"source": "items", "itemVariable": "item", "indexVariable": "i"},
         "steps": [prompt("say", "{{ i }}:{{ item }}:{{ loop.iteration }}")]},
        variables=[{"key": "items", "type": "array", "value": ["a", "b", "c"]}]), options=ECHO)
    assert result.output == ["[echo] 0:a:1", "[echo] 1:b:2", "[echo] 2:c:3"]
    paths = [r.step_path for r in model.requests]
    assert paths == ["each/0/say", "each/1/say", "each/2/say"]


@pytest.mark.parametrize(("source", "expected_items"), [
    ('["x", "y"]', ["x", "y"]),              # a JSON string is parsed
    ("first\n\n second \nthird", ["first", "second", "third"]),  # plain text, trimmed
    ({"meta": 1, "rows": ["r1", "r2"]}, ["r1", "r2"]),  # an object yields its first array
])
def test_loop_sources(source: Any, expected_items: list[str]) -> None:
    kind = "object" if isinstance(source, dict) else "string"
    h = Harness()
    result = h.run(manifest(
        {"id": "each", "type": "loop", "loop": {"source": "src", "itemVariable": "it"},
         "steps": [prompt("say", "{{ it }}")]},
        variables=[{"key": "src", "type": kind, "value": source}]), options=ECHO)
    outputs = [f"[echo] {item}" for item in expected_items]
    if isinstance(source, str) and not source.startswith("["):
        assert result.output == "\n\n".join(outputs)  # plain text source joins results
    else:
        assert result.output == outputs


def test_loop_delimiter_final_mode_and_max_iterations() -> None:
    h = Harness()
    result = h.run(manifest(
        {"id": "each", "type": "loop",
         "loop": {"source": "csv", "delimiter": ",", "itemVariable": "it", "outputMode": "final",
                  "maxIterations": 2},
         "steps": [prompt("say", "{{ it }}")]},
        variables=[{"key": "csv", "type": "string", "value": "a, b, c"}]), options=ECHO)
    assert result.output == "[echo] b"


def test_index_loop_without_source_runs_max_iterations() -> None:
    h = Harness()
    result = h.run(manifest(
        {"id": "n", "type": "loop", "loop": {"maxIterations": 3, "indexVariable": "k"},
         "steps": [prompt("say", "{{ k }}")]}), options=ECHO)
    # as the reference: without a source the items are not structured, so the
    # array output is the results joined by blank lines
    assert result.output == "[echo] 0\n\n[echo] 1\n\n[echo] 2"


def test_goal_loop_stops_when_goal_is_met_with_result_variable() -> None:
    model = scripted(by_step={"evaluate": [{"json": {"approved": False, "feedback": "shorter"}},
                                           {"json": {"approved": True, "feedback": "ok"}}]})
    h = Harness(model)
    schema = {"type": "object", "required": ["approved"],
              "properties": {"approved": {"type": "boolean"}, "feedback": {"type": "string"}}}
    result = h.run(manifest(
        {"id": "refine", "type": "loop", "includeInFinalOutput": True,
         "loop": {"goal": "verdict.approved == true", "maxIterations": 5,
                  "resultVariable": "verdict", "outputMode": "final"},
         "steps": [prompt("draft", "Draft; feedback: {{ loop.previous.output.feedback }}"),
                   prompt("evaluate", outputSchema=schema, outputVariable="verdict"),
                   prompt("note", "unrelated")]}))
    assert result.output == {"approved": True, "feedback": "ok"}
    assert h.types("loop.goal") == ["loop.goal.met"]
    drafts = [r for r in model.requests if r.step_id == "draft"]
    assert len(drafts) == 2
    assert drafts[1].messages[-1]["content"][0]["text"] == "Draft; feedback: shorter"


def test_loop_condition_skips_iterations() -> None:
    h = Harness()
    result = h.run(manifest(
        {"id": "each", "type": "loop",
         "loop": {"source": "items", "itemVariable": "n", "condition": "n > 1"},
         "steps": [prompt("say", "{{ n }}")]},
        variables=[{"key": "items", "type": "array", "value": [1, 2, 3]}]), options=ECHO)
    assert result.output == ["[echo] 2", "[echo] 3"]
    assert h.types("loop.iteration.skipped") == ["loop.iteration.skipped"]


def test_nested_loops_have_distinct_paths() -> None:
    model = scripted()
    h = Harness(model)
    result = h.run(manifest(
        {"id": "outer", "type": "loop", "loop": {"source": "rows", "itemVariable": "row"},
         "steps": [{"id": "inner", "type": "loop",
                    "loop": {"source": "row", "itemVariable": "cell"},
                    "steps": [prompt("say", "{{ cell }}")]}]},
        variables=[{"key": "rows", "type": "array", "value": [["a", "b"], ["c"]]}]),
        options=ECHO)
    assert result.output == [["[echo] a", "[echo] b"], ["[echo] c"]]
    assert [r.step_path for r in model.requests] == [
        "outer/0/inner/0/say", "outer/0/inner/1/say", "outer/1/inner/0/say"]


def test_output_schema_is_validated() -> None:
    schema = {"type": "object", "required": ["score"], "properties": {"score": {"type": "number"}}}
    h = Harness(scripted(responses=[{"json": {"score": "high"}}]))
    result = h.run(manifest(prompt("rate", outputSchema=schema)))
    assert result.status is RunStatus.FAILED
    assert result.error["type"] == "output_schema_invalid"
    assert "score" in result.error["message"]

    h = Harness(scripted(responses=[{"text": '```json\n{"score": 3}\n```'}]))
    assert h.run(manifest(prompt("rate", outputSchema=schema))).output == {"score": 3}


def test_echo_returns_the_smallest_valid_instance() -> None:
    schema = {"type": "object", "required": ["tags", "level", "ok"], "properties": {
        "tags": {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 2}},
        "level": {"enum": ["low", "high"]}, "ok": {"type": "boolean"}, "extra": {"type": "string"}}}
    h = Harness()
    result = h.run(manifest(prompt("rate", outputSchema=schema)), options=ECHO)
    assert result.output == {"tags": ["xx"], "level": "low", "ok": False}


def test_max_steps_limit_counts_declared_steps_up_front() -> None:
    """As the reference: a manifest declaring more steps than limits.maxSteps (loop
    children counted once) is refused before a run exists; iterations are not counted."""
    with pytest.raises(ManifestError, match=r"limits\.maxSteps: the manifest declares 3 steps"):
        manifest(prompt("a"), {"id": "l", "type": "loop", "loop": {"maxIterations": 4},
                               "steps": [prompt("b")]}, limits={"maxSteps": 2})
    h = Harness()
    result = h.run(manifest(prompt("a"), {"id": "l", "type": "loop", "loop": {"maxIterations": 4},
                                          "steps": [prompt("b")]}, limits={"maxSteps": 3}),
                   options=ECHO)
    assert result.status is RunStatus.COMPLETED  # six steps ran under a limit of three


def test_code_step_needs_a_sandbox() -> None:
    # Refused before a run exists, naming the step (no `sandbox:` in the config).
    h = Harness()
    with pytest.raises(ConfigError) as refused:
        h.run(manifest({"id": "calc", "type": "code", "language": "python",
                        "code": "print(1)"}), options=ECHO)
    assert refused.value.field == "steps[0].type"
    assert "code step calc" in str(refused.value) and "sandbox" in str(refused.value)


def test_model_error_fails_the_step_with_its_code() -> None:
    h = Harness(scripted(responses=[{"error": {"code": "rate_limited", "message": "slow down"}}]))
    result = h.run(manifest(prompt("a")))
    assert result.status is RunStatus.FAILED
    assert result.error["type"] == "model_error"
    assert result.error["details"] == {"code": "rate_limited"}


def test_every_step_is_checkpointed_the_last_by_the_completion() -> None:
    h = Harness()
    result = h.run(manifest(prompt("a"), prompt("b")), options=ECHO)
    infos = h.store.list_checkpoints(result.run_id)
    # one after the first step; the last step's commit point is the final
    # checkpoint, committed with the completion (nothing runs between them)
    assert [info.seq for info in infos] == [1, 2]
    final = h.store.load_latest_checkpoint(result.run_id)
    assert [item["type"] for item in final.transcript] == [
        "message", "model-response", "message", "model-response"]
    assert [entry["step_path"] for entry in final.step_results] == ["a", "b"]
    assert final.budget.consumed_tokens == result.usage["consumed_tokens"] > 0


def test_events_carry_no_prompt_text_or_values() -> None:
    canary = "CANARY-7f3a"
    h = Harness(scripted(responses=[{"text": f"model says {canary}"}]))
    h.run(manifest(prompt("a", f"secret {canary} {{{{ v }}}}", outputVariable="out"),
                   variables=[{"key": "v", "type": "string", "value": canary}]))
    for event in h.events.events:
        assert canary not in repr(event.to_json())
    assert h.types("run.") == ["run.started", "run.completed"]


def test_unknown_model_provider_is_refused_before_a_run_exists() -> None:
    from agent_runtime.errors import ConfigError

    h = Harness()
    with pytest.raises(ConfigError, match=r"manifest: model: .*model provider 'openai'"):
        h.run(manifest(prompt("a"), model={"provider": "openai", "model": "gpt-5.6"}),
              options={})
    assert h.store.list_runs().runs == []
