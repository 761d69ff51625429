"""A run reads only its own artifacts, and those of the runs it was forked from.

A prompt's `messages` may name any artifact uri; the bytes it names are sent
to the model. These tests name artifacts of other runs (another tenant's, a
parent's, a shared one of the old layout) and check that the step fails as
`artifact_refused`, naming the run the artifact belongs to and never its bytes,
while a run's own artifacts and its fork sources' still reach the model.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from engine_harness import Harness, manifest

from agent_runtime import RunStatus, ToolContext, tool
from agent_runtime.testing import scripted
from stores.artifacts import LocalArtifactStore

SECRET = b"the other tenant's quarterly figures"


def look_at(uri: str, step_id: str = "look") -> dict[str, Any]:
    """A prompt step whose history shows the model the artifact at `uri`."""
    return {"id": step_id, "type": "prompt", "includeInFinalOutput": True, "messages": [
        {"role": "user", "content": [
            {"type": "text", "text": "What does this say?"},
            {"type": "file", "artifact": {"id": "a-1", "name": "figures.txt",
                                          "mediaType": "text/plain", "uri": uri}}]}]}


def harness(tmp_path: Path, answers: int = 4) -> tuple[Harness, LocalArtifactStore]:
    h = Harness(scripted(responses=[{"text": f"answer {n}"} for n in range(answers)]))
    artifacts = LocalArtifactStore(tmp_path / "artifacts")
    h.runtime.artifacts = artifacts
    return h, artifacts


def checkpoint_of(run_id: str, seq: int, h: Harness) -> Any:
    checkpoint = h.store.load_checkpoint(run_id, seq)
    assert checkpoint is not None
    return checkpoint


def sent_bytes(h: Harness) -> str:
    return str([request.messages for request in h.model.requests])


def test_a_run_reads_its_own_artifact(tmp_path: Path) -> None:
    h, artifacts = harness(tmp_path)
    uri, _ = artifacts.put(b"mine", media_type="text/plain", run_id="run-mine")
    result = h.run(manifest(look_at(uri)), run_id="run-mine", tenant="team-a")
    assert result.status is RunStatus.COMPLETED, result.error
    assert "bWluZQ==" in sent_bytes(h)  # base64 of b"mine", inlined for the model


@pytest.mark.parametrize("tenant", ["team-b", None])
def test_another_runs_artifact_is_refused_naming_its_run(tmp_path: Path,
                                                         tenant: str | None) -> None:
    h, artifacts = harness(tmp_path)
    uri, _ = artifacts.put(SECRET, media_type="text/plain", run_id="run-of-team-a")
    result = h.run(manifest(look_at(uri)), run_id="run-of-team-b", tenant=tenant)
    assert result.status is RunStatus.FAILED
    assert result.error["type"] == "artifact_refused"
    message = result.error["message"]
    assert "'run-of-team-a'" in message and "'run-of-team-b'" in message
    assert "look" in message  # the step
    assert "quarterly" not in str(result.error)
    assert h.model.requests == []  # nothing was sent to the model
    assert "quarterly" not in str(h.events.events)


def test_a_fork_reads_the_artifacts_of_the_runs_it_was_forked_from(tmp_path: Path) -> None:
    h, artifacts = harness(tmp_path)
    uri, _ = artifacts.put(b"origin's", media_type="text/plain", run_id="run-origin")
    agent = manifest({"id": "first", "type": "prompt", "prompt": "Start."}, look_at(uri))
    origin = h.run(agent, run_id="run-origin", tenant="team-a")
    assert origin.status is RunStatus.COMPLETED, origin.error
    # Forked from the checkpoint after `first`: the fork's own run shows the
    # model its source's artifact; and so does a fork of that fork.
    first = next(info.seq for info in h.store.list_checkpoints("run-origin")
                 if len(checkpoint_of("run-origin", info.seq, h).step_results) == 1)
    fork = h.runtime.create_fork("run-origin", seq=first, new_run_id="run-fork")
    assert h.resume(fork.run_id).status is RunStatus.COMPLETED
    again = h.runtime.create_fork("run-fork", seq=1, new_run_id="run-fork-of-fork")
    assert h.resume(again.run_id).status is RunStatus.COMPLETED
    assert sent_bytes(h).count("b3JpZ2luJ3M=") == 3  # base64 of b"origin's", three runs


def test_a_fork_does_not_read_another_tenants_run_it_claims_as_source(tmp_path: Path) -> None:
    h, artifacts = harness(tmp_path)
    uri, _ = artifacts.put(SECRET, media_type="text/plain", run_id="run-of-team-a")
    h.run(manifest({"id": "first", "type": "prompt", "prompt": "Start."}),
          run_id="run-of-team-a", tenant="team-a")
    source = h.run(manifest({"id": "first", "type": "prompt", "prompt": "Start."},
                            look_at(uri)), run_id="run-of-team-b", tenant="team-b")
    assert source.error["type"] == "artifact_refused"
    # A fork given to team-b of team-a's run (only a host can make one) still
    # does not make team-a's artifacts team-b's.
    fork = h.runtime.create_fork("run-of-team-b", seq=1, new_run_id="run-b-fork")
    assert h.resume(fork.run_id).error["type"] == "artifact_refused"
    assert "quarterly" not in sent_bytes(h)


def test_a_sub_run_does_not_read_its_parents_artifacts(tmp_path: Path) -> None:
    h, artifacts = harness(tmp_path)
    uri, _ = artifacts.put(SECRET, media_type="text/plain", run_id="run-parent")
    child = {"schemaVersion": "1.0", "id": "child", "steps": [look_at(uri)]}
    result = h.run(manifest({"id": "delegate", "type": "sub-run", "manifest": child}),
                   run_id="run-parent", tenant="team-a")
    assert result.status is RunStatus.FAILED
    assert "artifact_refused" in str(result.error)
    assert "quarterly" not in sent_bytes(h)


def test_a_shared_artifact_of_the_old_layout_is_only_a_local_users(tmp_path: Path) -> None:
    h, artifacts = harness(tmp_path)
    _, digest = artifacts.put(b"old", media_type="text/plain", run_id="somewhere")
    legacy = tmp_path / "artifacts" / digest[:2] / digest
    legacy.parent.mkdir()
    legacy.write_bytes(b"old")
    assert artifacts.run_of(legacy.as_uri()) is None
    local = h.run(manifest(look_at(legacy.as_uri())), run_id="run-local")
    assert local.status is RunStatus.COMPLETED, local.error
    tenant = h.run(manifest(look_at(legacy.as_uri())), run_id="run-tenant", tenant="team-b")
    assert tenant.error["type"] == "artifact_refused"
    assert "belongs to no run" in tenant.error["message"]


@pytest.mark.parametrize("uri", ["file:///etc/passwd", "https://example.test/a.txt",
                                 "file:///{dir}/runs/../{sha}", "file:///{dir}/../{sha}"])
def test_a_uri_outside_the_store_is_unavailable_without_naming_the_store(
        tmp_path: Path, uri: str) -> None:
    h, artifacts = harness(tmp_path)
    _, digest = artifacts.put(b"x", media_type="text/plain", run_id="run-x")
    uri = uri.format(dir=str(tmp_path / "artifacts").lstrip("/"), sha=digest)
    result = h.run(manifest(look_at(uri)), run_id="run-x", tenant="team-a")
    assert result.error["type"] == "artifact_unavailable"
    assert "not in this artifact store" in result.error["message"] \
        or "not a local artifact uri" in result.error["message"]
    assert str(tmp_path / "artifacts") not in result.error["message"].replace(uri, "")


@pytest.mark.parametrize("run_id", ["run_1", "run/1.a", "..", "parent.sub-ab12", "ü"])
def test_a_local_artifact_uri_names_the_run_it_was_put_for(tmp_path: Path, run_id: str) -> None:
    artifacts = LocalArtifactStore(tmp_path / "artifacts")
    uri, _ = artifacts.put(b"bytes", media_type="text/plain", run_id=run_id)
    assert artifacts.run_of(uri) == run_id
    assert artifacts.get(uri) == b"bytes"


def by_id(artifact_id: str) -> dict[str, Any]:
    """A prompt step whose history names an artifact by its id alone, as the reference allows."""
    return {"id": "look", "type": "prompt", "includeInFinalOutput": True, "messages": [
        {"role": "user", "content": [
            {"type": "text", "text": "What does this say?"},
            {"type": "file", "artifact": {"id": artifact_id, "name": "note.txt",
                                          "mediaType": "text/plain"}}]}]}


def saving_harness(tmp_path: Path) -> Harness:
    @tool
    def keep(ctx: ToolContext) -> str:
        """Keep a note."""
        ref = ctx.save_artifact(b"kept by a tool", media_type="text/plain")
        return ref.sha256

    h = Harness(scripted(responses=[{"toolCalls": [{"name": "keep", "arguments": {}}]},
                                    {"text": "kept"}, {"text": "it says: kept by a tool"}]),
                tools=[keep])
    h.runtime.artifacts = LocalArtifactStore(tmp_path / "artifacts")
    return h


def test_an_artifact_the_run_recorded_is_found_by_its_id_without_a_uri(tmp_path: Path) -> None:
    digest = hashlib.sha256(b"kept by a tool").hexdigest()
    h = saving_harness(tmp_path)
    agent = manifest({"id": "save", "type": "prompt", "prompt": "Keep it.", "tools": ["keep"]},
                     by_id(f"sha256:{digest}"))
    result = h.run(agent)
    assert result.status is RunStatus.COMPLETED, result.error
    assert "a2VwdCBieSBhIHRvb2w=" in sent_bytes(h)  # base64 of the bytes, inlined


def test_an_id_the_run_did_not_record_is_unavailable_and_nothing_is_read(tmp_path: Path) -> None:
    h = saving_harness(tmp_path)
    # Another run's bytes in the same store: its id is not one this run recorded.
    _, other = LocalArtifactStore(tmp_path / "artifacts").put(
        SECRET, media_type="text/plain", run_id="run-of-another")
    assert other == hashlib.sha256(SECRET).hexdigest()
    agent = manifest({"id": "save", "type": "prompt", "prompt": "Keep it.", "tools": ["keep"]},
                     by_id(other))
    result = h.run(agent)
    assert result.status is RunStatus.FAILED
    assert result.error["type"] == "artifact_unavailable"
    assert repr(other) in result.error["message"] and "SHA-256" in result.error["message"]
    assert "quarterly" not in sent_bytes(h)
