"""Hostile input to the `agent-runtime` command: every case ends in one error line and a
pinned exit code (2 invalid, 3 not found, 4 conflict, 1 store error), never a traceback,
and a refused command leaves nothing on disk."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agent_runtime.cli import main

REPO = Path(__file__).resolve().parents[2]
HELLO = REPO / "tests" / "fixtures" / "manifests" / "hello.agent.yaml"
ECHO = ["--model", "scripted/echo"]


@pytest.fixture
def cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    shutil.copy(HELLO, tmp_path / "hello.agent.yaml")
    return tmp_path


def refused(capsys: pytest.CaptureFixture[str], *argv: str, code: int = 2) -> str:
    """Run the command in-process; it must exit `code` with exactly one error line."""
    assert main(list(argv)) == code
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    assert len(lines[0]) <= 410 and lines[0].isprintable()
    return lines[0]


def created(cwd: Path) -> set[str]:
    """What the commands left in the working directory beyond the test's own files."""
    return {path.name for path in cwd.iterdir()} - {"hello.agent.yaml", "inputs"}


def inputs(cwd: Path) -> Path:
    folder = cwd / "inputs"
    folder.mkdir(exist_ok=True)
    return folder


# -- manifests ------------------------------------------------------------------------


@pytest.mark.parametrize("case", [
    ("schemaVersion: '1.0'\nsteps: []\n? [a, b]\n: c\n", "keys.agent.yaml",
     "a mapping key must be a plain value"),
    ("schemaVersion: '1.0'\nsteps: []\nid: \"\\ud800\"\n", "surrogate.agent.yaml", "Unicode"),
    ('{"schemaVersion": "1.0", "steps": [], "id": "\\ud800"}', "surrogate.agent.json",
     "id: contains a lone surrogate"),
    ("schemaVersion: '1.0'\nsteps: []\nmetadata: " + "[" * 100 + "]" * 100 + "\n",
     "deep.agent.yaml", "nested deeper than 64 levels"),
    ("schemaVersion: '" + "x" * 700_000 + "'\nsteps: []\n", "long.agent.yaml",
     'schemaVersion: unsupported schema version "xxx'),
    ("schemaVersion: '1.0'\nsteps: [{id: a, type: '" + "t" * 700_000 + "'}]\n",
     "type.agent.yaml", "steps[0].type: unknown step type"),
    ("schemaVersion: '1.0'\nagent: {ref: " + "a" * 5000 + "}\n", "long.run.yaml",
     "agent.ref: cannot read the agent manifest: File name too long"),
    ("schemaVersion: '1.0'\nsteps:\n  - {id: a, type: prompt, prompt: hi, when: '"
     + "1 + " * 5000 + "1'}\n", "cond.agent.yaml", "longer than the limit of 16,384"),
])
@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_hostile_manifest_is_one_line_exit_2(
        cwd: Path, capsys: pytest.CaptureFixture[str], case: tuple[str, str, str],
        command: str) -> None:
    text, name, reason = case
    path = inputs(cwd) / name
    path.write_text(text)
    line = refused(capsys, command, str(path), *(ECHO if command == "run" else []))
    assert str(path) in line and reason in line
    assert created(cwd) == set()


def test_a_manifest_too_big_or_not_a_file(cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    big = inputs(cwd) / "big.agent.yaml"
    with big.open("wb") as file:
        file.truncate(50 * 1024 * 1024)
    for path in ("/dev/zero", str(big)):
        assert refused(capsys, "validate", path) == \
            f"error: {path}: the manifest is larger than the limit of 2 MiB"
    assert refused(capsys, "run", str(inputs(cwd)), *ECHO) == \
        f"error: {inputs(cwd)}: is a directory, expected a manifest"
    (inputs(cwd) / "latin1.agent.yaml").write_bytes(b"schemaVersion: '1.0'\nid: caf\xe9\n")
    assert "not UTF-8 text" in refused(capsys, "validate", "inputs/latin1.agent.yaml")
    assert refused(capsys, "run", "missing.agent.yaml", *ECHO, code=3) == \
        "error: missing.agent.yaml: cannot read the manifest: file not found"
    assert created(cwd) == set()


# -- variables and JSON flags ------------------------------------------------------------


DEEP_JSON = "[" * 5000 + "]" * 5000


@pytest.mark.parametrize(("variables", "reason"), [
    ('{"a": "\\ud800"}', "lone surrogate"),
    ('{"a": "x\udcff"}', "is not valid UTF-8 text"),  # undecodable bytes in argv
    ('{"a": ' + DEEP_JSON + "}", "nested too deeply"),
    ('{"a": ' + "[" * 70 + "]" * 70 + "}", "nested deeper than 64 levels"),
    ('{"audience": "x", "audience": "y"}', "duplicate key 'audience'"),
    ('{"audience": ' + "9" * 200 + "}", "more than 100 digits"),
    ('{"audience": "' + "x" * (1024 * 1024) + '"}', "larger than the limit of 1 MiB"),
    ("[1]", "expected a JSON object"),
])
def test_hostile_variables_are_one_line_exit_2(
        cwd: Path, capsys: pytest.CaptureFixture[str], variables: str, reason: str) -> None:
    line = refused(capsys, "run", "hello.agent.yaml", *ECHO, "--variables", variables)
    assert reason in line and "--variables" in line
    assert created(cwd) == set()


def test_variables_files(cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    latin1 = inputs(cwd) / "vars.json"
    latin1.write_bytes(b'{"a": "caf\xe9"}')
    assert "not UTF-8 text" in refused(capsys, "run", "hello.agent.yaml", *ECHO,
                                       "--variables", f"@{latin1}")
    twice = inputs(cwd) / "vars.yaml"
    twice.write_text("a: 1\na: 2\n")
    assert "duplicate key 'a'" in refused(capsys, "run", "hello.agent.yaml", *ECHO,
                                          "--variables", f"@{twice}")
    assert "is a directory" in refused(capsys, "run", "hello.agent.yaml", *ECHO,
                                       "--variables", f"@{inputs(cwd)}")
    assert "file not found" in refused(capsys, "run", "hello.agent.yaml", *ECHO,
                                       "--variables", "@nope.json", code=3)
    assert created(cwd) == set()


@pytest.mark.parametrize(("flags", "reason"), [
    (["approve", "r1", "--response", DEEP_JSON], "--response: nested too deeply"),
    (["approve", "r1", "--response", '{"a": 1, "a": 2}'], "--response: malformed JSON: dup"),
    (["effects", "resolve", "r1", "k", "--result", DEEP_JSON], "--result: nested too deeply"),
    (["effects", "resolve", "r1", "k", "--result", "[" * 80 + "]" * 80],
     "nested deeper than 64"),
])
def test_hostile_json_flags_are_refused_before_the_store_is_opened(
        cwd: Path, capsys: pytest.CaptureFixture[str], flags: list[str], reason: str) -> None:
    assert reason in refused(capsys, *flags)
    assert created(cwd) == set()


# -- flags, paths and the config -----------------------------------------------------------


@pytest.mark.parametrize("flags", [
    *(["run", "hello.agent.yaml", *ECHO, "--lease-seconds", v] for v in ("nan", "inf", "0", "-1")),
    *(["list", "--limit", v] for v in ("-1", "0", "x")),
    *(["reconcile", "--interval", v] for v in ("nan", "inf", "0", "-1")),
    ["reconcile", "--lease-seconds", "nan"],
    ["run", "hello.agent.yaml", *ECHO, "--max-total-tokens", "1" + "0" * 30],
    ["fork", "r1", "--seq", "0"],
    ["run", "hello.agent.yaml", "--colour"],
    ["nosuchcommand"],
])
def test_bad_flags_are_one_line_exit_2_and_create_nothing(
        cwd: Path, capsys: pytest.CaptureFixture[str], flags: list[str]) -> None:
    line = refused(capsys, *flags)
    assert "--help" in line
    assert created(cwd) == set()


@pytest.mark.parametrize(("flags", "reason"), [
    (["--store", "inputs"], '--store: "inputs" is a directory; a sqlite store is a file'),
    (["--store-driver", "file", "--store", "inputs/file"],
     '--store: "inputs/file" is a file; a file store is a directory'),
    (["--store", "inputs/file/runs.sqlite"], "a part of the path is a file"),
    (["--store", "/dev/null"], "is not a regular file"),
    (["--events", "inputs"], '--events: "inputs" is a directory, expected a file'),
    (["--artifacts", "inputs/file"], '--artifacts: "inputs/file" is a file, expected a directory'),
    (["--config", "inputs"], "inputs: is a directory, expected a runtime config"),
    (["--config", "inputs/latin1.yaml"], "not UTF-8 text"),
    (["--config", "/dev/zero"], "larger than the limit of 1 MiB"),
    (["--tools", "inputs"], '--tools: "inputs" is a directory, expected a file'),
])
def test_a_path_of_the_wrong_kind_is_refused_before_anything_is_created(
        cwd: Path, capsys: pytest.CaptureFixture[str], flags: list[str], reason: str) -> None:
    (inputs(cwd) / "file").write_text("")
    (inputs(cwd) / "latin1.yaml").write_bytes(b"version: '1.0'\n# caf\xe9\n")
    assert reason in refused(capsys, "run", "hello.agent.yaml", *ECHO, *flags)
    assert created(cwd) == set()


def test_a_config_with_bad_limits_is_refused(cwd: Path, capsys: pytest.CaptureFixture[str]
                                             ) -> None:
    config = inputs(cwd) / "runtime.yaml"
    config.write_text("version: '1.0'\nlimits: {maxDepht: 3}\n")
    assert "limits.maxDepht: unknown field" in refused(capsys, "validate", "hello.agent.yaml",
                                                       "--config", str(config))
    config.write_text("version: '1.0'\nlimits: {conditionLength: 300}\n")
    manifest = inputs(cwd) / "cond.agent.yaml"
    manifest.write_text("schemaVersion: '1.0'\nsteps:\n  - {id: a, type: prompt, prompt: hi, "
                        "when: '" + "1 + " * 100 + "1'}\n")
    assert main(["validate", str(manifest)]) == 0  # within the default limit
    assert "longer than the limit of 300" in refused(capsys, "run", str(manifest), *ECHO,
                                                     "--config", str(config))
    assert created(cwd) == set()


def test_undecodable_arguments_are_refused(cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert "FILE: " in refused(capsys, "validate", "caf\udce9.yaml")
    assert "RUN_ID: " in refused(capsys, "inspect", "run\udce9")
    assert "--by: " in refused(capsys, "approve", "r1", "--by", "\udce9")


def test_the_dynamodb_driver_without_a_region_names_aws_region(
        cwd: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(cwd / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(cwd / "no-credentials"))
    line = refused(capsys, "list", "--store-driver", "dynamodb", "--store", "runs")
    assert "no AWS region" in line and "AWS_REGION" in line


# -- event logs -----------------------------------------------------------------------------


GOOD_EVENT = json.dumps({"id": "e1", "run_id": "r1", "attempt": 1, "sequence": 1,
                         "timestamp": "2026-01-01T00:00:00+00:00", "type": "run.started"})


@pytest.mark.parametrize(("content", "reason"), [
    (b"not json\n", "line 2: not an event (Expecting value"),
    (b"[1, 2]\n", "line 2: not an event (not a JSON object)"),
    (b'{"id": "e2"}\n', "line 2: not an event (run_id is missing or not text)"),
    (GOOD_EVENT.replace('"sequence": 1', '"sequence": "1"').encode() + b"\n",
     "line 2: not an event (sequence is missing or not an integer)"),
    (GOOD_EVENT.replace("2026-01-01T00", "yesterday").encode() + b"\n",
     "line 2: not an event (Invalid isoformat string"),
    (b"\xff\xfe\n", "line 2: not an event (not UTF-8)"),
    (DEEP_JSON.encode() * 20 + b"\n", "line 2: not an event (nested too deeply)"),
])
def test_a_malformed_event_log_names_the_file_and_line(
        cwd: Path, capsys: pytest.CaptureFixture[str], content: bytes, reason: str) -> None:
    log = inputs(cwd) / "events.jsonl"
    log.write_bytes(GOOD_EVENT.encode() + b"\n" + content + GOOD_EVENT.encode() + b"\n")
    assert refused(capsys, "events", str(log)).startswith(f"error: {log}: {reason}")


def test_event_log_files_that_are_not_logs(cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert "event log not found" in refused(capsys, "events", "nope.jsonl", code=3)
    assert "is not a file" in refused(capsys, "events", str(inputs(cwd)))
    torn = inputs(cwd) / "torn.jsonl"
    torn.write_text(GOOD_EVENT + "\n" + GOOD_EVENT[:20])  # a writer killed mid-line
    assert main(["events", str(torn)]) == 0
    assert capsys.readouterr().out.count("run.started") == 1


# -- not found, conflict, store errors --------------------------------------------------------


@pytest.mark.parametrize("flags", [
    ["inspect", "r1"], ["list"], ["resume", "r1"], ["cancel", "r1"], ["effects", "r1"],
    ["approve", "r1"], ["fork", "r1"], ["list", "--store-driver", "file", "--store", "runs"],
])
def test_read_commands_never_create_a_store(cwd: Path, capsys: pytest.CaptureFixture[str],
                                            flags: list[str]) -> None:
    assert "no " in refused(capsys, *flags, code=3)
    assert created(cwd) == set()


def test_exit_codes_for_not_found_conflict_and_a_damaged_store(
        cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "hello.agent.yaml", *ECHO, "--run-id", "r1", "--events", "none"]) == 0
    capsys.readouterr()
    assert refused(capsys, "inspect", "r2", code=3) == \
        'error: RUN_ID: no run with id "r2" in the sqlite store ./.agent-runtime/runs.sqlite'
    assert refused(capsys, "run", "hello.agent.yaml", *ECHO, "--run-id", "r1", code=4) == \
        'error: --run-id: a run with id "r1" already exists'
    assert "already completed" in refused(capsys, "cancel", "r1", code=4)
    for run_id in ("../r1", "a/b", ".hidden", "x" * 201, "tab\there", " r1"):
        assert "RUN_ID: run id" in refused(capsys, "inspect", run_id)
    (inputs(cwd) / "damaged.sqlite").write_bytes(b"this is not a database, not at all" * 100)
    line = refused(capsys, "list", "--store", "inputs/damaged.sqlite", code=1)
    assert "inputs/damaged.sqlite" in line


def test_json_format_errors_are_one_json_object(cwd: Path, capsys: pytest.CaptureFixture[str]
                                                ) -> None:
    assert main(["validate", "nope.agent.yaml", "--format", "json"]) == 3
    (line,) = capsys.readouterr().err.splitlines()
    message = "nope.agent.yaml: cannot read the manifest: file not found"
    assert json.loads(line) == {"error": {"code": "not_found", "message": message}}
    bad = inputs(cwd) / "bad.agent.yaml"
    bad.write_text("schemaVersion: '1.0'\nsteps: [{id: a, type: prompt, prompt: 5}]\n")
    assert main(["run", str(bad), *ECHO, "--format", "json"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert json.loads(line)["error"]["field"] == "steps[0].prompt"


def test_user_values_appear_only_as_a_short_excerpt(cwd: Path, capsys: pytest.CaptureFixture[str]
                                                    ) -> None:
    key = "\x1b]0;pwned\x07" + "k" * 600_000
    line = refused(capsys, "run", "hello.agent.yaml", *ECHO, "--variables",
                   json.dumps({key: 1}))
    assert "pwned" not in line or "\\x1b]0;pwned\\x07" in line
    assert len(line) < 400 and "\x1b" not in line


# -- end to end, in a child process ---------------------------------------------------------


def agent_runtime(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "agent_runtime.cli", *args], cwd=cwd,
                          capture_output=True, text=True, env=env, timeout=120, check=False)


@pytest.mark.parametrize(("args", "code"), [
    (["validate", "/dev/zero"], 2),
    (["run", "hello.agent.yaml", *ECHO, "--lease-seconds", "nan"], 2),
    (["run", "hello.agent.yaml", *ECHO, "--variables", '{"a": ' + DEEP_JSON + "}"], 2),
    (["inspect", "r1"], 3),
    (["run", "missing.agent.yaml", *ECHO], 3),
])
def test_exit_codes_end_to_end(cwd: Path, args: list[str], code: int) -> None:
    done = agent_runtime(*args, cwd=cwd)
    assert done.returncode == code, done.stderr
    assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith("error: ")
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert created(cwd) == set()


def test_a_conflict_end_to_end(cwd: Path) -> None:
    assert agent_runtime("run", "hello.agent.yaml", *ECHO, "--run-id", "r1",
                         cwd=cwd).returncode == 0
    done = agent_runtime("run", "hello.agent.yaml", *ECHO, "--run-id", "r1", cwd=cwd)
    assert done.returncode == 4 and "already exists" in done.stderr
