"""The runtimes `serve` builds per attempt (`ServeRuntimes`): the config and tools files
a run's options name are loaded once, not per attempt, and again when they change; the
model adapters are shared by the runs of one tenant; serve's own paths are taken once."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from agent_runtime.api.submission import agent_from_request
from agent_runtime.cli.serve_runtimes import ServeRuntimes
from agent_runtime.errors import ConfigError
from stores.memory import MemoryRunStore
from stores.records import RunRecord

TOOLS = '''
from pathlib import Path

from agent_runtime import tool

with open(Path(__file__).with_suffix(".imports"), "a") as imports:
    imports.write("imported\\n")


@tool
def lookup(order_id: str) -> dict:
    """Look an order up."""
    return {"order_id": order_id, "version": VERSION}
'''


def runtimes(tmp_path: Path, *, tools: Path, config: Path | None = None) -> ServeRuntimes:
    args = argparse.Namespace(model=None, config=None if config is None else str(config),
                              tools=[str(tools)], events="none", artifacts="none",
                              lease_seconds=30.0, stream=False, format="json")
    return ServeRuntimes(args, MemoryRunStore(), [])


def imports(tools: Path) -> int:
    marks = tools.with_suffix(".imports")
    return len(marks.read_text().splitlines()) if marks.exists() else 0


def test_a_tools_file_is_imported_once_for_every_attempt_and_again_when_it_changes(
        tmp_path: Path) -> None:
    tools = tmp_path / "tools.py"
    tools.write_text(TOOLS.replace("VERSION", "1"), encoding="utf-8")
    config = tmp_path / "runtime.config.yaml"
    config.write_text("version: '1.0'\n", encoding="utf-8")
    runtime_for = runtimes(tmp_path, tools=tools, config=config)
    built = [runtime_for(None) for _ in range(20)]
    assert imports(tools) == 1
    assert len({id(runtime) for runtime in built}) == 20  # a runtime per attempt
    assert all(runtime.tools.get("lookup") is built[0].tools.get("lookup")
               for runtime in built)
    tools.write_text(TOOLS.replace("VERSION", "22"), encoding="utf-8")  # another size
    changed = runtime_for(None)
    assert imports(tools) == 2
    assert changed.tools.get("lookup") is not built[0].tools.get("lookup")


def test_a_missing_config_is_refused_by_name_every_time(tmp_path: Path) -> None:
    tools = tmp_path / "tools.py"
    tools.write_text(TOOLS.replace("VERSION", "1"), encoding="utf-8")
    runtime_for = runtimes(tmp_path, tools=tools, config=tmp_path / "gone.yaml")
    for _ in range(2):
        with pytest.raises(ConfigError, match=r"gone\.yaml"):
            runtime_for(None)


def test_serves_paths_are_taken_once_at_start_and_a_later_chdir_moves_none(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "tools.py").write_text(TOOLS.replace("VERSION", "1"), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    args = argparse.Namespace(model=None, config=None, tools=["tools.py"], events="none",
                              artifacts="artifacts", lease_seconds=30.0, stream=False,
                              format="json")
    runtime_for = ServeRuntimes(args, MemoryRunStore(), [])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # as a tool may
    first, second = runtime_for(None), runtime_for(None)
    assert first.tools.get("lookup") is not None
    assert first.artifacts is second.artifacts  # one store, opened at start
    assert first.artifacts is not None
    assert first.artifacts.directory == tmp_path / "artifacts"  # type: ignore[attr-defined]
    assert not (elsewhere / "artifacts").exists()
    assert first.base_dir == second.base_dir == tmp_path  # a scripted model's paths


def test_a_tools_file_removed_after_start_is_refused_by_name(tmp_path: Path) -> None:
    tools = tmp_path / "tools.py"
    tools.write_text(TOOLS.replace("VERSION", "1"), encoding="utf-8")
    runtime_for = runtimes(tmp_path, tools=tools)
    runtime_for(None)
    tools.unlink()
    for _ in range(2):
        with pytest.raises(ConfigError, match=r"tools\.py: tools file not found"):
            runtime_for(None)


CONFIG = """version: '1.0'
providers:
  local:
    driver: openai-compatible
    baseURL: http://127.0.0.1:9/v1
"""
MANIFEST = """schemaVersion: '1.0'
id: hello
steps:
  - id: greet
    type: prompt
    prompt: hi
    model: {provider: local, model: test-model}
"""


def test_the_runs_of_one_tenant_share_model_adapters_and_other_tenants_never_do(
        tmp_path: Path) -> None:
    tools = tmp_path / "tools.py"
    tools.write_text(TOOLS.replace("VERSION", "1"), encoding="utf-8")
    config = tmp_path / "runtime.config.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    runtime_for = runtimes(tmp_path, tools=tools, config=config)

    def run_of(tenant: str) -> RunRecord:
        record, _ = runtime_for(None).new_run(manifest=agent_from_request(MANIFEST),
                                              tenant=tenant)
        return record

    alice, bob = run_of("alice"), run_of("bob")
    first, second = runtime_for(alice), runtime_for(run_of("alice"))
    assert first is not second  # a runtime per attempt, as before
    # One adapter (its clients and their connections) for every run of a tenant...
    assert first.adapter_for("local") is second.adapter_for("local")
    # ...never one another tenant's runs use: an adapter may remember what a
    # provider answered a run.
    assert runtime_for(bob).adapter_for("local") is not first.adapter_for("local")
    config.write_text(CONFIG + "# changed\n", encoding="utf-8")
    assert runtime_for(alice).adapter_for("local") is not first.adapter_for("local")
