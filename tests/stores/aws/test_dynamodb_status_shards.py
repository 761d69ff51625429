"""The write-sharded status index (by-status-shard) under moto.

Runs of one status spread over its partitions; listing by status and the
reconciler's stale-run query read every partition, page after page, in
run_id order; the backfill gives the META items an earlier release wrote
(no `status_shard`) their partition, after which they are listed and
reconciled like the others.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from aws_template import AwsResources, create_table
from conftest import open_store, unique

from agent_runtime.reconcile import Reconciler
from agent_runtime.testing import FakeClock
from stores.conformance import LEASE_SECONDS, at, make_checkpoint, make_run
from stores.dynamodb.backfill import Backfilled, backfill_status_shards, main
from stores.dynamodb.items import (
    AGENT_INDEX,
    FORMER_STATUS_INDEX,
    META,
    PARENT_INDEX,
    STATUS_INDEX,
    TENANT_INDEX,
    key,
    status_shard,
    status_shards,
)
from stores.dynamodb.store import DynamoDbRunStore
from stores.records import RunStatus

RUNS = [f"run-{n:02d}" for n in range(40)]


@pytest.fixture
def store(aws: AwsResources) -> DynamoDbRunStore:
    return open_store(aws, prefix=f"{unique('test')}/")


def shard_of(aws: AwsResources, run_id: str) -> str | None:
    item = aws.dynamodb.get_item(TableName=aws.table, Key=key(run_id, META),
                                 ConsistentRead=True).get("Item")
    assert item is not None, f"{run_id} has no META item"
    return item.get("status_shard", {}).get("S")


def unshard(aws: AwsResources, run_id: str) -> None:
    """Make `run_id`'s META what an earlier release wrote: no `status_shard`."""
    aws.dynamodb.update_item(TableName=aws.table, Key=key(run_id, META),
                             UpdateExpression="REMOVE status_shard")


def start(store: DynamoDbRunStore, run_id: str, *, lease_seconds: float) -> None:
    store.create_run(make_run(run_id))
    store.resume_run(run_id, owner="owner-1", now=at(0), lease_seconds=lease_seconds)


def stale_candidates(store: DynamoDbRunStore, *, now_seconds: float) -> list[str]:
    """The run ids the reconciler's pass at `at(now_seconds)` would look at, pages of 5."""
    reconciler = Reconciler(store, clock=FakeClock(at(now_seconds)), page_size=5)
    return [run.run_id for run in reconciler.candidates()]


def test_a_runs_partition_follows_its_status_and_runs_spread_over_the_partitions(
        aws: AwsResources, store: DynamoDbRunStore) -> None:
    for run_id in RUNS:
        store.create_run(make_run(run_id))
    shards = {run_id: shard_of(aws, run_id) for run_id in RUNS}
    assert set(shards.values()) <= set(status_shards(RunStatus.CREATED))
    # 40 runs over 16 partitions: no partition holds more than a few of them.
    assert len(set(shards.values())) >= 8, shards
    number = str(shards["run-00"]).partition("#")[2]
    store.resume_run("run-00", owner="o", now=at(0), lease_seconds=LEASE_SECONDS)
    assert shard_of(aws, "run-00") == f"running#{number}"
    store.complete_run("run-00", expected_attempt=1, output=None, at=at(10))
    assert shard_of(aws, "run-00") == f"completed#{number}" == status_shard(
        RunStatus.COMPLETED, "run-00")


def test_listing_a_status_pages_through_every_partition_in_run_id_order(
        aws: AwsResources, store: DynamoDbRunStore) -> None:
    running = RUNS[::4]
    for run_id in RUNS:
        if run_id in running:
            start(store, run_id, lease_seconds=LEASE_SECONDS)
        else:
            store.create_run(make_run(run_id))
    assert len({shard_of(aws, run_id) for run_id in running}) > 1

    def pages(**filters: Any) -> Iterator[list[str]]:
        cursor = None
        while True:
            page = store.list_runs(limit=3, cursor=cursor, **filters)
            yield [run.run_id for run in page.runs]
            cursor = page.cursor
            if cursor is None:
                return

    seen = list(pages(statuses=[RunStatus.RUNNING]))
    assert [run_id for page in seen for run_id in page] == sorted(running)
    assert max(len(page) for page in seen) == 3
    newest = list(pages(statuses=[RunStatus.RUNNING], newest_first=True))
    assert [run_id for page in newest for run_id in page] == sorted(running, reverse=True)
    every = list(pages(statuses=[RunStatus.CREATED, RunStatus.RUNNING]))
    assert [run_id for page in every for run_id in page] == sorted(RUNS)


def test_the_reconciler_finds_the_stale_runs_of_every_partition(
        aws: AwsResources, store: DynamoDbRunStore) -> None:
    stale = RUNS[1::2]
    for run_id in RUNS:
        start(store, run_id, lease_seconds=60 if run_id in stale else 3600)
    assert len({shard_of(aws, run_id) for run_id in stale}) > 4
    assert stale_candidates(store, now_seconds=120) == sorted(stale)


def test_the_backfill_makes_runs_an_earlier_release_wrote_visible(
        aws: AwsResources, store: DynamoDbRunStore) -> None:
    stale = RUNS[:20:2]
    for run_id in RUNS[:20]:
        start(store, run_id, lease_seconds=60 if run_id in stale else 3600)
    store.save_checkpoint(make_checkpoint(RUNS[1], 1), expected_attempt=1)
    for run_id in RUNS[:20]:
        unshard(aws, run_id)
    assert store.list_runs(limit=100).runs == []
    assert stale_candidates(store, now_seconds=120) == []

    assert backfill_status_shards(aws.dynamodb, aws.table, dry_run=True) == Backfilled(
        updated=20)
    assert {shard_of(aws, run_id) for run_id in RUNS[:20]} == {None}
    assert backfill_status_shards(aws.dynamodb, aws.table) == Backfilled(updated=20)

    assert all(shard_of(aws, run_id) == status_shard(RunStatus.RUNNING, run_id)
               for run_id in RUNS[:20])
    assert [run.run_id for run in store.list_runs(limit=100).runs] == RUNS[:20]
    assert stale_candidates(store, now_seconds=120) == stale
    assert backfill_status_shards(aws.dynamodb, aws.table) == Backfilled()
    # The backfill changed no revision: an owner's next checkpoint, written on
    # what its store remembers (no read), is not refused.
    store.save_checkpoint(make_checkpoint(RUNS[1], 2), expected_attempt=1)
    run = store.load_run(RUNS[1])
    assert run is not None and run.checkpoint_seq == 2


def _delete_meta(aws: AwsResources, store: DynamoDbRunStore, run_id: str) -> None:
    aws.dynamodb.delete_item(TableName=aws.table, Key=key(run_id, META))


def _resume(aws: AwsResources, store: DynamoDbRunStore, run_id: str) -> None:
    store.resume_run(run_id, owner="owner-2", now=at(5), lease_seconds=LEASE_SECONDS)


@pytest.mark.parametrize(("meanwhile", "shard"), [
    (_delete_meta, None), (_resume, status_shard(RunStatus.RUNNING, "run-00"))],
    ids=["deleted", "resumed"])
def test_a_run_written_or_deleted_during_the_backfill_keeps_what_that_write_left(
        aws: AwsResources, store: DynamoDbRunStore,
        meanwhile: Callable[[AwsResources, DynamoDbRunStore, str], None],
        shard: str | None) -> None:
    store.create_run(make_run("run-00"))
    unshard(aws, "run-00")
    calls: list[str] = []

    def before_update(**_: Any) -> None:
        if not calls:
            calls.append("run-00")
            meanwhile(aws, store, "run-00")

    aws.dynamodb.meta.events.register("before-call.dynamodb.UpdateItem", before_update)
    try:
        done = backfill_status_shards(aws.dynamodb, aws.table)
    finally:
        aws.dynamodb.meta.events.unregister("before-call.dynamodb.UpdateItem", before_update)
    assert done == Backfilled(raced=1)
    item = aws.dynamodb.get_item(TableName=aws.table, Key=key("run-00", META),
                                 ConsistentRead=True).get("Item")
    # A deleted run is not brought back as a bare item; a resumed one keeps its shard.
    assert (None if item is None else item["status_shard"]["S"]) == shard


def test_the_backfill_names_a_meta_item_whose_status_is_no_run_status(
        aws: AwsResources, store: DynamoDbRunStore) -> None:
    store.create_run(make_run("run-00"))
    aws.dynamodb.update_item(TableName=aws.table, Key=key("run-00", META),
                             UpdateExpression="SET #status = :bad REMOVE status_shard",
                             ExpressionAttributeNames={"#status": "status"},
                             ExpressionAttributeValues={":bad": {"S": "paused"}})
    assert backfill_status_shards(aws.dynamodb, aws.table) == Backfilled(damaged=("run-00",))
    assert shard_of(aws, "run-00") is None


def test_the_backfill_command_reports_what_it_did(
        aws: AwsResources, store: DynamoDbRunStore, capsys: pytest.CaptureFixture[str]) -> None:
    for run_id in RUNS[:3]:
        store.create_run(make_run(run_id))
        unshard(aws, run_id)
    location = f"{aws.table}?region=us-east-1"
    assert main([location, "--dry-run"]) == 0
    assert capsys.readouterr().out == ("3 META item(s) lack status_shard; "
                                       "0 written meanwhile by the runtime (already sharded)\n")
    assert main([location]) == 0
    assert capsys.readouterr().out.startswith("3 META item(s) given status_shard;")
    assert [run.run_id for run in store.list_runs(statuses=[RunStatus.CREATED]).runs] == RUNS[:3]
    assert main(["runs/table"]) == 1
    assert "backfill: not a DynamoDB store location: 'runs/table'" in capsys.readouterr().err
    assert main([f"{unique('missing')}?region=us-east-1"]) == 1
    assert "does not exist" in capsys.readouterr().err


def test_a_table_without_the_former_index_serves_the_store(aws_account: AwsResources) -> None:
    resources = create_table(aws_account, unique("runs"), KeepFormerStatusIndex="false")
    try:
        table = resources.dynamodb.describe_table(TableName=resources.table)["Table"]
        assert {index["IndexName"] for index in table["GlobalSecondaryIndexes"]} == {
            STATUS_INDEX, PARENT_INDEX, TENANT_INDEX, AGENT_INDEX}
        assert "status" not in {a["AttributeName"] for a in table["AttributeDefinitions"]}
        store = open_store(resources)
        for run_id in RUNS[:3]:
            start(store, run_id, lease_seconds=60)
        assert stale_candidates(store, now_seconds=120) == RUNS[:3]
        assert backfill_status_shards(resources.dynamodb, resources.table) == Backfilled()
    finally:
        resources.dynamodb.delete_table(TableName=resources.table)


def test_an_upgrading_table_opts_in_to_keep_the_former_index(
        aws_account: AwsResources) -> None:
    resources = create_table(aws_account, unique("runs"), KeepFormerStatusIndex="true")
    try:
        table = resources.dynamodb.describe_table(TableName=resources.table)["Table"]
        assert FORMER_STATUS_INDEX in {
            index["IndexName"] for index in table["GlobalSecondaryIndexes"]}
    finally:
        resources.dynamodb.delete_table(TableName=resources.table)


def test_a_new_table_has_no_former_index(aws: AwsResources) -> None:
    table = aws.dynamodb.describe_table(TableName=aws.table)["Table"]
    assert FORMER_STATUS_INDEX not in {
        index["IndexName"] for index in table["GlobalSecondaryIndexes"]}
