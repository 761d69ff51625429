"""How DynamoDbRunStore removes a run: every item it owns, the run itself last.

A TTL removes only a run's META item; `clear_leftovers` removes the rest of
such a run (what `delete_run` of the now missing run, or the next
`create_run` of its id, calls). Deletion order keeps every prefix of a cut-short
deletion a consistent state: checkpoints newest first (what remains still
loads), then effects and approvals, the definition and META last, and the
run's S3 blobs (keyed under the run) after its items, when nothing names them
any more. `delete_run` of a run already gone deletes its blobs again, so a
deletion cut short anywhere is finished by repeating it (the retention
function does, on a redelivered stream record).
"""

from __future__ import annotations

import contextlib

from stores import transitions
from stores.dynamodb import run_keys
from stores.dynamodb.items import (
    CHECKPOINT_PREFIX,
    DEFINITION_SK,
    KEY_REF,
    META,
    Item,
    key,
    names,
    partition,
    s,
    text_of,
)
from stores.dynamodb.requests import Condition, Refused, delete_op
from stores.dynamodb.runs import RunReader
from stores.dynamodb.s3 import S3BlobStore


def delete_run(reader: RunReader, run_id: str, *, blobs: S3BlobStore | None = None) -> None:
    """Remove a terminal run and all it owns, its `blobs` last (the caller holds the
    run's lock)."""
    table = reader.table
    stored = reader.load(run_id)
    if stored is None:
        clear_leftovers(reader, run_id)
        if blobs is not None:
            blobs.delete_run(run_id)
        return
    transitions.check_deletable(stored.run)
    owned = [item for item in table.query(partition(run_id), projection=("sk",))
             if text_of(item, "sk") not in (META, DEFINITION_SK)]
    table.batch_delete(_deletion_order(owned))
    # The run goes last, with its definition: until then it is a
    # terminal run whose deletion can simply be repeated.
    ours = Condition("#incarnation = :incarnation", names("incarnation"),
                     {":incarnation": s(stored.incarnation)})
    # Refused: deleted, or deleted and created again, meanwhile; ours is gone.
    ops = [delete_op(table.name, key(run_id, META), ours),
           delete_op(table.name, key(run_id, DEFINITION_SK))]
    if stored.run.run_key is not None:  # the key goes with its run, in the same write
        ops.append(run_keys.release_op(table.name, stored.run.run_key, run_id))
    with contextlib.suppress(Refused):
        table.transact(ops)
    reader.forget(run_id)
    if blobs is not None:
        blobs.delete_run(run_id)


def clear_leftovers(reader: RunReader, run_id: str) -> None:
    """Delete what remains of a run whose META is gone (a TTL removes only META)."""
    leftovers = list(reader.table.query(partition(run_id), projection=("sk", KEY_REF)))
    if leftovers and all(text_of(item, "sk") != META for item in leftovers):
        reader.table.batch_delete(_deletion_order(leftovers))
        for item in leftovers:  # a keyed run's definition names its key: free it too
            if KEY_REF in item:
                run_keys.release_by_reference(reader.table, text_of(item, KEY_REF), run_id)


def _deletion_order(items: list[Item]) -> list[Item]:
    """The keys to delete: checkpoints newest first, so a deletion cut short leaves
    a loadable prefix; then effects and approvals; the definition last."""
    def rank(item: Item) -> tuple[int, int, str]:
        sk = text_of(item, "sk")
        if sk.startswith(CHECKPOINT_PREFIX):
            return 0, -int(sk.removeprefix(CHECKPOINT_PREFIX)), ""
        return (2 if sk == DEFINITION_SK else 1), 0, sk

    return [{"pk": item["pk"], "sk": item["sk"]} for item in sorted(items, key=rank)]
