"""A YAML mapping key read as a boolean (or null, or a number), through the real
command: refused naming the file, the path of the key as written, and its line."""

from __future__ import annotations

import subprocess
from pathlib import Path

import cli_process

MANIFEST = """schemaVersion: '1.0'
id: switches
model: {provider: openai, model: gpt-5.6}
steps:
  - id: answer
    type: prompt
    prompt: Say whether the switch is on.
    outputSchema:
      type: object
      properties:
        on: {type: boolean}
"""


def _cli(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = cli_process.run_cli(workdir, *args)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def test_a_boolean_key_in_a_manifest_is_named_by_file_and_path(tmp_path: Path) -> None:
    (tmp_path / "switches.agent.yaml").write_text(MANIFEST)
    done = _cli(tmp_path, "validate", "switches.agent.yaml")
    assert done.returncode == 2
    assert done.stderr == (
        "error: switches.agent.yaml: steps[0].outputSchema.properties.on: YAML reads the key "
        "'on' (line 11, column 9) as a boolean (true), and mapping keys must be text: quote it "
        "('on':)\n")
    (tmp_path / "switches.agent.yaml").write_text(MANIFEST.replace(" on:", " 'on':"))
    assert _cli(tmp_path, "validate", "switches.agent.yaml").returncode == 0


def test_a_boolean_key_in_a_runtime_config_is_named_too(tmp_path: Path) -> None:
    (tmp_path / "host.yaml").write_text("version: '1.0'\nproviders:\n  yes: {driver: openai}\n")
    done = _cli(tmp_path, "config", "validate", "host.yaml")
    assert done.returncode == 2
    assert "error: host.yaml: providers.yes: YAML reads the key 'yes' (line 3, column 3) as " \
           "a boolean (true)" in done.stderr
