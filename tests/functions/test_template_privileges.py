"""Least privilege (docs/design.md section 10): each function's role grants exactly what its
code uses, on what it uses, read from template.yaml.

`GRANTED` is the whole list of actions per function, so a broader grant (a
new action, a shared policy) fails here until it is argued for. How each was
derived from the code is in the template's comments beside the statements;
tests/functions/test_granted_calls.py checks the other direction, that every
AWS call the real handlers make under moto is granted.
"""

from __future__ import annotations

import pytest
from grants import actions, as_list, functions, grants, role_of

from tests.stores.aws.aws_template import load_template

LOGS = {"logs:CreateLogStream", "logs:PutLogEvents"}
READ_RUNS = {"dynamodb:GetItem", "dynamodb:Query", "s3:GetObject", "kms:Decrypt"}
WRITE_RUNS = READ_RUNS | {"dynamodb:PutItem", "s3:PutObject", "kms:GenerateDataKey"}
CONFIG = {"ssm:GetParameter"}  # the runtime config parameter (HasRuntimeConfig)
SECRETS = {"secretsmanager:GetSecretValue"}  # provider keys (UsesProviderSecrets)
EXECUTIONS = {"states:StartExecution", "states:DescribeExecution"}
SLOTS = {"dynamodb:UpdateItem"}  # capacity slots only (functions/capacity.py)

# Lambda's own, to attach a code runner to its subnets; never usable by the code
# (tests/functions/test_code_runner_template.py).
NETWORK_INTERFACES = {"ec2:CreateNetworkInterface", "ec2:DeleteNetworkInterface",
                      "ec2:AssignPrivateIpAddresses", "ec2:UnassignPrivateIpAddresses",
                      "ec2:DescribeNetworkInterfaces", "ec2:DescribeSubnets"}

GRANTED = {
    "AdvanceFunction": LOGS | WRITE_RUNS | CONFIG | SECRETS | {
        "dynamodb:UpdateItem", "dynamodb:ConditionCheckItem", "events:PutEvents",
        "bedrock:InvokeModel", "bedrock:InvokeModelWithResponseStream",
        "states:StartExecution", "lambda:InvokeFunction"},
    "StartFunction": LOGS | READ_RUNS | EXECUTIONS | SLOTS | {"sqs:SendMessage"},
    "ReconcilerFunction": LOGS | WRITE_RUNS | EXECUTIONS | SLOTS | {
        "dynamodb:BatchGetItem", "dynamodb:ConditionCheckItem", "events:PutEvents"},
    "ApiFunction": LOGS | WRITE_RUNS | CONFIG | SECRETS | {
        "dynamodb:BatchGetItem", "dynamodb:UpdateItem", "dynamodb:ConditionCheckItem",
        "events:PutEvents"},
    "RetentionFunction": LOGS | {
        "dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator",
        "dynamodb:ListStreams", "dynamodb:GetItem", "dynamodb:Query",
        "dynamodb:BatchWriteItem", "dynamodb:DeleteItem", "s3:ListBucket", "s3:GetObject",
        "s3:DeleteObject", "kms:Decrypt", "sqs:SendMessage"},
    "CodeRunnerPythonFunction": NETWORK_INTERFACES,
}
# What removes run data: only the retention function may.
DELETES = {"dynamodb:DeleteItem", "dynamodb:BatchWriteItem", "s3:DeleteObject",
           "s3:DeleteObjects", "dynamodb:DeleteTable", "s3:DeleteBucket"}
EVENTS_PUT = {"ApiFunction": ["resume-requested", "run-finished"],
              "AdvanceFunction": ["resume-requested", "run-finished"],
              "ReconcilerFunction": ["run-finished"]}


def test_every_function_has_its_own_role_and_an_entry_here() -> None:
    names = functions()
    assert sorted(GRANTED) == names
    roles = [role_of(name) for name in names]
    assert len(set(roles)) == len(roles)
    resources = load_template()["Resources"]
    # No shared managed policy: each role's grants are its own.
    assert not [name for name, resource in resources.items()
                if resource["Type"] == "AWS::IAM::ManagedPolicy" and name != "ApiClientPolicy"]


@pytest.mark.parametrize("function", sorted(GRANTED))
def test_a_function_is_granted_exactly_the_actions_its_code_uses(function: str) -> None:
    assert actions(role_of(function)) == GRANTED[function]


@pytest.mark.parametrize("function", sorted(GRANTED))
def test_no_grant_is_a_wildcard(function: str) -> None:
    for grant in grants(role_of(function)):
        assert not [action for action in grant.actions if "*" in action], grant
        if set(grant.actions) <= NETWORK_INTERFACES and grant.condition == {
                "Null": {"lambda:SourceFunctionArn": "true"}}:
            continue  # EC2's describe actions take no resource but '*'; Lambda's alone
        assert "*" not in grant.resources, grant


def test_only_the_retention_function_may_delete_run_data() -> None:
    template = load_template()
    deleters = {}
    for name, resource in template["Resources"].items():
        if resource["Type"] == "AWS::IAM::Role":
            found = actions(name, template) & DELETES
            if found:
                deleters[name] = found
    assert deleters == {"RetentionRole": {"dynamodb:BatchWriteItem", "dynamodb:DeleteItem",
                                          "s3:DeleteObject"}}
    # and it lists and deletes under the run prefixes only
    retention = grants("RetentionRole", template)
    (listing,) = [grant for grant in retention if "s3:ListBucket" in grant.actions]
    assert listing.condition == {"StringLike": {"s3:prefix": ["checkpoints/*", "artifacts/*"]}}


@pytest.mark.parametrize("function", sorted(GRANTED))
def test_run_data_is_granted_on_the_stack_s_table_bucket_and_key_only(function: str) -> None:
    table = {"Fn::GetAtt": ["RunsTable", "Arn"]}
    indexes = {f"${{RunsTable.Arn}}/index/{index}"
               for index in ("by-status-shard", "by-parent", "by-tenant", "by-agent")}
    prefixes = {f"${{BlobBucket.Arn}}/{prefix}/*" for prefix in ("checkpoints", "artifacts")}
    for grant in grants(role_of(function)):
        services = {action.split(":")[0] for action in grant.actions}
        if services == {"dynamodb"}:
            if set(grant.actions) == {"dynamodb:Query"} and table not in grant.resources:
                assert {resource["Fn::Sub"] for resource in grant.resources} <= indexes
            elif "dynamodb:GetRecords" in grant.actions:
                assert grant.resources == ({"Fn::GetAtt": ["RunsTable", "StreamArn"]},)
            else:
                assert grant.resources == (table,), grant
        elif services == {"s3"} and grant.actions != ("s3:ListBucket",):
            assert {resource["Fn::Sub"] for resource in grant.resources} <= prefixes, grant
        elif services == {"kms"}:
            assert grant.resources == ({"Fn::GetAtt": ["DataKey", "Arn"]},), grant


def test_indexes_are_queried_only_where_the_code_lists_runs() -> None:
    def indexes(function: str) -> set[str]:
        return {resource["Fn::Sub"].rsplit("/", 1)[-1] for grant in grants(role_of(function))
                if grant.actions == ("dynamodb:Query",) for resource in grant.resources
                if isinstance(resource, dict) and "Fn::Sub" in resource}

    # GET /runs by tenant, status, parent or agent; the reconciler's candidates by
    # status; nothing else lists runs (capacity is slots, not a count).
    assert indexes("ApiFunction") == {"by-status-shard", "by-parent", "by-tenant", "by-agent"}
    assert indexes("ReconcilerFunction") == {"by-status-shard"}
    for function in ("AdvanceFunction", "RetentionFunction", "StartFunction"):
        assert indexes(function) == set(), function


def test_events_are_put_only_on_the_stack_s_bus_with_its_source_and_types() -> None:
    putters = {}
    for function in GRANTED:
        for grant in grants(role_of(function)):
            if "events:PutEvents" in grant.actions:
                assert grant.actions == ("events:PutEvents",)
                assert grant.resources == ({"Fn::GetAtt": ["EventBus", "Arn"]},)
                condition = grant.condition["StringEquals"]
                assert condition["events:source"] == "agent-runtime", function
                putters[function] = as_list(condition["events:detail-type"])
    assert putters == EVENTS_PUT


def test_starters_write_only_the_capacity_slots() -> None:
    """Their UpdateItem is for the slots alone (dynamodb:LeadingKeys), not runs."""
    for function in ("StartFunction", "ReconcilerFunction"):
        (grant,) = [grant for grant in grants(role_of(function))
                    if "dynamodb:UpdateItem" in grant.actions]
        assert grant.actions == ("dynamodb:UpdateItem",), function
        assert grant.condition == {"ForAllValues:StringEquals": {
            "dynamodb:LeadingKeys": ["CAPACITY"]}}, function
