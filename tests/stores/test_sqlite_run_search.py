"""The SQLite store answers an operator's search from its indexes (issue 39,
acceptance 3): 5,000 runs, a search by agent and time range reads the runs in
the range through `runs_by_agent`, not every run; and runs stored before the
agent column existed are found once the file is migrated, encrypted ones too.
"""

from __future__ import annotations

import sqlite3
import statistics
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from stores import transitions
from stores.codecs import KEY_VARIABLE
from stores.records import RunRecord, RunStatus
from stores.run_search import RunSearch
from stores.sqlite import SqliteRunStore
from stores.sqlite_listing import listing_statement

T0 = datetime(2026, 12, 1, tzinfo=UTC)
RUNS = 5_000
AGENTS = 10
TIMINGS = 7


def _run(n: int, *, tenant: str | None = "acme") -> RunRecord:
    return RunRecord(run_id=f"run_{n:032x}", manifest_hash="sha256:x",
                     manifest={"schema_version": "1.0", "id": f"agent-{n % AGENTS}",
                               "steps": []},
                     tenant=tenant, created_at=T0 + timedelta(minutes=n))


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SqliteRunStore]:
    path = tmp_path_factory.mktemp("search") / "runs.sqlite"
    with SqliteRunStore(path, synchronous="NORMAL") as store:
        for n in range(RUNS):
            store.create_run(_run(n))
        yield store


def _plan(path: Path, **filters: Any) -> str:
    """SQLite's plan of the statement `list_runs(**filters)` runs."""
    options: dict[str, Any] = {"statuses": None, "lease_expired_before": None,
                               "parent_run_id": None, "tenant": None,
                               "resume_requested_before": None, "newest_first": True,
                               "limit": 50, "cursor": None}
    search = RunSearch(**{name: filters.pop(name) for name in list(filters)
                                      if name in RunSearch._fields})
    statement, params = listing_statement(search=search, **(options | filters))
    with sqlite3.connect(path) as raw:
        rows = raw.execute(f"EXPLAIN QUERY PLAN {statement}", params).fetchall()
    return " | ".join(str(row[-1]) for row in rows)


def _median_seconds(search: Any) -> float:
    timings = []
    for _ in range(TIMINGS):
        started = time.perf_counter()
        search()
        timings.append(time.perf_counter() - started)
    return statistics.median(timings)


def test_a_search_by_agent_and_time_range_over_5000_runs_reads_the_agent_index(
        seeded: SqliteRunStore) -> None:
    window = {"created_after": T0 + timedelta(hours=20),
              "created_before": T0 + timedelta(hours=40)}
    expected = sorted((_run(n).run_id for n in range(20 * 60, 40 * 60) if n % AGENTS == 3),
                      reverse=True)

    def search() -> list[str]:
        page = seeded.list_runs(agent="agent-3", tenant="acme", newest_first=True, limit=50,
                                **window)
        return [run.run_id for run in page.runs]

    assert search() == expected[:50]

    def unindexed() -> list[str]:
        # The peer: every run read and filtered, what a store without the index does.
        runs = seeded.list_runs(limit=RUNS, newest_first=True).runs
        return [run.run_id for run in runs if transitions.matches(
            run, statuses=None, lease_expired_before=None, parent_run_id=None,
            tenant="acme", agent="agent-3", **window)][:50]

    assert unindexed() == expected[:50]
    indexed, peer = _median_seconds(search), _median_seconds(unindexed)
    print(f"\nsearch by agent and time range over {RUNS} runs (SQLite): "
          f"{indexed * 1000:.1f} ms (median of {TIMINGS}); every run read and filtered: "
          f"{peer * 1000:.1f} ms; {peer / indexed:.0f}x")
    # The issue asks for 300 ms: the figure is printed above, not asserted (a busy
    # machine may take any time); the plan below is what makes it hold.
    for tenant in ("acme", None):
        plan = _plan(seeded.path, agent="agent-3", tenant=tenant, **window)
        assert "USING INDEX runs_by_agent (agent=? AND created_at>? AND created_at<?)" in plan \
            or "USING INDEX runs_by_agent (agent=? AND created_at>=? AND created_at<?)" in plan, \
            plan
    plan = _plan(seeded.path, agent="agent-3", tenant="acme", statuses=[RunStatus.CREATED],
                 **window)
    assert "runs_by_agent" in plan, plan


def test_the_other_searches_use_an_index_too(seeded: SqliteRunStore) -> None:
    assert "runs_by_agent" in _plan(seeded.path, agent="agent-1")
    prefix = _plan(seeded.path, run_id_prefix=_run(16).run_id[:-1])
    assert "run_id>? AND run_id<?" in prefix.replace(">=", ">"), prefix
    assert "SCAN" not in prefix, prefix
    # A closed range reads its runs through the creation index; an open one may walk
    # the ids newest first instead, stopping at a page.
    assert "runs_by_creation" in _plan(seeded.path, created_after=T0 + timedelta(hours=20),
                                       created_before=T0 + timedelta(hours=22))
    page = seeded.list_runs(run_id_prefix=_run(16).run_id[:-1], limit=100)  # ids 16..31
    assert [run.run_id for run in page.runs] == [f"run_{n:032x}" for n in range(16, 32)]


def test_runs_stored_before_the_agent_column_are_found_after_the_migration(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "runs.sqlite"
    with SqliteRunStore(path) as store:
        store.create_run(_run(1))
        store.create_run(_run(2).model_copy(update={"manifest": {"name": "agent-1"}}))
        store.create_run(_run(3).model_copy(update={"manifest": {}}))
        monkeypatch.setenv(KEY_VARIABLE, "base64:" + "A" * 43 + "=")
        store.create_run(_run(11))  # its definition encrypted
    # The file as schema 4 left it: no agent column, no search indexes.
    with sqlite3.connect(path) as raw:
        assert raw.execute("SELECT definition FROM runs WHERE run_id = ?",
                           (_run(11).run_id,)).fetchone()[0].startswith("aesgcm1:")
        raw.execute("DROP INDEX runs_by_agent")
        raw.execute("DROP INDEX runs_by_creation")
        raw.execute("ALTER TABLE runs DROP COLUMN agent")
        raw.execute("DELETE FROM schema_version WHERE version = 5")
    with SqliteRunStore(path) as store:
        found = store.list_runs(agent="agent-1").runs
        assert [run.run_id for run in found] == [_run(n).run_id for n in (1, 2, 11)]
        assert store.list_runs(agent="agent-3").runs == []
    with sqlite3.connect(path) as raw:
        assert raw.execute("SELECT max(version) FROM schema_version").fetchone()[0] == 5
