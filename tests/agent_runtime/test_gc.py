"""`agent-runtime gc`: local retention on every local store, artifacts included.

Finished runs older than the cutoff go with everything they own (checkpoints,
effects, approvals, artifacts); running, created and suspended runs stay;
`--dry-run` changes nothing (docs/design.md section 10, issue 16 acceptance 2)."""

from __future__ import annotations

import json
import sqlite3
from datetime import timedelta
from pathlib import Path

import pytest

from agent_runtime.cli import main
from agent_runtime.errors import InvalidInput
from agent_runtime.retention import collect, parse_duration
from agent_runtime.testing import FakeClock
from stores import open_store
from stores.artifacts import LocalArtifactStore
from stores.base import RunStore
from stores.conformance import (
    EFFECT_KEY,
    ERROR,
    OUTPUT,
    at,
    make_checkpoint,
    make_run,
    start_busy_run,
)
from stores.records import RunStatus

FINISHED_ID, FAILED_ID, RUNNING_ID, SUSPENDED_ID = ("run-done", "run-failed", "run-busy",
                                                    "run-waiting")
CANARY = "gc-canary-7f3a"


def finished_run(store: RunStore, artifacts: LocalArtifactStore, run_id: str,
                 *, status: RunStatus) -> None:
    """A run with an approval answered, checkpoints, an effect and an artifact, then ended."""
    store.create_run(make_run(run_id, variables={"canary": CANARY}))
    store.resume_run(run_id, owner="o-1", now=at(1), lease_seconds=60)
    store.suspend_run(run_id, expected_attempt=1, reason="approval", at=at(2),
                      details={"approval_id": "ship", "prompt": CANARY})
    store.resolve_approval(run_id, "ship", approved=True, response=CANARY, responded_by=None,
                           at=at(3))
    store.resume_run(run_id, owner="o-2", now=at(4), lease_seconds=60)
    for seq in (1, 2, 3):
        store.save_checkpoint(make_checkpoint(run_id, seq, 2, variables={"canary": CANARY}),
                              expected_attempt=2)
    store.begin_effect(EFFECT_KEY, run_id=run_id, expected_attempt=2, at=at(5))
    store.complete_effect(EFFECT_KEY, run_id=run_id, expected_attempt=2, result=CANARY,
                          at=at(6))
    artifacts.put(f"{CANARY} {run_id}".encode(), media_type="text/plain", run_id=run_id)
    if status is RunStatus.COMPLETED:
        store.complete_run(run_id, expected_attempt=2, output=OUTPUT, at=at(7))
    else:
        store.fail_run(run_id, expected_attempt=2, error=ERROR, at=at(7))


@pytest.fixture(params=["file", "sqlite"])
def local(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, Path, Path]:
    """A local store with a completed, a failed, a running and a suspended run."""
    driver = request.param
    location = tmp_path / ("runs.sqlite" if driver == "sqlite" else "runs")
    artifacts_dir = tmp_path / "artifacts"
    artifacts = LocalArtifactStore(artifacts_dir)
    with open_store(driver, location) as store:
        finished_run(store, artifacts, FINISHED_ID, status=RunStatus.COMPLETED)
        finished_run(store, artifacts, FAILED_ID, status=RunStatus.FAILED)
        start_busy_run(store, RUNNING_ID)
        artifacts.put(b"busy", media_type="text/plain", run_id=RUNNING_ID)
        store.create_run(make_run(SUSPENDED_ID))
        store.resume_run(SUSPENDED_ID, owner="o", now=at(1), lease_seconds=60)
        store.suspend_run(SUSPENDED_ID, expected_attempt=1, reason="approval", at=at(2),
                          details={"approval_id": "a"})
    return driver, location, artifacts_dir


def gc(local: tuple[str, Path, Path], *flags: str) -> int:
    driver, location, artifacts_dir = local
    return main(["gc", *flags, "--store-driver", driver, "--store", str(location),
                 "--artifacts", str(artifacts_dir)])


def snapshot(local: tuple[str, Path, Path]) -> dict[str, bytes]:
    """Every byte the store and the artifacts hold, by path."""
    _, location, artifacts_dir = local
    roots = [location, artifacts_dir] if location.is_dir() else [artifacts_dir]
    files = {str(path): path.read_bytes() for root in roots for path in sorted(root.rglob("*"))
             if path.is_file()}
    if location.is_file():
        with sqlite3.connect(location) as db:
            files[str(location)] = "\n".join(db.iterdump()).encode()
    return files


def raw_mentions(local: tuple[str, Path, Path], run_id: str) -> list[str]:
    """Where the raw bytes of the store and artifacts still name `run_id` or hold its data."""
    return [path for path, data in snapshot(local).items()
            if run_id.encode() in data or f"{CANARY} {run_id}".encode() in data
            or run_id in path]


def test_gc_deletes_exactly_the_finished_runs_in_the_status_asked(
        local: tuple[str, Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    driver, location, artifacts_dir = local
    assert raw_mentions(local, FINISHED_ID)  # what the test stands on
    assert gc(local, "--older-than", "0s", "--status", "completed") == 0
    assert f"deleted {FINISHED_ID} (completed" in capsys.readouterr().out
    assert raw_mentions(local, FINISHED_ID) == []
    with open_store(driver, location) as store:
        assert store.load_run(FINISHED_ID) is None
        kept = {run.run_id: run.status for run in store.list_runs().runs}
        assert kept == {FAILED_ID: RunStatus.FAILED, RUNNING_ID: RunStatus.RUNNING,
                        SUSPENDED_ID: RunStatus.SUSPENDED}
        assert len(store.list_checkpoints(FAILED_ID)) == 3
        assert len(store.list_checkpoints(RUNNING_ID)) == 1
    assert (artifacts_dir / "runs" / FAILED_ID).is_dir()
    assert (artifacts_dir / "runs" / RUNNING_ID).is_dir()
    # Without --status every finished status goes; unfinished runs never do.
    assert gc(local, "--older-than", "0s", "--format", "json") == 0
    report = json.loads(capsys.readouterr().out)
    assert [run["runId"] for run in report["runs"]] == [FAILED_ID]
    assert report["artifacts"] == 1
    with open_store(driver, location) as store:
        assert {run.run_id for run in store.list_runs().runs} == {RUNNING_ID, SUSPENDED_ID}


def test_dry_run_changes_nothing(local: tuple[str, Path, Path],
                                 capsys: pytest.CaptureFixture[str]) -> None:
    before = snapshot(local)
    assert gc(local, "--older-than", "0s", "--dry-run") == 0
    out = capsys.readouterr().out
    assert f"would delete {FINISHED_ID}" in out and f"would delete {FAILED_ID}" in out
    assert snapshot(local) == before


def test_a_younger_run_stays(local: tuple[str, Path, Path]) -> None:
    before = snapshot(local)
    # The runs finished in 2025; a cutoff a century ago keeps them all.
    assert gc(local, "--older-than", "36500d") == 0
    assert snapshot(local) == before


@pytest.mark.parametrize(("flags", "message"), [
    (["--older-than", "0s", "--status", "running"], "gc deletes only finished runs"),
    (["--older-than", "0s", "--status", "suspended"], "a suspended run is never deleted"),
    (["--older-than", "ten days"], "expected a duration"),
    (["--older-than", "10"], "expected a duration"),
])
def test_gc_refuses_unfinished_statuses_and_bad_durations(
        local: tuple[str, Path, Path], capsys: pytest.CaptureFixture[str],
        flags: list[str], message: str) -> None:
    before = snapshot(local)
    assert gc(local, *flags) == 2
    assert message in capsys.readouterr().err
    assert snapshot(local) == before


def test_collect_on_the_memory_store_with_an_injected_clock(tmp_path: Path) -> None:
    store = open_store("memory")
    artifacts = LocalArtifactStore(tmp_path)
    finished_run(store, artifacts, FINISHED_ID, status=RunStatus.COMPLETED)
    start_busy_run(store, RUNNING_ID)
    clock = FakeClock(at(7) + timedelta(hours=1))
    assert collect(store, older_than=timedelta(hours=2), clock=clock).runs == []
    result = collect(store, older_than=timedelta(hours=1), clock=clock, artifacts=artifacts)
    assert [run.run_id for run in result.runs] == [FINISHED_ID]
    assert result.artifacts == 1
    assert store.load_run(FINISHED_ID) is None and store.load_run(RUNNING_ID) is not None
    with pytest.raises(InvalidInput, match="only finished runs"):
        collect(store, older_than=timedelta(0), statuses=[RunStatus.RUNNING])


def test_durations() -> None:
    assert parse_duration("0s") == timedelta(0)
    assert parse_duration("1d12h") == timedelta(days=1, hours=12)
    assert parse_duration("2w") == timedelta(weeks=2)
    with pytest.raises(InvalidInput, match="--older-than"):
        parse_duration("-1d")
