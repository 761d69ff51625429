"""Which runtime config a command reads when `--config` names none, through the real
command: `agent-runtime.config.yaml`, `.yml` or `.json` beside the manifest, else
in the current directory (the reference's names and order), and the file used
is named."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import cli_process

# A manifest that runs only where a config defines its model profile `fast`.
PROFILE_MANIFEST = """schemaVersion: '1.0'
id: needs-a-profile
model: {ref: fast}
steps:
  - {id: answer, type: prompt, prompt: Answer briefly., includeInFinalOutput: true}
"""
FAST_IS_ECHO = "version: '1.0'\nmodels:\n  fast: {provider: scripted, model: echo}\n"
FAST_IS_ECHO_JSON = json.dumps({"version": "1.0",
                                "models": {"fast": {"provider": "scripted", "model": "echo"}}})


def _env(workdir: Path) -> dict[str, str]:
    env = cli_process.cli_env(workdir)
    env.pop("AGENT_RUNTIME_STORE", None)  # the store is chosen by the test, not the caller
    return env


def _cli(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = cli_process.run_cli(workdir, *args, env=_env(workdir))
    assert "Traceback" not in done.stderr, done.stderr
    return done


def _project(tmp_path: Path) -> tuple[Path, Path]:
    """(the current directory, the manifest's directory elsewhere) with the manifest."""
    here, project = tmp_path / "here", tmp_path / "project"
    here.mkdir()
    project.mkdir()
    (project / "agent.yaml").write_text(PROFILE_MANIFEST)
    return here, project


def test_a_config_beside_the_manifest_is_found_and_named(tmp_path: Path) -> None:
    here, project = _project(tmp_path)
    manifest = str(project / "agent.yaml")
    refused = _cli(here, "run", manifest, "--events", "none")
    assert refused.returncode == 2  # no config anywhere: the profile is unknown
    assert "model profile 'fast' is not defined" in refused.stderr

    (project / "agent-runtime.config.yml").write_text(FAST_IS_ECHO)
    done = _cli(here, "run", manifest, "--events", "none")
    assert done.returncode == 0, done.stderr
    assert "[echo] Answer briefly." in done.stdout
    assert f"runtime config: {project / 'agent-runtime.config.yml'} (found beside the " \
           "manifest)" in done.stderr

    checked = _cli(here, "validate", manifest, "--format", "json")
    assert checked.returncode == 0, checked.stderr
    assert json.loads(checked.stdout)["config"] == {
        "file": str(project / "agent-runtime.config.yml"), "found": "beside the manifest",
        "passed_over": [], "host_checked": False}
    # The run remembers the file it read: `inspect` shows it, `resume` reuses it.
    listed = _cli(here, "list", "--format", "json")
    run_id = json.loads(listed.stdout)["runs"][0]["run_id"]
    shown = json.loads(_cli(here, "inspect", run_id, "--format", "json").stdout)
    assert shown["options"]["config"] == str(project / "agent-runtime.config.yml")


def test_json_is_accepted_and_yaml_comes_first_at_one_level(tmp_path: Path) -> None:
    here, project = _project(tmp_path)
    (project / "agent-runtime.config.json").write_text(FAST_IS_ECHO_JSON)
    done = _cli(here, "run", str(project / "agent.yaml"), "--events", "none")
    assert done.returncode == 0, done.stderr

    # Two files at one level: `.yaml`, then `.yml`, then `.json`, as the
    # reference reads them; the one passed over is named, never read.
    (project / "agent-runtime.config.yaml").write_text("version: '1.0'\n")
    checked = _cli(here, "validate", str(project / "agent.yaml"))
    assert checked.returncode == 0, checked.stderr
    assert f"runtime config: {project / 'agent-runtime.config.yaml'} (found beside the " \
           "manifest; not read: agent-runtime.config.json)" in checked.stdout
    refused = _cli(here, "run", str(project / "agent.yaml"), "--events", "none")
    assert refused.returncode == 2  # the `.yaml` file wins, and it has no profile `fast`
    assert "model profile 'fast' is not defined" in refused.stderr


def test_beside_the_manifest_comes_before_the_current_directory(tmp_path: Path) -> None:
    here, project = _project(tmp_path)
    (here / "agent-runtime.config.yaml").write_text(FAST_IS_ECHO)
    done = _cli(here, "run", str(project / "agent.yaml"), "--events", "none")
    assert done.returncode == 0, done.stderr  # nothing beside it: the current directory's
    assert f"runtime config: {here / 'agent-runtime.config.yaml'} (found in the current " \
           "directory)" in done.stderr

    (project / "agent-runtime.config.yaml").write_text("version: '1.0'\n")
    refused = _cli(here, "run", str(project / "agent.yaml"), "--events", "none")
    assert refused.returncode == 2  # the file beside the manifest is read, not this one


def test_an_explicit_config_wins_and_is_not_announced(tmp_path: Path) -> None:
    here, project = _project(tmp_path)
    (project / "agent-runtime.config.yaml").write_text("version: '1.0'\n")
    (here / "mine.yaml").write_text(FAST_IS_ECHO)
    done = _cli(here, "run", str(project / "agent.yaml"), "--config", "mine.yaml",
                "--events", "none")
    assert done.returncode == 0, done.stderr
    assert "runtime config:" not in done.stderr
    checked = json.loads(_cli(here, "validate", str(project / "agent.yaml"), "--config",
                              "mine.yaml", "--format", "json").stdout)
    assert checked["config"] == {"file": str(here / "mine.yaml"), "found": "--config",
                                 "passed_over": [], "host_checked": True}


def test_the_store_of_a_config_beside_the_manifest(tmp_path: Path) -> None:
    here, project = _project(tmp_path)
    (project / "agent-runtime.config.yaml").write_text(
        FAST_IS_ECHO + f"store: 'sqlite:{tmp_path / 'beside.sqlite'}'\n")
    (project / "ask.agent.yaml").write_text(
        "schemaVersion: '1.0'\nmodel: {ref: fast}\nsteps:\n"
        "  - {id: ask, type: approval, prompt: Go?}\n")
    done = _cli(here, "run", str(project / "ask.agent.yaml"), "--events", "none",
                "--run-id", "ask")
    assert done.returncode == 10, done.stderr
    assert (tmp_path / "beside.sqlite").is_file()
    assert not (here / ".agent-runtime" / "runs.sqlite").exists()
    # From the current directory the next command would not find that file: the
    # hint names the store.
    assert f"agent-runtime approve ask --resume --store-driver sqlite --store " \
           f"{tmp_path / 'beside.sqlite'}" in done.stdout


def test_config_validate_finds_the_current_directorys_file(tmp_path: Path) -> None:
    (tmp_path / "agent-runtime.config.json").write_text(FAST_IS_ECHO_JSON)
    done = _cli(tmp_path, "config", "validate", "--format", "json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["file"] == "agent-runtime.config.json"
    os.remove(tmp_path / "agent-runtime.config.json")
    missing = _cli(tmp_path, "config", "validate")
    assert missing.returncode == 3
    assert "no agent-runtime.config.yaml, agent-runtime.config.yml, agent-runtime.config.json " \
           "in the current directory" in missing.stderr
