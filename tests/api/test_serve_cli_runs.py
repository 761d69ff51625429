"""Runs the CLI starts belong to the tenant `local`, the one tenant of a `serve` with one
token: a `serve` on the same store shows them (and another tenant does not)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from serve_process import ECHO, FIXTURES, REPO, running_serve, write_tokens_file

pytestmark = pytest.mark.slow


def cli_run(workdir: Path, *flags: str, env: dict[str, str] | None = None) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-m", "agent_runtime.cli", "run", str(FIXTURES / "hello.agent.yaml"),
         "--model", "scripted/echo", "--store", str(workdir / "runs.sqlite"),
         "--events", "none", "--format", "json", *flags],
        cwd=workdir, capture_output=True, text=True, timeout=120, check=False,
        env=env or dict(os.environ, PYTHONPATH=str(REPO)))
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_a_cli_run_is_shown_by_a_serve_with_one_token_on_the_same_store(
        tmp_path: Path) -> None:
    mine = cli_run(tmp_path)["run_id"]
    theirs = cli_run(tmp_path, "--tenant", "team-b")["run_id"]
    with running_serve(tmp_path) as server, server.client() as http:
        listed = http.get("/runs").json()["runs"]
        assert [run["runId"] for run in listed] == [mine]
        assert listed[0]["tenant"] == "local"
        assert http.get(f"/runs/{theirs}").status_code == 404


def test_a_tenant_from_the_environment_and_a_bad_one_refused(tmp_path: Path) -> None:
    tokens = write_tokens_file(tmp_path / "tokens.yaml",
                               {"token-of-team-a-0123456789abcdefgh": "team-a"})
    env = dict(os.environ, PYTHONPATH=str(REPO), AGENT_RUNTIME_TENANT="team-a")
    run_id = cli_run(tmp_path, env=env)["run_id"]
    with running_serve(tmp_path, token=None, args=["--tokens", str(tokens)]) as server, \
            server.client("token-of-team-a-0123456789abcdefgh") as client:
        assert [run["runId"] for run in client.get("/runs").json()["runs"]] == [run_id]
    refused = subprocess.run(
        [sys.executable, "-m", "agent_runtime.cli", "run", str(FIXTURES / "hello.agent.yaml"),
         "--model", "scripted/echo", "--tenant", "two words"], cwd=tmp_path,
        capture_output=True, text=True, timeout=120, check=False,
        env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert refused.returncode == 2 and "is not a tenant name" in refused.stderr


def test_keyed_runs_of_serve_list_newest_first_with_a_cli_run(tmp_path: Path) -> None:
    first = cli_run(tmp_path)["run_id"]
    manifest = (FIXTURES / "hello.agent.yaml").read_text()
    with running_serve(tmp_path) as server, server.client() as http:
        keyed = []
        for key in ("order-1", "order-2"):
            created = http.post("/runs", json={"manifest": manifest, "options": ECHO},
                                headers={"Idempotency-Key": key})
            assert created.status_code == 201, created.text
            keyed.append(created.json()["run"]["runId"])
        listed = [run["runId"] for run in http.get("/runs").json()["runs"]]
        assert listed == [*keyed[::-1], first]
        repeat = http.post("/runs", json={"manifest": manifest, "options": ECHO},
                           headers={"Idempotency-Key": "order-1"})
        assert (repeat.status_code, repeat.json()["run"]["runId"]) == (200, keyed[0])
