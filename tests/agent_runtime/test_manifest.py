"""Schema 1.0 agent and run manifests: what parses, what the hash covers, how errors read."""

from __future__ import annotations

import json
from pathlib import Path
from textwrap import dedent
from typing import Any

import pytest
import yaml

from agent_runtime.errors import ManifestError
from agent_runtime.limits import DEFAULT_LIMITS
from agent_runtime.manifest import (
    BUILT_IN_STEPS,
    DEFAULT_MAX_TOOL_CALLS_PER_ITERATION,
    AgentManifest,
    ApprovalStep,
    CodeStep,
    LoopStep,
    ProfileModelRef,
    PromptStep,
    ProviderModelRef,
    SubRunStep,
    WebhookStep,
    iter_steps,
    manifest_hash,
    manifest_json,
    parse_agent_manifest,
)
from agent_runtime.run_manifest import load_agent_manifest, load_manifest_file, parse_run_manifest
from agent_runtime.step_kinds import step_kinds, step_model

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "manifests"
AGENT_FIXTURES = sorted(FIXTURES.glob("*.agent.yaml"))


def base(**changes: Any) -> dict[str, Any]:
    """A minimal valid manifest, with top-level fields replaced by `changes`."""
    data: dict[str, Any] = {
        "schemaVersion": "1.0",
        "variables": [{"key": "topic", "type": "string", "value": "fencing"}],
        "steps": [{"id": "draft", "type": "prompt", "prompt": "Explain {{ topic }}."}],
    }
    data.update(changes)
    return data


def prompt(step_id: str = "p", **fields: Any) -> dict[str, Any]:
    return {"id": step_id, "type": "prompt", "prompt": "hi", **fields}


def error_for(data: Any, source: str = "agent.yaml") -> ManifestError:
    with pytest.raises(ManifestError) as info:
        parse_agent_manifest(data, source=source)
    return info.value


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(dedent(text), encoding="utf-8")
    return path


# -- the reference fixtures ------------------------------------------------------


def test_fixtures_are_present() -> None:
    assert len(AGENT_FIXTURES) >= 6


@pytest.mark.parametrize("path", AGENT_FIXTURES, ids=lambda p: p.name)
def test_every_reference_fixture_parses_and_round_trips(path: Path) -> None:
    manifest = load_agent_manifest(path)
    assert manifest.schema_version == "1.0"
    assert manifest.steps
    # The engine stores manifest_json in the run record and reparses it on resume.
    again = AgentManifest.model_validate(manifest_json(manifest))
    assert again == manifest
    assert manifest_hash(again) == manifest_hash(manifest)
    # What the user wrote, no more: the JSON dump is the YAML document itself.
    assert manifest_json(manifest) == yaml.safe_load(path.read_text(encoding="utf-8"))


def test_fixture_shapes_become_typed_steps() -> None:
    brief = load_agent_manifest(FIXTURES / "release-brief.agent.yaml")
    assert isinstance(brief.model, ProviderModelRef)
    assert brief.model.model == "gpt-5.6"
    assert [v.key for v in brief.variables] == ["release", "audience", "style"]
    assert brief.variables[1].requires_override and not brief.variables[1].has_default
    assert brief.max_tool_calls_per_iteration == 6
    assert brief.steps[1].when == "briefDraft != null"
    assert brief.steps[1].include_in_final_output is True

    loop = load_agent_manifest(FIXTURES / "collection-loop.agent.yaml").steps[0]
    assert isinstance(loop, LoopStep)
    assert loop.loop.item_variable == "current" and loop.loop.max_iterations == 20
    assert isinstance(loop.steps[0], PromptStep)

    approval = load_agent_manifest(FIXTURES / "approval.agent.yaml").steps[1]
    assert isinstance(approval, ApprovalStep) and approval.action == "pause"

    tools = load_agent_manifest(FIXTURES / "tool-agent.agent.yaml")
    assert tools.connections[0].effective_alias == "docs"


def test_run_manifest_loads_and_resolves_its_agent_relative_to_itself() -> None:
    loaded = load_manifest_file(FIXTURES / "release-brief.run.yaml")
    assert loaded.run is not None
    assert loaded.path == FIXTURES / "release-brief.run.yaml"
    assert loaded.agent_path == FIXTURES / "release-brief.agent.yaml"
    assert loaded.agent.id == "release-brief"
    assert [(o.key, o.value) for o in loaded.run.variables] == [("audience", "partners")]


def test_an_agent_manifest_file_loads_as_itself() -> None:
    loaded = load_manifest_file(FIXTURES / "hello.agent.yaml")
    assert loaded.run is None
    assert loaded.agent_path == loaded.path == FIXTURES / "hello.agent.yaml"


def test_run_manifest_with_missing_agent_names_the_ref(tmp_path: Path) -> None:
    path = write(tmp_path, "x.run.yaml", """\
        schemaVersion: '1.0'
        agent: {ref: nowhere.agent.yaml}
        """)
    with pytest.raises(ManifestError) as info:
        load_manifest_file(path)
    assert info.value.field == "agent.ref" and "not found" in str(info.value)
    assert str(path) in str(info.value)


def test_run_manifest_schema() -> None:
    run = parse_run_manifest(
        {"schemaVersion": "1.0", "agent": {"ref": "  a.yaml "}, "runId": "r1",
         "execution": {"mode": "sequential"},
         "budget": {"maxTotalTokens": 2**53 - 1}}, source="run.yaml")
    assert run.agent.ref == "a.yaml"
    assert run.execution is not None and run.execution.mode == "sequential"
    assert run.budget is not None and run.budget.max_total_tokens == 2**53 - 1
    bad: list[tuple[dict[str, Any], str, str]] = [
        ({"agent": {"ref": "a"}, "extra": 1}, "extra", "unknown field"),
        ({"agent": {"ref": " "}}, "agent.ref", "must not be empty"),
        ({"agent": {"ref": "a"}, "execution": {"mode": "sequential", "maxConcurrency": 65}},
         "execution.maxConcurrency", "at most 64"),
        # the reference's .safe(): JSON numbers past 2**53 - 1 are not exact
        ({"agent": {"ref": "a"}, "budget": {"maxTotalTokens": 2**53}}, "budget.maxTotalTokens",
         "must be at most 9007199254740991"),
        ({"agent": {"ref": "a"}, "variables": [{"key": "a", "value": 1}, {"key": "A", "value": 2}]},
         "variables[1].key", "duplicate"),
        ({"agent": {"ref": "a"}, "budget": {"maxTotalTokens": 0}}, "budget.maxTotalTokens",
         "must be at least 1"),
    ]
    for data, field, reason in bad:
        with pytest.raises(ManifestError) as info:
            parse_run_manifest({"schemaVersion": "1.0", **data}, source="run.yaml")
        assert info.value.field == field and reason in info.value.reason, data


# -- the hash --------------------------------------------------------------------


def test_hash_is_stable_across_loads_spellings_and_key_order(tmp_path: Path) -> None:
    path = FIXTURES / "release-brief.agent.yaml"
    first = manifest_hash(load_agent_manifest(path))
    assert first.startswith("sha256:") and len(first) == len("sha256:") + 64
    assert manifest_hash(load_agent_manifest(path)) == first
    # The same document written as JSON with its keys reversed hashes the same.
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    as_json = tmp_path / "brief.json"
    as_json.write_text(json.dumps(dict(reversed(list(data.items())))), encoding="utf-8")
    assert manifest_hash(load_agent_manifest(as_json)) == first


def test_hash_changes_when_any_field_changes() -> None:
    original = manifest_hash(parse_agent_manifest(base(), source="a"))
    changed = [
        base(name="x"),
        base(steps=[prompt("draft", prompt="Explain {{ topic }}!")]),
        base(variables=[{"key": "topic", "type": "string", "value": "fencing!"}]),
        base(limits={"maxToolCallsPerIteration": DEFAULT_MAX_TOOL_CALLS_PER_ITERATION}),
    ]
    hashes = {manifest_hash(parse_agent_manifest(d, source="a")) for d in changed}
    assert original not in hashes and len(hashes) == len(changed)


def test_defaults_are_exposed_but_not_injected() -> None:
    manifest = parse_agent_manifest(base(), source="a")
    assert manifest.max_tool_calls_per_iteration == DEFAULT_MAX_TOOL_CALLS_PER_ITERATION
    assert manifest.steps[0].include_in_final_output is False
    assert manifest_json(manifest) == base()


def test_python_constructed_steps_always_dump_their_type() -> None:
    manifest = AgentManifest(schema_version="1.0", steps=[PromptStep(id="a", prompt="hi")])
    assert manifest_json(manifest)["steps"] == [{"id": "a", "type": "prompt", "prompt": "hi"}]
    assert AgentManifest.model_validate(manifest_json(manifest)) == manifest


# -- every step kind -----------------------------------------------------------------


def test_every_step_kind_and_nested_structures_parse() -> None:
    inline = base(steps=[prompt("inner")])
    data = base(
        model={"ref": "quality", "options": {"openai": {"reasoningEffort": "low"}}},
        connections=[{"ref": "documents", "alias": "docs", "tools": ["search"]},
                     {"ref": "tickets", "mode": "read_write", "required": True}],
        steps=[
            prompt("p", systemPrompt="s", outputSchema={"type": "object"}, tools=["docs__search"],
                   maxOutputTokens=100, model={"provider": "anthropic", "model": "claude"},
                   completionPolicy={"onTruncation": "accept", "requireOutput": True}),
            {"id": "m", "type": "prompt", "messages": [
                {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
                {"role": "user", "content": [{"type": "text", "text": "Hi"},
                                             {"type": "image", "url": "https://x/y.png"}]},
                {"role": "assistant", "content": [{"type": "tool-call", "call": {
                    "id": "c1", "name": "docs__search", "input": {"q": "x"}}}]},
                {"role": "tool", "content": [{"type": "tool-result", "result": {
                    "callId": "c1", "name": "docs__search", "output": ["a"]}}]},
            ]},
            {"id": "l", "type": "loop", "loop": {"goal": "done == true", "maxIterations": 3,
                                                 "resultVariable": "result.value"},
             "steps": [prompt("a"), {"id": "inner", "type": "loop", "loop": {}, "steps": []}]},
            {"id": "w", "type": "webhook", "url": "https://hooks.example.com/x", "method": "POST",
             "headers": {"X-Trace": "1"}, "body": {"a": [1, None]}, "timeoutMs": 1000,
             "retries": 0, "idempotencyKey": "k"},
            {"id": "s", "type": "sub-run", "manifest": inline,
             "variableMappings": {"topic": "request.topic"}},
            {"id": "r", "type": "sub-run", "manifestRef": "agents/other.yaml"},
            {"id": "c", "type": "code", "language": "python", "code": "print(1)",
             "environment": {"A": "b"}},
        ],
    )
    manifest = parse_agent_manifest(data, source="a")
    assert isinstance(manifest.model, ProfileModelRef)
    kinds = [type(step) for step in manifest.steps]
    assert kinds == [PromptStep, PromptStep, LoopStep, WebhookStep, SubRunStep, SubRunStep,
                     CodeStep]
    assert manifest_json(manifest) == data
    assert AgentManifest.model_validate(manifest_json(manifest)) == manifest

    paths = [path for path, _ in iter_steps(manifest.steps)]
    assert paths[:5] == ["steps[0]", "steps[1]", "steps[2]", "steps[2].steps[0]",
                         "steps[2].steps[1]"]
    deep = [path for path, _ in iter_steps(manifest.steps, into_sub_runs=True)]
    assert "steps[4].manifest.steps[0]" in deep
    assert parse_agent_manifest(manifest, source="a") is manifest


def test_the_built_in_step_kinds_are_registered_with_their_models() -> None:
    assert (PromptStep, LoopStep, ApprovalStep, SubRunStep, WebhookStep,
                              CodeStep) == BUILT_IN_STEPS
    for model in BUILT_IN_STEPS:
        assert step_model(model.model_fields["type"].default) is model
    assert step_kinds()[:6] == ("prompt", "loop", "approval", "sub-run", "webhook", "code")


# -- errors name the file, the field and the reason ----------------------------------

BAD_CASES: list[tuple[str, dict[str, Any], str, str]] = [
    ("unknown top-level field", base(stepz=[]), "stepz", "unknown field"),
    ("unknown step field", base(steps=[prompt(temperature=1)]), "steps[0].temperature",
     "unknown field"),
    ("snake_case is not the file spelling", base(steps=[prompt(output_variable="x")]),
     "steps[0].output_variable", "unknown field"),
    ("wrong type", base(steps=[prompt(includeInFinalOutput="yes")]),
     "steps[0].includeInFinalOutput", "expected a boolean"),
    ("no coercion of numbers", base(limits={"maxSteps": "5"}), "limits.maxSteps",
     "expected an integer, got a string ('5')"),
    ("non-positive limit", base(limits={"maxSteps": 0}), "limits.maxSteps", "greater than 0"),
    ("missing required field", base(steps=[{"type": "prompt", "prompt": "x"}]), "steps[0].id",
     "required field is missing"),
    ("duplicate sibling ids", base(steps=[prompt("a"), prompt("b"), prompt("a")]),
     "steps[2].id", "duplicate step id 'a'"),
    ("duplicate ids in a loop",
     base(steps=[{"id": "l", "type": "loop", "loop": {},
                  "steps": [prompt("x"), prompt("y"), prompt("x")]}]),
     "steps[0].steps[2].id", "duplicate step id 'x'"),
    ("dotted outputVariable", base(steps=[prompt(), prompt("q", outputVariable="brief.draft")]),
     "steps[1].outputVariable", "contains a dot"),
    ("prototype outputVariable", base(steps=[prompt(outputVariable="Constructor")]),
     "steps[0].outputVariable", "reserved name"),
    ("prompt and messages",
     base(steps=[prompt(messages=[{"role": "user", "content": [{"type": "text", "text": "x"}]}])]),
     "steps[0]", "not both"),
    ("neither prompt nor messages", base(steps=[{"id": "p", "type": "prompt"}]), "steps[0]",
     "needs prompt or messages"),
    ("systemPrompt with messages",
     base(steps=[{"id": "p", "type": "prompt", "systemPrompt": "s",
                  "messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}]}]),
     "steps[0].systemPrompt", "cannot be combined with messages"),
    ("__proto__ variable key", base(variables=[{"key": "__proto__", "type": "string"}]),
     "variables[0].key", "reserved name"),
    ("dotted variable key", base(variables=[{"key": "a.b", "type": "string"}]),
     "variables[0].key", "contains a dot"),
    ("duplicate keys differing in case",
     base(variables=[{"key": "topic", "type": "string"}, {"key": "x", "type": "string"},
                     {"key": "Topic", "type": "string"}]),
     "variables[2].key", "duplicate variable key 'Topic'"),
    ("default of the wrong type", base(variables=[{"key": "n", "type": "number", "value": True}]),
     "variables[0].value", "must be of type number"),
    ("unknown variable type", base(variables=[{"key": "n", "type": "integer"}]),
     "variables[0].type", "must be one of"),
    ("schema version 2.0", base(schemaVersion="2.0"), "schemaVersion",
     "unsupported schema version '2.0'"),
    ("unquoted 1.0", base(schemaVersion=1.0), "schemaVersion", "quote it"),
    ("missing schema version", {"steps": []}, "schemaVersion", "required field is missing"),
    ("unknown step type", base(steps=[prompt(), {"id": "x", "type": "shell"}]), "steps[1].type",
     "unknown step type 'shell'; allowed step types: 'prompt', 'loop', 'approval', 'sub-run', "
     "'webhook', 'code'"),
    ("missing step type", base(steps=[{"id": "x"}]), "steps[0].type", "required field is missing"),
    ("step is not a mapping", base(steps=["draft"]), "steps[0]", "expected a mapping"),
    ("unparsable when", base(steps=[prompt(), prompt("q", when="a == == b")]), "steps[1].when",
     "unparsable condition: unexpected token"),
    ("unparsable loop condition",
     base(steps=[{"id": "l", "type": "loop", "loop": {"condition": "(a"}, "steps": []}]),
     "steps[0].loop.condition", "unparsable condition"),
    ("goal loop without maxIterations",
     base(steps=[{"id": "l", "type": "loop", "loop": {"goal": "done"}, "steps": []}]),
     "steps[0].loop.maxIterations", "required when the loop has a goal"),
    ("nested loop field",
     base(steps=[{"id": "l", "type": "loop", "loop": {},
                  "steps": [prompt("a"), prompt("b"),
                            {"id": "c", "type": "loop", "loop": {"maxIterations": -1},
                             "steps": []}]}]),
     "steps[0].steps[2].loop.maxIterations", "greater than 0"),
    ("bad loop variable path",
     base(steps=[{"id": "l", "type": "loop", "loop": {"itemVariable": "a..b"}, "steps": []}]),
     "steps[0].loop.itemVariable", "empty path segment"),
    ("bad connection alias", base(connections=[{"ref": "docs", "alias": "Docs_1"}]),
     "connections[0].alias", "not a valid alias"),
    ("duplicate connection alias",
     base(connections=[{"ref": "docs"}, {"ref": "other", "alias": "docs"}]),
     "connections[1].alias", "duplicate connection alias 'docs'"),
    ("bad connection mode", base(connections=[{"ref": "d", "mode": "write"}]),
     "connections[0].mode", "must be one of"),
    ("model with both forms", base(model={"provider": "a", "model": "b", "ref": "c"}), "model",
     "provider and model, or with ref"),
    ("step model field", base(steps=[prompt(model={"provider": "", "model": "m"})]),
     "steps[0].model.provider", "must not be empty"),
    ("invalid output schema", base(steps=[prompt(outputSchema={"type": "strin"})]),
     "steps[0].outputSchema.type", "not a valid JSON Schema"),
    ("non-http webhook", base(steps=[{"id": "w", "type": "webhook", "url": "ftp://x/y"}]),
     "steps[0].url", "not an http or https URL"),
    ("negative retries",
     base(steps=[{"id": "w", "type": "webhook", "url": "https://x", "retries": -1}]),
     "steps[0].retries", "at least 0"),
    ("sub-run without an agent", base(steps=[{"id": "s", "type": "sub-run"}]), "steps[0]",
     "needs manifest or manifestRef"),
    ("error inside an inline sub-run manifest",
     base(steps=[{"id": "s", "type": "sub-run", "manifest": base(steps=[prompt(bogus=1)])}]),
     "steps[0].manifest.steps[0].bogus", "unknown field"),
    ("dotted variable mapping key",
     base(steps=[{"id": "s", "type": "sub-run", "manifestRef": "x",
                  "variableMappings": {"a.b": "c"}}]),
     'steps[0].variableMappings["a.b"]', "contains a dot"),
    ("approval without prompt", base(steps=[{"id": "a", "type": "approval"}]), "steps[0].prompt",
     "required field is missing"),
    ("system message after user",
     base(steps=[{"id": "m", "type": "prompt", "messages": [
         {"role": "user", "content": [{"type": "text", "text": "x"}]},
         {"role": "system", "content": [{"type": "text", "text": "y"}]}]}]),
     "steps[0].messages[1].role", "system messages must come before"),
    ("non-text part in a system message",
     base(steps=[{"id": "m", "type": "prompt", "messages": [
         {"role": "system", "content": [{"type": "json", "value": 1}]}]}]),
     "steps[0].messages[0].content[0]", "a system message cannot contain a json part"),
    ("unknown content part type",
     base(steps=[{"id": "m", "type": "prompt", "messages": [
         {"role": "user", "content": [{"type": "video"}]}]}]),
     "steps[0].messages[0].content[0].type", "unknown content part type 'video'"),
    ("content part field",
     base(steps=[{"id": "m", "type": "prompt", "messages": [
         {"role": "user", "content": [{"type": "text", "text": 3}]}]}]),
     "steps[0].messages[0].content[0].text", "expected a string"),
    ("tool call without result",
     base(steps=[{"id": "m", "type": "prompt", "messages": [
         {"role": "assistant", "content": [
             {"type": "tool-call", "call": {"id": "c", "name": "t", "input": {}}}]}]}]),
     "steps[0].messages[0]", "tool call 'c' has no tool result"),
    ("empty messages", base(steps=[{"id": "m", "type": "prompt", "messages": []}]),
     "steps[0].messages", "must not be empty"),
    ("date value", base(metadata={"released": __import__("datetime").date(2024, 1, 2)}),
     "metadata.released", "quote it"),
    ("non-string key", base(metadata={1: "x"}), "metadata", "keys must be strings"),
]


@pytest.mark.parametrize(("data", "field", "reason"), [c[1:] for c in BAD_CASES],
                         ids=[c[0] for c in BAD_CASES])
def test_bad_manifest_names_file_field_and_reason(data: dict[str, Any], field: str,
                                                  reason: str) -> None:
    error = error_for(data, source="bad.agent.yaml")
    assert error.source == "bad.agent.yaml"
    assert error.field == field
    assert reason in error.reason
    assert str(error).startswith(f"bad.agent.yaml: {field}: ")


def test_several_problems_lead_with_the_first() -> None:
    error = error_for(base(steps=[prompt(bogus=1), {"id": "x", "type": "prompt", "prompt": 5}]))
    assert error.field == "steps[0].bogus"
    assert error.reason.startswith("unknown field (also: steps[1].prompt: expected a string")


def test_malformed_yaml_reports_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, "broken.agent.yaml", """\
        schemaVersion: '1.0'
        steps:
          - id: a
            prompt: [unclosed
        """)
    with pytest.raises(ManifestError) as info:
        load_agent_manifest(path)
    message = str(info.value)
    assert message.startswith(f"{path}: malformed YAML at line ")
    assert "column" in message


def test_malformed_json_reports_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, "broken.json", '{"schemaVersion": "1.0",\n "steps": [,]}')
    with pytest.raises(ManifestError, match=r"malformed JSON at line 2, column 12"):
        load_agent_manifest(path)


def test_unquoted_version_from_a_yaml_file(tmp_path: Path) -> None:
    path = write(tmp_path, "v.agent.yaml", "schemaVersion: 1.0\nsteps: []\n")
    with pytest.raises(ManifestError) as info:
        load_agent_manifest(path)
    assert str(info.value).startswith(f"{path}: schemaVersion: ")
    assert "quote it" in str(info.value)


@pytest.mark.parametrize(("text", "reason"), [
    ("", "got an empty document"),
    ("- a\n- b\n", "got a list"),
    ("just text\n", "got a string"),
])
def test_top_level_must_be_a_mapping(tmp_path: Path, text: str, reason: str) -> None:
    path = write(tmp_path, "x.agent.yaml", text)
    with pytest.raises(ManifestError, match=reason):
        load_manifest_file(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="file not found"):
        load_agent_manifest(tmp_path / "nope.yaml")


def test_a_run_manifest_is_not_an_agent_manifest() -> None:
    with pytest.raises(ManifestError, match="this is a run manifest"):
        load_agent_manifest(FIXTURES / "release-brief.run.yaml")


def test_structure_guard_rejects_deep_nesting() -> None:
    deep: Any = "leaf"
    for _ in range(DEFAULT_LIMITS.max_depth + 1):
        deep = [deep]
    error = error_for(base(metadata={"deep": deep}))
    assert f"nested deeper than {DEFAULT_LIMITS.max_depth} levels" in error.reason


def test_structure_guard_rejects_too_many_nodes() -> None:
    error = error_for(base(metadata={"big": list(range(DEFAULT_LIMITS.max_values))}))
    assert "too large" in error.reason


def test_structure_guard_rejects_alias_bombs_and_cycles(tmp_path: Path) -> None:
    # Each level doubles the expanded tree: a few lines that would expand to millions.
    lines = ["schemaVersion: '1.0'", "steps: []", "a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]"
              for i in range(1, 9)]
    bomb = write(tmp_path, "bomb.agent.yaml", "\n".join(lines) + "\n")
    with pytest.raises(ManifestError, match="too large"):
        load_agent_manifest(bomb)
    cycle = write(tmp_path, "cycle.agent.yaml",
                  "schemaVersion: '1.0'\nsteps: []\nmetadata: &m {self: *m}\n")
    with pytest.raises(ManifestError, match="contains itself") as info:
        load_agent_manifest(cycle)
    assert info.value.field == "metadata.self"


@pytest.mark.parametrize(("text", "name", "key"), [
    ("schemaVersion: '1.0'\nsteps: []\nsteps: []\n", "dup.agent.yaml", "steps"),
    ('{"schemaVersion": "1.0", "steps": [], "id": "a", "id": "b"}', "dup.agent.json", "id"),
])
def test_a_key_written_twice_is_refused(tmp_path: Path, text: str, name: str, key: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ManifestError, match=f"duplicate key '{key}'") as refused:
        load_agent_manifest(path)
    assert str(path) in str(refused.value)
