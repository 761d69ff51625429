"""S3 blobs: a 5 MB checkpoint through S3, every object under the project key,
and damaged or missing bytes raising CorruptRecord."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from aws_template import AwsResources
from conftest import open_store, unique

from stores.base import CorruptRecord, StoreError
from stores.conformance import RUN, at, make_checkpoint, make_run, start_run
from stores.dynamodb.items import checkpoint_sk, key
from stores.dynamodb.s3 import S3ArtifactStore, S3BlobStore
from stores.dynamodb.store import DynamoDbRunStore

FIVE_MB = 5 * 1024 * 1024


def noise(size: int) -> str:
    """`size` hex digits of hashes: text the store's compression halves at best, so a
    large one stays over the inline limit."""
    digests = (hashlib.sha256(n.to_bytes(4, "big")).hexdigest() for n in range(size // 64 + 1))
    return "".join(digests)[:size]


def big_checkpoint(seq: int = 1, size: int = FIVE_MB) -> Any:
    entry = {"role": "tool", "content": noise(size)}
    return make_checkpoint(seq=seq, transcript=[entry], step_results=[], artifacts=[])


@pytest.fixture
def store(aws: AwsResources) -> DynamoDbRunStore:
    # A prefix of its own: the bucket is shared by the module's tests.
    return open_store(aws, prefix=f"{unique('test')}/")


def objects(aws: AwsResources, prefix: str) -> list[str]:
    listing = aws.s3.list_objects_v2(Bucket=aws.bucket, Prefix=prefix)
    return [entry["Key"] for entry in listing.get("Contents", [])]


def test_a_5_mb_checkpoint_round_trips_through_s3(aws: AwsResources,
                                                   store: DynamoDbRunStore) -> None:
    start_run(store)
    checkpoint = big_checkpoint()
    store.save_checkpoint(checkpoint, expected_attempt=1)
    item = aws.dynamodb.get_item(TableName=aws.table, Key=key(RUN, checkpoint_sk(1)))["Item"]
    ref = item["body"]["M"]
    assert set(ref) == {"uri", "sha256", "size"}
    assert int(ref["size"]["N"]) > FIVE_MB
    assert ref["uri"]["S"].startswith(f"s3://{aws.bucket}/{store.blobs.prefix}")
    assert store.load_latest_checkpoint(RUN) == checkpoint
    assert open_store(aws, prefix=store.blobs.prefix).load_checkpoint(RUN, 1) == checkpoint
    [info] = store.list_checkpoints(RUN)
    assert info.size_bytes == int(ref["size"]["N"])


def test_every_object_written_is_encrypted_with_the_project_key(
        aws: AwsResources, store: DynamoDbRunStore) -> None:
    prefix = store.blobs.prefix
    big = noise(100_000)  # over the inline limit: the manifest, output and effect go to S3 too
    store.create_run(make_run(manifest={"steps": [{"id": "a", "prompt": big}]}))
    store.resume_run(RUN, owner="o", now=at(0), lease_seconds=60)
    store.save_checkpoint(big_checkpoint(1, 200_000), expected_attempt=1)
    store.begin_effect("e", run_id=RUN, expected_attempt=1, at=at(1))
    store.complete_effect("e", run_id=RUN, expected_attempt=1, result=big, at=at(2))
    store.complete_run(RUN, expected_attempt=1, output={"text": big}, at=at(3),
                       checkpoint=big_checkpoint(2, 300_000))
    artifacts = S3ArtifactStore(aws.bucket, aws.key_arn, prefix=f"{prefix}artifacts/",
                                client=aws.s3)
    uri, _ = artifacts.put(b"%PDF-1.7 ...", media_type="application/pdf", run_id=RUN)
    written = objects(aws, prefix)
    assert len(written) == 6, written  # definition, checkpoints 1-2, effect, state, artifact
    for name in written:
        head = aws.s3.head_object(Bucket=aws.bucket, Key=name)
        assert head["ServerSideEncryption"] == "aws:kms", name
        assert head["SSEKMSKeyId"] == aws.key_arn, name
        assert head["BucketKeyEnabled"] is True, name
    run = store.load_run(RUN)
    assert run is not None and run.output == {"text": big}
    assert run.manifest == {"steps": [{"id": "a", "prompt": big}]}
    assert artifacts.get(uri) == b"%PDF-1.7 ..."
    assert aws.s3.head_object(Bucket=aws.bucket, Key=uri.split("/", 3)[3])[
        "ContentType"] == "application/pdf"


@pytest.mark.parametrize("damage", ["altered", "missing"])
def test_a_blob_damaged_in_the_bucket_raises_corrupt_record(
        aws: AwsResources, store: DynamoDbRunStore, damage: str) -> None:
    start_run(store)
    store.save_checkpoint(big_checkpoint(1, 100_000), expected_attempt=1)
    [name] = objects(aws, store.blobs.prefix)
    if damage == "altered":
        body = aws.s3.get_object(Bucket=aws.bucket, Key=name)["Body"].read()
        aws.s3.put_object(Bucket=aws.bucket, Key=name, Body=body.replace(b"a", b"b", 1))
    else:
        aws.s3.delete_object(Bucket=aws.bucket, Key=name)
    fresh = open_store(aws, prefix=store.blobs.prefix)
    for load in (lambda: fresh.load_latest_checkpoint(RUN), lambda: fresh.load_checkpoint(RUN, 1)):
        with pytest.raises(CorruptRecord, match="blob"):
            load()


def test_an_inline_body_altered_in_the_table_raises_corrupt_record(
        aws: AwsResources, store: DynamoDbRunStore) -> None:
    start_run(store)
    store.save_checkpoint(make_checkpoint(seq=1), expected_attempt=1)
    aws.dynamodb.update_item(
        TableName=aws.table, Key=key(RUN, checkpoint_sk(1)), UpdateExpression="SET body = :b",
        ExpressionAttributeValues={":b": {"S": '{"format":"checkpoint-delta/1"}'}})
    with pytest.raises(CorruptRecord, match="checksum"):
        open_store(aws).load_latest_checkpoint(RUN)


def test_blob_puts_are_content_addressed_under_their_run_and_never_overwrite(
        aws: AwsResources) -> None:
    blobs = S3BlobStore(aws.bucket, aws.key_arn, prefix=f"{unique('blobs')}/", client=aws.s3)
    first = blobs.put(b"same bytes", run_id="run/1.a")
    assert blobs.put(b"same bytes", run_id="run/1.a") == first  # IfNoneMatch's 412 is success
    uri, sha256 = first
    assert uri == f"s3://{aws.bucket}/{blobs.prefix}run%2F1%2Ea/{sha256}"
    assert blobs.get(uri) == b"same bytes"
    # Another run's identical bytes are its own object: deleting one run spares it.
    other, _ = blobs.put(b"same bytes", run_id="run")
    assert other != uri
    assert blobs.delete_run("run/1.a") == 1
    assert blobs.delete_run("run/1.a") == 0
    assert blobs.get(other) == b"same bytes"
    with pytest.raises(CorruptRecord, match="missing"):
        blobs.get(uri)
    with pytest.raises(ValueError, match="not in this blob store"):
        blobs.get(f"s3://other-bucket/{blobs.prefix}run/{sha256}")


def test_a_blob_of_the_shared_layout_stays_readable(aws: AwsResources) -> None:
    """Blobs written before they were keyed under their run: <prefix><aa>/<sha256>."""
    blobs = S3BlobStore(aws.bucket, aws.key_arn, prefix=f"{unique('blobs')}/", client=aws.s3)
    sha256 = hashlib.sha256(b"old bytes").hexdigest()
    legacy = f"{blobs.prefix}{sha256[:2]}/{sha256}"
    aws.s3.put_object(Bucket=aws.bucket, Key=legacy, Body=b"old bytes")
    assert blobs.get(f"s3://{aws.bucket}/{legacy}") == b"old bytes"
    assert blobs.run_of(f"s3://{aws.bucket}/{legacy}") is None  # owned by no run


def test_a_blob_uri_names_the_run_it_was_put_for(aws: AwsResources) -> None:
    """What the runtime asks before reading an artifact (agent_runtime.artifact_access)."""
    blobs = S3ArtifactStore(aws.bucket, aws.key_arn, prefix=f"{unique('art')}/", client=aws.s3)
    for run_id in ("run_1", "run/1.a", "parent.sub-ab12"):
        uri, _ = blobs.put(b"bytes", media_type="text/plain", run_id=run_id)
        assert blobs.run_of(uri) == run_id
    with pytest.raises(ValueError, match="not in this blob store"):
        blobs.run_of(f"s3://other-bucket/{blobs.prefix}run_1/{'0' * 64}")
    with pytest.raises(ValueError):
        blobs.run_of("file:///etc/passwd")


def test_a_store_without_blobs_refuses_a_body_over_the_inline_limit(aws: AwsResources) -> None:
    store = DynamoDbRunStore(aws.table, client=aws.dynamodb)
    start_run(store)
    with pytest.raises(StoreError, match="no blob store"):
        store.save_checkpoint(big_checkpoint(1, 200_000), expected_attempt=1)
    assert store.list_checkpoints(RUN) == []
