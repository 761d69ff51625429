"""Acceptance 3 of issue 11: a damaged store never answers with silently wrong data.

A small store left by a real run (`corruption_scenario`) is damaged one way
at a time: every byte of the SQLite file is flipped in turn (the 100-byte
header and a deterministic sample, 500 offsets in all), every byte of every
file of the file store (a deterministic sample of 500 offsets in a larger
file), each SQLite row and each store file is deleted. After each damage
every read returns exactly the original data or raises a store error naming
the run or the store, and `resume` and `fork` run nothing from a store whose
run failed a check. The DynamoDB store's items are deleted in
tests/stores/aws/test_dynamodb_corruption.py; the memory store holds
everything in the process, so there is nothing on a disk to damage.
"""

from __future__ import annotations

import contextlib
import random
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from stores import atomic_files
from stores.base import CorruptRecord
from stores.file import FileRunStore
from stores.sqlite import SqliteRunStore
from tests.stores import corruption_scenario
from tests.stores.corruption_scenario import (
    T0,
    Outcome,
    build,
    check_engine,
    check_reads,
    reads,
)

SAMPLES = 500
HEADER = 100  # every byte of SQLite's file header is flipped; the rest sampled
MASKS = (0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80, 0xFF)
# The engine runs (resume, then fork, from a fresh copy) after every damage of
# the SQLite file and after every ENGINE_EVERY-th flip of a file-store file:
# every byte of a sealed file is covered by its checksum, so its flips all
# fail alike, and running the engine on each would only repeat itself.
ENGINE_EVERY = 20


def flips(data: bytes, *, seed: int, keep: int = 0) -> list[tuple[int, int]]:
    """(offset, xor mask) pairs: every offset below `keep` and a sample of the rest,
    SAMPLES in all (every offset of a smaller file). Three in four sampled bytes are
    not zero: a database's free space is zeros, and flipping it proves little."""
    if len(data) <= SAMPLES:
        offsets = list(range(len(data)))
    else:
        chosen = set(range(min(keep, len(data))))
        pick = random.Random(seed)
        used = [offset for offset in range(len(chosen), len(data)) if data[offset]]
        chosen.update(pick.sample(used, min(len(used), (SAMPLES - len(chosen)) * 3 // 4)))
        rest = [offset for offset in range(len(data)) if offset not in chosen]
        chosen.update(pick.sample(rest, SAMPLES - len(chosen)))
        offsets = sorted(chosen)
    return [(offset, MASKS[index % len(MASKS)]) for index, offset in enumerate(offsets)]


@pytest.fixture(autouse=True)
def no_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    """Durability is not what is tested here; fsync only slows thousands of writes."""
    monkeypatch.setattr(atomic_files.os, "fsync", lambda fd: None)


# -- SQLite --------------------------------------------------------------------


def _sqlite(path: Path) -> SqliteRunStore:
    return SqliteRunStore(path, synchronous="NORMAL")


@pytest.fixture(scope="module")
def sqlite_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, dict[str, Outcome]]:
    """The pristine database file and what its reads return."""
    path = tmp_path_factory.mktemp("pristine") / "runs.sqlite"
    with contextlib.closing(_sqlite(path)) as store:
        build(store)
    # Closed: the WAL is folded into the file, which is then the whole store (the
    # writers' lock file beside it holds nothing).
    assert sorted(entry.name for entry in path.parent.iterdir()) == ["runs.sqlite",
                                                                     "runs.sqlite-lock"]
    assert Path(f"{path}-lock").stat().st_size == 0
    with contextlib.closing(_sqlite(path)) as store:
        return path.read_bytes(), reads(store)


def _placed(path: Path, data: bytes) -> None:
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    path.write_bytes(data)


def _damaged_sqlite(path: Path, data: bytes, original: dict[str, Outcome], damage: str,
                    edit: Callable[[], None] | None = None) -> bool:
    """Check the reads and the engine on the database `data`, damaged by `edit`; whether
    the run's reads were unchanged."""
    def place() -> None:
        _placed(path, data)
        if edit is not None:
            edit()

    place()
    try:
        store = _sqlite(path)
    except Exception as error:
        damaged = dict.fromkeys(original, error)
    else:
        with contextlib.closing(store):
            damaged = reads(store)
    unchanged = check_reads(original, damaged, location=str(path), damage=damage)
    place()
    check_engine(lambda: _sqlite(path), unchanged=unchanged, damage=damage)
    return unchanged


@pytest.mark.slow
def test_every_flipped_byte_of_the_sqlite_file_is_caught_or_harmless(
        tmp_path: Path, sqlite_store: tuple[bytes, dict[str, Outcome]]) -> None:
    data, original = sqlite_store
    path = tmp_path / "runs.sqlite"
    caught = 0
    for offset, mask in flips(data, seed=3, keep=HEADER):
        damaged = bytearray(data)
        damaged[offset] ^= mask
        caught += not _damaged_sqlite(path, bytes(damaged), original,
                                      f"byte {offset} ^ {mask:#04x}")
    # Many bytes of a page are free space or bookkeeping that no read depends on.
    assert caught >= 150


def _deleted_row(path: Path, table: str, rowid: int) -> Callable[[], None]:
    """Delete one row as damage would: no trigger of the store's, no cascade."""
    def delete() -> None:
        with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as raw:
            raw.execute(f"DELETE FROM {table} WHERE rowid = ?", (rowid,))

    return delete


def _rows(data: bytes, path: Path) -> list[tuple[str, int]]:
    _placed(path, data)
    with contextlib.closing(sqlite3.connect(path)) as raw:
        tables = [row[0] for row in raw.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")]
        return [(table, row[0]) for table in sorted(tables)
                for row in raw.execute(f"SELECT rowid FROM {table} ORDER BY rowid")]


def test_every_deleted_sqlite_row_is_caught_or_harmless(
        tmp_path: Path, sqlite_store: tuple[bytes, dict[str, Outcome]]) -> None:
    data, original = sqlite_store
    path = tmp_path / "runs.sqlite"
    rows = _rows(data, path)
    assert {table for table, _ in rows} >= {"runs", "checkpoints", "effects", "approvals",
                                            "run_count", "schema_version"}
    harmless = set()
    for table, rowid in rows:
        if _damaged_sqlite(path, data, original, f"row {rowid} of {table} deleted",
                           _deleted_row(path, table, rowid)):
            harmless.add(table)
    # What no read of the run returns: the lasting copy of the approval decision
    # (run.json's suspension holds it), and the run count, which only a full
    # listing reads (and reports: check_reads saw list_runs raise).
    assert harmless <= {"approvals", "run_count"}


# -- the file store --------------------------------------------------------------


@pytest.fixture(scope="module")
def file_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Outcome]]:
    """The pristine store directory and what its reads return."""
    root = tmp_path_factory.mktemp("pristine") / "store"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(atomic_files.os, "fsync", lambda fd: None)
        build(FileRunStore(root))
    return root, reads(FileRunStore(root))


def _files(root: Path) -> list[Path]:
    return sorted(path.relative_to(root) for path in root.rglob("*") if path.is_file())


def _damaged_files(root: Path, copy: Path, original: dict[str, Outcome], damage: str, *,
                   engine: bool) -> bool:
    """Check the reads (and the engine, on a fresh copy) of the damaged store `root`;
    whether the run's reads were unchanged."""
    unchanged = check_reads(original, reads(FileRunStore(root)), location=str(root),
                            damage=damage)
    if engine or unchanged:
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(root, copy)
        check_engine(lambda: FileRunStore(copy), unchanged=unchanged, damage=damage)
    return unchanged


@pytest.mark.slow
def test_every_flipped_byte_of_every_store_file_is_caught(
        tmp_path: Path, file_store: tuple[Path, dict[str, Outcome]]) -> None:
    pristine, original = file_store
    root, copy = tmp_path / "store", tmp_path / "copy"
    shutil.copytree(pristine, root)
    files = _files(root)
    assert len(files) >= 8  # run.json, 4 checkpoints, an effect, an approval, a lock
    for number, name in enumerate(files):
        data = (root / name).read_bytes()
        for index, (offset, mask) in enumerate(flips(data, seed=number, keep=HEADER)):
            damaged = bytearray(data)
            damaged[offset] ^= mask
            (root / name).write_bytes(bytes(damaged))
            unchanged = _damaged_files(root, copy, original,
                                       f"{name}: byte {offset} ^ {mask:#04x}",
                                       engine=index % ENGINE_EVERY == 0)
            # Every byte is sealed; the approval file is read by no read of the run.
            assert not unchanged or name.parts[2] == "approvals", f"{name}: byte {offset}"
            (root / name).write_bytes(data)


def test_every_deleted_store_file_is_caught_or_harmless(
        tmp_path: Path, file_store: tuple[Path, dict[str, Outcome]]) -> None:
    pristine, original = file_store
    root, copy = tmp_path / "store", tmp_path / "copy"
    for name in _files(pristine):
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(pristine, root)
        (root / name).unlink()
        unchanged = _damaged_files(root, copy, original, f"{name} deleted", engine=True)
        # A lock file is made again; the approval file is a copy of run.json's decision.
        assert not unchanged or name.parts[0] == "locks" or name.parts[2] == "approvals", name


def test_a_file_of_another_run_is_caught_where_it_is_copied(
        tmp_path: Path, file_store: tuple[Path, dict[str, Outcome]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each file replaced by the same file of another run: well sealed, misplaced."""
    pristine, original = file_store
    root, copy, other = tmp_path / "store", tmp_path / "copy", tmp_path / "other"
    monkeypatch.setattr(corruption_scenario, "RUN_ID", "twin")
    corruption_scenario.build(FileRunStore(other))
    monkeypatch.undo()
    monkeypatch.setattr(atomic_files.os, "fsync", lambda fd: None)
    for name in _files(pristine):
        if name.parts[0] != "runs":
            continue
        folder = other / "runs" / "twin" / Path(*name.parts[2:]).parent
        twin = sorted(folder.glob("*.json"))[sorted(
            (pristine / name).parent.glob("*.json")).index(pristine / name)]
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(pristine, root)
        shutil.copyfile(twin, root / name)
        unchanged = _damaged_files(root, copy, original,
                                   f"{name} replaced by {twin.name} of twin", engine=True)
        if name.parts[2] == "approvals":  # read when the question is answered
            assert unchanged
            answer = original["load_run"].suspension.decision
            with pytest.raises(CorruptRecord, match="holds the answer to"):
                FileRunStore(root).resolve_approval(
                    "victim", answer["approval_id"], approved=answer["approved"],
                    response=answer["response"], responded_by=None, at=T0)
        else:
            assert not unchanged, name
