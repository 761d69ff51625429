"""How DynamoDbRunStore answers `list_runs` from its GSIs, never a Scan.

* `by-status-shard` (status_shard, due_at), KEYS_ONLY: one Query per
  partition of each wanted status (`STATUS_SHARDS` of them: a status is
  spread over that many partitions, see `items.status_shard`), sent a few
  at a time, merged in due_at order. With `lease_expired_before=T` only
  `running` and `created` are wanted, with `resume_requested_before=T` only
  `suspended`, and the key condition is `due_at < T` (a running run's lease
  expiry, a created run's creation time, a suspended run's resume request),
  so the reconciler reads only overdue runs, in every partition.
* `by-parent` (parent_run_id, run_id) and `by-tenant` (tenant, run_id),
  KEYS_ONLY and sparse: only sub-runs, and only runs with a tenant, are in
  them, already in run_id order (either way), read page by page as needed.

The index is chosen by the narrowest filter given: a parent, then an overdue
filter, then a tenant, else the statuses. Every other filter is applied to
the runs themselves, which come from one consistent BatchGetItem per 50; so
is the chosen one again, so an index entry that lags its run never shows.

Pages are in run_id order (descending with `newest_first`), as the contract
requires, and the cursor is the last run_id of a page. The status index is in
due_at order, so a page read from it reads every index key of the wanted
statuses, in all their partitions (~100 bytes each, eventually consistent),
keeps those beyond the cursor and sorts them: cheap for the reconciler (few
runs are overdue), linear in the matching runs for a full listing. Sharding
changes only how many Queries that takes, not which runs a page holds.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Iterator
from concurrent.futures import ThreadPoolExecutor
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
    number_of,
    run_id_of,
    s,
    status_shards,
    text_of,
)
from stores.dynamodb.runs import RunReader
from stores.records import RunPage, RunRecord, RunStatus

_RUNS_PER_BATCH = 50  # two keys (META, META#DEF) per run in a 100-key BatchGetItem
_PARTITION_READERS = 8  # status index partitions queried at once (boto3 clients are thread-safe)


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
        partitions = [(shard, due.get(status)) for status in wanted
                      for shard in status_shards(status)]
        candidates = iter(sorted(
            (run_id for run_id in _in_partitions(reader, partitions)
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


def _in_partitions(reader: RunReader,
                   partitions: list[tuple[str, datetime | None]]) -> Iterator[str]:
    """The ids of the runs in these status index partitions (each due before its time,
    if any), merged in due_at order.

    The partitions are read at once, `_PARTITION_READERS` Queries at a time:
    read one after another, the 16 partitions of a status would cost the start
    function's capacity count 16 round trips.
    """
    with ThreadPoolExecutor(max_workers=min(_PARTITION_READERS, len(partitions))) as pool:
        entries = list(pool.map(lambda partition: list(_in_shard(reader, *partition)),
                                partitions))
    for _, run_id in heapq.merge(*entries):
        yield run_id


def _in_shard(reader: RunReader, shard: str, before: datetime | None) -> Iterator[
        tuple[int, str]]:
    """(due_at, run id) of the runs in one status index partition, in due_at order."""
    condition = "#status_shard = :shard"
    values = {":shard": s(shard)}
    if before is not None:
        condition += " AND #due_at < :before"
        values[":before"] = n(micros(before))
    # DynamoDB refuses a name the expression does not use.
    used = names("status_shard", "due_at") if before is not None else names("status_shard")
    for entry in reader.table.query_index(STATUS_INDEX, condition, used, values):
        if text_of(entry, "sk") == META:
            yield number_of(entry, "due_at"), run_id_of(text_of(entry, "pk"))


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
