"""How DynamoDbRunStore keeps run keys unique: an item per key naming its run.

A keyed run's `create_run` puts, in the same transaction as its META and
definition, the item `RUNKEY#<sha256(key)>` / `RUNKEY` holding the run's id,
on condition that no such item exists. Its definition item carries the key
item's partition (`run_key_pk`), so deleting the run deletes the key with it,
and so does the deletion that follows a TTL's removal of the run's META (the
definition is still there then). A key item whose run is gone, or names a run
created under another key (its id reused), holds nothing: `holder` says so,
and the next create under the key replaces it (a conditional put naming the
run it found gone: only the retention function may delete run data).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from stores.dynamodb.items import Item, key_partition, names, s
from stores.dynamodb.requests import Condition, Refused, Table, delete_op, put_op
from stores.dynamodb.runs import RunReader

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef

KEY_SK = "RUNKEY"


def _key(partition: str) -> Item:
    return {"pk": s(partition), "sk": s(KEY_SK)}


def claim_op(table: str, run_key: str, run_id: str,
             stale: str | None = None) -> TransactWriteItemTypeDef:
    """The transaction item that takes the key for `run_id` if nobody holds it, or
    if it still names `stale`, a run found gone (`holder`): replaced in place, so
    taking a key needs no right to delete."""
    item: Item = {**_key(key_partition(run_key)), "run_id": s(run_id)}
    return put_op(table, item, Condition("attribute_not_exists(#pk)", names("pk"))
                  if stale is None else _naming(stale))


def release_op(table: str, run_key: str, run_id: str) -> TransactWriteItemTypeDef:
    """The transaction item that frees the key of a run being deleted."""
    return delete_op(table, _key(key_partition(run_key)), _naming(run_id))


def _naming(run_id: str) -> Condition:
    return Condition("attribute_not_exists(#pk) OR #run_id = :run_id", names("pk", "run_id"),
                     {":run_id": s(run_id)})


def holder(reader: RunReader, run_key: str) -> str | None:
    """The id of the stored run created under `run_key`, or None."""
    item = reader.table.get(_key(key_partition(run_key)))
    if item is None or "run_id" not in item:
        return None
    run_id = item["run_id"]["S"]
    stored = reader.load(run_id)
    return run_id if stored is not None and stored.run.run_key == run_key else None


def stale_holder(table: Table, run_key: str) -> str | None:
    """The run a key item names, read when `holder` found that run gone."""
    item = table.get(_key(key_partition(run_key)))
    return None if item is None or "run_id" not in item else item["run_id"]["S"]


def release_by_reference(table: Table, partition: str, run_id: str) -> None:
    """Free the key a deleted run's definition named (`KEY_REF`), if it still names it."""
    with contextlib.suppress(Refused):
        table.write(delete_op(table.name, _key(partition), _naming(run_id)))
