"""Run variable overrides: defaults, whole-value replacement and every rejection."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent_runtime.errors import VariableError
from agent_runtime.manifest import AgentManifest, manifest_hash, parse_agent_manifest
from agent_runtime.run_manifest import VariableOverride, load_manifest_file
from agent_runtime.variables import parse_variables_json, read_variables_option, resolve_variables

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "manifests"


def agent(*declarations: dict[str, Any]) -> AgentManifest:
    return parse_agent_manifest(
        {"schemaVersion": "1.0", "variables": list(declarations),
         "steps": [{"id": "a", "type": "prompt", "prompt": "hi"}]},
        source="agent.yaml")


STYLE = {"key": "style", "type": "object", "value": {"tone": "direct", "maxWords": 180}}
AUDIENCE = {"key": "audience", "type": "string", "requiresOverride": True}


def rejected(manifest: AgentManifest, overrides: Any, source: str = "--variables") -> VariableError:
    with pytest.raises(VariableError) as info:
        resolve_variables(manifest, overrides, source=source)
    assert info.value.source == source
    assert str(info.value).startswith(f"{source}: {info.value.field}: ")
    return info.value


def test_defaults_apply_and_undeclared_values_stay_absent() -> None:
    manifest = agent(STYLE, {"key": "notes", "type": "array"}, {"key": "n", "type": "number",
                                                               "value": 0})
    assert resolve_variables(manifest, None, source="--variables") == {
        "style": {"tone": "direct", "maxWords": 180}, "n": 0}


def test_the_reference_run_manifest_resolves() -> None:
    loaded = load_manifest_file(FIXTURES / "release-brief.run.yaml")
    assert loaded.run is not None
    variables = resolve_variables(loaded.agent, loaded.run.variables, source=str(loaded.path))
    assert variables == {
        "release": {"name": "Agent Runtime public release"},
        "audience": "partners",
        "style": {"tone": "direct", "maxWords": 180},
    }


def test_an_override_replaces_the_whole_object_value() -> None:
    manifest = agent(STYLE)
    variables = resolve_variables(manifest, {"style": {"tone": "concise"}}, source="--variables")
    assert variables == {"style": {"tone": "concise"}}  # no maxWords: no deep merge


def test_resolved_values_share_nothing_with_the_manifest() -> None:
    manifest = agent(STYLE)
    before = manifest_hash(manifest)
    resolve_variables(manifest, None, source="x")["style"]["tone"] = "changed"
    assert manifest_hash(manifest) == before
    assert manifest.variables[0].value == {"tone": "direct", "maxWords": 180}


@pytest.mark.parametrize(("type_", "good", "bad"), [
    ("string", "x", 1),
    ("number", 1.5, True),
    ("number", 3, "3"),
    ("boolean", False, 0),
    ("object", {}, []),
    ("array", [1], {"a": 1}),
    ("json", [1], "text"),
    ("json", {"a": 1}, None),
])
def test_type_checks(type_: str, good: Any, bad: Any) -> None:
    manifest = agent({"key": "v", "type": type_})
    assert resolve_variables(manifest, {"v": good}, source="x") == {"v": good}
    error = rejected(manifest, {"v": bad})
    assert error.field == "variables.v"
    assert f"declared as {type_}" in error.reason


def test_type_mismatch_in_a_list_names_the_value() -> None:
    error = rejected(agent(STYLE), [VariableOverride(key="style", value="loud")], source="run.yaml")
    assert error.field == "variables[0].value"


def test_unknown_key() -> None:
    error = rejected(agent(STYLE), {"tone": "x"})
    assert error.field == "variables.tone"
    assert "unknown variable 'tone'" in error.reason and "declared: style" in error.reason


def test_keys_must_match_exactly() -> None:
    error = rejected(agent(STYLE), [VariableOverride(key="Style", value={})], source="run.yaml")
    assert error.field == "variables[0].key"
    assert "did you mean 'style'" in error.reason


def test_duplicates_differing_in_case() -> None:
    manifest = agent(STYLE, {"key": "Tone", "type": "string"})
    error = rejected(manifest, {"Tone": "a", "tone": "b"})
    assert error.field == "variables.tone" and "duplicate override" in error.reason
    error = rejected(manifest, [VariableOverride(key="style", value={}),
                                VariableOverride(key="STYLE", value={})], source="run.yaml")
    assert error.field == "variables[1].key"


def test_missing_required_override_without_a_default() -> None:
    error = rejected(agent(AUDIENCE, STYLE), {"style": {}})
    assert error.field == "variables.audience"
    assert "requiresOverride" in error.reason


def test_missing_required_override_even_with_a_default() -> None:
    manifest = agent({**AUDIENCE, "value": "everyone"})
    error = rejected(manifest, None, source="run.yaml")
    assert error.field == "variables.audience" and "default does not count" in error.reason
    assert resolve_variables(manifest, {"audience": "partners"}, source="x") == {
        "audience": "partners"}


def test_override_values_must_be_json() -> None:
    error = rejected(agent({"key": "v", "type": "array"}), {"v": [1, float("nan")]})
    assert error.field == "variables.v[1]"


def test_variables_json_option(tmp_path: Path) -> None:
    assert parse_variables_json('{"audience": "partners"}') == {"audience": "partners"}
    with pytest.raises(VariableError, match=r"^--variables: malformed JSON at line 1"):
        parse_variables_json("{audience}")
    with pytest.raises(VariableError, match="expected a JSON object"):
        parse_variables_json("[1]")
    path = tmp_path / "vars.json"
    path.write_text('{"style": {"tone": "flat"}}', encoding="utf-8")
    assert read_variables_option(f"@{path}") == ({"style": {"tone": "flat"}}, str(path))
    assert read_variables_option('{"a": 1}') == ({"a": 1}, "--variables")
    with pytest.raises(VariableError, match="cannot read the variables file"):
        read_variables_option(f"@{tmp_path / 'missing.json'}")


def test_a_yaml_variables_file_is_reported_as_yaml(tmp_path: Path) -> None:
    path = tmp_path / "vars.yaml"
    path.write_text("style:\n  tone: flat\n", encoding="utf-8")
    assert read_variables_option(str(path)) == ({"style": {"tone": "flat"}}, str(path))
    path.write_text("- 1\n", encoding="utf-8")
    with pytest.raises(VariableError) as refused:
        read_variables_option(f"@{path}")
    assert refused.value.source == str(path)
    assert "expected a YAML mapping of variable values" in str(refused.value)
    assert "JSON" not in str(refused.value)
    path.write_text("style: [unclosed\n", encoding="utf-8")
    with pytest.raises(VariableError) as malformed:
        read_variables_option(f"@{path}")
    assert "JSON" not in str(malformed.value)
