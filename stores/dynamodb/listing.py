"""How DynamoDbRunStore answers `list_runs` from its GSIs, never a Scan, reading
about what a page holds rather than everything that matches.

* `by-status-shard` (status_shard, due_at), KEYS_ONLY: each status is spread
  over `STATUS_SHARDS` partitions (`items.status_shard`). `due_at` is a time
  for a run with something due (a running run's lease expiry, a created run's
  creation, a suspended run's resume request) and, past every time, a key in
  run_id order for a run with nothing due (`items.order_key`: suspended
  without a request, finished). So a partition holds a short "due" part in
  time order, then an "ordered" part in run_id order.
* `by-parent` (parent_run_id, run_id) and `by-tenant` (tenant, run_id),
  KEYS_ONLY and sparse: only sub-runs, and only runs with a tenant, are in
  them, already in run_id order (either way).
* `by-agent` (agent_key, run_id), sparse, with `created_at` projected: a
  tenant's runs of one agent (`items.agent_key`), in run_id order; a time
  range is the Query's filter, so the runs outside it are never fetched.

The index is chosen by the narrowest filter given: a parent, then an overdue
filter, then an agent within a tenant, then a tenant, else the statuses. An
id prefix narrows whichever is read to the range of ids that start with it
(`prefix_end`): a key condition on the indexes in run_id order,
the range of order keys in the status index's ordered part. An agent
without a tenant, or a time range without an agent, is checked on the runs
the chosen index yields.

Every read follows the page: a Query reads at most a page's worth of entries
(its `Limit`, one past the page) and the next Query of that index partition
is sent only when the page needs more, so `list_runs(limit=1)` costs a Query
of a few entries per partition, however many runs the table holds. An
overdue filter (`lease_expired_before`, `resume_requested_before`, the
reconciler's) reads the due part before the time (`due_at < T`): the runs
due, never the ones that wait. A listing by status reads each partition's due
part whole (ids in time order must all be seen to be ordered: a partition's
running runs, queued runs and unserved requests) and its ordered part from
the cursor on, a page at a time; the partitions are merged in run_id order.
Entries an earlier release wrote (a time for a finished run, `NEVER_DUE` for
a suspended one) sit in the due part and are read whole, until rewritten.

The runs themselves come from one BatchGetItem per 50, eventually consistent
(half the read units: the contract lets a listing lag a moment, and an index
does anyway); every filter is applied to them again, so an index entry that
lags its run never shows a run that does not match. The status index's
partitions are queried `_PARTITION_READERS` at a time.

Pages are in run_id order (descending with `newest_first`), as the contract
requires, and the cursor is the last run_id of a page.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from itertools import chain, groupby, islice
from typing import TYPE_CHECKING

from stores import transitions
from stores.dynamodb.items import (
    AGENT_INDEX,
    META,
    ORDERED,
    PARENT_INDEX,
    STATUS_INDEX,
    TENANT_INDEX,
    agent_key,
    micros,
    n,
    names,
    number_of,
    order_key,
    run_id_of,
    s,
    status_shards,
    text_of,
)
from stores.dynamodb.runs import RunReader
from stores.records import RunPage, RunRecord, RunStatus
from stores.run_search import RunSearch, prefix_end

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import AttributeValueTypeDef

_RUNS_PER_BATCH = 50  # two keys (META, META#DEF) per run in a 100-key BatchGetItem
_PARTITION_READERS = 16  # status index partitions queried at once (boto3 clients are thread-safe)
# The fewest entries a Query of a page reads (its Limit): a partition's few due
# entries and the first ordered ones then come in one Query, even for a page of
# one, and 25 KEYS_ONLY entries (~150 bytes each) stay within the 4 KB a Query is
# billed for at least.
_MIN_QUERY_PAGE = 25
# The Limit of a Query with a filter: past what 1 MB of entries holds, so a Query
# reads its whole 1 MB.
_FILTERED_QUERY_PAGE = 10_000
# Only runs with nothing due have an ordered part: a suspended one without a request
# and a finished one. Running and created runs are always due at some time.
_ORDERED_STATUSES = frozenset(RunStatus) - {RunStatus.RUNNING, RunStatus.CREATED}


def list_runs(reader: RunReader, *, statuses: Collection[RunStatus] | None,
              lease_expired_before: datetime | None, parent_run_id: str | None,
              tenant: str | None, resume_requested_before: datetime | None,
              search: RunSearch, newest_first: bool, limit: int,
              cursor: str | None) -> RunPage:
    wanted = set(RunStatus) if statuses is None else {RunStatus(status) for status in statuses}
    if lease_expired_before is not None:
        wanted &= {RunStatus.RUNNING, RunStatus.CREATED}
    if resume_requested_before is not None:
        wanted &= {RunStatus.SUSPENDED}
    if limit <= 0 or not wanted:
        return RunPage(runs=[])
    page = max(limit + 1, _MIN_QUERY_PAGE)
    # An empty prefix is every id.
    ids = _IdRange(search.run_id_prefix or None, cursor, newest_first=newest_first)
    overdue = lease_expired_before is not None or resume_requested_before is not None
    candidates: Iterator[str]
    if parent_run_id is not None:
        candidates = _in_order(reader, PARENT_INDEX, "parent_run_id", parent_run_id,
                               ids=ids, page=page)
    elif search.agent is not None and tenant is not None and not overdue:
        candidates = _in_order(reader, AGENT_INDEX, "agent_key",
                               agent_key(tenant, search.agent), ids=ids, page=page,
                               created=(search.created_after, search.created_before))
    elif tenant is not None and not overdue:
        candidates = _in_order(reader, TENANT_INDEX, "tenant", tenant, ids=ids, page=page)
    else:
        due = {RunStatus.RUNNING: lease_expired_before, RunStatus.CREATED: lease_expired_before,
               RunStatus.SUSPENDED: resume_requested_before}
        partitions = [_Partition(reader, shard, status, due.get(status) if overdue else None,
                                 overdue=overdue, ids=ids, page=page)
                      for status in wanted for shard in status_shards(status)]
        candidates = _merged(partitions, newest_first=newest_first)
    found: list[RunRecord] = []
    while len(found) <= limit:
        batch = list(islice(candidates, min(_RUNS_PER_BATCH, limit + 1 - len(found))))
        if not batch:
            break
        found += [run for run in reader.runs(batch, consistent=False) if run.status in wanted
                  and transitions.matches(run, statuses=None, parent_run_id=parent_run_id,
                                          lease_expired_before=lease_expired_before,
                                          tenant=tenant,
                                          resume_requested_before=resume_requested_before,
                                          **search._asdict())]
    return transitions.page_of(found, limit)


class _IdRange:
    """The run ids a listing may still return, in its order: beyond the cursor and,
    with a prefix, from the prefix up to `prefix_end` of it."""

    def __init__(self, prefix: str | None, cursor: str | None, *, newest_first: bool) -> None:
        self.prefix = prefix
        self.cursor = cursor
        self.newest_first = newest_first
        self.end = None if prefix is None else prefix_end(prefix)

    def holds(self, run_id: str) -> bool:
        return (transitions.beyond(run_id, self.cursor, newest_first=self.newest_first)
                and (self.prefix is None or run_id.startswith(self.prefix)))

    def past(self, run_id: str) -> bool:
        """Whether `run_id` is past the prefix's range in the listing's order: nothing
        after it can be returned."""
        if self.prefix is None:
            return False
        if self.newest_first:
            return run_id < self.prefix
        return self.end is not None and run_id >= self.end

    def key_condition(self) -> tuple[str, dict[str, AttributeValueTypeDef]]:
        """The sort key condition (on `#run_id`) where the listing starts: after the
        cursor, or at the prefix's edge of its range when that is further on."""
        if self.newest_first:
            bounds = [(bound, "<") for bound in (self.cursor, self.end) if bound is not None]
            start = min(bounds, default=None)
        else:
            bounds = [(bound, op) for bound, op in ((self.cursor, ">"), (self.prefix, ">="))
                      if bound is not None]
            start = max(bounds, default=None)
        if start is None:
            return "", {}
        return f" AND #run_id {start[1]} :start", {":start": s(start[0])}


class _Partition:
    """The run ids of one status index partition that a listing wants, in run_id order,
    beyond the cursor: its due part (before `before`, or all of it) read whole, and,
    unless the listing is of overdue runs, its ordered part read a page at a time."""

    def __init__(self, reader: RunReader, shard: str, status: RunStatus,
                 before: datetime | None, *, overdue: bool, ids: _IdRange, page: int) -> None:
        self._reader = reader
        self._shard = shard
        self._ids_wanted = ids
        self._newest_first = ids.newest_first
        self._page = page
        self._due: list[str] = []
        self._ordered: Iterator[tuple[int, str]] = iter(())
        self._before = before
        self._overdue = overdue
        self._has_ordered = not overdue and status in _ORDERED_STATUSES

    def read_first(self) -> None:
        """The Queries that start the partition: the due part whole, and the ordered
        part's first page (one Query for both, when the listing starts at the front)."""
        if self._overdue:
            if self._before is not None:
                self._due = self._ids(self._query(upper=micros(self._before)))
            return
        if not self._has_ordered:
            self._due = self._ids(self._query())
            return
        if self._ids_wanted.cursor is None and self._ids_wanted.prefix is None \
                and not self._newest_first:
            # Due part first, then the ordered part: one Query reads into both.
            entries = self._query(page=self._page)
            due = []
            for entry in entries:
                if entry[0] >= ORDERED:
                    self._ordered = chain([entry], entries)
                    break
                due.append(entry)
            self._due = self._ids(due)
            return
        self._due = self._ids(self._query(upper=ORDERED))
        self._ordered = self._ordered_part()
        first = next(self._ordered, None)  # the first page, read now with the others
        if first is not None:
            self._ordered = chain([first], self._ordered)

    def __iter__(self) -> Iterator[str]:
        beyond = [run_id for run_id in self._due if self._ids_wanted.holds(run_id)]
        beyond.sort(reverse=self._newest_first)
        return heapq.merge(beyond, self._ordered_ids(), reverse=self._newest_first)

    def _ordered_part(self) -> Iterator[tuple[int, str]]:
        """Entries of the ordered part from the cursor's key on (within the prefix's
        keys), in the listing's order."""
        ids = self._ids_wanted
        lower, upper = ORDERED, None
        if ids.cursor is not None:
            if self._newest_first:
                upper = order_key(ids.cursor) + 1
            else:
                lower = order_key(ids.cursor)
        if ids.prefix is not None:
            # A prefix's key is at or below its ids' (zero-padded), and every id
            # in its range is below its end, so at or below the end's key.
            lower = max(lower, order_key(ids.prefix))
            if ids.end is not None:
                end = order_key(ids.end) + 1
                upper = end if upper is None else min(upper, end)
        return self._query(lower=lower, upper=upper, page=self._page)

    def _ordered_ids(self) -> Iterator[str]:
        """The ordered part's ids in run_id order: entries sharing a key (ids alike in
        their first bytes) come in no order, so each such group is sorted."""
        for _, group in groupby(self._ordered, key=lambda entry: entry[0]):
            ids = sorted((run_id for _, run_id in group), reverse=self._newest_first)
            yield from (run_id for run_id in ids if self._ids_wanted.holds(run_id))

    def _ids(self, entries: Iterator[tuple[int, str]] | list[tuple[int, str]]) -> list[str]:
        return [run_id for _, run_id in entries]

    def _query(self, *, lower: int | None = None, upper: int | None = None,
               page: int | None = None) -> Iterator[tuple[int, str]]:
        """(due_at, run id) of the partition's entries with lower <= due_at < upper, in
        due_at order (reversed with `newest_first`, for the ordered part)."""
        condition = "#status_shard = :shard"
        values: dict[str, AttributeValueTypeDef] = {":shard": s(self._shard)}
        if lower is not None and upper is not None:
            condition += " AND #due_at BETWEEN :lower AND :upper"
            values |= {":lower": n(lower), ":upper": n(upper - 1)}
        elif lower is not None:
            condition += " AND #due_at >= :lower"
            values[":lower"] = n(lower)
        elif upper is not None:
            condition += " AND #due_at < :upper"
            values[":upper"] = n(upper)
        # DynamoDB refuses a name the expression does not use.
        used = names("status_shard", "due_at") if ":lower" in values or ":upper" in values \
            else names("status_shard")
        forward = not (self._newest_first and lower is not None)
        for entry in self._reader.table.query_index(STATUS_INDEX, condition, used, values,
                                                    forward=forward, page=page):
            if text_of(entry, "sk") == META:
                yield number_of(entry, "due_at"), run_id_of(text_of(entry, "pk"))


def _merged(partitions: list[_Partition], *, newest_first: bool) -> Iterator[str]:
    """The partitions' run ids merged in run_id order, each once.

    Every partition's first Queries are sent at once, `_PARTITION_READERS` at a
    time: one after another, the 16 partitions of a status would cost the start
    function's capacity count 16 round trips. Later pages (rare: a page longer
    than a partition's first Query) are read as the merge reaches them.
    """
    with ThreadPoolExecutor(max_workers=min(_PARTITION_READERS, len(partitions))) as pool:
        list(pool.map(_Partition.read_first, partitions))
    previous = None
    # An entry moved between partitions while they were read (its run changed
    # status) may be met twice; the runs themselves are checked later anyway.
    for run_id in heapq.merge(*partitions, reverse=newest_first):
        if run_id != previous:
            yield run_id
        previous = run_id


def _in_order(reader: RunReader, index: str, attribute: str, value: str, *, ids: _IdRange,
              page: int,
              created: tuple[datetime | None, datetime | None] = (None, None)) -> Iterator[str]:
    """The run ids under `value` of an index sorted by run_id, in `ids`, a page of
    entries per Query; with `created` (after, before), only the entries whose
    projected `created_at` is in that range (the Query's filter)."""
    start, values = ids.key_condition()
    condition = f"#{attribute} = :value{start}"
    values[":value"] = s(value)
    used = names(attribute, "run_id") if start else names(attribute)
    keep = []
    for bound, (placeholder, operator) in zip(created, ((":after", ">="), (":before", "<")),
                                              strict=True):
        if bound is not None:
            keep.append(f"#created_at {operator} {placeholder}")
            values[placeholder] = n(micros(bound))
    if keep:
        used |= names("created_at")
        # Filtered entries still count against a Query's Limit: read up to a
        # Query's own 1 MB rather than a page, so a narrow range costs few Queries.
        page = _FILTERED_QUERY_PAGE
    for entry in reader.table.query_index(index, condition, used, values,
                                          forward=not ids.newest_first, page=page,
                                          keep=" AND ".join(keep) or None):
        run_id = text_of(entry, "run_id")
        if ids.past(run_id):
            return
        if ids.holds(run_id):
            yield run_id
