"""An owner's checkpoint on DynamoDB in one transaction, with no read first.

The store remembers each run as it last read or wrote it (`runs.RunReader`).
When that predicts the save succeeds (the same incarnation and attempt,
running, held by this owner, latest checkpoint `seq - 1`, the previous lists
cached, no budget change to decide), the save is one `TransactWriteItems`:
META updated on the condition of exactly that prediction, and the new
checkpoint body put where none exists. A wrong prediction is a refusal, which
the store decides again on what it returned (its read-modify-write path).
"""

from __future__ import annotations

import secrets
from datetime import datetime

from stores import transitions
from stores.deltas import encode_body
from stores.dynamodb.items import (
    META,
    Texts,
    checkpoint_item,
    due_at,
    key,
    lease_still_due,
    micros,
    n,
    names,
    s,
)
from stores.dynamodb.requests import ABSENT, Condition, Refused, Table, landed, put_op, update_op
from stores.dynamodb.runs import RunReader, StoredRun, running_at
from stores.records import Checkpoint, RunStatus


def save_predicted(table: Table, reader: RunReader, texts: Texts, checkpoint: Checkpoint, *,
                   expected_attempt: int, lease_expires_at: datetime | None,
                   owner: str | None) -> bool | Refused:
    """True when saved; False when the remembered run does not predict success; the
    refusal when the prediction was wrong (the run is forgotten then). `owner`: the
    lease owner the store's writes of this run need (None: any)."""
    known = reader.remembered(checkpoint.run_id)
    seq = checkpoint.seq
    if (known is None or known.run.attempt != expected_attempt
            or known.run.status is not RunStatus.RUNNING
            or owner not in (None, known.run.lease_owner)
            or (known.run.checkpoint_seq or 0) != seq - 1
            or transitions.budget_changes(known.run, checkpoint)):
        return False
    previous = reader.saved_lists(known.incarnation, seq - 1)
    if previous is None and seq != 1:
        return False
    updated = transitions.next_checkpoint(
        known.run, checkpoint, expected_attempt=expected_attempt,
        lease_expires_at=lease_expires_at, latest_seq=seq - 1, stored_at_seq=None)
    if updated is None:
        return False
    body, saved = encode_body(checkpoint, previous)
    rev = secrets.token_hex(8)
    # `takeovers` too: a checkpoint is progress, it resets the count.
    sets = {"checkpoint_seq": n(seq), "consumed_tokens": n(updated.consumed_tokens),
            "updated_at": n(micros(updated.updated_at)), "takeovers": n(updated.takeovers),
            "rev": s(rev)}
    due = known.due_at
    if lease_expires_at is not None:
        sets["lease_expires_at"] = n(micros(lease_expires_at))
        if not lease_still_due(due, updated):
            due = due_at(updated)
            sets["due_at"] = n(due)
    # Conditioned on exactly the prediction: this incarnation, running at
    # this attempt, with seq - 1 its latest checkpoint.
    prediction = running_at(known, expected_attempt, owner) & Condition(
        "#checkpoint_seq = :previous", names("checkpoint_seq"), {":previous": n(seq - 1)})
    meta = update_op(table.name, key(checkpoint.run_id, META),
                     "SET " + ", ".join(f"#{name} = :{name}" for name in sets), prediction,
                     names=names(*sets),
                     values={f":{name}": value for name, value in sets.items()})
    body_put = put_op(table.name, checkpoint_item(checkpoint, body, texts), ABSENT)
    try:
        table.transact([meta, body_put])
    except Refused as refused:
        if not landed(refused, "rev", rev):
            reader.forget(checkpoint.run_id)
            return refused
    reader.remember(StoredRun(updated, known.incarnation, rev, due))
    reader.save_lists(known.incarnation, saved)
    return True
