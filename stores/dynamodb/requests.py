"""The DynamoDB requests DynamoDbRunStore makes, and what a refused one tells.

Every conditional write asks for `ReturnValuesOnConditionCheckFailure=ALL_OLD`,
so a refusal carries the item as it was when the condition failed: `Refused`
holds one `Reason` per written item (a `TransactWriteItems` answers with its
`CancellationReasons` in request order). The store runs the shared lifecycle
rules on those images to raise the contract's error; it never infers the error
from the fact of a refusal alone.
"""

from __future__ import annotations

import contextlib
import itertools
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from stores.base import StoreUnavailable
from stores.dynamodb.items import Item

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import (
        AttributeValueTypeDef,
        TransactWriteItemTypeDef,
        WriteRequestOutputTypeDef,
        WriteRequestTypeDef,
    )

CONDITION_FAILED = "ConditionalCheckFailed"
# How often a transaction cancelled only for throughput is sent (with backoff).
THROTTLED_TRIES = 8
# What DynamoDB says of a request it throttled (after the SDK's own retries),
# and of a transaction item it cancelled for throughput.
_THROTTLED = frozenset({"ProvisionedThroughputExceededException", "ThrottlingException",
                        "RequestLimitExceeded"})
_THROTTLED_REASONS = frozenset({"ThrottlingError", "ProvisionedThroughputExceeded",
                                "RequestLimitExceeded"})
# BatchWriteItem takes 25 requests, BatchGetItem 100 keys.
_WRITE_BATCH = 25
_GET_BATCH = 100


@dataclass(frozen=True)
class Condition:
    """A condition expression with its attribute names and values."""

    expression: str
    names: dict[str, str] = field(default_factory=dict)
    values: dict[str, AttributeValueTypeDef] = field(default_factory=dict)

    def __and__(self, other: Condition) -> Condition:
        return Condition(f"({self.expression}) AND ({other.expression})",
                         {**self.names, **other.names}, {**self.values, **other.values})


ABSENT = Condition("attribute_not_exists(#pk)", {"#pk": "pk"})


@dataclass(frozen=True)
class Reason:
    """Why one item of a refused write was refused.

    `code` is DynamoDB's: "None" (this item passed), "ConditionalCheckFailed",
    "TransactionConflict" (another transaction held the item), ... `item` is the
    image of the item when its condition failed; None when it did not exist.
    """

    code: str
    item: Item | None = None

    @property
    def failed(self) -> bool:
        return self.code == CONDITION_FAILED


class Refused(Exception):
    """A conditional write or transaction was refused; `reasons[i]` is about its i-th item."""

    def __init__(self, reasons: Sequence[Reason]) -> None:
        super().__init__(", ".join(reason.code for reason in reasons))
        self.reasons = list(reasons)


def put_op(table: str, item: Item, condition: Condition | None = None) -> TransactWriteItemTypeDef:
    put: dict[str, Any] = {"TableName": table, "Item": item}
    return {"Put": _conditioned(put, condition)}  # type: ignore[typeddict-item]


def update_op(table: str, key: Item, expression: str, condition: Condition, *,
              names: dict[str, str], values: dict[str, AttributeValueTypeDef],
              ) -> TransactWriteItemTypeDef:
    update: dict[str, Any] = {"TableName": table, "Key": key, "UpdateExpression": expression,
                              "ExpressionAttributeNames": names,
                              "ExpressionAttributeValues": values}
    return {"Update": _conditioned(update, condition)}  # type: ignore[typeddict-item]


def check_op(table: str, key: Item, condition: Condition) -> TransactWriteItemTypeDef:
    check: dict[str, Any] = {"TableName": table, "Key": key}
    return {"ConditionCheck": _conditioned(check, condition)}  # type: ignore[typeddict-item]


def delete_op(table: str, key: Item, condition: Condition | None = None,
              ) -> TransactWriteItemTypeDef:
    delete: dict[str, Any] = {"TableName": table, "Key": key}
    return {"Delete": _conditioned(delete, condition)}  # type: ignore[typeddict-item]


def _conditioned(request: dict[str, Any], condition: Condition | None) -> dict[str, Any]:
    # The TypedDicts of the stubs cannot express "these keys, merged": the ops
    # are built as plain dicts and typed at the return (the ignores above).
    if condition is not None:
        request["ConditionExpression"] = condition.expression
        request["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
        request.setdefault("ExpressionAttributeNames", {}).update(condition.names)
        if condition.values:
            request.setdefault("ExpressionAttributeValues", {}).update(condition.values)
    return request


class StoreThrottled(StoreUnavailable):
    """DynamoDB kept throttling the table's requests past the store's retries."""


class Table:
    """One DynamoDB table through a low-level client: the requests the store needs.

    Errors a user can act on name the table and its region: a missing table
    (or index) and throttling that outlasted the retries are `StoreUnavailable`
    (`StoreThrottled`). A transaction cancelled only for throttling wrote
    nothing, so it is sent again as it was, after a jittered backoff (`sleep`),
    without reading the run again: a throttled table gets no extra reads.
    """

    def __init__(self, client: DynamoDBClient, name: str, *,
                 sleep: Callable[[float], None] | None = None) -> None:
        self.client = client
        self.name = name
        self.sleep = sleep or time.sleep

    def where(self) -> str:
        return f"DynamoDB table {self.name!r} in {self.client.meta.region_name}"

    @contextlib.contextmanager
    def answering(self, what: str) -> Iterator[None]:
        """Translate the errors of `what` (a request) that say the table cannot be used."""
        try:
            yield
        except ClientError as error:
            code = _code(error)
            if code == "ResourceNotFoundException":
                raise StoreUnavailable(
                    f"{self.where()} does not exist, or is not visible to these credentials "
                    f"({what}: {code}); deploy it (template.yaml) or fix the store location"
                ) from None
            if code in _THROTTLED:
                raise StoreThrottled(
                    f"{self.where()} is throttling requests ({what}: {code}, after the SDK's "
                    "retries); raise its capacity or use on-demand mode") from None
            raise

    def get(self, key: Item) -> Item | None:
        with self.answering("GetItem"):
            return self.client.get_item(TableName=self.name, Key=key,
                                        ConsistentRead=True).get("Item")

    def write(self, op: TransactWriteItemTypeDef) -> None:
        """One conditional write (Put, Update or Delete) as its own request."""
        try:
            with self.answering("a conditional write"):
                if "Put" in op:
                    self.client.put_item(**op["Put"])
                elif "Update" in op:
                    self.client.update_item(**op["Update"])
                else:
                    self.client.delete_item(**op["Delete"])
        except ClientError as error:
            if _code(error) != "ConditionalCheckFailedException":
                raise
            # The image comes back only when the item existed.
            raise Refused([Reason(CONDITION_FAILED, _image(error.response.get("Item")))]) from None

    def transact(self, ops: list[TransactWriteItemTypeDef]) -> None:
        """Write `ops` atomically; a single write is sent as a plain conditional write
        (half the write units of a transaction)."""
        if len(ops) == 1 and "ConditionCheck" not in ops[0]:
            self.write(ops[0])
            return
        for attempt in range(THROTTLED_TRIES):
            try:
                with self.answering("TransactWriteItems"):
                    self.client.transact_write_items(TransactItems=ops)
                return
            except ClientError as error:
                if _code(error) != "TransactionCanceledException":
                    raise
                reasons = error.response.get("CancellationReasons") or []
                if len(reasons) != len(ops):
                    raise  # not an answer about our items: nothing to decide from
                refused = Refused([Reason(str(reason.get("Code", "None")),
                                          _image(reason.get("Item"))) for reason in reasons])
            codes = {reason.code for reason in refused.reasons} - {"None"}
            if not codes <= _THROTTLED_REASONS:
                raise refused
            self.sleep(_jittered(attempt))
        raise StoreThrottled(f"{self.where()} is throttling transactions: cancelled for "
                             f"throughput {THROTTLED_TRIES} times in a row; raise its capacity "
                             "or use on-demand mode")

    def query(self, partition: str, *, between: tuple[str, str] | None = None,
              prefix: str | None = None, projection: Sequence[str] = ()) -> Iterator[Item]:
        """The items of one partition, in sort-key order, page after page (consistent)."""
        condition = "#pk = :pk"
        values: dict[str, AttributeValueTypeDef] = {":pk": {"S": partition}}
        names = {"#pk": "pk"}
        if between is not None:
            condition += " AND #sk BETWEEN :low AND :high"
            values |= {":low": {"S": between[0]}, ":high": {"S": between[1]}}
            names["#sk"] = "sk"
        elif prefix is not None:
            condition += " AND begins_with(#sk, :prefix)"
            values[":prefix"] = {"S": prefix}
            names["#sk"] = "sk"
        request: dict[str, Any] = {"TableName": self.name, "KeyConditionExpression": condition,
                                   "ExpressionAttributeValues": values, "ConsistentRead": True}
        if projection:
            names |= {f"#{name}": name for name in projection}
            request["ProjectionExpression"] = ", ".join(f"#{name}" for name in
                                                        dict.fromkeys(["pk", "sk", *projection]))
        request["ExpressionAttributeNames"] = names
        yield from self._pages(request)

    def query_index(self, index: str, condition: str, names: dict[str, str],
                    values: dict[str, AttributeValueTypeDef],
                    *, start: Item | None = None, forward: bool = True,
                    page: int | None = None, keep: str | None = None) -> Iterator[Item]:
        """Entries of a GSI, in its sort order, or reversed when not `forward`
        (GSIs are read eventually consistent). `page` caps the entries a Query
        reads (its `Limit`): the next Query is sent only when the caller reads past
        them, so a caller that stops early pays for what it read, not for the index.
        `keep` is a FilterExpression on the entries' projected attributes: only
        those it keeps are returned (all read are billed)."""
        request: dict[str, Any] = {"TableName": self.name, "IndexName": index,
                                   "KeyConditionExpression": condition,
                                   "ExpressionAttributeNames": names,
                                   "ExpressionAttributeValues": values,
                                   "ScanIndexForward": forward}
        if keep is not None:
            request["FilterExpression"] = keep
        if start is not None:
            request["ExclusiveStartKey"] = start
        if page is not None:
            request["Limit"] = page
        yield from self._pages(request)

    def _pages(self, request: dict[str, Any]) -> Iterator[Item]:
        while True:
            with self.answering("Query"):
                page = self.client.query(**request)
            yield from page.get("Items", [])
            last = page.get("LastEvaluatedKey")
            if last is None:
                return
            request["ExclusiveStartKey"] = last

    def batch_get(self, keys: Sequence[Item], *, consistent: bool = True) -> list[Item]:
        """The items at `keys` (those that exist), in no order; read consistently
        unless told (an eventually consistent read costs half)."""
        found: list[Item] = []
        for start in range(0, len(keys), _GET_BATCH):
            pending: dict[str, Any] = {self.name: {"Keys": list(keys[start:start + _GET_BATCH]),
                                                   "ConsistentRead": consistent}}
            for attempt in itertools.count():
                with self.answering("BatchGetItem"):
                    answer = self.client.batch_get_item(RequestItems=pending)
                found.extend(answer.get("Responses", {}).get(self.name, []))
                pending = dict(answer.get("UnprocessedKeys") or {})
                if not pending:
                    break
                _back_off(attempt)
        return found

    def batch_delete(self, keys: Sequence[Item]) -> None:
        """Delete the items at `keys`, 25 to a request, in the order given."""
        for start in range(0, len(keys), _WRITE_BATCH):
            requests: Sequence[WriteRequestTypeDef | WriteRequestOutputTypeDef] = [
                {"DeleteRequest": {"Key": item_key}}
                for item_key in keys[start:start + _WRITE_BATCH]]
            for attempt in itertools.count():
                with self.answering("BatchWriteItem"):
                    answer = self.client.batch_write_item(RequestItems={self.name: requests})
                requests = (answer.get("UnprocessedItems") or {}).get(self.name, [])
                if not requests:
                    break
                _back_off(attempt)


def _back_off(attempt: int) -> None:
    """Unprocessed batch entries mean throttling: wait before asking again."""
    time.sleep(min(1.0, 0.02 * 2 ** attempt))


def _jittered(attempt: int) -> float:
    """Full jitter over an exponential backoff: 50 ms, 100 ms, ... up to 2 s."""
    return random.uniform(0, min(2.0, 0.05 * 2 ** attempt))


def _code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def _image(item: object) -> Item | None:
    return item if isinstance(item, dict) and item else None


def landed(refused: Refused, attribute: str, written: str) -> bool:
    """Whether the refused META write is one that already landed.

    botocore retries a request whose answer was lost; a retried conditional
    write then meets its own first attempt and is refused. The image shows it:
    the token this write set (a revision, a new run's incarnation) is there.
    """
    image = refused.reasons[0].item
    return image is not None and image.get(attribute, {}).get("S") == written
