"""Every CLI error path an operator meets, as a table (docs/design.md section 9): the pinned
exit code, one line naming what and where (or one JSON object with `--format
json`), no traceback, and nothing created or removed on disk."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from agent_runtime.cli import main
from stores.records import RunRecord
from stores.sqlite import SqliteRunStore

REPO = Path(__file__).resolve().parents[2]
HELLO = REPO / "tests" / "fixtures" / "manifests" / "hello.agent.yaml"
STORE = ".agent-runtime/runs.sqlite"
ECHO = ["--model", "scripted/echo", "--events", "none"]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with a completed run `done`, a run `held` whose live owner (this
    process) holds its lease, a directory and a plain file."""
    root = tmp_path_factory.mktemp("errors")
    shutil.copy(HELLO, root / "hello.agent.yaml")
    (root / "a-directory").mkdir()
    (root / "a-file").write_text("not a store\n")
    previous = Path.cwd()
    os.chdir(root)
    try:
        assert main(["run", "hello.agent.yaml", *ECHO, "--run-id", "done"]) == 0
    finally:
        os.chdir(previous)
    with SqliteRunStore(root / STORE) as store:
        done = store.load_run("done")
        assert done is not None
        store.create_run(RunRecord(run_id="held", manifest_hash=done.manifest_hash,
                                   manifest=done.manifest))
        store.resume_run("held", owner=f"{socket.gethostname()}:{os.getpid()}",
                         now=store.load_run("held").created_at,  # type: ignore[union-attr]
                         lease_seconds=7 * 24 * 3600)
    return root


def _tree(root: Path) -> set[str]:
    return {str(path.relative_to(root)) for path in root.rglob("*")
            if not path.name.endswith(("-wal", "-shm"))}


# (command line, exit code, what the one line says: the thing and where it is)
CASES = [
    (["list", "--store", "missing.sqlite"], 3, '--store: no sqlite store at "missing.sqlite"'),
    (["inspect", "done", "--store-driver", "file"], 3,
     '--store-driver: no file store at "./.agent-runtime/runs"'),
    (["list", "--store", "a-directory"], 2,
     '--store: "a-directory" is a directory; a sqlite store is a file'),
    (["list", "--store-driver", "file", "--store", "a-file"], 2,
     '--store: "a-file" is a file; a file store is a directory'),
    (["inspect", "nope"], 3,
     'RUN_ID: no run with id "nope" in the sqlite store ./.agent-runtime/runs.sqlite'),
    (["inspect", "../done"], 2, 'RUN_ID: run id "../done" must not start with a dot'),
    (["resume", ""], 2, "RUN_ID: run id \"\" must not be empty"),
    (["run", "hello.agent.yaml", *ECHO, "--run-id", ""], 2,
     '--run-id: run id "" must not be empty'),
    (["run", "hello.agent.yaml", *ECHO, "--lease-seconds", "-1"], 2,
     "argument --lease-seconds: must be a number of seconds above 0"),
    (["run", "hello.agent.yaml", *ECHO, "--grace-seconds", "-1"], 2,
     "argument --grace-seconds: must be a number of seconds 0 or more"),
    (["list", "--limit", "0"], 2, "argument --limit: must be 1 or more"),
    (["list", "--store-driver", "dynamodb"], 2, "--store: the dynamodb driver needs --store"),
    (["cancel", "done"], 4, 'RUN_ID: run "done" is already completed'),
    (["approve", "done"], 4, 'RUN_ID: run "done" is completed, not waiting for an approval'),
    (["approve", "held"], 4, 'RUN_ID: run "held" is running, not waiting for an approval'),
    (["resume", "held"], 4, "lease held by"),
    (["resume", "held", "--allow-running-takeover"], 4, "takeover is allowed only after it"),
    (["inspect", "done", "--seq", "99"], 3, "--seq: run done has no checkpoint 99"),
    (["events", "missing.jsonl"], 3, "missing.jsonl: event log not found"),
]


@pytest.mark.parametrize("case", CASES, ids=[" ".join(c[0]) for c in CASES])
def test_error_path(prepared: Path, monkeypatch: pytest.MonkeyPatch,
                    capsys: pytest.CaptureFixture[str], case: tuple[list[str], int, str]
                    ) -> None:
    argv, code, says = case
    monkeypatch.chdir(prepared)
    monkeypatch.delenv("AGENT_RUNTIME_STORE", raising=False)
    before = _tree(prepared)
    assert main(argv) == code
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert line.startswith("error: ") and says in line, line
    assert captured.out == ""
    assert _tree(prepared) == before
    if "--format" in argv or argv[0] in ("validate", "events"):
        return
    # The same error with --format json: one JSON object on stderr.
    assert main([*argv, "--format", "json"]) == code
    (line,) = capsys.readouterr().err.splitlines()
    error = json.loads(line)["error"]
    assert says.split(": ", 1)[-1] in error["message"]
    assert error["code"] == {2: "invalid_input", 3: "not_found", 4: "conflict"}[code]
    assert _tree(prepared) == before


def test_a_bad_store_variable_names_it(prepared: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(prepared)
    monkeypatch.setenv("AGENT_RUNTIME_STORE", "postgres:db")
    assert main(["list"]) == 2
    assert "AGENT_RUNTIME_STORE: expected DRIVER:LOCATION" in capsys.readouterr().err
    monkeypatch.setenv("AGENT_RUNTIME_STORE", "sqlite:.agent-runtime/runs.sqlite")
    assert main(["inspect", "done"]) == 0


def test_the_store_of_the_config_in_the_current_directory(
        prepared: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AGENT_RUNTIME_STORE", raising=False)
    (tmp_path / "agent-runtime.config.yaml").write_text(
        f"version: '1.0'\nstore: 'sqlite:{prepared / STORE}'\n")
    assert main(["inspect", "done", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["run_id"] == "done"
    (tmp_path / "agent-runtime.config.yaml").write_text("version: '1.0'\nstore: 'sqlite'\n")
    assert main(["list"]) == 2
    assert "agent-runtime.config.yaml" in capsys.readouterr().err


def test_resume_of_a_completed_run_prints_its_result(prepared: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(prepared)
    monkeypatch.delenv("AGENT_RUNTIME_STORE", raising=False)
    assert main(["resume", "done", "--format", "json", "--events", "none"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["run_id"], result["status"], result["attempt"]) == ("done", "completed", 1)
    assert result["output"]


def test_the_file_driver_without_a_location_uses_its_own_default(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AGENT_RUNTIME_STORE", raising=False)
    shutil.copy(HELLO, tmp_path / "hello.agent.yaml")
    assert main(["run", "hello.agent.yaml", *ECHO, "--store-driver", "file"]) == 0
    assert (tmp_path / ".agent-runtime" / "runs").is_dir()
    assert not (tmp_path / STORE).exists()


def test_the_dynamodb_driver_without_botocore_says_what_to_install(tmp_path: Path) -> None:
    fake = tmp_path / "no-botocore" / "botocore"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'botocore'\", name='botocore')\n")
    env = dict(os.environ, PYTHONPATH=f"{fake.parent}{os.pathsep}{REPO}")
    env.pop("AGENT_RUNTIME_STORE", None)
    done = subprocess.run([sys.executable, "-m", "agent_runtime.cli", "list", "--store-driver",
                           "dynamodb", "--store", "runs-table"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "error: --store-driver: the dynamodb driver needs botocore, which is not installed: "
        "pip install 'agent-runtime-durable[aws]'"]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["no-botocore"]
