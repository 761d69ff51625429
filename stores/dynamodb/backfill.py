"""Give the META items written before the status index was sharded their `status_shard`.

Runs are found by status through the `by-status-shard` GSI, keyed on the
`status_shard` attribute every META write now sets (`items.meta_item`). A
table deployed by an earlier release holds META items without it: until they
are written again they are in no partition of that index, so neither
`list_runs` by status nor the reconciler sees them. `backfill_status_shards`
finds them and sets the attribute, after the release that writes it is
deployed (before, the earlier code's writes would drop it again):

    python -m stores.dynamodb.backfill 'TABLE?region=REGION' [--dry-run]

It reads the table with a Scan (filtered to those items, only their keys and
status read back), so it needs no index, old or new, and works while the old
`by-status` index exists or after it is gone. Each item is updated on its own,
conditioned on still lacking the attribute and still having the status read,
and touching nothing else (not `rev`): a run written meanwhile already has its
shard and keeps it, and no writer's fenced write is refused because of the
backfill. Running it again finds nothing to do, so an interrupted one is simply
run again.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from stores.base import StoreError
from stores.dynamodb.items import META, Item, names, run_id_of, s, status_shard, text_of
from stores.dynamodb.requests import Condition, Refused, Table, update_op
from stores.records import RunStatus

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient


@dataclass(frozen=True)
class Backfilled:
    """What a backfill found: META items given their shard, items a concurrent write
    changed first (they have their shard from that write), and items whose status
    is not a run status (left alone, named in `damaged`)."""

    updated: int = 0
    raced: int = 0
    damaged: tuple[str, ...] = ()


def backfill_status_shards(client: DynamoDBClient, table_name: str, *,
                           dry_run: bool = False) -> Backfilled:
    """Set `status_shard` on every META item of `table_name` that lacks it.

    `dry_run` only counts them (as `updated`). Raises `StoreUnavailable` when
    the table cannot be reached.
    """
    table = Table(client, table_name)
    updated = raced = 0
    damaged: list[str] = []
    for item in _unsharded(table):
        run_id = run_id_of(text_of(item, "pk"))
        try:
            status = RunStatus(text_of(item, "status"))
        except (ValueError, StoreError):
            damaged.append(run_id)
            continue
        if dry_run:
            updated += 1
            continue
        # Still without a shard and still in this status: otherwise a write of
        # the run came first, and every write sets the shard of its status.
        condition = Condition("attribute_not_exists(#status_shard) AND #status = :status",
                              names("status_shard", "status"), {":status": s(status.value)})
        op = update_op(table_name, {"pk": item["pk"], "sk": item["sk"]},
                       "SET #status_shard = :shard", condition,
                       names=names("status_shard"),
                       values={":shard": s(status_shard(status, run_id))})
        try:
            table.write(op)
            updated += 1
        except Refused:
            raced += 1
    return Backfilled(updated=updated, raced=raced, damaged=tuple(damaged))


def _unsharded(table: Table) -> Iterator[Item]:
    """The keys and status of the META items without `status_shard`, page by page."""
    request: dict[str, Any] = {
        "TableName": table.name,
        "FilterExpression": "#sk = :meta AND attribute_not_exists(#status_shard)",
        "ProjectionExpression": "#pk, #sk, #status",
        "ExpressionAttributeNames": names("pk", "sk", "status", "status_shard"),
        "ExpressionAttributeValues": {":meta": s(META)}}
    while True:
        with table.answering("Scan"):
            page = table.client.scan(**request)
        yield from page.get("Items", [])
        last = page.get("LastEvaluatedKey")
        if last is None:
            return
        request["ExclusiveStartKey"] = last


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m stores.dynamodb.backfill",
        description="Set status_shard on the META items an earlier release wrote, so the "
                    "sharded status index (by-status-shard) lists and reconciles them. Run it "
                    "once after deploying the release that adds the index; running it again "
                    "is harmless.")
    parser.add_argument("location", metavar="LOCATION",
                        help="the DynamoDB store: TABLE[?region=R&endpoint_url=U] (as --store)")
    parser.add_argument("--dry-run", action="store_true",
                        help="count the items that lack the attribute, change nothing")
    args = parser.parse_args(argv)
    from stores.dynamodb.location import open_dynamodb_store  # noqa: PLC0415 - after parsing

    try:
        store = open_dynamodb_store(args.location)
        done = backfill_status_shards(store.client, store.table_name, dry_run=args.dry_run)
    except (ValueError, StoreError, ClientError) as error:
        print(f"backfill: {error}", file=sys.stderr)
        return 1
    verb = "lack" if args.dry_run else "given"
    print(f"{done.updated} META item(s) {verb} status_shard; {done.raced} written meanwhile "
          f"by the runtime (already sharded)")
    for run_id in done.damaged:
        print(f"run {run_id!r}: its status is not a run status; left alone", file=sys.stderr)
    return 1 if done.damaged else 0


if __name__ == "__main__":
    sys.exit(main())
