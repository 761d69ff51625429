"""Ports of packages/store-local/src/artifact-store.file.test.ts on our LocalArtifactStore
(content-addressed: a file named by its SHA-256, so a caller's name is never a path)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from stores.artifacts import LocalArtifactStore
from stores.base import CorruptRecord


def path_of(uri: str) -> Path:
    return Path(unquote(urlparse(uri).path))


def test_round_trips_bytes_with_durable_metadata_and_integrity_information(
        tmp_path: Path) -> None:
    """artifact-store.file.test.ts: "round-trips bytes with durable metadata and integrity
    information"."""
    store = LocalArtifactStore(tmp_path / "artifacts")
    data = bytes([0, 1, 2, 255])
    uri, sha256 = store.put(data, media_type="application/octet-stream",
                            run_id="run-1")
    assert store.get(uri) == data
    assert sha256 == hashlib.sha256(data).hexdigest()
    assert uri.startswith("file:") and path_of(uri).is_file()
    assert path_of(uri).is_relative_to(tmp_path / "artifacts")


def test_does_not_use_caller_provided_names_as_filesystem_paths(tmp_path: Path) -> None:
    """artifact-store.file.test.ts: "does not use caller-provided names as filesystem paths"
    (no name is taken at all), and a uri outside the store is refused."""
    store = LocalArtifactStore(tmp_path / "artifacts")
    uri, _ = store.put(b"safe", media_type="text/plain", run_id="run-1")
    assert store.get(uri) == b"safe"
    (tmp_path / "outside.txt").write_text("outside")
    with pytest.raises(ValueError, match="not in this artifact store"):
        store.get((tmp_path / "outside.txt").as_uri())


@pytest.mark.parametrize("uri", ["", "file:///..", "https://example.test/a"])
def test_rejects_empty_and_dot_segment_artifact_identifiers_on_reads(
        tmp_path: Path, uri: str) -> None:
    """artifact-store.file.test.ts: "rejects empty artifact identifiers on reads" and "does
    not interpret dot-segment artifact ids as directories"."""
    store = LocalArtifactStore(tmp_path / "artifacts")
    with pytest.raises(ValueError):
        store.get(uri)


def test_detects_artifact_data_corruption_on_read(tmp_path: Path) -> None:
    """artifact-store.file.test.ts: "detects artifact data corruption on read" and "validates
    bytes against the caller reference when data and metadata are replaced" (the name is the
    hash: there is no separate metadata to replace)."""
    store = LocalArtifactStore(tmp_path / "artifacts")
    uri, _ = store.put(b"original", media_type="text/plain", run_id="run-1")
    path_of(uri).write_bytes(b"changed")
    with pytest.raises(CorruptRecord, match="does not match its sha256"):
        store.get(uri)
