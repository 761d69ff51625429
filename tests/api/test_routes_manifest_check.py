"""POST /manifests/validate: a manifest's problems (in `agent-runtime validate`'s words) and
its declared variables, without starting a run; what the console's start form is built from."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from routes_harness import Api, manifest_text

from agent_runtime.cli.options import load_manifest
from agent_runtime.errors import ManifestError

REPO = Path(__file__).resolve().parents[2]
BROKEN = "schemaVersion: '1.0'\nid: broken\nsteps:\n  - id: a\n    type: nonsense\n"
# Every agent manifest the project ships: the console's examples, the fixtures, examples/.
AGENT_MANIFESTS = sorted({*(REPO / "agent_runtime" / "console" / "examples").glob("*.agent.yaml"),
                          *(REPO / "tests" / "fixtures" / "manifests").glob("*.agent.yaml"),
                          *(REPO / "examples").glob("*.agent.yaml")})


def test_a_valid_manifest_answers_its_declared_variables(api: Api) -> None:
    reply = api.post("/manifests/validate", {"manifest": manifest_text("hello.agent.yaml")})
    assert reply.status == 200, reply
    assert reply.body == {"valid": True, "problems": [], "variables": [
        {"key": "topic", "type": "string", "required": False, "hasDefault": True,
         "default": "durable agent checkpoints", "description": "Subject to explain."}]}
    assert api.store.list_runs(limit=10).runs == []  # checked, not started


def test_a_manifest_as_an_object_is_read_as_post_runs_reads_it(api: Api) -> None:
    manifest = yaml.safe_load(manifest_text("release-brief.agent.yaml"))
    reply = api.post("/manifests/validate", {"manifest": manifest})
    assert reply.status == 200 and reply.body["valid"] is True
    declared = [item["key"] for item in manifest["variables"]]
    assert [item["key"] for item in reply.body["variables"]] == declared
    required = {item["key"] for item in manifest["variables"] if item.get("requiresOverride")}
    assert {item["key"] for item in reply.body["variables"] if item["required"]} == required


def test_a_problem_reads_as_the_cli_and_post_runs_word_it(api: Api, tmp_path: Path) -> None:
    reply = api.post("/manifests/validate", {"manifest": BROKEN})
    assert reply.status == 200
    assert reply.body["valid"] is False and reply.body["variables"] == []
    (problem,) = reply.body["problems"]
    assert problem["severity"] == "error" and problem["field"].startswith("steps[0]")

    refused = api.post("/runs", {"manifest": BROKEN})
    assert refused.status == 422
    assert refused.problem["detail"] == problem["message"]

    file = tmp_path / "broken.agent.yaml"
    file.write_text(BROKEN, encoding="utf-8")
    with pytest.raises(ManifestError) as cli:
        load_manifest(str(file))
    assert cli.value.field == problem["field"]
    assert problem["message"] == f"manifest: {cli.value.field}: {cli.value.reason}"


@pytest.mark.parametrize(("manifest", "field"), [
    ("just text", None),
    ("agent: {ref: ./x.agent.yaml}\n", "agent.ref"),
    ("schemaVersion: '1.0'\nid: a\nid: b\nsteps: []\n", None),
])
def test_what_post_runs_refuses_is_a_problem_not_an_error_status(
        api: Api, manifest: str, field: str | None) -> None:
    reply = api.post("/manifests/validate", {"manifest": manifest})
    assert reply.status == 200, reply
    assert reply.body["valid"] is False
    (problem,) = reply.body["problems"]
    assert problem["field"] == field and problem["message"].startswith("manifest:")
    assert api.post("/runs", {"manifest": manifest}).status == 422


def test_an_undeclared_template_name_is_a_warning_as_validate_says(api: Api) -> None:
    manifest = ("schemaVersion: '1.0'\nid: w\nsteps:\n  - id: a\n    type: prompt\n"
                "    prompt: Hello {{ nobody }}\n")
    reply = api.post("/manifests/validate", {"manifest": manifest})
    assert reply.status == 200 and reply.body["valid"] is True
    (warning,) = reply.body["problems"]
    assert warning["severity"] == "warning" and warning["field"] == "steps[0].prompt"
    assert "nobody" in warning["message"]


def test_the_route_needs_credentials_and_a_manifest(api: Api) -> None:
    assert api.post("/manifests/validate", {"manifest": "x: 1"}, token=None).status == 401
    assert api.post("/manifests/validate", {}).status == 422
    assert api.post("/manifests/validate", {"manifest": 5}).status == 422


def test_the_hosts_input_limits_apply(api: Api) -> None:
    deep = "schemaVersion: '1.0'\nid: deep\nsteps: []\nmetadata: " + "[" * 200 + "]" * 200
    reply = api.post("/manifests/validate", {"manifest": deep})
    assert reply.status == 200 and reply.body["valid"] is False
    assert "deep" in reply.body["problems"][0]["message"] or \
        "depth" in reply.body["problems"][0]["message"]


@pytest.mark.parametrize("path", AGENT_MANIFESTS, ids=lambda path: path.name)
def test_every_shipped_manifest_is_valid_with_the_variables_it_declares(
        api: Api, path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    reply = api.post("/manifests/validate", {"manifest": text})
    assert reply.status == 200 and reply.body["valid"] is True, reply.body
    declared = yaml.safe_load(text).get("variables") or []
    assert [(item["key"], item["type"]) for item in reply.body["variables"]] == \
        [(item["key"], item["type"]) for item in declared]
    for item, wanted in zip(reply.body["variables"], declared, strict=True):
        assert item["hasDefault"] == ("value" in wanted)
        if "value" in wanted:
            assert item["default"] == wanted["value"]
