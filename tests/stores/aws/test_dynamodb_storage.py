"""Storage stays linear: a checkpoint stores only what it appended (stores.deltas).

Bytes are measured as DynamoDB bills them (attribute names plus values, over
every item of the run) plus the bytes of the run's S3 objects.
"""

from __future__ import annotations

from typing import Any

import pytest
from aws_template import AwsResources
from conftest import open_store, unique

from stores.conformance import RUN, make_checkpoint, start_run
from stores.dynamodb.items import partition


def value_bytes(value: dict[str, Any]) -> int:
    """DynamoDB's size of an attribute value (documented item-size rules)."""
    (kind, inner), = value.items()
    if kind == "S":
        return len(inner.encode())
    if kind == "N":
        return (len(inner.lstrip("-").replace(".", "").lstrip("0")) + 1) // 2 + 1
    if kind == "B":
        return len(inner)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "M":
        return 3 + sum(1 + len(k.encode()) + value_bytes(v) for k, v in inner.items())
    if kind == "L":
        return 3 + sum(1 + value_bytes(v) for v in inner)
    raise AssertionError(kind)


def stored_bytes(aws: AwsResources, prefix: str) -> int:
    items: list[dict[str, Any]] = []
    request: dict[str, Any] = {"TableName": aws.table, "KeyConditionExpression": "pk = :pk",
                               "ExpressionAttributeValues": {":pk": {"S": partition(RUN)}}}
    while True:
        page = aws.dynamodb.query(**request)
        items += page["Items"]
        if "LastEvaluatedKey" not in page:
            break
        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    table = sum(len(name.encode()) + value_bytes(value)
                for item in items for name, value in item.items())
    listing = aws.s3.list_objects_v2(Bucket=aws.bucket, Prefix=prefix)
    return table + sum(entry["Size"] for entry in listing.get("Contents", []))


@pytest.mark.slow
def test_bytes_per_step_after_1000_steps_are_within_1_25x_of_those_after_100(
        aws: AwsResources, item_rollback: None) -> None:
    prefix = f"{unique('test')}/"
    store = open_store(aws, prefix=prefix)
    start_run(store)
    transcript: list[dict[str, Any]] = []
    per_step = {}
    for seq in range(1, 1001):
        transcript = [*transcript, {"role": "assistant", "n": seq, "content": "x" * 180}]
        store.save_checkpoint(make_checkpoint(seq=seq, transcript=transcript, step_results=[],
                                              artifacts=[]), expected_attempt=1)
        if seq in (100, 1000):
            per_step[seq] = stored_bytes(aws, prefix) / seq
    ratio = per_step[1000] / per_step[100]
    print(f"\nbytes per step: {per_step[100]:.0f} after 100 steps, {per_step[1000]:.0f} after"
          f" 1000 steps (x{ratio:.3f}); a full transcript per step would be"
          f" ~{len(str(transcript)) / 2:.0f}")
    assert ratio <= 1.25
    assert store.load_latest_checkpoint(RUN) == make_checkpoint(
        seq=1000, transcript=transcript, step_results=[], artifacts=[])
