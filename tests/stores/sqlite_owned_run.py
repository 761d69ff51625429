"""One run held by its owner in an SQLite store, for the store's own tests.

Run "r1" is created, resumed by "me" (attempt 1) and checkpointed once, so
the next save of an owner's checkpoint is the store's fast path.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from stores.records import Checkpoint, RunRecord
from stores.sqlite import SqliteRunStore

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def checkpoint(seq: int, attempt: int = 1) -> Checkpoint:
    """Checkpoint `seq` of run "r1": a transcript of `seq` entries, one more each seq."""
    return Checkpoint(run_id="r1", seq=seq, attempt=attempt, manifest_hash="sha256:m",
                      transcript=[{"n": index} for index in range(seq)],
                      created_at=NOW + timedelta(seconds=seq))


def owned_run_store(path: Path) -> SqliteRunStore:
    """A store at `path` whose run "r1" is owned by "me" and has checkpoint 1."""
    store = SqliteRunStore(path)
    store.create_run(RunRecord(run_id="r1", manifest_hash="sha256:m", tenant="acme"))
    store.resume_run("r1", owner="me", now=NOW, lease_seconds=60)
    store.save_checkpoint(checkpoint(1), expected_attempt=1)
    return store
