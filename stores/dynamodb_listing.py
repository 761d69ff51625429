"""How DynamoDbRunStore answers `list_runs` from its GSIs, never a Scan.

* `by-status` (status, due_at), KEYS_ONLY: one Query per wanted status; with
  `lease_expired_before=T` only `running` and `created` are wanted and the key
  condition is `due_at < T` (a running run's lease expiry, a created run's
  creation time), so the reconciler reads only overdue runs.
* `by-parent` (parent_run_id, run_id), KEYS_ONLY and sparse: only sub-runs
  are in it, already in run_id order, read page by page.

Pages are in run_id order, as the contract requires. The status index is in
due_at order, so a page reads every index key of the wanted statuses
(~100 bytes each, eventually consistent) and sorts them: cheap for the
reconciler (few runs are overdue), linear in the matching runs for a full
listing. The runs themselves come from one consistent BatchGetItem per 50, and
are filtered again, so an index entry that lags its run never shows.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from datetime import datetime
from itertools import islice

from stores import transitions
from stores.dynamodb_items import (
    META,
    PARENT_INDEX,
    STATUS_INDEX,
    micros,
    n,
    names,
    run_id_of,
    s,
    text_of,
)
from stores.dynamodb_runs import RunReader
from stores.records import RunPage, RunRecord, RunStatus

_RUNS_PER_BATCH = 50  # two keys (META, META#DEF) per run in a 100-key BatchGetItem


def list_runs(reader: RunReader, *, statuses: Collection[RunStatus] | None,
              lease_expired_before: datetime | None, parent_run_id: str | None, limit: int,
              cursor: str | None) -> RunPage:
    if limit <= 0:
        return RunPage(runs=[])
    wanted = set(RunStatus) if statuses is None else {RunStatus(status) for status in statuses}
    if lease_expired_before is not None:
        wanted &= {RunStatus.RUNNING, RunStatus.CREATED}
    if parent_run_id is not None:
        candidates = _children(reader, parent_run_id, cursor)
    else:
        candidates = iter(sorted(run_id for status in wanted
                                 for run_id in _with_status(reader, status, lease_expired_before)
                                 if cursor is None or run_id > cursor))
    found: list[RunRecord] = []
    while len(found) <= limit:
        batch = list(islice(candidates, min(_RUNS_PER_BATCH, limit + 1 - len(found))))
        if not batch:
            break
        found += [run for run in reader.runs(batch) if run.status in wanted
                  and transitions.matches(run, statuses=None, parent_run_id=parent_run_id,
                                          lease_expired_before=lease_expired_before)]
    page = found[:limit]
    return RunPage(runs=page, cursor=page[-1].run_id if len(found) > limit else None)


def _with_status(reader: RunReader, status: RunStatus, before: datetime | None) -> Iterator[str]:
    condition = "#status = :status"
    values = {":status": s(status.value)}
    if before is not None:
        condition += " AND #due_at < :before"
        values[":before"] = n(micros(before))
    # DynamoDB refuses a name the expression does not use.
    used = names("status", "due_at") if before is not None else names("status")
    for entry in reader.table.query_index(STATUS_INDEX, condition, used, values):
        if text_of(entry, "sk") == META:
            yield run_id_of(text_of(entry, "pk"))


def _children(reader: RunReader, parent_run_id: str, cursor: str | None) -> Iterator[str]:
    condition = "#parent_run_id = :parent"
    values = {":parent": s(parent_run_id)}
    if cursor is not None:
        condition += " AND #run_id > :cursor"
        values[":cursor"] = s(cursor)
    used = names("parent_run_id", "run_id") if cursor is not None else names("parent_run_id")
    for entry in reader.table.query_index(PARENT_INDEX, condition, used, values):
        yield text_of(entry, "run_id")
