"""What a real `serve` tells a tenant and writes to its log: nothing of the host's or another's.

* A webhook refusal names the host the manifest wrote and the rule it broke,
  never the internal address the name resolved to.
* The access log keeps a request's method and path, not its query string (a
  `?token=` pasted from a link).
* A run reads only its own artifacts (and its fork sources'), tested on the
  engine (tests/agent_runtime/test_artifact_access.py): here, another
  tenant's artifact uri fails the step naming the run it belongs to, and its
  bytes reach neither the model, the run, the events nor the log.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from serve_process import (
    Serve,
    approval_manifest,
    run_of,
    running_serve,
    start,
    wait_for_status,
    write_tokens_file,
)

from stores.artifacts import LocalArtifactStore

pytestmark = pytest.mark.slow

TOKEN_A = "disclosure-token-team-a-0123456789"
TOKEN_B = "disclosure-token-team-b-0123456789"
SECRET = b"team-a's unreleased figures: 4,2,1"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    workdir = tmp_path_factory.mktemp("serve-disclosure")
    tokens = write_tokens_file(workdir / "tokens.yaml", {TOKEN_A: "team-a", TOKEN_B: "team-b"})
    with running_serve(workdir, token=None, args=["--tokens", str(tokens)]) as serve:
        yield serve


@pytest.fixture
def team_a(server: Serve) -> Iterator[httpx.Client]:
    with server.client(TOKEN_A) as http:
        yield http


@pytest.fixture
def team_b(server: Serve) -> Iterator[httpx.Client]:
    with server.client(TOKEN_B) as http:
        yield http


def events_of(server: Serve, run_id: str) -> str:
    return json.dumps([event for event in server.events() if event.get("run_id") == run_id])


# -- webhooks -----------------------------------------------------------------------


def test_a_webhook_refusal_names_the_host_and_the_rule_not_the_address(
        server: Serve, team_b: httpx.Client) -> None:
    manifest = {"schemaVersion": "1.0", "id": "probe", "steps": [
        {"id": "call", "type": "webhook", "url": "http://localhost:9/internal", "retries": 0}]}
    run_id = start(team_b, manifest)["runId"]
    failed = wait_for_status(team_b, run_id, "failed")
    assert failed["error"]["type"] == "webhook_destination_refused"
    assert "webhook host 'localhost' resolves to a loopback address" in \
        failed["error"]["message"]
    told = json.dumps(failed) + events_of(server, run_id)
    assert "127.0.0.1" not in told and "::1" not in told


# -- the access log -----------------------------------------------------------------


def test_the_access_log_keeps_no_query_string(server: Serve, team_a: httpx.Client) -> None:
    secret = "q-secret-7f3a9c"
    assert team_a.get(f"/runs?status=completed&token={secret}").status_code == 200
    with server.client(auth=False) as anonymous:
        assert anonymous.get(f"/runs?token={secret}-anon").status_code == 401
    assert team_a.get(f"/runs/run_{secret}?cursor={secret}").status_code == 404
    logged = server.output()
    assert '"GET /runs HTTP/1.1" 200' in logged
    assert '"GET /runs HTTP/1.1" 401' in logged
    # The path is the request's own: kept (the console keeps run ids out of paths).
    assert f'"GET /runs/run_{secret} HTTP/1.1" 404' in logged
    assert f"?token={secret}" not in logged and "cursor=" not in logged
    assert "status=completed" not in logged


# -- artifacts ------------------------------------------------------------------------


def look_at(uri: str) -> dict[str, Any]:
    return {"schemaVersion": "1.0", "id": "look", "steps": [
        {"id": "look", "type": "prompt", "includeInFinalOutput": True, "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "What does this say?"},
                {"type": "file", "artifact": {"id": "figures", "name": "figures.txt",
                                              "mediaType": "text/plain", "uri": uri}}]}]}]}


def test_another_tenants_artifact_is_refused_naming_its_run(
        server: Serve, team_a: httpx.Client, team_b: httpx.Client) -> None:
    theirs = start(team_a, approval_manifest())["runId"]
    # What a tool of team-a's run saved, in the server's artifact store.
    uri, _ = LocalArtifactStore(Path(server.workdir) / "artifacts").put(
        SECRET, media_type="text/plain", run_id=theirs)

    run_id = start(team_b, look_at(uri))["runId"]
    failed = wait_for_status(team_b, run_id, "failed")
    error = failed["error"]
    assert error["type"] == "artifact_refused"
    assert f"belongs to run {theirs!r}" in error["message"]
    told = json.dumps(run_of(team_b, run_id)) + events_of(server, run_id) + server.output()
    assert "unreleased" not in told
