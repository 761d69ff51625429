"""Store errors a user can act on: what is missing is named, throttling is said so.

Under moto with the store's real clients. A missing table or bucket is
`StoreUnavailable` naming it and its region. Throttling is injected through
botocore's `before-call` hook on the real client, answering a
TransactWriteItems with the error DynamoDB sends when it cancels a
transaction for throughput (`TransactionCanceledException` with
`ThrottlingError` reasons): the store sends the same transaction again after
a jittered backoff (an injected sleep, so no real waiting) without reading
the run again, and when the throttling outlasts its tries it says so.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from aws_template import AwsResources
from botocore.awsrequest import AWSResponse
from conftest import open_store

from stores.base import StoreUnavailable
from stores.conformance import RUN, at, make_checkpoint, start_run
from stores.dynamodb.requests import THROTTLED_TRIES, StoreThrottled
from stores.dynamodb.s3 import S3BlobStore
from stores.dynamodb.store import DynamoDbRunStore

REGION = "us-east-1"


@contextmanager
def throttled_transactions(client: Any, times: int) -> Iterator[Counter[str]]:
    """Cancel the next `times` TransactWriteItems for throughput; count every call."""
    calls: Counter[str] = Counter()

    def answer(model: Any, params: dict[str, Any], **_: Any) -> Any:
        calls[model.name] += 1
        if model.name != "TransactWriteItems" or calls[model.name] > times:
            return None  # sent to the service
        # `params` is the request as it will be sent: one reason per item.
        reasons = [{"Code": "ThrottlingError", "Message": "Throughput exceeds the current "
                    "capacity for one or more global secondary indexes."}
                   for _ in json.loads(params["body"])["TransactItems"]]
        body = {"Error": {"Code": "TransactionCanceledException",
                          "Message": "Transaction cancelled, please refer cancellation "
                                     "reasons for specific reasons [ThrottlingError]"},
                "CancellationReasons": reasons}
        return AWSResponse(f"https://dynamodb.{REGION}.amazonaws.com/", 400, {}, None), body

    client.meta.events.register("before-call.dynamodb", answer)
    try:
        yield calls
    finally:
        client.meta.events.unregister("before-call.dynamodb", answer)


def test_a_missing_table_is_named_with_its_region(aws: AwsResources) -> None:
    missing = DynamoDbRunStore("no-such-runs", client=aws.dynamodb)
    with pytest.raises(StoreUnavailable) as raised:
        missing.load_run(RUN)
    message = str(raised.value)
    assert "'no-such-runs'" in message and REGION in message and "does not exist" in message


def test_a_missing_bucket_is_named_with_its_region(aws: AwsResources) -> None:
    blobs = S3BlobStore("no-such-blobs", aws.key_arn, client=aws.s3)
    with pytest.raises(StoreUnavailable) as put:
        blobs.put(b"a checkpoint body", run_id="run-1")
    assert "'no-such-blobs'" in str(put.value) and REGION in str(put.value)
    with pytest.raises(StoreUnavailable) as get:
        blobs.get("s3://no-such-blobs/checkpoints/ab/" + "ab" * 32)
    assert "'no-such-blobs'" in str(get.value)


def test_a_transaction_cancelled_for_throttling_is_sent_again_without_reading(
        aws: AwsResources) -> None:
    waits: list[float] = []
    store = open_store(aws, sleep=waits.append)
    start_run(store)
    store.save_checkpoint(make_checkpoint(seq=1), expected_attempt=1)

    with throttled_transactions(aws.dynamodb, times=3) as calls:
        store.save_checkpoint(make_checkpoint(seq=2), expected_attempt=1,
                              lease_expires_at=at(90))
    # Three throttled tries and the one that landed; no read of the run between.
    assert calls == {"TransactWriteItems": 4}
    assert len(waits) == 3 and all(0 <= wait <= 2.0 for wait in waits)
    saved = store.load_run(RUN)
    assert saved is not None and (saved.checkpoint_seq, saved.lease_expires_at) == (2, at(90))


def test_throttling_that_outlasts_the_tries_is_reported_as_throttling(
        aws: AwsResources) -> None:
    waits: list[float] = []
    store = open_store(aws, sleep=waits.append)
    start_run(store)
    store.save_checkpoint(make_checkpoint(seq=1), expected_attempt=1)

    with throttled_transactions(aws.dynamodb, times=1000), \
            pytest.raises(StoreThrottled) as raised:
        store.save_checkpoint(make_checkpoint(seq=2), expected_attempt=1)
    message = str(raised.value)
    assert "throttling" in message and aws.table in message and REGION in message
    assert "concurrent changes" not in message
    assert isinstance(raised.value, StoreUnavailable)
    assert len(waits) == THROTTLED_TRIES
    unchanged = store.load_run(RUN)
    assert unchanged is not None and unchanged.checkpoint_seq == 1
