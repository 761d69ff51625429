"""How DynamoDbRunStore answers `list_runs` from its GSIs, never a Scan.

* `by-status` (status, due_at), KEYS_ONLY: one Query per wanted status. With
  `lease_expired_before=T` only `running` and `created` are wanted, with
  `resume_requested_before=T` only `suspended`, and the key condition is
  `due_at < T` (a running run's lease expiry, a created run's creation time,
  a suspended run's resume request), so the reconciler reads only overdue runs.
* `by-parent` (parent_run_id, run_id) and `by-tenant` (tenant, run_id),
  KEYS_ONLY and sparse: only sub-runs, and only runs with a tenant, are in
  them, already in run_id order (either way), read page by page as needed.

The index is chosen by the narrowest filter given: a parent, then an overdue
filter, then a tenant, else the statuses. Every other filter is applied to
the runs themselves, which come from one consistent BatchGetItem per 50; so
is the chosen one again, so an index entry that lags its run never shows.

Pages are in run_id order (descending with `newest_first`), as the contract
requires. The status index is in due_at order, so a page read from it reads
every index key of the wanted statuses (~100 bytes each, eventually
consistent) and sorts them: cheap for the reconciler (few runs are overdue),
linear in the matching runs for a full listing.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from datetime import datetime
from itertools import islice

from stores import transitions
from stores.dynamodb.items import (
    META,
    PARENT_INDEX,
    STATUS_INDEX,
    TENANT_INDEX,
    micros,
    n,
    names,
    run_id_of,
    s,
    text_of,
)
from stores.dynamodb.runs import RunReader
from stores.records import RunPage, RunRecord, RunStatus

_RUNS_PER_BATCH = 50  # two keys (META, META#DEF) per run in a 100-key BatchGetItem


def list_runs(reader: RunReader, *, statuses: Collection[RunStatus] | None,
              lease_expired_before: datetime | None, parent_run_id: str | None,
              tenant: str | None, resume_requested_before: datetime | None,
              newest_first: bool, limit: int, cursor: str | None) -> RunPage:
    wanted = set(RunStatus) if statuses is None else {RunStatus(status) for status in statuses}
    if lease_expired_before is not None:
        wanted &= {RunStatus.RUNNING, RunStatus.CREATED}
    if resume_requested_before is not None:
        wanted &= {RunStatus.SUSPENDED}
    if limit <= 0 or not wanted:
        return RunPage(runs=[])
    candidates: Iterator[str]
    if parent_run_id is not None:
        candidates = _in_order(reader, PARENT_INDEX, "parent_run_id", parent_run_id,
                               cursor=cursor, newest_first=newest_first)
    elif tenant is not None and lease_expired_before is None and resume_requested_before is None:
        candidates = _in_order(reader, TENANT_INDEX, "tenant", tenant, cursor=cursor,
                               newest_first=newest_first)
    else:
        due = {RunStatus.RUNNING: lease_expired_before, RunStatus.CREATED: lease_expired_before,
               RunStatus.SUSPENDED: resume_requested_before}
        candidates = iter(sorted(
            (run_id for status in wanted for run_id in _with_status(reader, status, due.get(status))
             if transitions.beyond(run_id, cursor, newest_first=newest_first)),
            reverse=newest_first))
    found: list[RunRecord] = []
    while len(found) <= limit:
        batch = list(islice(candidates, min(_RUNS_PER_BATCH, limit + 1 - len(found))))
        if not batch:
            break
        found += [run for run in reader.runs(batch) if run.status in wanted
                  and transitions.matches(run, statuses=None, parent_run_id=parent_run_id,
                                          lease_expired_before=lease_expired_before,
                                          tenant=tenant,
                                          resume_requested_before=resume_requested_before)]
    return transitions.page_of(found, limit)


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


def _in_order(reader: RunReader, index: str, attribute: str, value: str, *,
              cursor: str | None, newest_first: bool) -> Iterator[str]:
    """The run ids under `value` of an index sorted by run_id, after `cursor`."""
    condition = f"#{attribute} = :value"
    values = {":value": s(value)}
    if cursor is not None:
        condition += f" AND #run_id {'<' if newest_first else '>'} :cursor"
        values[":cursor"] = s(cursor)
    used = names(attribute, "run_id") if cursor is not None else names(attribute)
    for entry in reader.table.query_index(index, condition, used, values,
                                          forward=not newest_first):
        yield text_of(entry, "run_id")
