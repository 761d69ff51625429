"""Retention: the TTL attribute of terminal runs, and what a TTL leaves behind.

DynamoDB's TTL removes a finished run's META item only; its definition,
checkpoints and effects stay until `delete_run` of the (now missing) run or
the next `create_run` of the same id clears them.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from aws_template import AwsResources
from conftest import open_store

from stores.conformance import ERROR, RUN, at, make_checkpoint, make_run, start_busy_run
from stores.dynamodb.items import META, TTL_ATTRIBUTE, key, partition


def meta(aws: AwsResources) -> dict[str, dict[str, str]]:
    item: dict[str, dict[str, str]] = aws.dynamodb.get_item(TableName=aws.table,
                                                            Key=key(RUN, META))["Item"]
    return item


def items(aws: AwsResources) -> list[str]:
    found = aws.dynamodb.query(TableName=aws.table, KeyConditionExpression="pk = :pk",
                               ExpressionAttributeValues={":pk": {"S": partition(RUN)}})
    return [item["sk"]["S"] for item in found["Items"]]


@pytest.mark.parametrize("end", ["complete_run", "fail_run", "cancel_run"])
def test_a_terminal_run_gets_its_ttl_and_a_live_one_none(aws: AwsResources, end: str) -> None:
    store = open_store(aws, retention=timedelta(days=7))
    start_busy_run(store)
    assert TTL_ATTRIBUTE not in meta(aws)
    if end == "cancel_run":
        store.cancel_run(RUN, at=at(100))
    elif end == "complete_run":
        store.complete_run(RUN, expected_attempt=1, output=None, at=at(100))
    else:
        store.fail_run(RUN, expected_attempt=1, error=ERROR, at=at(100))
    expires = int(meta(aws)[TTL_ATTRIBUTE]["N"])
    assert expires == int((at(100) + timedelta(days=7)).timestamp())


def test_without_retention_no_run_expires(aws: AwsResources) -> None:
    store = open_store(aws, retention=None)
    start_busy_run(store)
    store.complete_run(RUN, expected_attempt=1, output=None, at=at(100))
    assert TTL_ATTRIBUTE not in meta(aws)


def test_what_a_ttl_leaves_is_cleared_by_the_next_create_or_by_delete_run(
        aws: AwsResources) -> None:
    store = open_store(aws)
    start_busy_run(store)
    store.complete_run(RUN, expected_attempt=1, output=None, at=at(100),
                       checkpoint=make_checkpoint(seq=2))
    aws.dynamodb.delete_item(TableName=aws.table, Key=key(RUN, META))  # what the TTL does
    fresh = open_store(aws)
    assert fresh.load_run(RUN) is None
    assert fresh.load_latest_checkpoint(RUN) is None
    assert RUN not in [run.run_id for run in fresh.list_runs().runs]
    assert len(items(aws)) == 4  # definition, two checkpoints, an effect

    fresh.create_run(make_run())  # the same id again: nothing of the old run comes back
    assert sorted(items(aws)) == ["META", "META#DEF"]
    fresh.resume_run(RUN, owner="o", now=at(200), lease_seconds=60)
    fresh.save_checkpoint(make_checkpoint(seq=1, variables={"new": True}), expected_attempt=1)
    assert fresh.list_checkpoints(RUN)[0].seq == 1

    fresh.complete_run(RUN, expected_attempt=1, output=None, at=at(300))
    aws.dynamodb.delete_item(TableName=aws.table, Key=key(RUN, META))
    fresh.delete_run(RUN)  # a missing run: a no-op for the contract, a cleanup here
    assert items(aws) == []
