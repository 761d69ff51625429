"""Runs written straight into the table as DynamoDbRunStore lays them out
(`items.meta_item`, `items.definition_item`), 25 items to a BatchWriteItem: a
backlog of thousands in seconds, where the store's own transactions (which moto
copies the table for) take minutes. For tests of what reading them costs."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterable

from stores.dynamodb.items import Item, Texts, definition_item, meta_item
from stores.dynamodb.store import DEFAULT_INLINE_LIMIT, DynamoDbRunStore
from stores.records import RunRecord


def seed(store: DynamoDbRunStore, runs: Iterable[RunRecord]) -> None:
    """Write `runs` as they are (status, attempt, suspension...), as the store would."""
    texts = Texts(None, DEFAULT_INLINE_LIMIT)
    items: list[Item] = []
    for run in runs:
        incarnation = uuid.uuid4().hex
        items += [meta_item(run, incarnation=incarnation, rev=secrets.token_hex(8),
                            texts=texts, retention=None),
                  definition_item(run, incarnation=incarnation, texts=texts)]
    for start in range(0, len(items), 25):
        batch = [{"PutRequest": {"Item": item}} for item in items[start:start + 25]]
        while batch:
            answer = store.client.batch_write_item(RequestItems={store.table_name: batch})
            batch = answer.get("UnprocessedItems", {}).get(store.table_name, [])
