"""How SqliteRunStore answers `list_runs`: every filter as indexed SQL.

Each filter reads a column of the run row that copies a field of the row's
checksummed texts (`sqlite_rows.RUN_FIELDS`; the indexes are in
`sqlite_schema`). The runs returned are checked like any read (their seal,
their texts) and against the filters again, so a row whose columns were
altered outside the store is reported as `CorruptRecord`, never listed under
the wrong filter. A listing of every run is also checked against the store's
run count, so a run row that went missing is reported, not left out.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection
from datetime import datetime
from pathlib import Path
from typing import Any

from stores import transitions
from stores.base import CorruptRecord
from stores.records import RunPage, RunStatus
from stores.run_search import RunSearch, prefix_end
from stores.sqlite_integrity import check_run_count
from stores.sqlite_rows import RUN_SELECT, decode_run, micros, run_row, with_columns


def list_runs(conn: sqlite3.Connection, path: Path, *,
              statuses: Collection[RunStatus] | None, lease_expired_before: datetime | None,
              parent_run_id: str | None, tenant: str | None,
              resume_requested_before: datetime | None, search: RunSearch,
              newest_first: bool, limit: int, cursor: str | None) -> RunPage:
    statement, params = listing_statement(
        statuses=statuses, lease_expired_before=lease_expired_before,
        parent_run_id=parent_run_id, tenant=tenant,
        resume_requested_before=resume_requested_before, search=search,
        newest_first=newest_first, limit=limit, cursor=cursor)
    rows = conn.execute(statement, params).fetchall()
    found = []
    for columns in rows:
        row = run_row(path, columns)
        run = with_columns(path, decode_run(path, row.run_id, text=row.record,
                                            checksum=row.checksum, definition=row.definition,
                                            definition_checksum=row.definition_checksum),
                           row.values)
        # The filter columns are written with the texts, so a disagreement
        # means the row was altered outside this store.
        if not transitions.matches(run, statuses=statuses, parent_run_id=parent_run_id,
                                   lease_expired_before=lease_expired_before, tenant=tenant,
                                   resume_requested_before=resume_requested_before,
                                   **search._asdict()):
            raise CorruptRecord(f"run {run.run_id!r} in {path}: its indexed "
                                "columns disagree with its record")
        found.append(run)
    page = transitions.page_of(found, limit)
    every_run = all(given is None for given in (
        statuses, lease_expired_before, parent_run_id, tenant, resume_requested_before, cursor,
        *search))
    if every_run and page.cursor is None and limit >= 0:
        check_run_count(conn, path, len(page.runs))
    return page


def listing_statement(*, statuses: Collection[RunStatus] | None,
                      lease_expired_before: datetime | None, parent_run_id: str | None,
                      tenant: str | None, resume_requested_before: datetime | None,
                      search: RunSearch, newest_first: bool, limit: int,
                      cursor: str | None) -> tuple[str, list[Any]]:
    """The SELECT of a `list_runs` page (one run past it) and its parameters: what a
    test asks SQLite's planner about (`EXPLAIN QUERY PLAN`)."""
    where = ["1"]
    params: list[Any] = []
    # With an agent, its index (agent, created_at) answers: a unary `+` keeps the
    # planner from the status and tenant indexes, which would read every run of
    # the status or tenant to spare a sort of the few the search finds.
    unindexed = "+" if search.agent is not None else ""
    if statuses is not None:
        wanted = sorted({RunStatus(status).value for status in statuses})
        where.append(f"{unindexed}status IN ({', '.join('?' * len(wanted))})")
        params.extend(wanted)
    if parent_run_id is not None:
        where.append("parent_run_id = ?")
        params.append(parent_run_id)
    if tenant is not None:
        where.append(f"{unindexed}tenant = ?")
        params.append(tenant)
    _search_terms(search, where, params)
    if lease_expired_before is not None:
        where.append("((status = 'running' AND lease_expires_at < ?)"
                     " OR (status = 'created' AND created_at < ?))")
        params.extend([micros(lease_expired_before)] * 2)
    if resume_requested_before is not None:
        where.append("status = 'suspended' AND resume_requested_at < ?")
        params.append(micros(resume_requested_before))
    if cursor is not None:
        where.append("run_id < ?" if newest_first else "run_id > ?")
        params.append(cursor)
    # One more than a page tells whether another page follows.
    params.append(max(limit + 1, 0))
    return (f"SELECT {RUN_SELECT} FROM runs WHERE {' AND '.join(where)}"
            f" ORDER BY run_id {'DESC' if newest_first else 'ASC'} LIMIT ?", params)


def _search_terms(search: RunSearch, where: list[str], params: list[Any]) -> None:
    """The operator's search as indexed terms: the agent and creation columns, and the
    id prefix as a range of the primary key."""
    if search.agent is not None:
        where.append("agent = ?")
        params.append(search.agent)
    if search.run_id_prefix is not None:
        where.append("run_id >= ?")
        params.append(search.run_id_prefix)
        end = prefix_end(search.run_id_prefix)
        if end is not None:
            where.append("run_id < ?")
            params.append(end)
    if search.created_after is not None:
        where.append("created_at >= ?")
        params.append(micros(search.created_after))
    if search.created_before is not None:
        where.append("created_at < ?")
        params.append(micros(search.created_before))
