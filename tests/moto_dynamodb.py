"""moto's DynamoDB made to behave, at scale and under threads, as DynamoDB does.

Two things moto does that DynamoDB does not:

* To undo a cancelled TransactWriteItems it deep-copies every table the
  transaction touches before each one, so N transactions on a growing table
  cost O(N^2): a 1,000-checkpoint run, or a burst of 2,000 runs, takes
  minutes.
* Nothing serialises its requests. A cancelled transaction puts back the
  copy of the whole table, undoing what other threads wrote meanwhile, and
  two conditional writes of one item from two threads can both pass their
  condition. DynamoDB makes each item's conditional write atomic.

`item_rollback()` keeps a copy of only the items a transaction names (the
only ones it can change) and puts them back if it is cancelled, and runs
every DynamoDB request under one lock, so each request is atomic as it is
on DynamoDB. What moto answers is unchanged.

One more thing moto does that DynamoDB does not: every Query, of the table or
of an index, sorts every item of the table before it looks at the key, so a
Query costs O(table) however small its partition, and a burst of N runs, whose
reconciler passes and Advances Query all along, costs O(N^2) in Queries.
`keyed_queries()` hands moto's Query only the items that can match its key: the
partition's items; for an index, those that a map of the index's hash key
values (kept on every write, checked on every read) places under the
condition's value. moto then checks, sorts and pages them as before: what it
answers is unchanged.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest


@contextmanager
def item_rollback() -> Iterator[None]:
    from moto.dynamodb import models
    from moto.dynamodb.models.dynamo_type import DynamoType
    from moto.dynamodb.responses import DynamoHandler

    stdlib_copy = models.copy
    transact = models.DynamoDBBackend.transact_write_items
    call_action = DynamoHandler.call_action
    one_at_a_time = threading.RLock()

    class TablesByReference:
        copy = staticmethod(stdlib_copy.copy)

        @staticmethod
        def deepcopy(value: Any, memo: Any = None) -> Any:
            return value if isinstance(value, models.Table) else stdlib_copy.deepcopy(value, memo)

    def transact_with_item_rollback(backend: Any, transact_items: list[dict[str, Any]]) -> None:
        saved = []
        for entry in transact_items:
            (_, op), = entry.items()
            table = backend.get_table(op["TableName"])
            keys = op.get("Key") or op["Item"]
            at = (DynamoType(keys[table.hash_key_attr]), DynamoType(keys[table.range_key_attr]))
            saved.append((table, at, stdlib_copy.deepcopy(table.get_item(*at))))
        try:
            transact(backend, transact_items)
        except Exception:
            for table, (hash_key, range_key), item in saved:
                if item is None:
                    table.items[hash_key].pop(range_key, None)
                else:
                    table.items[hash_key][range_key] = item
            raise

    def atomic_call_action(handler: Any) -> Any:
        with one_at_a_time:
            return call_action(handler)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(models, "copy", TablesByReference)
        patch.setattr(models.DynamoDBBackend, "transact_write_items", transact_with_item_rollback)
        patch.setattr(DynamoHandler, "call_action", atomic_call_action)
        yield



@contextmanager
def keyed_queries() -> Iterator[None]:
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.models.table import Table

    query = Table.query
    all_items = Table.all_items
    put_item = Table.put_item
    update_item = DynamoDBBackend.update_item
    query_arguments = inspect.signature(query)
    # The candidates of the Query running on this thread (None: every item).
    narrowed = threading.local()
    # Each table's index hash keys, by the table object (held, so its id is not reused):
    # a table moto replaces by a copy (its own transaction rollback) starts afresh.
    indexes: dict[int, tuple[Any, _HashKeyIndex]] = {}
    indexes_lock = threading.Lock()

    def index_of(table: Any) -> _HashKeyIndex:
        with indexes_lock:
            held = indexes.get(id(table))
            if held is None:
                held = indexes[id(table)] = (table, _HashKeyIndex())
            return held[1]

    def query_by_key(table: Any, *args: Any, **kwargs: Any) -> Any:
        arguments = query_arguments.bind(table, *args, **kwargs).arguments
        narrowed.items = _candidates(table, index_of(table), arguments["hash_key"],
                                     arguments.get("index_name"),
                                     arguments.get("hash_key_conditions"))
        try:
            return query(table, *args, **kwargs)
        finally:
            narrowed.items = None

    def candidates_or_all_items(table: Any) -> Any:
        items = getattr(narrowed, "items", None)
        return all_items(table) if items is None else items

    # Every write of an item goes through one of these two (a transaction's, a
    # batch's, an update creating the item): each adds it where its values say.
    def put_and_index(table: Any, *args: Any, **kwargs: Any) -> Any:
        item = put_item(table, *args, **kwargs)
        index_of(table).add(item)
        return item

    def update_and_index(backend: Any, table_name: str, *args: Any, **kwargs: Any) -> Any:
        item = update_item(backend, table_name, *args, **kwargs)
        index_of(backend.get_table(table_name)).add(item)
        return item

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Table, "query", query_by_key)
        patch.setattr(Table, "all_items", candidates_or_all_items)
        patch.setattr(Table, "put_item", put_and_index)
        patch.setattr(DynamoDBBackend, "update_item", update_and_index)
        yield


_KEY_TYPES = frozenset({"S", "N", "B"})  # the only types a key attribute can have


class _HashKeyIndex:
    """Where a table's items are by the value of an index's hash key attribute.

    A superset: every write adds the item under its new values, and a read checks
    each item it finds against the Query's key, dropping those that no longer
    match (deleted, or changed since). An attribute is indexed from the first
    Query on it, by one pass over the table."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # attribute -> (type, value) -> the (hash key, range key) of its items
        self._places: dict[str, dict[tuple[str, Any], set[tuple[Any, Any]]]] = {}

    def add(self, item: Any) -> None:
        with self._lock:
            for attribute, places in self._places.items():
                self._put(places, item, attribute)

    def items(self, table: Any, attribute: str, value: Any) -> list[Any]:
        with self._lock:
            places = self._places.get(attribute)
            if places is None:
                places = self._places[attribute] = {}
                for item in _every_item(table):
                    self._put(places, item, attribute)
            keys = places.get((value.type, value.cast_value), set())
            found = []
            for key in list(keys):
                item = _item_at(table, *key)
                if item is not None and _equal(item.attrs.get(attribute), value):
                    found.append(item)
                else:
                    keys.discard(key)
            return found

    @staticmethod
    def _put(places: dict[tuple[str, Any], set[tuple[Any, Any]]], item: Any,
             attribute: str) -> None:
        value = item.attrs.get(attribute)
        if value is not None and value.type in _KEY_TYPES:
            places.setdefault((value.type, value.cast_value), set()).add(
                (item.hash_key, item.range_key))


def _every_item(table: Any) -> Iterator[Any]:
    for partition in list(table.items.values()):
        yield from list(partition.values()) if table.range_key_attr else [partition]


def _item_at(table: Any, hash_key: Any, range_key: Any) -> Any:
    partition = table.items.get(hash_key)
    if partition is None or not table.range_key_attr:
        return partition
    return partition.get(range_key)


def _candidates(table: Any, index: _HashKeyIndex, hash_key: Any, index_name: str | None,
                hash_key_conditions: list[tuple[str, Any]] | None) -> list[Any] | None:
    """The items a Query can match, a superset of what moto keeps (None: every item).
    moto's order of them does not matter: it sorts what it keeps by the full key."""
    if not index_name:
        if hash_key is None:
            return None
        partition = table.items.get(hash_key)
        if partition is None:
            return []
        return list(partition.values()) if table.range_key_attr else [partition]
    if not hash_key_conditions or hash_key_conditions[0][1].type not in _KEY_TYPES:
        return None
    (attribute, value), *others = hash_key_conditions
    return [item for item in index.items(table, attribute, value)
            if all(_equal(item.attrs.get(name), other) for name, other in others)]


def _equal(attribute: Any, value: Any) -> bool:
    """moto's DynamoType equality (type and value), without casting a string or binary."""
    if attribute is None:
        return False
    if value.type in {"S", "B"}:
        return bool(attribute.type == value.type and attribute.value == value.value)
    return bool(attribute == value)
