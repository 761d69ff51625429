"""Encryption at rest in the local stores (issue 16, acceptance 5).

With `AGENT_RUNTIME_STORE_KEY` set, a run's variables, prompts, model outputs
and tool results are nowhere in the raw bytes of the SQLite file or the file
store's directory, the run still resumes and completes, and reading it
without the key or with another one is a clear error naming the variable.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path

import pytest
import yaml

from agent_runtime.cli import main
from stores import codecs, open_store
from stores.codecs import KEY_VARIABLE, StoreKeyError


def canary(tag: str) -> str:
    return tag + hashlib.sha256(tag.encode()).hexdigest()[:24]


VARIABLE, PROMPT, OUTPUT, TOOL_RESULT, ARGUMENT = (
    canary("canaryvar"), canary("canaryprompt"), canary("canaryout"), canary("canarytool"),
    canary("canaryarg"))
CANARIES = (VARIABLE, PROMPT, OUTPUT, TOOL_RESULT, ARGUMENT)
AGENT = {
    "schemaVersion": "1.0", "id": "secret-work",
    "variables": [{"key": "topic", "type": "string", "value": "default"}],
    "steps": [
        {"id": "ask", "type": "prompt", "prompt": f"{PROMPT} {{{{ topic }}}}",
         "tools": ["lookup"], "includeInFinalOutput": True},
        {"id": "confirm", "type": "approval", "prompt": "Publish?"},
    ],
}
SCRIPT = {"byStep": {"ask": [
    {"toolCalls": [{"name": "lookup", "id": "call-1", "arguments": {"query": ARGUMENT}}]},
    {"text": OUTPUT}]}}
TOOLS = f'''
from agent_runtime import tool


@tool
def lookup(query: str) -> str:
    """Look something up."""
    return "{TOOL_RESULT} for " + query
'''


def new_key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "agent.yaml").write_text(yaml.safe_dump(AGENT))
    (tmp_path / "script.yaml").write_text(yaml.safe_dump(SCRIPT))
    (tmp_path / "tools.py").write_text(TOOLS)
    (tmp_path / "variables.json").write_text(json.dumps({"topic": VARIABLE}))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def store_flags(driver: str) -> list[str]:
    return ["--store-driver", driver, "--store", "runs.sqlite" if driver == "sqlite" else "runs"]


def raw_bytes(workdir: Path, driver: str) -> dict[str, bytes]:
    """Every file the store wrote (the SQLite file with its journal, or the directory)."""
    if driver == "sqlite":
        files = [path for path in workdir.iterdir() if path.name.startswith("runs.sqlite")]
    else:
        files = [path for path in (workdir / "runs").rglob("*") if path.is_file()]
    return {str(path): path.read_bytes() for path in files}


def leaked(files: dict[str, bytes]) -> list[tuple[str, str]]:
    return [(name, text[:14]) for name, data in files.items() for text in CANARIES
            if text.encode() in data]


@pytest.mark.parametrize("driver", ["sqlite", "file"])
def test_no_canary_reaches_the_disk_and_the_run_resumes(
        workdir: Path, driver: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    flags = ["--model", "scripted/script.yaml", "--tools", "tools.py", "--events", "none",
             "--artifacts", "none", *store_flags(driver)]
    # Without a key the canaries are on disk: what the test stands on.
    assert main(["run", "agent.yaml", "--run-id", "plain", "--variables", "@variables.json",
                 *flags]) == 10
    assert leaked(raw_bytes(workdir, driver))
    main(["cancel", "plain", *store_flags(driver)])
    assert main(["gc", "--older-than", "0s", "--artifacts", "none",
                 *store_flags(driver)]) == 0
    capsys.readouterr()

    key = new_key()
    monkeypatch.setenv(KEY_VARIABLE, key)
    assert main(["run", "agent.yaml", "--run-id", "sealed", "--variables", "@variables.json",
                 *flags]) == 10
    assert main(["approve", "sealed", "--resume", *flags]) == 0
    out = capsys.readouterr().out
    assert OUTPUT in out  # the run completed with the model's answer
    files = raw_bytes(workdir, driver)
    assert files and leaked(files) == []
    with open_store(driver, workdir / ("runs.sqlite" if driver == "sqlite" else "runs")) as store:
        run = store.load_run("sealed")
        assert run is not None and run.variables == {"topic": VARIABLE}
        effects = store.list_effects("sealed")
        assert effects and TOOL_RESULT in json.dumps([e.model_dump(mode="json")
                                                      for e in effects])

    # Without the key, or with another, reading is a clear error, never garbage.
    for setting in (None, new_key()):
        if setting is None:
            monkeypatch.delenv(KEY_VARIABLE)
        else:
            monkeypatch.setenv(KEY_VARIABLE, setting)
        assert main(["inspect", "sealed", *store_flags(driver)]) == 1
        err = capsys.readouterr().err
        assert KEY_VARIABLE in err, err
        assert VARIABLE not in err


def test_a_malformed_key_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    for setting, message in (("not base64!", "not base64"),
                             (base64.b64encode(b"short").decode(), "5-byte key")):
        monkeypatch.setenv(KEY_VARIABLE, setting)
        with pytest.raises(StoreKeyError, match=message):
            codecs.seal_text("{}")


def test_a_kms_data_key_seals_and_opens(monkeypatch: pytest.MonkeyPatch) -> None:
    from moto import mock_aws

    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        import boto3

        kms = boto3.client("kms")
        key_id = kms.create_key()["KeyMetadata"]["KeyId"]
        blob = kms.generate_data_key(KeyId=key_id, KeySpec="AES_256")["CiphertextBlob"]
        monkeypatch.setenv(KEY_VARIABLE, "kms:" + base64.b64encode(blob).decode())
        sealed = codecs.seal_text('{"secret": 1}')
        assert sealed.startswith("aesgcm1:") and "secret" not in sealed
        assert codecs.open_text(sealed, "a record") == '{"secret": 1}'
