"""Acceptance 3 of issue 11 for DynamoDB: each item of a small store deleted in turn.

The store left by `corruption_scenario` (a run with checkpoints, an effect,
an approval decision), under moto. Each item is deleted in turn, and every
read either returns the original data or raises a store error naming the run,
and `resume` and `fork` run nothing from a run that failed a check (see
tests/stores/test_corruption.py for the file and SQLite stores, where bytes
are flipped too; DynamoDB has no bytes of ours to flip).

What the store cannot tell, by design, is skipped visibly: a run's META item
gone is what its TTL does (the run reads as deleted), and an effect item gone
leaves nothing behind to count it (an effect's reservation writes beside the
run, not on it).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aws_template import AwsResources
from conftest import open_store

from agent_runtime.errors import InvalidInput
from stores.base import RunNotFound
from stores.dynamodb.items import APPROVAL_PREFIX, CHECKPOINT_PREFIX, DEFINITION_SK, META
from tests.stores.corruption_scenario import (
    FORK_SEQ,
    RUN_ID,
    Engine,
    build,
    check_engine,
    check_reads,
    reads,
)


def _items(aws: AwsResources) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    request: dict[str, Any] = {"TableName": aws.table, "ConsistentRead": True}
    while True:
        page = aws.dynamodb.scan(**request)
        items += page["Items"]
        if "LastEvaluatedKey" not in page:
            return sorted(items, key=lambda item: item["sk"]["S"])
        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def _restore(aws: AwsResources, items: list[dict[str, Any]]) -> None:
    """The table holding exactly `items` again."""
    for item in _items(aws):
        aws.dynamodb.delete_item(TableName=aws.table, Key={"pk": item["pk"], "sk": item["sk"]})
    for item in items:
        aws.dynamodb.put_item(TableName=aws.table, Item=item)


def _deleted(aws: AwsResources, item: dict[str, Any]) -> None:
    aws.dynamodb.delete_item(TableName=aws.table, Key={"pk": item["pk"], "sk": item["sk"]})


@pytest.fixture
def built(aws: AwsResources) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The items of the pristine store and what its reads return."""
    build(open_store(aws))
    return _items(aws), reads(open_store(aws))


@pytest.mark.parametrize("kind", ["definition", "checkpoint", "approval"])
def test_a_deleted_item_is_caught_or_harmless(
        aws: AwsResources, built: tuple[list[dict[str, Any]], dict[str, Any]],
        kind: str) -> None:
    items, original = built
    prefix = {"definition": DEFINITION_SK, "checkpoint": CHECKPOINT_PREFIX,
              "approval": APPROVAL_PREFIX}[kind]
    chosen = [item for item in items if item["sk"]["S"].startswith(prefix)]
    assert chosen
    for item in chosen:
        damage = f"item {item['sk']['S']} deleted"
        _restore(aws, items)
        _deleted(aws, item)
        unchanged = check_reads(original, reads(open_store(aws)), location=aws.table,
                                damage=damage)
        # The approval item is the lasting copy of the decision META holds.
        assert unchanged == (kind == "approval"), damage
        _restore(aws, items)
        _deleted(aws, item)
        check_engine(lambda: open_store(aws), unchanged=unchanged, damage=damage)


def test_a_run_whose_meta_is_gone_reads_as_deleted(
        aws: AwsResources, built: tuple[list[dict[str, Any]], dict[str, Any]]) -> None:
    """What a TTL does to a finished run: its META goes, the run reads as absent."""
    items, _ = built
    _deleted(aws, next(item for item in items if item["sk"]["S"] == META))
    store = open_store(aws)
    assert store.load_run(RUN_ID) is None
    assert store.load_latest_checkpoint(RUN_ID) is None
    with pytest.raises(RunNotFound):
        store.list_effects(RUN_ID)
    engine = Engine(open_store(aws))
    with pytest.raises(InvalidInput):
        engine.runtime.run_sync(run_id=RUN_ID, resume=True)
    with pytest.raises(InvalidInput):
        asyncio.run(engine.runtime.fork(RUN_ID, seq=FORK_SEQ))
    assert engine.activity == 0


def test_a_deleted_effect_item_is_not_detected() -> None:
    pytest.skip("DynamoDB keeps no count of a run's effects: a reservation writes its "
                "EFFECT# item beside META, fenced by a condition on it, never on it, so "
                "an effect item deleted out of band reads as never reserved")
