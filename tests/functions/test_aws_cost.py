"""bench/aws_cost.py's accounting, on a short run, so the benchmark cannot rot unseen.

The benchmark prices what a run costs on AWS from the requests its handlers
make (issue 32, acceptance 3). Here its meter runs on the deployed stack for
a two-step run, and its unit rules on items of known sizes.
"""

from __future__ import annotations

import boto3
import pytest
from aws_stack import Deployment

from bench.aws_billing import Bill, item_size, read_units, value_size, write_units
from bench.aws_cost import Meter, measure, prompts, report
from tests.stores.aws.aws_template import REGION

pytestmark = pytest.mark.slow


def test_item_sizes_and_units_follow_dynamodbs_rules() -> None:
    assert item_size({"pk": {"S": "RUN#a"}, "n": {"N": "12345"}}) == 2 + 5 + 1 + 4
    assert value_size({"N": "-0.0100"}) == 2  # one significant digit
    assert value_size({"M": {"a": {"S": "xy"}}}) == 3 + 1 + 1 + 2
    assert value_size({"L": [{"BOOL": True}, {"NULL": True}]}) == 3 + 2 + 2
    assert [write_units(size) for size in (0, 1, 1024, 1025)] == [1, 1, 1, 2]
    assert read_units(4096, consistent=True) == 1
    assert read_units(4097, consistent=True) == 2
    assert read_units(10, consistent=False) == 0.5


def test_a_write_is_billed_by_its_size_doubled_in_a_transaction(
        deployment: Deployment) -> None:
    store = deployment.services.store
    table, client = store.table_name, store.client
    bill = Bill(steps=1)
    meter = Meter([client], boto3.client("dynamodb", region_name=REGION), bill)
    big = "x" * 2500  # with its names and keys: 3 started KB
    with meter.counting((table,)):
        client.put_item(TableName=table, Item={"pk": {"S": "RUN#sized"}, "sk": {"S": "A"},
                                               "body": {"S": big}})
        client.transact_write_items(TransactItems=[{"Put": {"TableName": table, "Item": {
            "pk": {"S": "RUN#sized"}, "sk": {"S": "B"}, "body": {"S": big}}}}])
        client.get_item(TableName=table, Key={"pk": {"S": "RUN#sized"}, "sk": {"S": "A"}})
    assert bill.requests == {"dynamodb:PutItem": 1, "dynamodb:TransactWriteItems": 1,
                             "dynamodb:GetItem": 1}
    assert bill.write_units == 3 + 2 * 3
    assert bill.index_write_units == 0  # no status, tenant or parent: in no index
    assert bill.read_units == 0.5  # 2.5 KB, eventually consistent


def test_a_short_run_is_counted_request_by_request(deployment: Deployment) -> None:
    bill = measure(deployment, prompts(2), steps=2)
    assert bill.invocations == {"ApiFunction": 1, "StartFunction": 1, "AdvanceFunction": 1}
    # Advance, which ended the execution: one slice reserved and ran the run.
    assert bill.transitions == 1
    assert bill.requests["stepfunctions:StartExecution"] == 1
    transactions = bill.requests["dynamodb:TransactWriteItems"]
    assert transactions >= 2  # a checkpoint per step at least
    # Every item a transaction writes costs at least 2 units, and a checkpoint
    # writes two (META and the body).
    assert bill.write_units >= 2 * 2 * transactions
    assert bill.writes["CP"] >= 2 and bill.writes["META"] >= transactions
    assert bill.gb_seconds > 0 and bill.read_units > 0
    assert bill.per_thousand_steps() == pytest.approx(sum(bill.dollars().values()) * 500)
    text = report({"two steps": bill})
    assert "dollars per 1,000 steps" in text and "target" in text
