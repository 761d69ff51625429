"""The test-only moto patches (tests/moto_dynamodb.py, tests/moto_sqs.py) answer what
moto answers: the same script of writes and reads, run on moto as it is and
patched, gets the same answers."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import boto3
import pytest
from moto import mock_aws

from tests import moto_dynamodb, moto_sqs

REGION = "us-east-1"
TABLE = "items"
INDEX = "by-group"


@pytest.fixture(autouse=True)
def fake_aws(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_DEFAULT_REGION": REGION}.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB",
                 "AWS_ENDPOINT_URL_SQS"):
        monkeypatch.delenv(name, raising=False)


def _in_moto(script: Callable[[], list[Any]], *patches: Callable[[], Any]) -> list[Any]:
    with mock_aws(), ExitStack() as stack:
        for patch in patches:
            stack.enter_context(patch())
        return script()


def _item(pk: str, sk: int, group: str | None, order: int) -> dict[str, Any]:
    item: dict[str, Any] = {"pk": {"S": pk}, "sk": {"N": str(sk)}, "order": {"N": str(order)}}
    if group is not None:
        item["group"] = {"S": group}
    return item


def _pages(client: Any, **query: Any) -> Iterator[dict[str, Any]]:
    """Every page of a Query, paged `Limit` items at a time."""
    start: dict[str, Any] | None = None
    while True:
        page = client.query(TableName=TABLE, **query,
                            **({"ExclusiveStartKey": start} if start else {}))
        yield {key: page.get(key) for key in ("Items", "Count", "ScannedCount",
                                              "LastEvaluatedKey")}
        start = page.get("LastEvaluatedKey")
        if not start:
            return


def _reads(client: Any) -> list[Any]:
    answers: list[Any] = []
    for pk in ("p0", "p3", "absent"):
        for forward in (True, False):
            answers += _pages(client, KeyConditionExpression="pk = :pk",
                              ExpressionAttributeValues={":pk": {"S": pk}},
                              ScanIndexForward=forward, Limit=3)
    answers += _pages(client, KeyConditionExpression="pk = :pk AND sk BETWEEN :a AND :b",
                      ExpressionAttributeValues={":pk": {"S": "p1"}, ":a": {"N": "2"},
                                                 ":b": {"N": "7"}})
    for group in ("g0", "g1", "g2", "g9"):
        for forward in (True, False):
            answers += _pages(client, IndexName=INDEX, KeyConditionExpression="#g = :g",
                              ExpressionAttributeNames={"#g": "group"},
                              ExpressionAttributeValues={":g": {"S": group}},
                              ScanIndexForward=forward, Limit=4)
        answers += _pages(client, IndexName=INDEX,
                          KeyConditionExpression="#g = :g AND #o < :o",
                          ExpressionAttributeNames={"#g": "group", "#o": "order"},
                          ExpressionAttributeValues={":g": {"S": group}, ":o": {"N": "30"}})
    return answers


def _dynamodb_script() -> list[Any]:
    client = boto3.client("dynamodb", region_name=REGION)
    client.create_table(
        TableName=TABLE, BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": name, "AttributeType": kind} for name, kind in
                              (("pk", "S"), ("sk", "N"), ("group", "S"), ("order", "N"))],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"},
                   {"AttributeName": "sk", "KeyType": "RANGE"}],
        GlobalSecondaryIndexes=[{
            "IndexName": INDEX, "Projection": {"ProjectionType": "KEYS_ONLY"},
            "KeySchema": [{"AttributeName": "group", "KeyType": "HASH"},
                          {"AttributeName": "order", "KeyType": "RANGE"}]}])
    for n in range(50):
        client.put_item(TableName=TABLE,
                        Item=_item(f"p{n % 5}", n // 5, None if n % 7 == 0 else f"g{n % 3}",
                                   (n * 17) % 50))
    answers = _reads(client)  # the index's map is made here: the writes below keep it
    for n in range(0, 50, 4):  # moved to another group, or out of the index
        client.update_item(TableName=TABLE, Key={"pk": {"S": f"p{n % 5}"},
                                                 "sk": {"N": str(n // 5)}},
                           UpdateExpression="SET #g = :g", ExpressionAttributeNames={"#g": "group"},
                           ExpressionAttributeValues={":g": {"S": f"g{(n + 1) % 3}"}})
    for n in range(1, 50, 9):
        client.update_item(TableName=TABLE, Key={"pk": {"S": f"p{n % 5}"},
                                                 "sk": {"N": str(n // 5)}},
                           UpdateExpression="REMOVE #g", ExpressionAttributeNames={"#g": "group"})
    client.update_item(TableName=TABLE, Key={"pk": {"S": "p9"}, "sk": {"N": "0"}},
                       UpdateExpression="SET #g = :g, #o = :o",
                       ExpressionAttributeNames={"#g": "group", "#o": "order"},
                       ExpressionAttributeValues={":g": {"S": "g2"}, ":o": {"N": "3"}})
    for n in range(2, 50, 11):
        client.delete_item(TableName=TABLE, Key={"pk": {"S": f"p{n % 5}"},
                                                 "sk": {"N": str(n // 5)}})
    client.batch_write_item(RequestItems={TABLE: [
        {"PutRequest": {"Item": _item("p3", 20 + n, f"g{n % 2}", 60 + n)}} for n in range(6)]})
    client.transact_write_items(TransactItems=[
        {"Put": {"TableName": TABLE, "Item": _item("p0", 40, "g1", 1)}},
        {"Update": {"TableName": TABLE, "Key": {"pk": {"S": "p1"}, "sk": {"N": "1"}},
                    "UpdateExpression": "SET #g = :g", "ExpressionAttributeNames": {"#g": "group"},
                    "ExpressionAttributeValues": {":g": {"S": "g0"}}}},
        {"Delete": {"TableName": TABLE, "Key": {"pk": {"S": "p2"}, "sk": {"N": "2"}}}}])
    with pytest.raises(client.exceptions.TransactionCanceledException):
        client.transact_write_items(TransactItems=[  # cancelled: nothing changes
            {"Put": {"TableName": TABLE, "Item": _item("p4", 3, "g9", 5)}},
            {"Put": {"TableName": TABLE, "Item": _item("p1", 3, "g0", 6),
                     "ConditionExpression": "attribute_not_exists(pk)"}}])
    return answers + _reads(client)


def test_keyed_queries_answer_every_query_as_moto_does() -> None:
    plain = _in_moto(_dynamodb_script)
    assert plain == _in_moto(_dynamodb_script, moto_dynamodb.keyed_queries)
    assert plain == _in_moto(_dynamodb_script, moto_dynamodb.item_rollback,
                             moto_dynamodb.keyed_queries)


def _sqs_script() -> list[Any]:
    sqs = boto3.client("sqs", region_name=REGION)
    url = sqs.create_queue(QueueName="requests")["QueueUrl"]
    short = sqs.create_queue(QueueName="short", Attributes={"MessageRetentionPeriod": "60"})
    counts = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible",
              "ApproximateNumberOfMessagesDelayed"]
    answers: list[Any] = []
    for n in range(25):
        sqs.send_message(QueueUrl=url, MessageBody=f"m{n}")
    sqs.send_message(QueueUrl=short["QueueUrl"], MessageBody="brief")
    answers.append(sqs.get_queue_attributes(QueueUrl=url, AttributeNames=counts)["Attributes"])
    while True:
        received = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10,
                                       WaitTimeSeconds=0).get("Messages", [])
        if not received:
            break
        answers.append(sorted(message["Body"] for message in received))
        answers.append(sqs.get_queue_attributes(QueueUrl=url, AttributeNames=counts)["Attributes"])
        for message in received:
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    answers.append([message["Body"] for message in sqs.receive_message(
        QueueUrl=short["QueueUrl"]).get("Messages", [])])
    return answers


def test_uncounted_sends_and_receives_answer_as_moto_does() -> None:
    plain = _in_moto(_sqs_script)
    assert plain == _in_moto(_sqs_script, moto_sqs.uncounted_sends_and_receives)
