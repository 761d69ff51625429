"""Cheaper steps on DynamoDB (issue 32): compressed inline texts, a 4 KB inline limit,
large outputs out of META, and an index entry a checkpoint moves only now and then.

Items an earlier release wrote (plain `S` texts up to 64 KB, an index entry
moved by every checkpoint) still load.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from datetime import timedelta
from typing import Any

import pytest
from aws_template import AwsResources
from conftest import open_store

from stores.base import CorruptRecord
from stores.conformance import RUN, make_checkpoint, start_run
from stores.conformance.builders import LEASE_SECONDS, at
from stores.dynamodb.items import META, checkpoint_sk, key, partition


def items_of(aws: AwsResources, run_id: str = RUN) -> dict[str, dict[str, Any]]:
    found = aws.dynamodb.query(TableName=aws.table, KeyConditionExpression="pk = :pk",
                               ExpressionAttributeValues={":pk": {"S": partition(run_id)}},
                               ConsistentRead=True)["Items"]
    return {item["sk"]["S"]: item for item in found}


def save(store: Any, seq: int, *, renewed_at: float, **fields: Any) -> None:
    store.save_checkpoint(make_checkpoint(seq=seq, created_at=at(renewed_at), **fields),
                          expected_attempt=1,
                          lease_expires_at=at(renewed_at) + timedelta(seconds=LEASE_SECONDS))


def test_a_compressible_body_is_stored_compressed_inline(aws: AwsResources) -> None:
    store = open_store(aws)
    start_run(store)
    save(store, 1, renewed_at=1, variables={"notes": "the same words again " * 400})
    body = items_of(aws)[checkpoint_sk(1)]["body"]
    assert set(body) == {"B"} and len(body["B"]) < 1024  # an 8 KB text in under a KB
    assert open_store(aws).load_latest_checkpoint(RUN) == make_checkpoint(
        seq=1, created_at=at(1), variables={"notes": "the same words again " * 400})


def test_a_body_over_4_kb_compressed_goes_to_s3(aws: AwsResources) -> None:
    store = open_store(aws)
    start_run(store)
    # 16,000 hex digits of hashes: compressed, still ~8 KB.
    noise = "".join(hashlib.sha256(str(n).encode()).hexdigest() for n in range(250))
    save(store, 1, renewed_at=1, variables={"noise": noise})
    assert set(items_of(aws)[checkpoint_sk(1)]["body"]) == {"M"}
    loaded = open_store(aws).load_latest_checkpoint(RUN)
    assert loaded is not None and loaded.variables == {"noise": noise}


def test_a_large_output_is_kept_in_s3_and_meta_stays_small(aws: AwsResources) -> None:
    store = open_store(aws)
    start_run(store)
    output = {"report": [f"{n:08x}-{n * 7919 % 65521:05d}" for n in range(3500)]}  # ~63 KB
    assert len(json.dumps(output)) > 60_000
    store.complete_run(RUN, expected_attempt=1, output=output, at=at(5))
    meta = items_of(aws)[META]
    assert set(meta["state"]) == {"M"}
    assert sum(len(name) + len(json.dumps(value)) for name, value in meta.items()) < 1500
    done = open_store(aws).load_run(RUN)
    assert done is not None and done.output == output


def test_a_checkpoint_moves_the_index_entry_once_per_half_lease(aws: AwsResources) -> None:
    store = open_store(aws)
    start_run(store)  # leased at 0 for 60 s
    due = []
    for seq in range(1, 41):  # a checkpoint a second
        save(store, seq, renewed_at=seq)
        due.append(int(items_of(aws)[META]["due_at"]["N"]))
    assert len(set(due)) <= 3  # moved at the first checkpoint, then once per 30 s
    # Never later than the lease: a run whose lease expired is found at once.
    last_lease = at(40) + timedelta(seconds=LEASE_SECONDS)
    assert store.list_runs(lease_expired_before=last_lease).runs == []
    expired = store.list_runs(lease_expired_before=last_lease + timedelta(microseconds=1))
    assert [run.run_id for run in expired.runs] == [RUN]
    # Between the index entry's due_at and the lease, the run is not listed as expired.
    assert store.list_runs(lease_expired_before=at(60)).runs == []


def test_items_an_earlier_release_wrote_still_load(aws: AwsResources) -> None:
    """Plain texts inline (bodies up to 64 KB), as before compression and the 4 KB limit."""
    store = open_store(aws, inline_limit=64 * 1024)
    start_run(store)
    for seq in range(1, 4):
        save(store, seq, renewed_at=seq, variables={"notes": "the same words again " * 900})
    for item in items_of(aws).values():  # what the earlier release wrote: no "B"
        for name, value in item.items():
            if "B" in value:
                text = zlib.decompress(value["B"]).decode()
                aws.dynamodb.update_item(TableName=aws.table, Key=key(RUN, item["sk"]["S"]),
                                         UpdateExpression="SET #t = :t",
                                         ExpressionAttributeNames={"#t": name},
                                         ExpressionAttributeValues={":t": {"S": text}})
    old = items_of(aws)
    assert len(old[checkpoint_sk(1)]["body"]["S"]) > 18_000  # over today's inline limit
    fresh = open_store(aws)
    assert fresh.load_latest_checkpoint(RUN) == make_checkpoint(
        seq=3, created_at=at(3), variables={"notes": "the same words again " * 900})
    save(fresh, 4, renewed_at=4)  # and the run goes on in today's layout
    assert set(items_of(aws)[checkpoint_sk(4)]["body"]) <= {"B", "S"}
    assert [info.seq for info in fresh.list_checkpoints(RUN)] == [1, 2, 3, 4]


@pytest.mark.parametrize("damage", [b"not zlib", zlib.compress(b"\xff\xfe not utf-8")])
def test_a_damaged_compressed_text_is_corrupt_not_a_default(aws: AwsResources,
                                                            damage: bytes) -> None:
    store = open_store(aws)
    start_run(store)
    save(store, 1, renewed_at=1, variables={"notes": "the same words again " * 400})
    aws.dynamodb.update_item(TableName=aws.table, Key=key(RUN, checkpoint_sk(1)),
                             UpdateExpression="SET body = :b",
                             ExpressionAttributeValues={":b": {"B": damage}})
    with pytest.raises(CorruptRecord, match="checkpoint 1 of run"):
        open_store(aws).load_latest_checkpoint(RUN)
