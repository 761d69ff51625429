"""Ports of packages/store-local/src/manifest-source.file.test.ts (loading manifest files) and
event-sinks.test.ts (the JSONL event sink)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agent_runtime.errors import ManifestError
from agent_runtime.events import EventEmitter, JsonlEventSink, read_events
from agent_runtime.run_manifest import load_agent_manifest

MANIFEST = {"schemaVersion": "1.0", "name": "JSON agent",
            "steps": [{"id": "draft", "type": "prompt", "prompt": "Write a draft"}]}


def test_loads_and_validates_json_manifests(tmp_path: Path) -> None:
    """manifest-source.file.test.ts: "loads and validates JSON manifests"."""
    (tmp_path / "nested").mkdir()
    (tmp_path / "nested" / "agent.json").write_text(json.dumps(MANIFEST))
    loaded = load_agent_manifest(tmp_path / "nested" / "agent.json")
    assert loaded.model_dump(mode="json", by_alias=True, exclude_unset=True) == MANIFEST


def test_loads_and_validates_yaml_manifests(tmp_path: Path) -> None:
    """manifest-source.file.test.ts: "loads and validates YAML manifests"."""
    (tmp_path / "agent.yaml").write_text('schemaVersion: "1.0"\nname: YAML agent\nsteps:\n'
                                         "  - id: draft\n    type: prompt\n"
                                         "    prompt: Write a draft\n")
    loaded = load_agent_manifest(tmp_path / "agent.yaml")
    assert (loaded.name, loaded.steps[0].id, loaded.steps[0].type) == ("YAML agent", "draft",
                                                                       "prompt")


def test_returns_contract_validation_errors_for_malformed_manifests(tmp_path: Path) -> None:
    """manifest-source.file.test.ts: "returns contract validation errors for malformed
    manifests"."""
    (tmp_path / "bad.json").write_text(json.dumps({"schemaVersion": "0", "steps": []}))
    with pytest.raises(ManifestError) as raised:
        load_agent_manifest(tmp_path / "bad.json")
    assert (raised.value.source, raised.value.field) == (str(tmp_path / "bad.json"),
                                                         "schemaVersion")


def test_writes_jsonl_emissions_in_invocation_order(tmp_path: Path) -> None:
    """event-sinks.test.ts: "writes concurrent JSONL emissions in invocation order"."""
    path = tmp_path / "nested" / "events.jsonl"
    sink = JsonlEventSink(path)
    emitter = EventEmitter([sink], run_id="run-1", attempt=1,
                           now=lambda: datetime(2026, 7, 22, tzinfo=UTC))
    emitted = [emitter.emit("step.started", step_id=f"s{index}") for index in range(3)]
    sink.close()
    assert path.read_text().endswith("\n")
    assert [event.to_json() for event in read_events(path)] == [e.to_json() for e in emitted]
