"""Listing by status reads a page, not the table (issue 32).

A run with nothing due (suspended without a request, finished) sits in its
status index partition in run_id order, past every due time; a listing reads
such runs a Query `Limit` at a time and merges the partitions. So
`list_runs(limit=1)` reads the same index entries over 1,200 runs as over
2,400, and pages through ids alike in their first bytes (one sort key) and
through entries an earlier release wrote (a time as their sort key) in order.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from aws_template import AwsResources
from conftest import open_store, unique
from seeding import seed
from test_dynamodb_requests import requests

from stores.conformance import NOW, make_run
from stores.dynamodb.items import META, NEVER_DUE, STATUS_SHARDS, key, micros
from stores.dynamodb.store import DynamoDbRunStore
from stores.records import RunRecord, RunStatus, Suspension


@pytest.fixture
def store(aws: AwsResources) -> DynamoDbRunStore:
    return open_store(aws, prefix=f"{unique('test')}/")


def finished(run_id: str) -> RunRecord:
    return make_run(run_id, status=RunStatus.COMPLETED, attempt=1, output="ok",
                    updated_at=NOW + timedelta(minutes=1))


def waiting(run_id: str, **fields: Any) -> RunRecord:
    return make_run(run_id, status=RunStatus.SUSPENDED, attempt=1, **fields,
                    suspension=Suspension(reason="approval", details={"approval_id": "a"}))


@pytest.fixture
def entries_read(aws: AwsResources) -> Iterator[list[int]]:
    """How many index entries each Query returned."""
    read: list[int] = []

    def count(parsed: dict[str, Any], **_: Any) -> None:
        read.append(len(parsed.get("Items", [])))

    aws.dynamodb.meta.events.register("after-call.dynamodb.Query", count)
    yield read
    aws.dynamodb.meta.events.unregister("after-call.dynamodb.Query", count)


@pytest.mark.slow  # ~30 s: moto writes 3,600 runs
def test_listing_one_run_reads_the_same_whatever_the_table_holds(
        store: DynamoDbRunStore, entries_read: list[int]) -> None:
    figures = {}
    for size in (1_200, 2_400):  # each partition holds more than a Query's Limit
        seed(store, [finished(f"done-{size}-{n:05d}") for n in range(size // 2)])
        seed(store, [waiting(f"wait-{size}-{n:05d}") for n in range(size // 2)])
        for newest_first in (False, True):
            entries_read.clear()
            with requests(store.client) as counted:
                page = store.list_runs(limit=1, newest_first=newest_first)
            assert len(page.runs) == 1 and page.cursor == page.runs[0].run_id
            figures[size, newest_first] = (dict(counted), sum(entries_read))
    print(f"\nlist_runs(limit=1): {figures}")
    # One Query per partition of each of the six statuses; newest first, the four
    # statuses with an ordered part take two (its due part, then the ordered part).
    assert figures[2_400, False][0] == {"dynamodb:Query": 6 * STATUS_SHARDS,
                                        "dynamodb:BatchGetItem": 1}
    assert figures[2_400, True][0] == {"dynamodb:Query": (2 + 4 * 2) * STATUS_SHARDS,
                                       "dynamodb:BatchGetItem": 1}
    # A Query's Limit of entries from each partition holding any, not the runs:
    for newest_first in (False, True):
        assert figures[1_200, newest_first][1] == figures[2_400, newest_first][1]
        assert figures[2_400, newest_first][1] <= 2 * STATUS_SHARDS * 25


@pytest.mark.parametrize("newest_first", [False, True], ids=["oldest-first", "newest-first"])
def test_pages_cover_alike_ids_and_earlier_releases_entries_in_order(
        aws: AwsResources, store: DynamoDbRunStore, newest_first: bool) -> None:
    # Forty ids alike in their first 15 bytes (one sort key), and others around them.
    alike = [f"run_0123456789ab-{n:02d}" for n in range(40)]
    others = [f"run_{n:02d}" for n in range(30)] + [f"run_z{n:02d}" for n in range(10)]
    seed(store, [finished(run_id) for run_id in alike + others[::2]])
    seed(store, [waiting(run_id) for run_id in others[1::2]])
    requested = "run_0123456789ab-07x"
    seed(store, [waiting(requested, resume_requested_at=NOW, resume_reason="asked")])
    # What an earlier release wrote: a finished run's last update, NEVER_DUE for a
    # suspended run without a request.
    for run_id, due in (("run_03", micros(NOW)), ("run_05", NEVER_DUE), ("run_z01", 1)):
        aws.dynamodb.update_item(TableName=aws.table, Key=key(run_id, META),
                                 UpdateExpression="SET due_at = :due",
                                 ExpressionAttributeValues={":due": {"N": str(due)}})
    everything = sorted([*alike, *others, requested], reverse=newest_first)
    for statuses, expected in (
            (None, everything),
            ([RunStatus.COMPLETED], [r for r in everything if r in alike or r in others[::2]]),
            ([RunStatus.SUSPENDED], [r for r in everything
                                     if r in others[1::2] or r == requested])):
        seen: list[str] = []
        cursor = None
        while True:
            page = store.list_runs(statuses=statuses, limit=7, cursor=cursor,
                                   newest_first=newest_first)
            seen += [run.run_id for run in page.runs]
            cursor = page.cursor
            if cursor is None:
                break
        assert seen == expected, statuses
