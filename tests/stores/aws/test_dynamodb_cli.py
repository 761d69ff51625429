"""`agent-runtime ... --store-driver dynamodb` in a child process, against moto's server.

The endpoint reaches the child two ways, both documented in
`stores.dynamodb.location`: the `endpoint_url=` option of the store location,
and AWS_ENDPOINT_URL, which boto3 reads itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aws_template import AwsResources
from conftest import FAKE_AWS

REPO = Path(__file__).resolve().parents[3]
MANIFESTS = REPO / "tests" / "fixtures" / "manifests"


def cli(*args: str, cwd: Path, endpoint: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {name: value for name, value in os.environ.items() if not name.startswith("AWS_")}
    env |= FAKE_AWS | {"PYTHONPATH": str(REPO)}
    if endpoint is not None:
        env["AWS_ENDPOINT_URL"] = endpoint
    return subprocess.run([sys.executable, "-m", "agent_runtime.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def result(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert "Traceback" not in done.stderr, done.stderr
    parsed: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return parsed


@pytest.mark.slow
def test_run_approve_resume_inspect_and_list_on_the_dynamodb_store(
        aws_server: AwsResources, moto_server: str, tmp_path: Path) -> None:
    location = f"{aws_server.table}?bucket={aws_server.bucket}&kms_key={aws_server.key_arn}"
    explicit = ["--store-driver", "dynamodb", "--store", f"{location}&endpoint_url={moto_server}"]
    from_env = ["--store-driver", "dynamodb", "--store", location]
    common = ["--model", "scripted/echo", "--events", "none", "--artifacts", "none",
              "--format", "json"]

    done = cli("run", str(MANIFESTS / "hello.agent.yaml"), *common, *explicit, cwd=tmp_path)
    hello = result(done)
    assert (done.returncode, hello["status"]) == (0, "completed"), done.stderr
    assert hello["output"]

    done = cli("run", str(MANIFESTS / "approval.agent.yaml"), *common, *explicit, cwd=tmp_path)
    suspended = result(done)
    assert (done.returncode, suspended["status"]) == (10, "suspended"), done.stderr
    run_id = suspended["run_id"]
    approved = cli("approve", run_id, *from_env, cwd=tmp_path, endpoint=moto_server)
    assert approved.returncode == 0, approved.stderr
    # --here: executed on this machine (without it, the stack is asked to resume it).
    done = cli("resume", run_id, "--here", "--format", "json", "--events", "none", *from_env,
               cwd=tmp_path, endpoint=moto_server)
    resumed = result(done)
    assert (done.returncode, resumed["status"], resumed["attempt"]) == (0, "completed", 2)

    inspect = cli("inspect", run_id, "--checkpoints", *explicit, cwd=tmp_path)
    assert inspect.returncode == 0, inspect.stderr
    assert "completed" in inspect.stdout and "checkpoints" in inspect.stdout
    listing = cli("list", "--status", "completed", *from_env, cwd=tmp_path, endpoint=moto_server)
    assert listing.returncode == 0, listing.stderr
    assert run_id in listing.stdout and hello["run_id"] in listing.stdout
    # Everything went to the table: nothing was written beside the manifests.
    assert not (tmp_path / ".agent-runtime" / "runs.sqlite").exists()


def test_a_bad_dynamodb_location_is_invalid_input(tmp_path: Path) -> None:
    done = cli("list", "--store-driver", "dynamodb", "--store", "runs?bucket=b&colour=blue",
               cwd=tmp_path)
    assert done.returncode == 2
    assert "colour" in done.stderr and "Traceback" not in done.stderr


def test_open_store_reads_every_option_of_the_location() -> None:
    from stores import open_store
    from stores.dynamodb.store import DynamoDbRunStore

    store = open_store("dynamodb", "dynamodb://runs-table?bucket=blob-bucket&kms_key=alias/k"
                       "&prefix=cp/&region=eu-west-1&endpoint_url=http://127.0.0.1:9&"
                       "inline_limit=1000&retention_days=0")
    assert isinstance(store, DynamoDbRunStore)
    assert (store.table_name, store.retention) == ("runs-table", None)
    assert store.client.meta.region_name == "eu-west-1"
    assert store.client.meta.endpoint_url == "http://127.0.0.1:9"
    assert store.blobs is not None
    assert (store.blobs.bucket, store.blobs.kms_key_id, store.blobs.prefix) == (
        "blob-bucket", "alias/k", "cp/")
    assert store.blobs.client.meta.endpoint_url == "http://127.0.0.1:9"
    plain = open_store("dynamodb", "runs-table")
    assert isinstance(plain, DynamoDbRunStore) and plain.blobs is None
    assert plain.retention is not None and plain.retention.days == 90
    for bad in ("", "runs?bucket=b", "runs?kms_key=k", "runs?inline_limit=lots", "a/b"):
        with pytest.raises(ValueError):
            open_store("dynamodb", bad)
