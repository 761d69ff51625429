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
"""

from __future__ import annotations

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
