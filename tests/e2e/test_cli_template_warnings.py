"""`validate` names a template or condition reference the manifest never declares (a
misspelled `{{ outlin }}` renders as empty text): a warning, an error with --strict."""

from __future__ import annotations

import json
from pathlib import Path

import cli_process

MANIFEST = """schemaVersion: '1.0'
id: typo
variables:
  - {key: outline, type: string, value: a plan}
steps:
  - {id: draft, type: prompt, prompt: "Write {{ outlin }}.", when: "outline != null"}
"""


def test_a_misspelled_variable_is_a_warning_by_field_and_an_error_with_strict(
        tmp_path: Path) -> None:
    (tmp_path / "typo.agent.yaml").write_text(MANIFEST)
    warned = cli_process.run_cli(tmp_path, "validate", "typo.agent.yaml")
    assert warned.returncode == 0, warned.stderr
    assert warned.stdout.startswith("ok: typo.agent.yaml")
    assert "warning: typo.agent.yaml: steps[0].prompt: 'outlin' is not a declared variable" \
        in warned.stderr

    summary = json.loads(cli_process.run_cli(tmp_path, "validate", "typo.agent.yaml",
                                             "--format", "json").stdout)
    assert [warning["field"] for warning in summary["warnings"]] == ["steps[0].prompt"]

    strict = cli_process.run_cli(tmp_path, "validate", "typo.agent.yaml", "--strict",
                                 "--format", "json")
    assert strict.returncode == 2
    error = json.loads(strict.stderr)["error"]
    assert error["field"] == "steps[0].prompt" and "--strict refuses it" in error["message"]

    (tmp_path / "typo.agent.yaml").write_text(MANIFEST.replace("outlin ", "outline "))
    clean = cli_process.run_cli(tmp_path, "validate", "typo.agent.yaml", "--strict")
    assert clean.returncode == 0 and "warning" not in clean.stderr
