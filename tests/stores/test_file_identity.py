"""What the file store checks beyond checksums: every file holds what its place says,
every file its bookkeeping counts is there, and its location is a directory.

Also the ids of sub-run children, which are directory names on this store."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agent_runtime import AgentRuntime, RunStatus
from agent_runtime.manifest import parse_agent_manifest
from agent_runtime.steps.subrun import child_run_id_for
from agent_runtime.testing import FakeClock, scripted
from stores import file
from stores.atomic_files import hashed_name
from stores.base import CorruptRecord, StoreUnavailable
from stores.file import FileRunStore
from stores.file_layout import check_run_id
from stores.records import Checkpoint, RunRecord

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def started(store: FileRunStore, run_id: str) -> int:
    store.create_run(RunRecord(run_id=run_id, manifest_hash="m", created_at=T0))
    return store.resume_run(run_id, owner="me", now=T0, lease_seconds=60).attempt


def checkpoint(run_id: str, seq: int, attempt: int) -> Checkpoint:
    return Checkpoint(run_id=run_id, seq=seq, attempt=attempt, manifest_hash="m",
                      transcript=[{"n": n} for n in range(seq)], created_at=at(seq))


@pytest.fixture
def store(tmp_path: Path) -> Iterator[FileRunStore]:
    with FileRunStore(tmp_path / "store") as opened:
        yield opened


def folder(store: FileRunStore, run_id: str, sub: str = "") -> Path:
    return store.path / "runs" / run_id / sub


def two_runs(store: FileRunStore) -> None:
    """Runs a and b, alike: two checkpoints and an effect each."""
    for run_id in ("a", "b"):
        attempt = started(store, run_id)
        for seq in (1, 2):
            store.save_checkpoint(checkpoint(run_id, seq, attempt), expected_attempt=attempt)
        store.begin_effect("k", run_id=run_id, expected_attempt=attempt, at=at(3))


def test_a_location_that_is_a_file_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "store"
    path.write_text("not a directory")
    with pytest.raises(StoreUnavailable, match=str(path)):
        FileRunStore(path)


@pytest.mark.parametrize(("name", "reason"), [
    ("run.json", "holds run 'a'"),
    ("checkpoints/0000000002.json", "holds checkpoint 2 of run 'a'"),
    (f"effects/{hashed_name('k')}", "holds an effect of run 'a'"),
])
def test_a_file_copied_from_another_run_is_corrupt(store: FileRunStore, name: str,
                                                   reason: str) -> None:
    two_runs(store)
    shutil.copyfile(folder(store, "a", name), folder(store, "b", name))
    reads = {"run.json": lambda: store.load_run("b"),
             "checkpoints/0000000002.json": lambda: store.load_latest_checkpoint("b"),
             f"effects/{hashed_name('k')}": lambda: store.list_effects("b")}
    with pytest.raises(CorruptRecord, match=f"{folder(store, 'b', name)}: {reason}"):
        reads[name]()
    assert store.load_run("a") is not None  # the source is fine


def test_an_effect_stored_under_another_key_is_corrupt(store: FileRunStore) -> None:
    two_runs(store)
    effects = folder(store, "b", "effects")
    (effects / hashed_name("k")).rename(effects / hashed_name("other"))
    with pytest.raises(CorruptRecord, match="holds effect 'k', stored under another key"):
        store.list_effects("b")


def test_a_missing_run_json_is_corrupt_while_the_run_has_files(store: FileRunStore) -> None:
    two_runs(store)
    (folder(store, "b") / "run.json").unlink()
    for read in (lambda: store.load_run("b"), store.list_runs,
                 lambda: store.create_run(RunRecord(run_id="b", manifest_hash="m"))):
        with pytest.raises(CorruptRecord, match=r"run\.json: missing, but the run's"):
            read()


def test_a_counted_effect_that_is_gone_is_never_reserved_again(store: FileRunStore) -> None:
    two_runs(store)
    (folder(store, "b", "effects") / hashed_name("k")).unlink()
    missing = "effect 1 of the 1 run 'b' counts is missing"
    with pytest.raises(CorruptRecord, match=missing):
        store.list_effects("b")
    with pytest.raises(CorruptRecord, match=missing):
        store.begin_effect("k", run_id="b", expected_attempt=1, at=at(4))
    with pytest.raises(CorruptRecord, match=missing):
        store.complete_effect("k", run_id="b", expected_attempt=1, result=1, at=at(4))
    assert not (folder(store, "b", "effects") / hashed_name("k")).exists()


def test_a_missing_directory_of_a_run_is_corrupt(store: FileRunStore) -> None:
    two_runs(store)
    shutil.rmtree(folder(store, "b", "effects"))
    with pytest.raises(CorruptRecord, match="effects: the directory is missing"):
        store.list_effects("b")


def test_an_effect_whose_reservation_never_committed_is_absent_and_swept(
        store: FileRunStore, monkeypatch: pytest.MonkeyPatch) -> None:
    attempt = started(store, "r")
    real = file.write_atomic

    def dying(path: Path, data: bytes) -> None:
        if path.name == "run.json":
            raise SystemExit("killed")
        real(path, data)

    monkeypatch.setattr(file, "write_atomic", dying)
    with pytest.raises(SystemExit):
        store.begin_effect("k", run_id="r", expected_attempt=attempt, at=at(1))
    monkeypatch.undo()
    assert (folder(store, "r", "effects") / hashed_name("k")).exists()  # written, uncounted
    assert store.list_effects("r") == []
    store.suspend_run("r", expected_attempt=attempt, reason="interrupted", details={},
                      at=at(2))
    again = store.resume_run("r", owner="me", now=at(3), lease_seconds=60).attempt
    assert list(folder(store, "r", "effects").iterdir()) == []  # swept
    effect = store.begin_effect("k", run_id="r", expected_attempt=again, at=at(4))
    assert effect.attempt == again
    assert store.list_effects("r") == [effect]


# -- sub-run child ids -------------------------------------------------------------


@pytest.mark.parametrize("parent", ["run_0190f1c2a3b4c5d6e7f8091a2b3c4d5e", "a.b", "x" * 150,
                                    "x" * 200, "ends.", "a..b", "é" * 100, "-dash"])
def test_child_ids_are_valid_run_ids_on_the_file_store(parent: str) -> None:
    child = child_run_id_for(parent, "loop/3/delegate")
    check_run_id(child)
    assert child == child_run_id_for(parent, "loop/3/delegate")  # stable
    assert child != child_run_id_for(parent, "loop/4/delegate")
    grandchild = child_run_id_for(child, "nested")
    check_run_id(grandchild)


def test_ordinary_child_ids_are_unchanged() -> None:
    digest = hashlib.sha256(b"delegate").hexdigest()[:12]
    assert child_run_id_for("run_abc", "delegate") == f"run_abc.sub-{digest}"


def test_children_of_parents_sharing_a_long_prefix_differ() -> None:
    first, second = "p" * 190 + "one", "p" * 190 + "two"
    assert child_run_id_for(first, "s") != child_run_id_for(second, "s")


def test_a_sub_run_of_a_long_parent_id_runs_on_the_file_store(tmp_path: Path) -> None:
    agent = parse_agent_manifest({
        "schemaVersion": "1.0", "id": "parent", "variables": [],
        "steps": [{"id": "delegate", "type": "sub-run", "manifest": {
            "schemaVersion": "1.0", "id": "child", "variables": [],
            "steps": [{"id": "draft", "type": "prompt", "prompt": "draft"}]}}]},
        source="test")
    store = FileRunStore(tmp_path / "store")
    runtime = AgentRuntime(store=store, models={"scripted": scripted(
        by_step={"draft": [{"text": "from child"}]})}, clock=FakeClock(T0))
    parent = "p" * 195
    result = runtime.run_sync(manifest=agent, run_id=parent, options={"model": "scripted/test"})
    assert result.status is RunStatus.COMPLETED and result.output == "from child"
    child = store.load_run(child_run_id_for(parent, "delegate"))
    assert child is not None and child.parent is not None and child.parent.run_id == parent
