"""JSON Schemas as hostile input (agent_runtime.schemas): no reference leaves the
schema, no cycle, no regex or validation that runs on, no schema past the size
limits — refused when a manifest is validated, naming the field, and never a
fetch, a file read or a traceback."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from engine_harness import Harness, manifest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_runtime import RunStatus
from agent_runtime.cli import main
from agent_runtime.config import parse_config
from agent_runtime.errors import ManifestError
from agent_runtime.manifest import parse_agent_manifest
from agent_runtime.schemas import (
    SchemaInvalid,
    SchemaLimits,
    SchemaRefused,
    compile_schema,
)
from agent_runtime.testing import scripted
from agent_runtime.tools import Tool, ToolArgumentsError
from tests.local_http import Answer, Request, serve_http


@dataclass
class SchemaHost:
    """A local HTTP server that serves any path as a JSON Schema and records every
    request it gets: the runtime must never make one."""

    url: str
    requests: list[str] = field(default_factory=list)


@pytest.fixture
def schema_host() -> Iterator[SchemaHost]:
    host = SchemaHost(url="")

    def respond(request: Request) -> Answer:
        host.requests.append(request.path)
        return Answer(200, {"Content-Type": "application/schema+json"},
                      json.dumps({"type": "string"}).encode())

    with serve_http(respond) as url:
        host.url = url
        yield host


def agent_with_schema(schema: Any) -> dict[str, Any]:
    return {"schemaVersion": "1.0", "id": "schemas",
            "steps": [{"id": "answer", "type": "prompt", "prompt": "Answer.",
                       "outputSchema": schema, "includeInFinalOutput": True}]}


def validate_exit(tmp_path: Path, schema: Any, capsys: pytest.CaptureFixture[str]) -> tuple[
        int, str]:
    path = tmp_path / "agent.json"
    path.write_text(json.dumps(agent_with_schema(schema)))
    code = main(["validate", str(path)])
    return code, capsys.readouterr().err


def refusal(schema: Any, limits: SchemaLimits | None = None) -> SchemaRefused:
    with pytest.raises(SchemaRefused) as refused:
        compile_schema(schema, *(limits,) if limits else ())
    return refused.value


# -- acceptance 1: no reference leaves the schema ----------------------------------


def test_remote_and_file_references_are_refused_at_validate_naming_the_field(
        tmp_path: Path, schema_host: SchemaHost, capsys: pytest.CaptureFixture[str]) -> None:
    local = tmp_path / "string.schema.json"
    local.write_text(json.dumps({"type": "string"}))  # a schema that would validate fine
    for target in (f"{schema_host.url}/string.schema.json", local.as_uri()):
        schema = {"type": "object", "properties": {"x": {"$ref": target}}}
        code, err = validate_exit(tmp_path, schema, capsys)
        assert code == 2, err
        assert err.startswith("error: ") and "Traceback" not in err
        assert ": steps[0].outputSchema.properties.x.$ref: " in err
        assert "only references within the schema itself" in err
    assert schema_host.requests == []


@pytest.mark.parametrize(("make_schema", "field"), [
    # A root $id re-bases relative references onto the server.
    (lambda url: {"$id": f"{url}/root.json", "$ref": "other.json"}, "$ref"),
    (lambda url: {"$dynamicRef": f"{url}/meta#node"}, "$dynamicRef"),
    (lambda url: {"$recursiveRef": f"{url}/meta"}, "$recursiveRef"),
    # A metaschema is only ever looked up by its URI, never fetched.
    (lambda url: {"$schema": f"{url}/meta", "type": "string"}, "$schema"),
    # An embedded $id would make '#...' references under it resolve elsewhere.
    (lambda url: {"$defs": {"a": {"$id": f"{url}/a.json", "$ref": "#/x"}},
                  "$ref": "#/$defs/a"}, "$defs.a.$id"),
    # Draft-04's `id`, embedded, likewise.
    (lambda url: {"$schema": "http://json-schema.org/draft-04/schema#",
                  "properties": {"p": {"id": f"{url}/p.json", "$ref": "#/definitions/d"}},
                  "definitions": {"d": {}}}, "properties.p.id"),
    (lambda url: {"$schema": "http://json-schema.org/draft-07/schema#",
                  "items": {"$ref": f"{url}/item.json"}}, "items.$ref"),
    # A reference in an unknown keyword can still be pointed at and followed.
    (lambda url: {"x-extra": {"$ref": f"{url}/x.json"}, "$ref": "#/x-extra"}, "x-extra.$ref"),
])
def test_every_way_to_name_another_document_is_refused_without_a_request(
        tmp_path: Path, schema_host: SchemaHost, capsys: pytest.CaptureFixture[str],
        make_schema: Any, field: str) -> None:
    code, err = validate_exit(tmp_path, make_schema(schema_host.url), capsys)
    assert code == 2, err
    assert f": steps[0].outputSchema.{field}: " in err
    assert schema_host.requests == []


MCP_SERVER = Path(__file__).resolve().parent / "mcp_schema_server.py"


@pytest.mark.slow
@pytest.mark.parametrize("remote", [True, False])
def test_an_mcp_tool_schema_with_a_remote_reference_fails_the_step_without_a_fetch(
        tmp_path: Path, schema_host: SchemaHost, remote: bool) -> None:
    local = tmp_path / "query.schema.json"
    local.write_text(json.dumps({"type": "string"}))
    target = f"{schema_host.url}/query.schema.json" if remote else local.as_uri()
    schema = {"type": "object", "required": ["query"],
              "properties": {"query": {"$ref": target}}}
    log = tmp_path / "received.jsonl"
    config = parse_config({"version": "1.0", "connections": {"documents": {
        "driver": "mcp", "transport": "stdio", "command": sys.executable,
        "args": [str(MCP_SERVER), str(log), json.dumps(schema)], "mode": "read",
        "tools": ["search"], "readTools": ["search"],
        "required": True, "connectTimeoutMs": 300_000}}}, source="test-config")
    h = Harness(scripted(responses=[
        {"toolCalls": [{"name": "docs__search", "arguments": {"query": "leases"}}]},
        {"text": "done"}]), config=config)
    agent = parse_agent_manifest({
        "schemaVersion": "1.0", "id": "mcp", "connections": [{"ref": "documents",
                                                              "alias": "docs"}],
        "steps": [{"id": "answer", "type": "prompt", "prompt": "Answer.",
                   "tools": ["docs__search"]}]}, source="test")
    result = h.run(agent)

    assert result.status is RunStatus.FAILED
    assert result.error["type"] == "mcp_tool_schema_refused"
    assert "tool 'search' is refused at inputSchema.properties.query.$ref" in \
        result.error["message"]
    assert "only references within the schema itself" in result.error["message"]
    assert schema_host.requests == []
    assert not log.exists()  # the tool was never called
    assert h.model.requests == []  # nor offered to the model


def test_urls_that_are_only_names_are_never_fetched(schema_host: SchemaHost) -> None:
    # A root id names the schema; a `$schema` below the root is ignored by every
    # dialect here. Neither is a reason to fetch anything, and nothing is fetched.
    compiled = compile_schema({
        "$id": f"{schema_host.url}/root.json", "type": "object",
        "properties": {"a": {"$schema": f"{schema_host.url}/meta", "$ref": "#/$defs/a"}},
        "$defs": {"a": {"type": "integer"}}})
    assert compiled.first_error({"a": 1}) is None
    assert compiled.first_error({"a": "x"}) is not None
    draft4 = compile_schema({"$schema": "http://json-schema.org/draft-04/schema#",
                             "id": f"{schema_host.url}/d4.json",
                             "properties": {"n": {"$ref": "#/definitions/n"}},
                             "definitions": {"n": {"type": "number"}}})
    assert draft4.first_error({"n": "x"}) is not None
    assert schema_host.requests == []


def test_local_references_and_anchors_still_work() -> None:
    schema = {
        "$id": "https://schemas.example/verdict.json",  # naming the root is fine
        "type": "object", "required": ["verdict", "reasons"],
        "properties": {"verdict": {"$ref": "#/$defs/verdict"},
                       "reasons": {"type": "array", "items": {"$ref": "#reason"}}},
        "$defs": {"verdict": {"enum": ["approve", "reject"]},
                  "reason": {"$anchor": "reason", "type": "string", "minLength": 3}}}
    compiled = compile_schema(schema)
    assert compiled.first_error({"verdict": "approve", "reasons": ["fine"]}) is None
    error = compiled.first_error({"verdict": "maybe", "reasons": ["ok"]})
    assert error is not None and error.validator in ("enum", "minLength")
    draft7 = compile_schema({"$schema": "http://json-schema.org/draft-07/schema#",
                             "definitions": {"n": {"$id": "#num", "type": "number"}},
                             "items": {"$ref": "#num"}})
    assert draft7.first_error([1, 2]) is None and draft7.first_error(["x"]) is not None


def test_a_reference_that_does_not_resolve_is_refused_at_validate() -> None:
    assert refusal({"$ref": "#/$defs/missing"}).at == ("$ref",)
    assert refusal({"properties": {"a": {"$ref": "#nowhere"}}}).at == ("properties", "a", "$ref")
    assert "does not point at a schema" in refusal({"$ref": "#/required", "required": ["a"]}).reason


# -- recursion ---------------------------------------------------------------------------


@pytest.mark.parametrize(("schema", "at"), [
    ({"$ref": "#"}, ("$ref",)),
    ({"allOf": [{"$ref": "#"}]}, ("allOf", 0, "$ref")),
    ({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"anyOf": [{"$ref": "#/$defs/a"}]}},
      "$ref": "#/$defs/a"}, None),
    ({"not": {"if": {"$ref": "#/$defs/x"}}, "$defs": {"x": {"oneOf": [{"$ref": "#"}]}}}, None),
    ({"dependentSchemas": {"a": {"$ref": "#"}}}, ("dependentSchemas", "a", "$ref")),
    ({"properties": {"a": {"$ref": "#/properties/a"}}}, ("properties", "a", "$ref")),
])
def test_reference_cycles_without_progress_are_refused(schema: dict[str, Any],
                                                        at: tuple[Any, ...] | None) -> None:
    refused = refusal(schema)
    assert "reference cycle" in refused.reason
    assert refused.at[-1] == "$ref"
    if at is not None:
        assert refused.at == at


def test_a_self_reference_is_refused_by_validate_naming_the_field(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = validate_exit(tmp_path, {"type": "object", "properties": {
        "child": {"$ref": "#/properties/child"}}}, capsys)
    assert code == 2 and ": steps[0].outputSchema.properties.child.$ref: reference cycle" in err


def test_a_recursive_tree_schema_is_fine_and_a_too_deep_value_is_refused() -> None:
    tree = compile_schema({"type": "object", "required": ["name"], "properties": {
        "name": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#"}}}})
    assert tree.first_error({"name": "a", "children": [{"name": "b", "children": []}]}) is None
    wrong = tree.first_error({"name": "a", "children": [{"children": []}]})
    assert wrong is not None and list(wrong.absolute_path) == ["children", 0]
    value: dict[str, Any] = {"name": "leaf"}
    for _ in range(5000):
        value = {"name": "n", "children": [value]}
    with pytest.raises(SchemaRefused, match="nests too deeply"):
        tree.first_error(value)


def test_an_answer_nested_too_deeply_fails_the_step_without_a_traceback() -> None:
    answer = "[" * 100_000 + "]" * 100_000
    h = Harness(scripted(responses=[{"text": answer}]))
    result = h.run(manifest({"id": "deep", "type": "prompt", "prompt": "x",
                             "outputSchema": {"type": "array"}}))
    assert result.status is RunStatus.FAILED
    assert result.error["type"] == "output_schema_invalid"


# -- regular expressions -----------------------------------------------------------------


def test_catastrophic_patterns_finish_on_long_answers() -> None:
    # ^(a+)+$ on 27+ characters that do not match takes seconds on a backtracking
    # engine, doubling with each character; RE2 is linear.
    compiled = compile_schema({"type": "object", "properties": {
        "text": {"type": "string", "pattern": "^(a+)+$"}},
        "patternProperties": {"^(x+x+)+y$": {"type": "number"}},
        "additionalProperties": {"type": "string"}})
    long_miss = "a" * 5000 + "!"
    error = compiled.first_error({"text": long_miss})
    assert error is not None and error.validator == "pattern"
    assert compiled.first_error({"text": "a" * 5000}) is None
    assert compiled.first_error({"x" * 5000: "not matched, so a string is fine"}) is None
    error = compiled.first_error({"x" * 5000 + "y": "matched, so must be a number"})
    assert error is not None and error.validator == "type"


def test_a_catastrophic_pattern_in_a_run_completes_with_a_verdict() -> None:
    schema = {"type": "object", "properties": {"word": {"type": "string",
                                                        "pattern": "^(a+)+$"}}}
    h = Harness(scripted(responses=[{"json": {"word": "a" * 64 + "b"}}]))
    result = h.run(manifest({"id": "p", "type": "prompt", "prompt": "x", "outputSchema": schema}))
    assert result.status is RunStatus.FAILED
    assert result.error["type"] == "output_schema_invalid"
    assert "'pattern'" in result.error["message"]


@pytest.mark.parametrize(("schema", "at"), [
    ({"pattern": "(a)\\1"}, ("pattern",)),  # backreference
    ({"pattern": "^(?=a)"}, ("pattern",)),  # look-ahead
    ({"properties": {"a": {"pattern": "(?<!x)y"}}}, ("properties", "a", "pattern")),
    ({"patternProperties": {"(?!z)": {}}}, ("patternProperties", "(?!z)")),
    ({"pattern": "a{1001}"}, ("pattern",)),
    ({"propertyNames": {"pattern": "(x)\\1"}}, ("propertyNames", "pattern")),
])
def test_patterns_re2_cannot_run_are_refused_naming_them(schema: dict[str, Any],
                                                          at: tuple[Any, ...]) -> None:
    refused = refusal(schema)
    assert refused.at == at and "is not supported" in refused.reason


def test_ecma_pattern_syntax_and_semantics() -> None:
    compiled = compile_schema({"type": "string", "pattern": "^caf\\u00e9$"})
    assert compiled.first_error("café") is None
    # `$` is the end of the text, as in ECMA-262 (Python's re also allows a final newline).
    assert compile_schema({"pattern": "^a$"}).first_error("a\n") is not None
    named = compile_schema({"pattern": "^(?<year>\\d{4})-\\d{2}$"})
    assert named.first_error("2024-05") is None
    # Text that is not valid Unicode matches no pattern, and is no traceback.
    assert compile_schema({"pattern": "."}).first_error("\ud800") is not None


def test_unevaluated_properties_with_pattern_properties_run_on_re2() -> None:
    compiled = compile_schema({"allOf": [{"patternProperties": {"^(a+)+$": {"type": "number"}}}],
                               "properties": {"id": {"type": "string"}},
                               "unevaluatedProperties": False})
    assert compiled.first_error({"id": "x", "aaa": 1}) is None
    error = compiled.first_error({"id": "x", "a" * 3000 + "!": 1})
    assert error is not None and error.validator == "unevaluatedProperties"


# -- size, depth, dialects and cost --------------------------------------------------


def test_size_and_depth_limits_name_the_field(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    big = {"type": "object", "properties": {f"p{i}": {"type": "string", "description": "d" * 60}
                                            for i in range(1200)}}
    code, err = validate_exit(tmp_path, big, capsys)
    assert code == 2 and ": steps[0].outputSchema: the schema is larger than 65536 bytes" in err

    deep: dict[str, Any] = {"type": "string"}
    for _ in range(40):
        deep = {"type": "array", "items": deep}
    code, err = validate_exit(tmp_path, deep, capsys)
    assert code == 2 and "nests objects and arrays more than 32 deep" in err
    assert ": steps[0].outputSchema.items.items." in err

    assert refusal({"type": "string"}, SchemaLimits(max_bytes=10)).reason.startswith(
        "the schema is larger than 10 bytes")
    compile_schema({"items": {"items": {"items": {}}}}, SchemaLimits(max_depth=4))
    refusal({"items": {"items": {"items": {"items": {}}}}}, SchemaLimits(max_depth=4))


@pytest.mark.parametrize(("uri", "accepted"), [
    ("https://json-schema.org/draft/2020-12/schema", True),
    ("http://json-schema.org/draft-07/schema#", True),
    ("http://json-schema.org/draft-06/schema#", True),
    ("http://json-schema.org/draft-04/schema#", True),
    ("https://json-schema.org/draft/2019-09/schema", False),
    ("http://json-schema.org/draft-03/schema#", False),
    ("https://example.com/my-dialect", False),
])
def test_dialects(uri: str, accepted: bool) -> None:
    if accepted:
        compile_schema({"$schema": uri, "type": "string"})
    else:
        assert refusal({"$schema": uri}).at == ("$schema",)


def test_a_schema_that_breaks_its_metaschema_is_invalid() -> None:
    with pytest.raises(SchemaInvalid) as invalid:
        compile_schema({"properties": {"a": {"type": "strin"}}})
    assert invalid.value.at == ("properties", "a", "type")
    with pytest.raises(SchemaInvalid):
        compile_schema(["not", "a", "schema"])
    assert compile_schema(True).first_error(1) is None


def test_a_validation_that_would_run_on_stops_at_its_step_budget() -> None:
    # Each level tries two branches that fail further down: 2^30 paths.
    defs: dict[str, Any] = {f"d{i}": {"anyOf": [{"$ref": f"#/$defs/d{i + 1}"},
                                                 {"$ref": f"#/$defs/d{i + 1}"}]}
                            for i in range(30)}
    defs["d30"] = {"type": "string"}
    compiled = compile_schema({"$ref": "#/$defs/d0", "$defs": defs},
                              SchemaLimits(max_steps=20_000))
    assert compiled.first_error("fine") is None  # the first branch succeeds at once
    with pytest.raises(SchemaRefused, match="takes more than 20000 steps"):
        compiled.first_error(5)


def test_validate_refuses_a_schema_in_a_manifest_with_the_manifest_error() -> None:
    with pytest.raises(ManifestError) as refused:
        parse_agent_manifest(agent_with_schema({"$ref": "file:///etc/passwd"}), source="m")
    assert refused.value.field == "steps[0].outputSchema.$ref"


def test_python_tool_schemas_go_through_the_same_checks() -> None:
    def lookup(word: str, limit: int = 3) -> str:
        return word * limit

    tool = Tool(lookup)
    tool.check_arguments({"word": "a"})
    with pytest.raises(ToolArgumentsError, match="limit"):
        tool.check_arguments({"word": "a", "limit": "many"})


# -- nothing escapes ------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.sampled_from(
        ["#", "#/$defs/a", "#/properties", "#a", "^(a+)+$", "(?=x)", "a{1001}", "string",
         "object", "array", "http://127.0.0.1:9/x", "a", "\ud800"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["$ref", "$defs", "$id", "$anchor", "$dynamicRef", "$dynamicAnchor",
                         "$schema", "type", "properties", "items", "prefixItems", "allOf",
                         "anyOf", "oneOf", "not", "if", "then", "else", "pattern",
                         "patternProperties", "additionalProperties", "unevaluatedProperties",
                         "dependentSchemas", "const", "enum", "required", "a", "id"]),
        inner, max_size=4),
    max_leaves=12)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=json_values, instance=json_values)
def test_any_schema_and_value_end_in_a_verdict_or_a_refusal(schema: Any, instance: Any) -> None:
    try:
        compiled = compile_schema(schema)
    except SchemaRefused:
        return
    with contextlib.suppress(SchemaRefused):
        compiled.first_error(instance)
