"""Retention on AWS: the table stream's TTL removal of a run's META, delivered to the
real retention handler, deletes every item and object the run owned and nothing
of another run, even one holding the same blob bytes (docs/design.md section 10)."""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta
from typing import Any

import pytest
from aws_stack import Deployment, FakeContext, sample_event

from functions.retention import app as retention
from stores.conformance import at, make_checkpoint, make_run
from stores.dynamodb.items import META, key, key_partition, partition
from stores.dynamodb.s3 import S3ArtifactStore
from stores.dynamodb.store import DynamoDbRunStore
from stores.records import ArtifactRef

# ~75 KB of hex digits of hashes, which compression only halves: over the
# store's inline limit, so an S3 blob.
BIG = "".join(hashlib.sha256(n.to_bytes(4, "big")).hexdigest() for n in range(1_200))
# Both runs save these same bytes (> 64 KiB) as an artifact.
ARTIFACT = b"%PDF-1.7 " + BIG.encode()


@pytest.fixture
def handler(deployment: Deployment, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The real handler with its real services, built from the stack's environment."""
    retention.retention.cache_clear()
    return retention.handler


def artifacts_of(store: DynamoDbRunStore) -> S3ArtifactStore:
    blobs = store.blobs
    assert blobs is not None
    return S3ArtifactStore(blobs.bucket, blobs.kms_key_id, client=blobs.client)


def build_run(store: DynamoDbRunStore, run_id: str, *, checkpoints: int) -> ArtifactRef:
    """A run with `checkpoints` checkpoints (the last with a big variable), an effect,
    an approval answered, and an artifact; left suspended on a second approval."""
    store.create_run(make_run(run_id, manifest={"steps": [{"id": "a", "prompt": BIG}]}))
    store.resume_run(run_id, owner="o-1", now=at(0), lease_seconds=600)
    for seq in range(1, checkpoints + 1):
        variables = {"seq": seq} | ({"big": BIG} if seq == checkpoints else {})
        store.save_checkpoint(make_checkpoint(run_id, seq, variables=variables),
                              expected_attempt=1)
    store.begin_effect("send-mail", run_id=run_id, expected_attempt=1, at=at(1))
    store.complete_effect("send-mail", run_id=run_id, expected_attempt=1, result={"id": 7},
                          at=at(2))
    uri, sha256 = artifacts_of(store).put(ARTIFACT, media_type="application/pdf", run_id=run_id)
    store.suspend_run(run_id, expected_attempt=1, reason="approval", at=at(3),
                      details={"approval_id": "ship", "prompt": "Ship it?"})
    store.resolve_approval(run_id, "ship", approved=True, response={"note": "ok"},
                           responded_by="alice", at=at(4))
    return ArtifactRef(uri=uri, sha256=sha256, size=len(ARTIFACT), media_type="application/pdf")


def items(store: DynamoDbRunStore, run_id: str) -> list[str]:
    answer = store.client.query(TableName=store.table_name, KeyConditionExpression="pk = :pk",
                                ExpressionAttributeValues={":pk": {"S": partition(run_id)}})
    return [item["sk"]["S"] for item in answer["Items"]]


def objects(store: DynamoDbRunStore, run_id: str) -> dict[str, str]:
    """Every object under the run's prefixes, by key: its sha256 (the key's last part)."""
    blobs = store.blobs
    assert blobs is not None
    found: dict[str, str] = {}
    for prefix in (blobs.run_prefix(run_id), artifacts_of(store).run_prefix(run_id)):
        listed = blobs.client.list_objects_v2(Bucket=blobs.bucket, Prefix=prefix)
        found |= {entry["Key"]: entry["Key"].rsplit("/", 1)[1]
                  for entry in listed.get("Contents", [])}
    return found


def removal_record(store: DynamoDbRunStore, run_id: str, *, by_ttl: bool,
                   sequence: str = "1") -> dict[str, Any]:
    """The stream record of the removal of a run's META item, as the event source mapping
    delivers it from a KEYS_ONLY stream; a TTL's carries the DynamoDB service's identity.
    (moto's DynamoDB Streams API answers 'Not yet implemented', so the record is built
    in the documented shape.)"""
    arn = store.client.describe_table(TableName=store.table_name)["Table"]["LatestStreamArn"]
    record: dict[str, Any] = {
        "eventID": f"event-{sequence}", "eventName": "REMOVE", "eventVersion": "1.1",
        "eventSource": "aws:dynamodb", "awsRegion": "us-east-1", "eventSourceARN": arn,
        "dynamodb": {"ApproximateCreationDateTime": 1_700_000_000,
                     "Keys": key(run_id, META), "SequenceNumber": sequence,
                     "SizeBytes": 64, "StreamViewType": "KEYS_ONLY"}}
    if by_ttl:
        record["userIdentity"] = {"type": "Service", "principalId": "dynamodb.amazonaws.com"}
    return record


def test_a_ttl_removal_deletes_all_the_run_owned_and_spares_a_run_with_the_same_bytes(
        deployment: Deployment, handler: Any) -> None:
    store = deployment.services.store
    assert store.blobs is not None
    expired, kept = "run-expired", "run-kept"
    build_run(store, expired, checkpoints=50)
    kept_artifact = build_run(store, kept, checkpoints=3)
    store.cancel_run(expired, at=at(10))
    # What the test stands on: the expired run has all of it, and shares blob bytes.
    owned = items(store, expired)
    assert len([sk for sk in owned if sk.startswith("CP#")]) == 50
    assert any(sk.startswith("EFFECT#") for sk in owned)
    assert any(sk.startswith("APPROVAL#") for sk in owned)
    assert any(name.startswith(store.blobs.run_prefix(expired)) for name in objects(store, expired))
    shared = set(objects(store, expired).values()) & set(objects(store, kept).values())
    assert hashlib.sha256(ARTIFACT).hexdigest() in shared
    kept_before = (items(store, kept), objects(store, kept))

    # The TTL: DynamoDB's service principal removes the META item.
    store.client.delete_item(TableName=store.table_name, Key=key(expired, META))
    # With another run's removal by a caller, which is not the TTL's.
    records = [removal_record(store, kept, by_ttl=False, sequence="1"),
               removal_record(store, expired, by_ttl=True, sequence="2")]
    answer = handler({"Records": records}, FakeContext("RetentionFunction", 300_000))

    assert answer == {"batchItemFailures": []}
    assert items(store, expired) == []
    assert objects(store, expired) == {}
    assert (items(store, kept), objects(store, kept)) == kept_before
    # The other run still resumes, its big checkpoint and artifact intact.
    fresh = DynamoDbRunStore(store.table_name, blobs=store.blobs, client=store.client)
    resumed = fresh.resume_run(kept, owner="o-2", now=at(20), lease_seconds=600)
    assert resumed.attempt == 2
    latest = fresh.load_latest_checkpoint(kept)
    assert latest is not None and latest.variables["big"] == BIG
    assert artifacts_of(fresh).get(kept_artifact.uri) == ARTIFACT


def test_a_run_created_again_under_the_expired_id_is_left_alone(
        deployment: Deployment, handler: Any) -> None:
    store = deployment.services.store
    build_run(store, "run-again", checkpoints=1)
    store.cancel_run("run-again", at=at(10))
    store.client.delete_item(TableName=store.table_name, Key=key("run-again", META))
    store.create_run(make_run("run-again", created_at=at(30) - timedelta(seconds=1)))
    ttl_removal = removal_record(store, "run-again", by_ttl=True)
    assert handler({"Records": [ttl_removal]}, FakeContext("RetentionFunction", 300_000)) == {
        "batchItemFailures": []}
    assert store.load_run("run-again") is not None


def test_the_sample_event_is_a_ttl_removal_and_other_records_are_not() -> None:
    [record] = sample_event("retention-ttl-removal.json")["Records"]
    assert retention.expired_run(record) == "run_0190f4a2b3c47d1e8a2b3c4d5e6f7a8b"
    by_caller = {key: value for key, value in record.items() if key != "userIdentity"}
    assert retention.expired_run(by_caller) is None
    checkpoint = json.loads(json.dumps(record))
    checkpoint["dynamodb"]["Keys"]["sk"]["S"] = "CP#0000000001"
    assert retention.expired_run(checkpoint) is None
    assert retention.expired_run(record | {"eventName": "MODIFY"}) is None


def key_items(store: DynamoDbRunStore, run_key: str) -> list[dict[str, Any]]:
    return store.client.query(
        TableName=store.table_name, KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": key_partition(run_key)}})["Items"]


@pytest.mark.parametrize("taken_before_deletion", [False, True])
def test_a_ttl_removal_frees_the_run_key_of_a_keyed_run(
        deployment: Deployment, handler: Any, taken_before_deletion: bool) -> None:
    store = deployment.services.store
    run_key = "5e" * 32
    store.create_run(make_run("run-keyed", run_key=run_key))
    store.cancel_run("run-keyed", at=at(10))
    assert store.find_run_key(run_key) == "run-keyed"

    store.client.delete_item(TableName=store.table_name, Key=key("run-keyed", META))
    # Between the TTL and its stream record the key already holds nothing, and
    # a new run may take it (replacing the item in place).
    assert store.find_run_key(run_key) is None
    if taken_before_deletion:
        store.create_run(make_run("run-again", run_key=run_key))
    answer = handler({"Records": [removal_record(store, "run-keyed", by_ttl=True)]},
                     FakeContext("RetentionFunction", 300_000))

    assert answer == {"batchItemFailures": []}
    assert items(store, "run-keyed") == []
    if taken_before_deletion:  # the deletion spared the item the new run holds
        assert [item["run_id"]["S"] for item in key_items(store, run_key)] == ["run-again"]
    else:
        assert key_items(store, run_key) == []
        store.create_run(make_run("run-again", run_key=run_key))
    assert store.find_run_key(run_key) == "run-again"
